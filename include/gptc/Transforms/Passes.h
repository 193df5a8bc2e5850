//===- Passes.h - gptc's passes ---------------------------------*- C++ -*-===//
#ifndef GPTC_TRANSFORMS_PASSES_H
#define GPTC_TRANSFORMS_PASSES_H

#include "gptc/Dialect/GPT/GPTDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace gptc {

#define GEN_PASS_DECL
#include "gptc/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "gptc/Transforms/Passes.h.inc"

/// gpt-fuse-attention's pattern, rooted at the matmul of probabilities by v.
void populateFuseAttentionPatterns(mlir::RewritePatternSet &patterns);

/// gpt-fuse-elementwise on one function: elementwise chains into
/// gpt.fused_elementwise, same-bodied ones into gpt.multi_tensor_elementwise.
void fuseElementwise(mlir::func::FuncOp func);

/// gpt-fuse-elementwise's loss pattern: a cross_entropy and a
/// cross_entropy_grad of the same logits into gpt.cross_entropy_with_grad.
void fuseCrossEntropyWithGrad(mlir::func::FuncOp func);

/// The gradient function of `forward` (see gpt-autodiff), inserted after it.
mlir::FailureOr<mlir::func::FuncOp>
buildGradientFunction(mlir::func::FuncOp forward);

} // namespace gptc

#endif // GPTC_TRANSFORMS_PASSES_H
