//===- GPTOps.td - gpt dialect operations ------------------*- tablegen -*-===//
//
// The ops a person needs to write GPT-2: embeddings, matmul, layernorm,
// softmax, causal masking, GELU, head reshapes, cross-entropy and elementwise
// arithmetic; the ops passes make of them (flash attention); and the
// gradient ops gpt-autodiff emits. All shapes are static; every op verifies
// its shapes with a message that names the offending dimension.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_DIALECT_GPT_GPTOPS_TD
#define GPTC_DIALECT_GPT_GPTOPS_TD

include "gptc/Dialect/GPT/GPTDialect.td"
include "gptc/Dialect/GPT/GPTInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def GPT_FloatTensor : RankedTensorOf<[F32, BF16, F16]>;
def GPT_IdTensor : RankedTensorOf<[I32]>;
def GPT_ScalarF32 : 0DTensorOf<[F32]>;

// An op with a vector-Jacobian product (lib/Dialect/GPT/GPTVJP.cpp).
def Differentiable
    : DeclareOpInterfaceMethods<GPT_DifferentiableOpInterface, ["buildVJP"]>;

//===----------------------------------------------------------------------===//
// Constants and index generation
//===----------------------------------------------------------------------===//

def GPT_ConstantOp : GPT_Op<"constant",
    [Pure, ConstantLike, AllTypesMatch<["value", "result"]>]> {
  let summary = "A constant tensor";
  let description = [{
    ```mlir
    %scale = gpt.constant dense<0.125> : tensor<f32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def GPT_IotaOp : GPT_Op<"iota", [Pure]> {
  let summary = "0, 1, ..., N-1 as a 1-D tensor of i32 (token positions)";
  let arguments = (ins);
  let results = (outs 1DTensorOf<[I32]>:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Embedding, matmul, normalisation
//===----------------------------------------------------------------------===//

def GPT_EmbeddingOp : GPT_Op<"embedding", [Pure, Differentiable]> {
  let summary = "Rows of a [V, C] table gathered by integer ids";
  let description = [{
    `result[i..., c] = table[ids[i...], c]`. The result shape is the id shape
    followed by C. Ids outside [0, V) are an error at run time.

    ```mlir
    %x = gpt.embedding %wte, %tokens
        : tensor<50257x768xf32>, tensor<4x1024xi32> -> tensor<4x1024x768xf32>
    ```

    Rows gathered by `gpt.iota` (the position embedding's) are the table's
    first rows: the op folds to the table where there are V of them, and
    canonicalizes to a `gpt.slice` of it where there are fewer.
  }];
  let arguments = (ins GPT_FloatTensor:$table, GPT_IdTensor:$ids);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $ids attr-dict `:` type($table) `,` type($ids) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def GPT_MatmulOp : GPT_Op<"matmul", [Pure, Differentiable]> {
  let summary = "(Batched) matrix product with optional transposes";
  let description = [{
    `a` is `[batch..., M, K]` (`[batch..., K, M]` with `transpose_a`), `b` is
    `[batch..., K, N]` or a shared `[K, N]` (`[..., N, K]` with
    `transpose_b`); the result is `[batch..., M, N]`.

    ```mlir
    %logits = gpt.matmul %x, %wte {transpose_b}
        : tensor<4x64x128xf32>, tensor<512x128xf32> -> tensor<4x64x512xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$a, GPT_FloatTensor:$b,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b attr-dict `:` type($a) `,` type($b) `->` type($result)
  }];
  let hasVerifier = 1;
}

def GPT_LayerNormOp : GPT_Op<"layernorm",
    [Pure, Differentiable, AllTypesMatch<["x", "result"]>]> {
  let summary = "Layer normalisation over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * gamma + beta`, with the biased
    variance, over the last dimension C; `gamma` and `beta` are `[C]`.
  }];
  let arguments = (ins GPT_FloatTensor:$x, GPT_FloatTensor:$gamma,
                       GPT_FloatTensor:$beta,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = [{
    $x `,` $gamma `,` $beta attr-dict `:` type($x) `,` type($gamma) `,`
    type($beta)
  }];
  let hasVerifier = 1;
}

