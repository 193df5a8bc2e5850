//===- GPTDialect.h - the gpt dialect -------------------------------------===//
#ifndef GPTC_DIALECT_GPT_GPTDIALECT_H
#define GPTC_DIALECT_GPT_GPTDIALECT_H

#include "mlir/IR/Dialect.h"

#include "gptc/Dialect/GPT/GPTDialect.h.inc"

namespace gptc::gpt {
// Argument and result attribute names (see the dialect description).
inline constexpr llvm::StringLiteral kParamAttr = "gpt.param";
inline constexpr llvm::StringLiteral kInitAttr = "gpt.init";
inline constexpr llvm::StringLiteral kInitStdAttr = "gpt.init_std";
inline constexpr llvm::StringLiteral kInputAttr = "gpt.input";
inline constexpr llvm::StringLiteral kOutputAttr = "gpt.output";
} // namespace gptc::gpt

#endif
