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
// gpt-mixed-precision: the policy, on the module ("tf32", "bf16", "fp16"),
// and, under fp16, a unit attribute on the forward function that asks
// gpt-autodiff for a run-time loss scale (gpt.hyper = "loss_scale") as the
// seed of the backward pass.
inline constexpr llvm::StringLiteral kPrecisionAttr = "gpt.precision";
inline constexpr llvm::StringLiteral kLossScalingAttr = "gpt.loss_scaling";
// gpt-weight-copies: a parameter's low-precision copy, kept across steps.
// As an argument of type T: the parameter rounded to T's element type and
// zero-padded at the high end of each dimension to T's shape. As a result:
// what the update writes into that copy, either all of it or, when the
// result is the parameter's shape and only the leading dimension is
// shorter, its leading rows (the padding after them never changes).
inline constexpr llvm::StringLiteral kParamCopyAttr = "gpt.param_copy";
} // namespace gptc::gpt

#endif
