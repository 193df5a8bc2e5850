//===- Passes.td - gptc's passes ---------------------------*- tablegen -*-===//
//
// The pipeline, in order (lib/Pipeline/Pipeline.cpp strings them together):
//
//   gpt-fuse-attention  q·kᵀ, scale, mask, softmax, ·v -> gpt.flash_attention
//   gpt-autodiff        forward graph -> + gradient function
//   gpt-optimizer       + AdamW update function
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRANSFORMS_PASSES_TD
#define GPTC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def GPTFuseAttention : Pass<"gpt-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Replaces attention written as q·kᵀ, scale, mask, softmax, ·v "
                "with gpt.flash_attention";
  let description = [{
    Finds scaled dot-product attention as a person writes it and replaces it
    with one `gpt.flash_attention`, whose gradient (after gpt-autodiff) is
    one `gpt.flash_attention_grad` that recomputes the probabilities instead
    of keeping the [T, T] matrix alive. The search starts at each matmul
    of a softmax by v, walks up, and accepts:

    - the scores `q·kᵀ`: `gpt.matmul %q, %k {transpose_b}`, or a matmul with
      an explicit `gpt.transpose` of k's last two dimensions;
    - a scale of 1/√d (d the head size), as a multiplication by a splat
      constant or a division by one, on the scores, on q or on k (several
      factors multiply);
    - an optional causal mask: `gpt.causal_mask` (fill -inf), or an added
      constant with 0 on and below the diagonal and -inf above; no mask
      makes `causal = false`;
    - the probabilities multiplied by v, `gpt.matmul %p, %v`.

    q, k and v already in [B, H, T, D] (GPT-2 splits heads with reshape and
    transpose before q·kᵀ) are used as they are; heads folded into one batch
    dimension ([B·H, T, D]) are unfolded by looking through the reshape that
    folded them, or by a new reshape, and the output is reshaped back.

    Anything that is not exactly attention stays as it is, with a remark
    `did not fuse attention: <why>` at the softmax: a mask that is not
    causal, a scale that is not 1/√d, probabilities or scores used by other
    ops.

    Example:

    ```mlir
    %scale = gpt.constant dense<0.176776692> : tensor<f32>
    %s = gpt.matmul %q, %k {transpose_b} : tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32> -> tensor<2x4x8x8xf32>
    %c = gpt.mul %s, %scale : tensor<2x4x8x8xf32>, tensor<f32> -> tensor<2x4x8x8xf32>
    %m = gpt.causal_mask %c : tensor<2x4x8x8xf32>
    %p = gpt.softmax %m : tensor<2x4x8x8xf32>
    %y = gpt.matmul %p, %v : tensor<2x4x8x8xf32>, tensor<2x4x8x32xf32> -> tensor<2x4x8x32xf32>
    ```

    becomes

    ```mlir
    %y, %lse = gpt.flash_attention %q, %k, %v {causal, scale = 0.176776692 : f32}
        : tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32>
        -> tensor<2x4x8x32xf32>, tensor<2x4x8xf32>
    ```
  }];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTAutodiff : Pass<"gpt-autodiff", "mlir::ModuleOp"> {
  let summary = "Derives the gradient of the loss with respect to every parameter";
  let description = [{
    For every function with a result tagged `gpt.output = "loss"`, adds a
    function `<name>_grad` with the same arguments that returns the loss and
    the gradient of each `gpt.param` argument (result attribute
    `gpt.grad = "<param>"`), in argument order. The backward ops come from
    each op's `DifferentiableOpInterface::buildVJP` rule, walked in reverse;
    gradients of a value used twice (the tied `wte` of GPT-2) are summed.
    Backward ops are located at their forward op, inside `fused<"vjp">`.

    Example: `y = gpt.matmul %x, %w` contributes
    `dx = gpt.matmul %dy, %w {transpose_b}` and
    `dw = gpt.matmul %x2d, %dy2d {transpose_a}`.
  }];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTOptimizer : Pass<"gpt-optimizer", "mlir::ModuleOp"> {
  let summary = "Appends the AdamW update as a function of the IR";
  let description = [{
    Adds `adamw_update` for the parameters of the gradient function that
    gpt-autodiff made: it scales the summed gradients by `grad_scale`
    (1/grad_accum), computes their global L2 norm, clips them to `clip`
    (PyTorch's clip_grad_norm_: coefficient min(clip / (norm + 1e-6), 1)),
    and applies AdamW as torch.optim.AdamW does: decoupled weight decay
    (2-D parameters only), moments with bias correction, then
    `p -= lr / bc1 · m / (sqrt(v) / sqrt(bc2) + eps)`. The learning rate
    and the step number are arguments: the schedule lives in the runtime.
  }];
  let options = [
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.95", "AdamW beta2">,
    Option<"eps", "eps", "double", "1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.1",
           "Decoupled weight decay, applied to 2-D parameters only">,
    Option<"clip", "clip", "double", "1.0",
           "Clip gradients to this global L2 norm; 0 turns clipping off">,
  ];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

#endif // GPTC_TRANSFORMS_PASSES_TD