def GPT_SoftmaxOp : GPT_Op<"softmax", [Pure, Differentiable, AllTypesMatch<["x", "result"]>]> {
  let summary = "Softmax over the last dimension";
  let arguments = (ins GPT_FloatTensor:$x);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

def GPT_CausalMaskOp : GPT_Op<"causal_mask",
    [Pure, Differentiable, AllTypesMatch<["x", "result"]>]> {
  let summary = "Sets x[..., i, j] to `fill` (-inf by default) where j > i";
  let description = [{
    The attention mask of a decoder: a query at position i sees keys 0..i.
    The last two dimensions (queries, keys) must be equal. Its gradient is
    the same mask with `fill = 0.0`.
  }];
  let arguments = (ins GPT_FloatTensor:$x,
      DefaultValuedAttr<F32Attr, "-std::numeric_limits<float>::infinity()">:$fill);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def GPT_GeluOp : GPT_Op<"gelu", [Pure, Differentiable, AllTypesMatch<["x", "result"]>]> {
  let summary = "GELU activation, tanh approximation by default (as GPT-2)";
  let description = [{
    `approximate = "tanh"`: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`;
    `approximate = "none"`: the exact `0.5·x·(1 + erf(x/√2))`.
  }];
  let arguments = (ins GPT_FloatTensor:$x,
                       DefaultValuedAttr<StrAttr, "\"tanh\"">:$approximate);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention (what gpt-fuse-attention makes of q·kᵀ, scale, mask, softmax, ·v)
//===----------------------------------------------------------------------===//

def GPT_FlashAttentionOp : GPT_Op<"flash_attention", [Pure, Differentiable]> {
  let summary = "Scaled dot-product attention in one kernel, with its logsumexp";
  let description = [{
    `q` is `[B, H, T, D]`, `k` and `v` are `[B, H, S, D]`. With the scores
    `s = scale · q·kᵀ` (`[B, H, T, S]`), where `causal` sets `s[..., i, j]`
    to -inf for `j > i` (then `S` must equal `T`):

      out = softmax(s) · v                 [B, H, T, D]
      lse = logsumexp(s) over the keys     [B, H, T], always f32

    The probabilities are never materialised: the kernel walks tiles of
    keys with an online softmax (FlashAttention-2). `lse` is what the
    backward pass needs to recompute them (`gpt.flash_attention_grad`); it
    is not differentiable.

    ```mlir
    %out, %lse = gpt.flash_attention %q, %k, %v {causal, scale = 0.176776692 : f32}
        : tensor<4x12x64x32xf32>, tensor<4x12x64x32xf32>, tensor<4x12x64x32xf32>
        -> tensor<4x12x64x32xf32>, tensor<4x12x64xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$q, GPT_FloatTensor:$k,
                       GPT_FloatTensor:$v, F32Attr:$scale, UnitAttr:$causal);
  let results = (outs GPT_FloatTensor:$out, RankedTensorOf<[F32]>:$lse);
  let assemblyFormat = [{
    $q `,` $k `,` $v attr-dict `:` type($q) `,` type($k) `,` type($v) `->`
    type($out) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def GPT_FlashAttentionQKVOp : GPT_Op<"flash_attention_qkv",
    [Pure, Differentiable]> {
  let summary = "Self-attention read from a packed [B, T, 3·H·D] q|k|v tensor";
  let description = [{
    gpt.flash_attention in the layout the GEMMs around it use. `qkv` is
    `[B, T, 3·C]` with `C = num_heads · D`: q, k and v side by side along the
    last axis, in that order, each with its heads contiguous (head `h` of q
    is columns `[h·D, (h+1)·D)`, of k `C + h·D`, of v `2·C + h·D`). That is
    GPT-2's c_attn output and what `split` (axis 2) + `reshape [B, T, H, D]`
    + `transpose [0, 2, 1, 3]` of it mean. `out` is `[B, T, C]`, the heads
    merged back (what `transpose [0, 2, 1, 3]` + `reshape [B, T, C]` of
    gpt.flash_attention's out gives), so the next GEMM reads it as it is.
    `lse` is `[B, H, T]` f32, as gpt.flash_attention's. Queries and keys are
    the same T positions, so `causal` needs no further check.

    The kernel addresses heads by stride instead of having them copied into
    [B, H, T, D] first: no split, transpose or merge launches around it.

    ```mlir
    %out, %lse = gpt.flash_attention_qkv %qkv {causal, num_heads = 12 : i64,
                                               scale = 0.125 : f32}
        : tensor<4x64x2304xbf16> -> tensor<4x64x768xbf16>, tensor<4x12x64xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$qkv, I64Attr:$num_heads,
                       F32Attr:$scale, UnitAttr:$causal);
  let results = (outs GPT_FloatTensor:$out, RankedTensorOf<[F32]>:$lse);
  let assemblyFormat = [{
    $qkv attr-dict `:` type($qkv) `->` type($out) `,` type($lse)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Shapes: reshape, transpose, split
//===----------------------------------------------------------------------===//

def GPT_ReshapeOp : GPT_Op<"reshape", [Pure, Differentiable]> {
  let summary = "Same elements, new shape (row-major order kept)";
  let arguments = (ins AnyRankedTensor:$x);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def GPT_TransposeOp : GPT_Op<"transpose", [Pure, Differentiable]> {
  let summary = "Permutes dimensions: result dim i is input dim perm[i]";
  let description = [{
    Like gpt.split, gpt.concat, gpt.pad and gpt.slice it may also convert
    between float element types, rounding as gpt.cast does: the form a cast
    takes when gpt-fuse-elementwise folds it into the layout op next to it
    (lib/Transforms/FoldCasts.cpp), one kernel that moves and converts.

    ```mlir
    %qh = gpt.transpose %q [0, 2, 1, 3]
        : tensor<4x64x2x32xf32> -> tensor<4x2x64x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x, DenseI64ArrayAttr:$permutation);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $x $permutation attr-dict `:` type($x) `->` type($result)
  }];
  let hasVerifier = 1;
}

def GPT_SplitOp : GPT_Op<"split", [Pure, Differentiable]> {
  let summary = "Splits a tensor into consecutive pieces along one axis";
  let description = [{
    The results' sizes along `axis` add up to the input's; all other
    dimensions are unchanged. GPT-2 splits the fused q/k/v projection this way.

    ```mlir
    %q, %k, %v = gpt.split %qkv {axis = 2}
        : tensor<4x64x384xf32> -> tensor<4x64x128xf32>, tensor<4x64x128xf32>,
          tensor<4x64x128xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x, I64Attr:$axis);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Padding (what gpt-pad-dims inserts at the edges of the padded region)
//===----------------------------------------------------------------------===//

def GPT_PadOp : GPT_Op<"pad", [Pure, Differentiable]> {
  let summary = "Extends a tensor at the high end of each dimension with `value`";
  let description = [{
    The result has the input's rank (and element type, or another float
    type: see gpt.transpose) and is at least as large in every dimension; `result[i...] = x[i...]` inside the input's
    shape and `value` (0 unless set; integer tensors only may use another
    value) outside it. Its gradient is `gpt.slice` of the output gradient.

    ```mlir
    %wte_p = gpt.pad %wte : tensor<50257x768xf32> -> tensor<50304x768xf32>
    %targets_p = gpt.pad %targets {value = -1 : i64}
        : tensor<4x100xi32> -> tensor<4x128xi32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x,
                       DefaultValuedAttr<I64Attr, "0">:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
}

def GPT_SliceOp : GPT_Op<"slice", [Pure, Differentiable]> {
  let summary = "The leading corner of a tensor (the inverse of gpt.pad)";
  let description = [{
    `result[i...] = x[i...]` for every index of the result's shape, which is
    at most the input's in every dimension. Its gradient is `gpt.pad` of the
    output gradient with zeros.

    ```mlir
    %logits = gpt.slice %logits_p : tensor<4x128x50304xf32> -> tensor<4x100x50257xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def GPT_CrossEntropyOp : GPT_Op<"cross_entropy", [Pure, Differentiable]> {
  let summary = "Mean softmax cross-entropy of logits against target ids";
  let description = [{
    `mean over positions p of (logsumexp(logits[p, :]) - logits[p, targets[p]])`.
    `logits` is the target shape followed by the vocabulary V.

    gpt-pad-dims sets two optional attributes: `num_classes` (the real
    vocabulary; logits columns from it on are padding and take no part in
    the softmax) and `ignore_index` (positions whose target equals it are
    padding: they add nothing, and the mean divides by the other positions
    only, as PyTorch's `ignore_index` does).

    ```mlir
    %loss = gpt.cross_entropy %logits, %targets
        : tensor<4x64x512xf32>, tensor<4x64xi32> -> tensor<f32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$logits, GPT_IdTensor:$targets,
                       OptionalAttr<I64Attr>:$num_classes,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs GPT_ScalarF32:$loss);
  let builders = [OpBuilder<(ins "::mlir::Type":$loss, "::mlir::Value":$logits,
                                 "::mlir::Value":$targets), [{
    build($_builder, $_state, loss, logits, targets, ::mlir::IntegerAttr(),
          ::mlir::IntegerAttr());
  }]>];
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` type($logits) `,` type($targets) `->`
    type($loss)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise arithmetic
//===----------------------------------------------------------------------===//

// Binary ops broadcast as numpy does: shapes are aligned at the trailing
// dimension and a dimension of size 1 (or a missing one) stretches.
class GPT_BinaryOp<string mnemonic, string formula>
    : GPT_Op<mnemonic, [Pure, Differentiable]> {
  let summary = "Elementwise " # formula # " with numpy broadcasting";
  let arguments = (ins GPT_FloatTensor:$lhs, GPT_FloatTensor:$rhs);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def GPT_AddOp : GPT_BinaryOp<"add", "lhs + rhs">;
def GPT_SubOp : GPT_BinaryOp<"sub", "lhs - rhs">;
def GPT_MulOp : GPT_BinaryOp<"mul", "lhs * rhs">;
def GPT_DivOp : GPT_BinaryOp<"div", "lhs / rhs">;
def GPT_MaxOp : GPT_BinaryOp<"max", "max(lhs, rhs)">;
def GPT_MinOp : GPT_BinaryOp<"min", "min(lhs, rhs)">;

class GPT_UnaryOp<string mnemonic, string formula>
    : GPT_Op<mnemonic, [Pure, Differentiable, AllTypesMatch<["x", "result"]>]> {
  let summary = "Elementwise " # formula;
  let arguments = (ins GPT_FloatTensor:$x);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

def GPT_NegOp : GPT_UnaryOp<"neg", "-x">;
def GPT_ExpOp : GPT_UnaryOp<"exp", "exp(x)">;
def GPT_LogOp : GPT_UnaryOp<"log", "log(x)">;
def GPT_TanhOp : GPT_UnaryOp<"tanh", "tanh(x)">;
def GPT_SqrtOp : GPT_UnaryOp<"sqrt", "sqrt(x)">;
def GPT_RsqrtOp : GPT_UnaryOp<"rsqrt", "1 / sqrt(x)">;

def GPT_CastOp : GPT_Op<"cast",
    [Pure, Differentiable, SameOperandsAndResultShape]> {
  let summary = "Converts a float tensor to another float element type";
  let description = [{
    Rounds to nearest, ties to even, when narrowing (f32 to bf16 or f16;
    values beyond f16's range become ±inf); widening is exact. Its gradient
    is the output gradient cast back to the input's type. gpt-mixed-precision
    inserts these around matmuls and attention; the fusion passes fold them
    into the kernels that produce or consume the values.

    ```mlir
    %wb = gpt.cast %w : tensor<768x2304xf32> -> tensor<768x2304xbf16>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$x);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Reductions and joins (the adjoints of broadcasting and of split)
//===----------------------------------------------------------------------===//

def GPT_ReduceSumOp : GPT_Op<"reduce_sum", [Pure]> {
  let summary = "Sums a tensor down to a shape it broadcasts from";
  let description = [{
    The result shape must broadcast (numpy rules) back to the input shape;
    every dimension that the broadcast would stretch is summed. This is the
    adjoint of broadcasting: the gradient of a bias `[C]` added to `[B, T, C]`
    is `gpt.reduce_sum` of the output gradient to `[C]`. A rank-0 result sums
    everything.

    Two forms that gpt-fuse-elementwise folds in
    (lib/Transforms/FoldIntoReduceSum.cpp), so that one kernel reads the
    tensor where it lies:
    - `corner`: only the leading corner of that shape is summed, as if the
      operand were `gpt.slice`d to it first (the result broadcasts back to
      the corner). GPT-2's c_attn bias gradient sums the q third of each
      row of the packed dq|dk|dv this way.
    - a float32 result of a bf16 or f16 operand: the terms widened (exact)
      before they are summed, as if through `gpt.cast`.

    ```mlir
    %dq_sum = gpt.reduce_sum %dqkv {corner = array<i64: 16384, 1, 768>}
        : tensor<16384x3x768xbf16> -> tensor<768xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$x,
                       OptionalAttr<DenseI64ArrayAttr>:$corner);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
}

def GPT_ConcatOp : GPT_Op<"concat", [Pure]> {
  let summary = "Joins tensors along one axis (the adjoint of gpt.split)";
  let arguments = (ins Variadic<GPT_FloatTensor>:$inputs, I64Attr:$axis);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradient ops: what gpt-autodiff emits for ops whose VJP is not a
// composition of forward ops. Each recomputes the cheap statistics it needs
// (layernorm's mean and rstd, the softmax of the logits) rather than keeping
// them alive from the forward pass.
//===----------------------------------------------------------------------===//

def GPT_EmbeddingGradOp : GPT_Op<"embedding_grad", [Pure]> {
  let summary = "Scatter-adds output-gradient rows into a [V, C] table";
  let description = [{
    `result[v, c] = sum over positions p with ids[p] == v of dy[p, c]`,
    rounded to the result's type.

    With an `addend` (of the result's type, which must then be float32),
    the result is `addend + that`: exactly a `gpt.add` of the addend and
    the plain op's result. gpt-fuse-elementwise makes it for tied
    embeddings, whose table gradient is the lm_head's plus the
    embedding's, so that the sum is not a kernel of its own.

    ```mlir
    %dwte = gpt.embedding_grad %dx, %ids, %dhead : tensor<4x64x768xf32>, tensor<4x64xi32>, tensor<50257x768xf32> -> tensor<50257x768xf32>
    ```

    With `gpt.iota` ids (the position embedding's gradient) each row has
    one term, dy's row of the same index: without an addend the op folds
    to dy where dy has V rows, and canonicalizes to a `gpt.pad` of dy with
    zeros where it has fewer.
  }];
  let arguments = (ins GPT_FloatTensor:$dy, GPT_IdTensor:$ids,
                       Optional<GPT_FloatTensor>:$addend);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = [{
    $dy `,` $ids (`,` $addend^)? attr-dict `:` type($dy) `,` type($ids)
    (`,` type($addend)^)? `->` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def GPT_LayerNormGradOp : GPT_Op<"layernorm_grad",
    [Pure, AllTypesMatch<["x", "dx"]>, AllTypesMatch<["gamma", "dgamma", "dbeta"]>]> {
  let summary = "Gradients of gpt.layernorm for x, gamma and beta";
  let arguments = (ins GPT_FloatTensor:$x, GPT_FloatTensor:$gamma,
                       GPT_FloatTensor:$dy,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs GPT_FloatTensor:$dx, GPT_FloatTensor:$dgamma,
                      GPT_FloatTensor:$dbeta);
  let assemblyFormat = [{
    $x `,` $gamma `,` $dy attr-dict `:` type($x) `,` type($gamma) `,` type($dy)
  }];
  let hasVerifier = 1;
}

def GPT_SoftmaxGradOp : GPT_Op<"softmax_grad",
    [Pure, AllTypesMatch<["y", "dy", "dx"]>]> {
  let summary = "dx = y * (dy - sum(dy * y)) over the last dimension";
  let arguments = (ins GPT_FloatTensor:$y, GPT_FloatTensor:$dy);
  let results = (outs GPT_FloatTensor:$dx);
  let assemblyFormat = "$y `,` $dy attr-dict `:` type($y)";
}

def GPT_GeluGradOp : GPT_Op<"gelu_grad", [Pure, AllTypesMatch<["x", "dy", "dx"]>]> {
  let summary = "dx = gelu'(x) * dy";
  let arguments = (ins GPT_FloatTensor:$x, GPT_FloatTensor:$dy,
                       DefaultValuedAttr<StrAttr, "\"tanh\"">:$approximate);
  let results = (outs GPT_FloatTensor:$dx);
  let assemblyFormat = "$x `,` $dy attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def GPT_CrossEntropyGradOp : GPT_Op<"cross_entropy_grad",
    [Pure, AllTypesMatch<["logits", "dlogits"]>]> {
  let summary = "dlogits = (softmax(logits) - onehot(targets)) * dloss / N";
  let description = [{
    The gradient of the mean cross-entropy over the N target positions.
  }];
  let arguments = (ins GPT_FloatTensor:$logits, GPT_IdTensor:$targets,
                       GPT_ScalarF32:$dloss,
                       OptionalAttr<I64Attr>:$num_classes,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs GPT_FloatTensor:$dlogits);
  let builders = [OpBuilder<(ins "::mlir::Type":$dlogits, "::mlir::Value":$logits,
                                 "::mlir::Value":$targets, "::mlir::Value":$dloss), [{
    build($_builder, $_state, dlogits, logits, targets, dloss, ::mlir::IntegerAttr(),
          ::mlir::IntegerAttr());
  }]>];
  let assemblyFormat = [{
    $logits `,` $targets `,` $dloss attr-dict `:` type($logits) `,`
    type($targets) `,` type($dloss)
  }];
  let hasVerifier = 1;
}

def GPT_FlashAttentionGradOp : GPT_Op<"flash_attention_grad",
    [Pure, AllTypesMatch<["q", "out", "dout", "dq"]>,
     AllTypesMatch<["k", "dk"]>, AllTypesMatch<["v", "dv"]>]> {
  let summary = "Gradients of gpt.flash_attention for q, k and v";
  let description = [{
    FlashAttention-2's backward pass. It takes the forward's inputs, its
    output `out` and logsumexp `lse`, and the output gradient `dout`, and
    recomputes the probabilities tile by tile instead of storing them:

      P  = exp(scale · q·kᵀ − lse)  (0 where `causal` masks)
      D  = rowsum(dout ∘ out)
      dv = Pᵀ · dout
      dS = P ∘ (dout · vᵀ − D)
      dq = scale · dS · k,   dk = scale · dSᵀ · q

    `scale` and `causal` are the forward op's. With a `delta` operand
    (gpt.attention_row_dot of `out` and `dout`, as gpt-autodiff writes it),
    D is read from it rather than computed: once per query row, not once
    per key tile that row meets.

    ```mlir
    %dq, %dk, %dv = gpt.flash_attention_grad %q, %k, %v, %out, %lse, %dout
        {causal, scale = 0.176776692 : f32}
        : tensor<4x12x64x32xf32>, tensor<4x12x64x32xf32>,
          tensor<4x12x64x32xf32>, tensor<4x12x64xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$q, GPT_FloatTensor:$k,
                       GPT_FloatTensor:$v, GPT_FloatTensor:$out,
                       RankedTensorOf<[F32]>:$lse, GPT_FloatTensor:$dout,
                       Optional<RankedTensorOf<[F32]>>:$delta,
                       F32Attr:$scale, UnitAttr:$causal);
  let results = (outs GPT_FloatTensor:$dq, GPT_FloatTensor:$dk,
                      GPT_FloatTensor:$dv);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $out `,` $lse `,` $dout (`,` $delta^)? attr-dict `:`
    type($q) `,` type($k) `,` type($v) `,` type($lse) (`,` type($delta)^)?
  }];
  let hasVerifier = 1;
}

def GPT_FlashAttentionQKVGradOp : GPT_Op<"flash_attention_qkv_grad",
    [Pure, AllTypesMatch<["qkv", "dqkv"]>, AllTypesMatch<["out", "dout"]>]> {
  let summary = "Gradient of gpt.flash_attention_qkv, packed as its input";
  let description = [{
    gpt.flash_attention_grad in the packed layout: `qkv` `[B, T, 3·C]`,
    `out` and `dout` `[B, T, C]`, `lse` `[B, H, T]` f32. `dqkv` has the
    layout of `qkv` (dq, dk, dv side by side, heads contiguous within each):
    what the c_attn backward GEMMs read, with no concat in between.
    `num_heads`, `scale` and `causal` are the forward op's; `delta`, as for
    gpt.flash_attention_grad, `[B, H, T]`.

    ```mlir
    %dqkv = gpt.flash_attention_qkv_grad %qkv, %out, %lse, %dout, %delta
        {causal, num_heads = 12 : i64, scale = 0.125 : f32}
        : tensor<4x64x2304xbf16>, tensor<4x64x768xbf16>, tensor<4x12x64xf32>,
          tensor<4x12x64xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$qkv, GPT_FloatTensor:$out,
                       RankedTensorOf<[F32]>:$lse, GPT_FloatTensor:$dout,
                       Optional<RankedTensorOf<[F32]>>:$delta,
                       I64Attr:$num_heads, F32Attr:$scale, UnitAttr:$causal);
  let results = (outs GPT_FloatTensor:$dqkv);
  let assemblyFormat = [{
    $qkv `,` $out `,` $lse `,` $dout (`,` $delta^)? attr-dict `:` type($qkv)
    `,` type($out) `,` type($lse) (`,` type($delta)^)?
  }];
  let hasVerifier = 1;
}

def GPT_AttentionRowDotOp : GPT_Op<"attention_row_dot",
    [Pure, AllTypesMatch<["out", "dout"]>]> {
  let summary = "D = rowsum(dout ∘ out) of each head's query rows, the "
                "attention backward's row term";
  let description = [{
    The softmax backward's per-row term of FlashAttention-2
    (`D_i = Σ_d dout_id · out_id = Σ_j P_ij · dP_ij`), in float32, for
    gpt.flash_attention_grad and gpt.flash_attention_qkv_grad to read as
    their `delta`. gpt-autodiff writes it ahead of each attention gradient
    (FlashAttention-2's preprocessing kernel): every key tile of a query
    row needs D, and here it is computed once.

    `out` and `dout` are `[B, H, T, D]`, or packed `[B, T, H·D]` with
    `num_heads` (gpt.flash_attention_qkv's layout); the result is
    `[B, H, T]`.

    ```mlir
    %delta = gpt.attention_row_dot %out, %dout {num_heads = 12 : i64}
        : tensor<4x64x768xbf16> -> tensor<4x12x64xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$out, GPT_FloatTensor:$dout,
                       OptionalAttr<I64Attr>:$num_heads);
  let results = (outs RankedTensorOf<[F32]>:$delta);
  let assemblyFormat = [{
    $out `,` $dout attr-dict `:` type($out) `->` type($delta)
  }];
  let hasVerifier = 1;
}

def GPT_AttentionBiasGradOp : GPT_Op<"attention_bias_grad", [Pure]> {
  let summary = "c_attn's bias gradient from attention's identities: "
                "[Σ dq, 0, Σ dout]";
  let description = [{
    The bias gradient of a projection to packed q|k|v that feeds
    gpt.flash_attention_qkv, from that attention's gradient `dqkv` (`[...,
    3C]`) and its output gradient `dout` (`[..., C]`, as many rows), as
    gpt-attention-bias-grad derives it (lib/Transforms/AttentionBiasGrad.cpp):
    the column sums of dq (the first third of each row of dqkv), zero for
    k (the softmax takes a bias on k away), and the column sums of dout for
    v (`dv = Pᵀ dout` and each row of P sums to 1). The result is `[3C]`;
    the terms are widened to float32 (exact) and summed in float32.

    One launch reads dq where it lies and dout, and writes the three
    thirds: where the sums, the zeros and their concatenation were three.

    ```mlir
    %db = gpt.attention_bias_grad %dqkv, %dout
        : tensor<16x1024x2304xbf16>, tensor<16x1024x768xbf16> -> tensor<2304xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$dqkv, GPT_FloatTensor:$dout);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = [{
    $dqkv `,` $dout attr-dict `:` type($dqkv) `,` type($dout) `->` type($result)
  }];
  let hasVerifier = 1;
}

// What gpt-fuse-elementwise makes: one kernel over scalar code.
include "gptc/Dialect/GPT/GPTFusedOps.td"

#endif // GPTC_DIALECT_GPT_GPTOPS_TD
