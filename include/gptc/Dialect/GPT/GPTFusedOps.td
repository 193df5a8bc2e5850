//===- GPTFusedOps.td - what gpt-fuse-elementwise makes -----*- tablegen -*-===//
//
// Kernel-level ops: each is one launch whose body is scalar code (upstream
// `arith` and `math` on one element of each operand). The CUDA emitter
// prints the body once per element; the CPU executor compiles it into a
// short register program (lib/Executor/FusedKernels.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_DIALECT_GPT_GPTFUSEDOPS_TD
#define GPTC_DIALECT_GPT_GPTFUSEDOPS_TD

include "mlir/Interfaces/ControlFlowInterfaces.td"

def GPT_FusedElementwiseOp : GPT_Op<"fused_elementwise",
    [Pure, SingleBlock, IsolatedFromAbove]> {
  let summary = "A chain of elementwise ops as one kernel over scalar code";
  let description = [{
    All results share one shape, the iteration shape. Each input broadcasts
    to it as numpy does (a bias `[C]` or a scalar `tensor<f32>` against
    `[B, T, C]`). The body sees one element of each input as a block
    argument of the input's element type and yields one element of each
    result; it holds only `arith` and `math` ops on scalars. A bf16 or f16
    result may be yielded as float32 and is then rounded when written (a
    narrowing `gpt.cast` folded into the group). Several results
    are a multi-output group: values that other ops still need are written
    out by the same kernel that computes them.

    ```mlir
    %h, %g = gpt.fused_elementwise(%mm, %bias : tensor<4x64x512xf32>, tensor<512xf32>)
        -> tensor<4x64x512xf32>, tensor<4x64x512xf32> {
    ^bb0(%x: f32, %b: f32):
      %0 = arith.addf %x, %b : f32
      ...
      gpt.yield %0, %7 : f32, f32
    }
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<GPT_FloatTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    (`(` $inputs^ `:` type($inputs) `)`)? attr-dict `->` type($results)
    $body
  }];
  let hasVerifier = 1;
}

def GPT_MultiTensorElementwiseOp : GPT_Op<"multi_tensor_elementwise",
    [Pure, SingleBlock, IsolatedFromAbove, AttrSizedOperandSegments]> {
  let summary = "One scalar body applied to several tensors of different sizes";
  let description = [{
    A multi-tensor apply (AdamW over every parameter in one launch): the
    `tensors` are `num_tensors` tensors per body argument, argument-major
    (`tensors[j * num_tensors + t]` is argument j of tensor t), each of
    tensor t's shape; `scalars` are rank-0 tensors every tensor shares.
    The body's arguments are one element of each per-tensor argument, then
    the scalars; results are argument-major too (`results[r * num_tensors
    + t]`, of tensor t's shape). The body yields float32; result r of every
    tensor has one element type and is rounded to it when written (the
    per-step bf16 copies of the parameters are one such op whose body
    yields its argument). The kernel walks all tensors as one flat
    buffer.

    `per_tensor` (optional) are constants that differ per tensor (AdamW's
    weight decay: 0.1 for matrices, 0 for biases and gains), argument-major
    as well: `per_tensor[k * num_tensors + t]` is constant k of tensor t.
    The body sees them as block arguments between the per-tensor elements
    and the scalars, so the body's arguments are: one element of each
    per-tensor operand, then each per-tensor constant, then the scalars.
    gpt-fuse-elementwise makes them when bodies differ only in the values
    of their `arith.constant`s.
  }];
  let arguments = (ins Variadic<GPT_FloatTensor>:$tensors,
                       Variadic<AnyRankedTensor>:$scalars,
                       I64Attr:$num_tensors,
                       OptionalAttr<DenseF32ArrayAttr>:$per_tensor);
  let results = (outs Variadic<GPT_FloatTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $tensors `:` type($tensors) `)`
    (`scalars` `(` $scalars^ `:` type($scalars) `)`)? attr-dict
    `->` type($results) $body
  }];
  let hasVerifier = 1;
}

def GPT_MultiTensorReduceOp : GPT_Op<"multi_tensor_reduce",
    [Pure, SingleBlock, IsolatedFromAbove, AttrSizedOperandSegments]> {
  let summary = "The sum of one scalar body over every element of several "
                "tensors";
  let description = [{
    A multi-tensor reduction (the squared global gradient norm in one
    launch): operands as in gpt.multi_tensor_elementwise (`tensors`
    argument-major, `num_tensors` per body argument, rank-0 `scalars`); the
    body sees one element of each per-tensor operand, then the scalars, and
    yields one f32. The result is the sum of the yielded value over every
    element of every tensor. Terms are computed in float32 and summed in a
    fixed order (deterministic for a given backend): the CPU executor adds
    them in double, tensor after tensor; the CUDA kernel adds float32 block
    partials in double, the last block in block order. The two may differ in
    the last bits of the float32 result.

    ```mlir
    %sumsq = gpt.multi_tensor_reduce(%g0, %g1 : tensor<64x64xf32>,
        tensor<64xf32>) scalars(%scale : tensor<f32>) {num_tensors = 2 : i64}
        -> tensor<f32> {
    ^bb0(%g: f32, %s: f32):
      %0 = arith.mulf %g, %s : f32
      %1 = arith.mulf %0, %0 : f32
      gpt.yield %1 : f32
    }
    ```
  }];
  let arguments = (ins Variadic<GPT_FloatTensor>:$tensors,
                       Variadic<AnyRankedTensor>:$scalars,
                       I64Attr:$num_tensors);
  let results = (outs GPT_ScalarF32:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $tensors `:` type($tensors) `)`
    (`scalars` `(` $scalars^ `:` type($scalars) `)`)? attr-dict
    `->` type($result) $body
  }];
  let hasVerifier = 1;
}

def GPT_CrossEntropyWithGradOp : GPT_Op<"cross_entropy_with_grad", [Pure]> {
  let summary = "gpt.cross_entropy and gpt.cross_entropy_grad in one pass "
                "over the logits";
  let description = [{
    The loss of `gpt.cross_entropy` and the gradient of
    `gpt.cross_entropy_grad` (same operands, same `num_classes` and
    `ignore_index`), from one read of the logits: each row's softmax is
    computed once and gives both the row's loss term and its gradient.
    The logits are the largest tensor of a GPT-2 step ([B, T, V]); the
    unfused pair reads them twice.

    ```mlir
    %loss, %dlogits = gpt.cross_entropy_with_grad %logits, %targets, %one
        : tensor<4x64x512xf32>, tensor<4x64xi32>, tensor<f32>
        -> tensor<f32>, tensor<4x64x512xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$logits, GPT_IdTensor:$targets,
                       GPT_ScalarF32:$dloss,
                       OptionalAttr<I64Attr>:$num_classes,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs GPT_ScalarF32:$loss, GPT_FloatTensor:$dlogits);
  let assemblyFormat = [{
    $logits `,` $targets `,` $dloss attr-dict `:` type($logits) `,`
    type($targets) `,` type($dloss) `->` type($loss) `,` type($dlogits)
  }];
  let hasVerifier = 1;
}

