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
    result; it holds only `arith` and `math` ops on scalars. Several results
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
    + t]`, of tensor t's shape). The kernel walks all tensors as one flat
    buffer.
  }];
  let arguments = (ins Variadic<GPT_FloatTensor>:$tensors,
                       Variadic<AnyRankedTensor>:$scalars,
                       I64Attr:$num_tensors);
  let results = (outs Variadic<GPT_FloatTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $tensors `:` type($tensors) `)`
    (`scalars` `(` $scalars^ `:` type($scalars) `)`)? attr-dict
    `->` type($results) $body
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

def GPT_YieldOp : GPT_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["FusedElementwiseOp", "MultiTensorElementwiseOp"]>]> {
  let summary = "The scalar results of a fused body";
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

#endif // GPTC_DIALECT_GPT_GPTFUSEDOPS_TD
