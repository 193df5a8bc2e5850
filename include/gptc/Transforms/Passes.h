//===- Passes.h - gptc's passes ---------------------------------*- C++ -*-===//
#ifndef GPTC_TRANSFORMS_PASSES_H
#define GPTC_TRANSFORMS_PASSES_H

#include "gptc/Dialect/GPT/GPTDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace gptc {
namespace gpt {
class LayerNormGradOp;
class FusedLayerNormGradOp;
} // namespace gpt

#define GEN_PASS_DECL
#include "gptc/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "gptc/Transforms/Passes.h.inc"

/// gpt-fuse-attention's pattern, rooted at the matmul of probabilities by v;
/// with `packQKV`, attention on heads split from one [B, T, 3C] tensor
/// becomes gpt.flash_attention_qkv.
void populateFuseAttentionPatterns(mlir::RewritePatternSet &patterns,
                                   bool packQKV = true);

/// gpt-fuse-elementwise on one function: elementwise chains into
/// gpt.fused_elementwise, same-bodied ones into gpt.multi_tensor_elementwise,
/// and (unless !layernormPrologue) layernorms with their elementwise
/// prologues into gpt.fused_layernorm; first (unless !foldCasts) casts into
/// the layout ops next to them; last (unless !parameterCasts) the
/// parameters' casts, and the returned gradients' widening casts, into one
/// multi-tensor op each. The options are the pass's (Passes.td).
void fuseElementwise(mlir::func::FuncOp func,
                     const GPTFuseElementwiseOptions &options = {});

/// The bf16 or f16 value that the float32 `v` widens (`v` is a gpt.cast of
/// it), or null: a value a kernel can read narrow and widen as it loads,
/// the same values (FoldCasts.cpp).
mlir::Value widenedFrom(mlir::Value v);

/// Converting float type `from` to `to` keeps every value: the same type,
/// or bf16/f16 widened to f32 (FoldCasts.cpp).
bool isExactConversion(mlir::Type from, mlir::Type to);

/// gpt-fuse-elementwise's very first step: cast(cast(x)) becomes one cast,
/// or x, where the first conversion loses nothing or the second is none
/// (bf16 -> f32 -> bf16 is nothing; f32 -> bf16 -> f32 stays).
void foldCastPairs(mlir::func::FuncOp func);

/// gpt-fuse-elementwise's first step: a gpt.cast next to a layout op
/// (transpose, slice, pad, concat, split), reshapes between them seen
/// through, becomes that op's conversion where that is exact
/// (FoldCasts.cpp).
void foldCastsIntoLayoutOps(mlir::func::FuncOp func);

/// After fuseLayerNormPrologues: a gpt.cast that is the only reader of a
/// gpt.fused_layernorm's normalised result becomes that result's type; if
/// `plainLayerNorms`, a gpt.layernorm so read (no prologue) becomes a
/// gpt.fused_layernorm first.
void foldCastsIntoLayerNorms(mlir::func::FuncOp func, bool plainLayerNorms);

/// After the chains are fused: a narrowing gpt.cast that is the only
/// reader of a gpt.fused_elementwise result becomes that result's type (the
/// body yields float32, rounded on store).
void foldCastsIntoGroups(mlir::func::FuncOp func);

/// With it: a gpt.layernorm_grad or gpt.fused_layernorm_grad whose dy is a
/// widening gpt.cast reads the cast's narrow input instead.
void foldCastsIntoLayerNormGrads(mlir::func::FuncOp func);

/// And: the narrowing casts of a gpt.fused_layernorm_grad value become one
/// more value of the op, written in the narrow type.
void foldCastsIntoLayerNormGradValues(mlir::func::FuncOp func);

/// After the loss pattern: a gpt.cross_entropy_with_grad of widened logits
/// whose gradient only a cast back narrows reads and writes the narrow
/// type.
void foldCastsIntoLoss(mlir::func::FuncOp func);

/// After the loss pattern: a float32 gpt.add of a gpt.embedding_grad that
/// nothing else reads (tied embeddings' two gradients) becomes that
/// embedding_grad with the add's other operand as its addend
/// (FuseEmbeddingGrad.cpp).
void fuseEmbeddingGradAddends(mlir::func::FuncOp func);

/// gpt-fuse-elementwise's loss pattern: a cross_entropy and a
/// cross_entropy_grad of the same logits into gpt.cross_entropy_with_grad.
void fuseCrossEntropyWithGrad(mlir::func::FuncOp func);

/// gpt-fuse-elementwise's sum of full reductions (the global gradient
/// norm): a tree of rank-0 gpt.add over gpt.reduce_sum into one
/// gpt.multi_tensor_reduce (MultiTensorReduce.cpp). Runs before the chains
/// are fused.
void formMultiTensorReduce(mlir::func::FuncOp func);

/// After formMultiTensorReduce: a gpt.reduce_sum of a leading-corner
/// gpt.slice (or, if `casts`, of a widening gpt.cast) sums the slice's (the
/// cast's) operand, its `corner` the slice's shape (FoldIntoReduceSum.cpp).
void foldIntoReduceSums(mlir::func::FuncOp func, bool casts);

/// After the multi-tensor merge: a gpt.multi_tensor_elementwise whose
/// results only a gpt.multi_tensor_reduce reads becomes that reduction's
/// body prologue.
void foldReducePrologues(mlir::func::FuncOp func);

/// After the chains are fused: a gpt.layernorm of a gpt.fused_elementwise
/// whose other users run later becomes one gpt.fused_layernorm, and a
/// gpt.layernorm_grad whose dx only a gpt.fused_elementwise reads one
/// gpt.fused_layernorm_grad (FuseLayerNormPrologue.cpp).
void fuseLayerNormPrologues(mlir::func::FuncOp func);

/// A plain gpt.layernorm_grad as the gpt.fused_layernorm_grad whose body
/// yields dx, in its place (FuseLayerNormPrologue.cpp).
gpt::FusedLayerNormGradOp asFusedLayerNormGrad(gpt::LayerNormGradOp g);

/// `g` again with one more value at `loc`, of `type` (x's shape in another
/// element type, or [C] for its column sums), yielding the scalar that
/// value `value` yields; `g`'s results are replaced and `g` erased.
gpt::FusedLayerNormGradOp addLayerNormGradValue(gpt::FusedLayerNormGradOp g,
                                                unsigned value,
                                                mlir::Type type,
                                                mlir::Location loc);

/// After the layernorm gradients' casts are folded: a
/// gpt.matmul_bias_grad whose right operand is (reshaped) a value a
/// gpt.fused_layernorm_grad writes becomes a gpt.matmul, its bias gradient
/// that op's column sums of the value (FuseLayerNormBiasGrad.cpp).
void fuseBiasGradsIntoLayerNormGrads(mlir::func::FuncOp func);

/// True for a copy gpt-recompute made of a forward op for the backward
/// (located in `fused<"recompute">`, Recompute.cpp).
bool isRecomputed(mlir::Operation *op);

/// True for an op of the backward: gpt-autodiff's (located in
/// `fused<"vjp">`) or one of gpt-recompute's copies.
bool isBackward(mlir::Operation *op);

/// The gradient function of `forward` (see gpt-autodiff), inserted after it.
mlir::FailureOr<mlir::func::FuncOp>
buildGradientFunction(mlir::func::FuncOp forward);

} // namespace gptc

#endif // GPTC_TRANSFORMS_PASSES_H