def GPT_MatmulEpilogueOp : GPT_Op<"matmul_epilogue", [Pure]> {
  let summary = "A projection with its bias add and GELU as the GEMM's "
                "epilogue (gpt-fuse-matmul-epilogue)";
  let description = [{
    `a` `[batch..., M, K]` (`[batch..., K, M]` with `transpose_a`) times a
    2-D weight `b` `[K, N]` (`[N, K]` with `transpose_b`), plus a float32
    bias `[N]` broadcast along the rows, then GELU (tanh form) if `gelu`:

        acc[m, n]    = sum_k a[m, k] * b[k, n]        float32 accumulation
        pre[m, n]    = acc[m, n] + bias[n]            float32
        result[m, n] = gelu ? gelu_tanh(pre) : pre    float32
        gelu_tanh(x) = (0.5 x) (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

    and each result is rounded once, to its own element type, when it is
    written. `pre`, the optional second result (only with `gelu`), is the
    pre-activation that the backward's `gelu_grad` reads: cuBLASLt's
    GELU_AUX_BIAS epilogue. Without it the op is BIAS or GELU_BIAS. The
    bias and `pre` are of the result's element type, as cuBLASLt keeps
    them in D's (a bf16 result takes a bf16 bias; the sum is float32).

    Under bf16 autocast this is not the unfused chain, which rounds the
    product to bf16 before the bias: the epilogue keeps the float32
    accumulator (as cuBLASLt does), so it rounds once instead of twice.

    ```mlir
    %h, %pre = gpt.matmul_epilogue %x, %w, %bias {gelu}
        : tensor<4x64x128xbf16>, tensor<128x512xbf16>, tensor<512xf32>
        -> tensor<4x64x512xf32>, tensor<4x64x512xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$a, GPT_FloatTensor:$b,
                       GPT_FloatTensor:$bias, UnitAttr:$transpose_a,
                       UnitAttr:$transpose_b, UnitAttr:$gelu);
  let results = (outs GPT_FloatTensor:$result,
                      Optional<GPT_FloatTensor>:$pre);
  let assemblyFormat = [{
    $a `,` $b `,` $bias attr-dict `:` type($a) `,` type($b) `,` type($bias)
    `->` type($result) (`,` type($pre)^)?
  }];
  let hasVerifier = 1;
}

def GPT_MatmulBiasGradOp : GPT_Op<"matmul_bias_grad", [Pure]> {
  let summary = "A weight-gradient GEMM that also sums its right operand "
                "into the bias gradient (gpt-fuse-matmul-epilogue)";
  let description = [{
    The backward of a projection with a bias reads the output gradient
    `dy` twice: the weight-gradient GEMM `x^T dy` and the bias gradient, its
    column sums. This op does both in one pass over `dy`, the right operand
    `b` `[M, N]` (2-D, not transposed; `a` is 2-D, `[K, M]` or `[M, K]`
    with `transpose_a`):

        result[k, n]    = sum_m a[m, k] * b[m, n]     float32 accumulation
        bias_grad[n]    = sum_m b[m, n]               float32 accumulation

    each rounded once to its element type, which is one type for both
    (cuBLASLt writes the bias gradient in D's). cuBLASLt's BGRADA
    epilogue (the operands swap in its column-major view).

    Under bf16 autocast `b` is the bf16 copy the GEMM reads, so the bias
    gradient sums bf16-rounded values where the unfused step summed the
    float32 gradient before its cast: one rounding of each term, as in
    llm.c (docs/pipeline.md says why this is the definition).

    ```mlir
    %dw, %db = gpt.matmul_bias_grad %x, %dy {transpose_a}
        : tensor<1024x128xbf16>, tensor<1024x512xbf16>
        -> tensor<128x512xf32>, tensor<512xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$a, GPT_FloatTensor:$b,
                       UnitAttr:$transpose_a);
  let results = (outs GPT_FloatTensor:$result, GPT_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $a `,` $b attr-dict `:` type($a) `,` type($b) `->` type($result) `,`
    type($bias_grad)
  }];
  let hasVerifier = 1;
}

def GPT_MatmulGeluGradOp : GPT_Op<"matmul_gelu_grad", [Pure]> {
  let summary = "A GEMM whose result is multiplied by GELU's derivative at "
                "the forward's pre-activation, and optionally summed into "
                "the bias gradient (gpt-fuse-matmul-epilogue)";
  let description = [{
    The backward of `gelu(x W1 + b1) W2` computes `dh = dy W2^T`, then
    `dpre = gelu'(pre) * dh` and the bias gradient `sum_m dpre`. Here the
    GEMM's epilogue does the last two: with `a` `[batch..., M, K]`, a 2-D
    weight `b` and `pre` of the result's shape (the aux output of the
    forward's gpt.matmul_epilogue),

        acc[m, n]    = sum_k a[m, k] * b[k, n]        float32 accumulation
        result[m, n] = gelu_tanh'(pre[m, n]) * acc[m, n]     float32
        bias_grad[n] = sum_m result[m, n]             (if asked for)

    gelu_tanh' is the one gpt-fuse-elementwise writes for gpt.gelu_grad,
    operation for operation in float32, so the fp32 step is unchanged bit
    for bit. cuBLASLt's DGELU_BGRAD (DGELU without the bias gradient).
    `pre` and `bias_grad` are of the result's element type (cuBLASLt keeps
    the aux and the bias gradient in D's); the sums are float32.
    Under bf16 autocast the product is no longer rounded to bf16 before
    the derivative multiplies it, as in gpt.matmul_epilogue.

    ```mlir
    %dpre, %db = gpt.matmul_gelu_grad %dy, %w2, %pre {transpose_b}
        : tensor<4x64x128xbf16>, tensor<512x128xbf16>, tensor<4x64x512xf32>
        -> tensor<4x64x512xf32>, tensor<512xf32>
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$a, GPT_FloatTensor:$b,
                       GPT_FloatTensor:$pre, UnitAttr:$transpose_a,
                       UnitAttr:$transpose_b);
  let results = (outs GPT_FloatTensor:$result,
                      Optional<GPT_FloatTensor>:$bias_grad);
  let assemblyFormat = [{
    $a `,` $b `,` $pre attr-dict `:` type($a) `,` type($b) `,` type($pre)
    `->` type($result) (`,` type($bias_grad)^)?
  }];
  let hasVerifier = 1;
}

def GPT_FusedLayerNormOp : GPT_Op<"fused_layernorm",
    [Pure, SingleBlock, IsolatedFromAbove]> {
  let summary = "gpt.layernorm of a fused elementwise body's value, one "
                "row pass that also writes the body's other values";
  let description = [{
    A layernorm with a fused elementwise prologue (gpt-fuse-elementwise
    makes it of a gpt.fused_elementwise and the gpt.layernorm that reads it:
    GPT-2's residual add + layernorm). `inputs` broadcast to the iteration
    shape `[..., C]`, that of `result` and of every one of `values`, as the
    inputs of gpt.fused_elementwise do. The body sees one element of each
    input and yields 1 + size(values) scalars: first `x`, the float32 value
    to normalise, then one per `values` result. Per row of C:

        x[c]      = body(inputs at [row, c])#0             float32
        values[k] = body(...)#(k+1), rounded to its element type
        result    = (x - mean(x)) / sqrt(var(x) + epsilon) * gamma + beta

    exactly gpt.layernorm of a float32 tensor holding x (biased variance;
    `gamma`, `beta` are `[C]`), so the CPU executor gives the bits of the
    unfused pair. `x` itself is written only if the body also yields it as
    one of `values` (the residual stream, which the next block and the
    backward's layernorm_grad read).

    ```mlir
    %y, %sum = gpt.fused_layernorm(%h, %r : tensor<4x64x128xf32>,
        tensor<4x64x128xf32>) norm %gamma, %beta : tensor<128xf32>,
        tensor<128xf32> -> tensor<4x64x128xf32>, tensor<4x64x128xf32> {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      gpt.yield %s, %s : f32, f32
    }
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs,
                       GPT_FloatTensor:$gamma, GPT_FloatTensor:$beta,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs GPT_FloatTensor:$result,
                      Variadic<GPT_FloatTensor>:$values);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `:` type($inputs) `)` `norm` $gamma `,` $beta `:`
    type($gamma) `,` type($beta) attr-dict `->` type($result)
    (`,` type($values)^)? $body
  }];
  let hasVerifier = 1;
}

