//===- Pipeline.h - from a model config to runnable step functions -*- C++ -*-===//
//
// The compiler pipeline as a library call: build the model's forward graph,
// run the passes up to a stage, and hand back the functions a training loop
// runs. The functions are identified by their attributes, never by position:
//
//   forward (gpt2_forward):   params {gpt.param}, tokens, targets {gpt.input}
//                             -> loss {gpt.output="loss"}, logits
//   grads (gpt2_forward_grad): the same arguments
//                             -> loss {gpt.output="loss"},
//                                one gradient per param {gpt.grad=<name>}
//   update (adamw_update):    params {gpt.param}, gradient sums {gpt.grad},
//                             moments {gpt.adam_m}, {gpt.adam_v},
//                             scalars {gpt.hyper="lr" | "step" | "grad_scale"}
//                             -> params {gpt.param}, moments {gpt.adam_m},
//                                {gpt.adam_v}, grad_norm {gpt.output}
//
// "step" is the 1-based AdamW step t (bias correction), "grad_scale" is
// 1/grad_accum (the update sees the sum of the micro-batch gradients), and
// grad_norm is the global L2 norm of the scaled gradient before clipping.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_PIPELINE_PIPELINE_H
#define GPTC_PIPELINE_PIPELINE_H

#include "gptc/Models/GPT2.h"
#include "gptc/Pipeline/OptimizerOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"

namespace gptc {

struct TrainingProgram {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp forward;
  mlir::func::FuncOp grads;
  mlir::func::FuncOp update;
};

/// gpt-pad-dims pads matmul and attention dimensions to a multiple of this
/// (docs/pipeline.md, stage "padded"); 0 leaves them as they are.
inline constexpr int64_t kDefaultPadMultiple = 64;

/// Adds the passes that turn the forward graph into a training step, up to
/// and including `stage` ("graph", "padded", "attention", "autodiff",
/// "optimizer", "recompute", "fused"). `packAttention` is gpt-fuse-attention's pack-qkv
/// (false: attention on [B, H, T, D] head copies, as the step tests compare).
void buildPipeline(mlir::OpPassManager &pm, llvm::StringRef stage,
                   const OptimizerOptions &opts,
                   int64_t padMultiple = kDefaultPadMultiple,
                   bool packAttention = true);

/// Builds GPT-2 for a [B, T] batch and runs the whole training pipeline.
/// Fails (with diagnostics already reported) if a pass fails.
mlir::FailureOr<TrainingProgram>
compileTrainingProgram(mlir::MLIRContext &ctx, const models::GPT2Config &cfg,
                       int64_t batch, int64_t seq,
                       const OptimizerOptions &opts,
                       int64_t padMultiple = kDefaultPadMultiple);

} // namespace gptc

#endif // GPTC_PIPELINE_PIPELINE_H
