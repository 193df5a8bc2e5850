//===- Pipeline.cpp - the pass pipeline, stage by stage -------------------===//

#include "gptc/Pipeline/Pipeline.h"

#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Transforms/Passes.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace gptc {

void buildPipeline(OpPassManager &pm, StringRef stage,
                   const OptimizerOptions &opts, int64_t padMultiple,
                   bool packAttention) {
  if (stage == "graph")
    return;
  // First, on the forward graph as written: attention is still spelled out,
  // and the padded shapes flow through every later pass.
  if (padMultiple > 0) {
    GPTPadDimsOptions pad;
    pad.multiple = padMultiple;
    pm.addPass(createGPTPadDims(pad));
  }
  if (stage == "padded")
    return;
  // Before autodiff, so that the backward is flash_attention(_qkv)_grad.
  GPTFuseAttentionOptions attention;
  attention.packQKV = packAttention;
  pm.addPass(createGPTFuseAttention(attention));
  if (stage == "attention")
    return;
  // Before autodiff, so the backward GEMMs read the same low-precision copies
  // and the casts' VJPs hand float32 gradients to the master weights.
  GPTMixedPrecisionOptions precision;
  precision.policy = opts.precision;
  pm.addPass(createGPTMixedPrecision(precision));
  if (stage == "precision")
    return;
  pm.addPass(createGPTAutodiff());
  if (stage == "autodiff")
    return;
  GPTOptimizerOptions optimizer;
  optimizer.beta1 = opts.beta1;
  optimizer.beta2 = opts.beta2;
  optimizer.eps = opts.eps;
  optimizer.weightDecay = opts.weightDecay;
  optimizer.clip = opts.clip;
  pm.addPass(createGPTOptimizer(optimizer));
  // The update repeats its scalar constants per parameter; fold them once.
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (stage == "optimizer")
    return;
  // After CSE, which would merge the copies back into the forward's ops;
  // before the fusion passes, which then fuse the copies like any op.
  if (!opts.recompute.empty()) {
    GPTRecomputeOptions recompute;
    recompute.ops = opts.recompute;
    pm.addPass(createGPTRecompute(recompute));
  }
  if (stage == "recompute")
    return;
  // c_attn's bias gradient from attention's identities, before the
  // epilogues would take it into its weight-gradient GEMM (BGRADA).
  if (opts.fusedBiasGrads)
    pm.addPass(createGPTAttentionBiasGrad());
  // Matmul epilogues first, on the plain ops and the whole step (the
  // backward's gelu_grad must read the aux pre-activation); elementwise
  // fusion then groups what is left around them.
  GPTFuseMatmulEpilogueOptions epilogues;
  epilogues.geluBiasGrads = opts.geluBiasGrads;
  pm.addPass(createGPTFuseMatmulEpilogue(epilogues));
  // The update writes the weights' low-precision copies: after the
  // epilogues, which narrow the biases they add, and before
  // gpt-fuse-elementwise, which folds each copy's cast into AdamW's kernel.
  if (opts.weightCopies)
    pm.addPass(createGPTWeightCopies());
  // Last, over the whole step: the backward's and the update's chains
  // exist only now (docs/pipeline.md, "Where the fusion passes sit").
  GPTFuseElementwiseOptions fuse;
  fuse.layernormBiasGrads = opts.fusedBiasGrads;
  pm.addPass(createGPTFuseElementwise(fuse));
}

FailureOr<TrainingProgram>
compileTrainingProgram(MLIRContext &ctx, const models::GPT2Config &cfg,
                       int64_t batch, int64_t seq,
                       const OptimizerOptions &opts, int64_t padMultiple) {
  TrainingProgram program;
  program.module = models::buildGPT2(ctx, cfg, batch, seq);
  PassManager pm(&ctx);
  buildPipeline(pm, "fused", opts, padMultiple);
  if (failed(verify(*program.module)) || failed(pm.run(*program.module)))
    return failure();
  for (auto func : program.module->getOps<func::FuncOp>()) {
    bool hasGrad = false, hasLoss = false;
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      hasGrad |= bool(func.getResultAttr(i, gpt::kGradAttr));
      hasLoss |= bool(func.getResultAttr(i, gpt::kOutputAttr));
    }
    if (func.getSymName() == "adamw_update")
      program.update = func;
    else if (hasGrad)
      program.grads = func;
    else if (hasLoss)
      program.forward = func;
  }
  if (!program.forward || !program.grads || !program.update)
    return program.module->emitError(
        "the pipeline did not produce forward, gradient and update functions");
  return program;
}

} // namespace gptc