def GPT_FusedLayerNormGradOp : GPT_Op<"fused_layernorm_grad",
    [Pure, SingleBlock, IsolatedFromAbove]> {
  let summary = "gpt.layernorm_grad whose dx goes straight into a fused "
                "elementwise epilogue";
  let description = [{
    `dgamma` and `dbeta` are gpt.layernorm_grad's (same operands `x`,
    `gamma`, `dy`, `epsilon`); its `dx` (float32, as layernorm_grad computes
    it) is not written but fed to the body with one element of each of
    `inputs` (broadcasting to x's shape): the body's first argument is dx,
    then the inputs' elements, and it yields one float32 scalar per
    `values` result (each of x's shape, rounded to its element type when
    written, so one yielded value may be written twice: as float32 and as
    the bf16 copy the next GEMM reads). In GPT-2 the body is the residual
    gradient's add (dres + dx of each block's layernorm), so the sum is
    written once instead of dx being written and read back.

    A value of shape `[C]` (x's last dimension) where x has more than one
    row is not written but summed: its yielded float32 scalar added over
    the rows, in float32 (the executor in double, as gpt.reduce_sum). In
    GPT-2 that is the bias gradient of the output projection whose output
    gradient this op writes (gpt-fuse-elementwise takes it from the
    weight-gradient GEMM's BGRADA epilogue): the column sums come from the
    rows while they are in registers, and sum the float32 gradient, not
    its bf16 copy.

    ```mlir
    %dg, %db, %dres = gpt.fused_layernorm_grad %x, %gamma, %dy
        : tensor<4x64x128xf32>, tensor<128xf32>, tensor<4x64x128xf32>
        epilogue(%r : tensor<4x64x128xf32>)
        -> tensor<128xf32>, tensor<128xf32>, tensor<4x64x128xf32> {
    ^bb0(%dx: f32, %a: f32):
      %s = arith.addf %a, %dx : f32
      gpt.yield %s : f32
    }
    ```

    With the residual gradient's bf16 copy and its column sums:

    ```mlir
    %dg, %db, %dres, %dres16, %dbias = gpt.fused_layernorm_grad %x, %gamma, %dy
        : tensor<4x64x128xf32>, tensor<128xf32>, tensor<4x64x128xbf16>
        epilogue(%r : tensor<4x64x128xf32>)
        -> tensor<128xf32>, tensor<128xf32>, tensor<4x64x128xf32>,
           tensor<4x64x128xbf16>, tensor<128xf32> {
    ^bb0(%dx: f32, %a: f32):
      %s = arith.addf %a, %dx : f32
      gpt.yield %s, %s, %s : f32, f32, f32
    }
    ```
  }];
  let arguments = (ins GPT_FloatTensor:$x, GPT_FloatTensor:$gamma,
                       GPT_FloatTensor:$dy, Variadic<AnyRankedTensor>:$inputs,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs GPT_FloatTensor:$dgamma, GPT_FloatTensor:$dbeta,
                      Variadic<GPT_FloatTensor>:$values);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $x `,` $gamma `,` $dy `:` type($x) `,` type($gamma) `,` type($dy)
    `epilogue` `(` ($inputs^ `:` type($inputs))? `)` attr-dict `->`
    type($dgamma) `,` type($dbeta) `,` type($values) $body
  }];
  let hasVerifier = 1;
}

def GPT_YieldOp : GPT_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["FusedElementwiseOp", "MultiTensorElementwiseOp",
                "MultiTensorReduceOp", "FusedLayerNormOp",
                "FusedLayerNormGradOp"]>]> {
  let summary = "The scalar results of a fused body";
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

#endif // GPTC_DIALECT_GPT_GPTFUSEDOPS_TD
