//===- Passes.td - gptc's passes ---------------------------*- tablegen -*-===//
//
// The pipeline, in order (lib/Pipeline/Pipeline.cpp strings them together):
//
//   gpt-autodiff     forward graph -> + gradient function
//   gpt-optimizer    + AdamW update function
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRANSFORMS_PASSES_TD
#define GPTC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

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
