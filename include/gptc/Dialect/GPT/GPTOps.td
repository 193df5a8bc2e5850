//===- GPTOps.td - gpt dialect operations ------------------*- tablegen -*-===//
//
// The ops a person needs to write GPT-2: embeddings, matmul, layernorm,
// softmax, causal masking, GELU, head reshapes, cross-entropy and elementwise
// arithmetic. All shapes are static; every op verifies its shapes with a
// message that names the offending dimension.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_DIALECT_GPT_GPTOPS_TD
#define GPTC_DIALECT_GPT_GPTOPS_TD

include "gptc/Dialect/GPT/GPTDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def GPT_FloatTensor : RankedTensorOf<[F32, BF16, F16]>;
def GPT_IdTensor : RankedTensorOf<[I32]>;
def GPT_ScalarF32 : 0DTensorOf<[F32]>;

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

def GPT_EmbeddingOp : GPT_Op<"embedding", [Pure]> {
  let summary = "Rows of a [V, C] table gathered by integer ids";
  let description = [{
    `result[i..., c] = table[ids[i...], c]`. The result shape is the id shape
    followed by C. Ids outside [0, V) are an error at run time.

    ```mlir
    %x = gpt.embedding %wte, %tokens
        : tensor<50257x768xf32>, tensor<4x1024xi32> -> tensor<4x1024x768xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$table, GPT_IdTensor:$ids);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $ids attr-dict `:` type($table) `,` type($ids) `->` type($result)
  }];
  let hasVerifier = 1;
}

def GPT_MatmulOp : GPT_Op<"matmul", [Pure]> {
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
    [Pure, AllTypesMatch<["x", "result"]>]> {
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

def GPT_SoftmaxOp : GPT_Op<"softmax", [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "Softmax over the last dimension";
  let arguments = (ins GPT_FloatTensor:$x);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

def GPT_CausalMaskOp : GPT_Op<"causal_mask",
    [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "Sets x[..., i, j] to -inf where j > i";
  let description = [{
    The attention mask of a decoder: a query at position i sees keys 0..i.
    The last two dimensions (queries, keys) must be equal.
  }];
  let arguments = (ins GPT_FloatTensor:$x);
  let results = (outs GPT_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def GPT_GeluOp : GPT_Op<"gelu", [Pure, AllTypesMatch<["x", "result"]>]> {
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
// Shapes: reshape, transpose, split
//===----------------------------------------------------------------------===//

def GPT_ReshapeOp : GPT_Op<"reshape", [Pure]> {
  let summary = "Same elements, new shape (row-major order kept)";
  let arguments = (ins AnyRankedTensor:$x);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def GPT_TransposeOp : GPT_Op<"transpose", [Pure]> {
  let summary = "Permutes dimensions: result dim i is input dim perm[i]";
  let description = [{
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

def GPT_SplitOp : GPT_Op<"split", [Pure]> {
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
// Loss
//===----------------------------------------------------------------------===//

def GPT_CrossEntropyOp : GPT_Op<"cross_entropy", [Pure]> {
  let summary = "Mean softmax cross-entropy of logits against target ids";
  let description = [{
    `mean over positions p of (logsumexp(logits[p, :]) - logits[p, targets[p]])`.
    `logits` is the target shape followed by the vocabulary V.

    ```mlir
    %loss = gpt.cross_entropy %logits, %targets
        : tensor<4x64x512xf32>, tensor<4x64xi32> -> tensor<f32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$logits, GPT_IdTensor:$targets);
  let results = (outs GPT_ScalarF32:$loss);
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
    : GPT_Op<mnemonic, [Pure]> {
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

class GPT_UnaryOp<string mnemonic, string formula>
    : GPT_Op<mnemonic, [Pure, AllTypesMatch<["x", "result"]>]> {
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

#endif // GPTC_DIALECT_GPT_GPTOPS_TD
