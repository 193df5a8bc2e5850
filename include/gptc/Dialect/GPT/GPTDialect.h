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
// The training step (gpt-autodiff, gpt-optimizer): gradients, AdamW moments
// and the run-time scalars of the update, each naming its parameter.
inline constexpr llvm::StringLiteral kGradAttr = "gpt.grad";
inline constexpr llvm::StringLiteral kAdamMAttr = "gpt.adam_m";
inline constexpr llvm::StringLiteral kAdamVAttr = "gpt.adam_v";
inline constexpr llvm::StringLiteral kHyperAttr = "gpt.hyper";
} // namespace gptc::gpt

#endif
