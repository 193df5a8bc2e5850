//===- GPTDialect.td - the gpt dialect ---------------------*- tablegen -*-===//
//
// The gpt dialect describes a transformer the way a person writes it: tensors
// with static shapes, one op per textbook operation. Passes rewrite it into
// fused, mixed-precision, padded form; the CPU executor runs it at every stage.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_DIALECT_GPT_GPTDIALECT_TD
#define GPTC_DIALECT_GPT_GPTDIALECT_TD

include "mlir/IR/OpBase.td"

def GPT_Dialect : Dialect {
  let name = "gpt";
  let cppNamespace = "::gptc::gpt";
  let summary = "Transformer training graphs, as written and as optimised";
  let description = [{
    Parameters and inputs of a model are the arguments of a `func.func`,
    tagged with argument attributes:

    - `gpt.param = "h.0.attn.c_attn.weight"`: a trainable parameter, named as
      in Hugging Face GPT-2 checkpoints, with `gpt.init = "normal" | "zeros" |
      "ones"` and, for `normal`, `gpt.init_std = 0.02 : f32`;
    - `gpt.input = "tokens" | "targets"`: a batch of token ids.

    Results may carry `gpt.output = "loss" | "logits"`.

    The training step adds `gpt.grad`, `gpt.adam_m`, `gpt.adam_v` and
    `gpt.hyper` (gpt-autodiff, gpt-optimizer), and gpt-weight-copies
    `gpt.param_copy = "wte.weight"`: a parameter's low-precision copy that
    lives across steps. An argument of type T holds the parameter rounded
    to T's element type and zero-padded at the high end of each dimension
    to T's shape; the update's result of that name writes the copy, all of
    it, or its leading rows when it has the parameter's shape and only the
    leading dimension is shorter (the padding never changes).
  }];
  // The bodies of fused ops (gpt.fused_elementwise) are scalar arith/math.
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasConstantMaterializer = 0;
}

class GPT_Op<string mnemonic, list<Trait> traits = []>
    : Op<GPT_Dialect, mnemonic, traits>;

#endif // GPTC_DIALECT_GPT_GPTDIALECT_TD
