//===- OptimizerOptions.h - AdamW's compile-time settings -------*- C++ -*-===//
//
// Plain data and no MLIR: the training program carries these (they are
// constants in its update kernels) and records them in checkpoints.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_PIPELINE_OPTIMIZEROPTIONS_H
#define GPTC_PIPELINE_OPTIMIZEROPTIONS_H

#include <string>
#include <vector>

namespace gptc {

/// Hyper-parameters fixed at compile time (the learning rate is not: the
/// schedule feeds it to every update).
struct OptimizerOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weightDecay = 0.1; ///< on 2-D parameters only
  double clip = 1.0;        ///< global-norm clipping; 0 turns it off
  /// gpt-mixed-precision's policy: fp32, tf32, bf16 or fp16 (fp16 adds a
  /// run-time loss scale to the gradient function; the trainer drives it).
  std::string precision = "fp32";
  /// gpt-recompute's ops ("gelu", "layernorm"): activations the backward
  /// computes again instead of keeping them. None by default.
  std::vector<std::string> recompute;
  /// gpt-plan-streams (rt::planStreams): the weight gradients' GEMMs on a
  /// second CUDA stream, beside the backward's next launches. Off by
  /// default.
  bool overlapWeightGrads = false;
  /// The projections' bias gradients outside their weight-gradient GEMMs
  /// (the default): the output projections' summed by the layernorm
  /// gradients that write their output gradients (gpt-fuse-elementwise's
  /// layernorm-bias-grads), c_attn's from attention's identities
  /// (gpt-attention-bias-grad). False: all in their weight-gradient GEMMs
  /// (cuBLASLt's BGRADA, or gptc's column sums after a plain GEMM).
  bool fusedBiasGrads = true;
  /// With fusedBiasGrads, c_fc's bias gradient summed by the GEMM that
  /// writes GELU's derivative (gpt-fuse-matmul-epilogue's gelu-bias-grads)
  /// rather than by its weight-gradient GEMM. Off by default.
  bool geluBiasGrads = false;
  /// gpt-weight-copies: under autocast the parameters' bf16 (fp16) copies
  /// live across steps, written by the update, instead of being cast from
  /// the master weights in every gradient function. On by default.
  bool weightCopies = true;
  /// Gradient accumulation's gradients that a GEMM or the embedding
  /// gradient writes added by that launch in place (grads_accumulate,
  /// LowerToKernels.h); false: into temps, then by the add like the
  /// others. On by default.
  bool accumulateInPlace = true;

  /// recompute as a program records it: "gelu,layernorm", or "none".
  std::string recomputeList() const {
    std::string s;
    for (const std::string &op : recompute)
      s += (s.empty() ? "" : ",") + op;
    return s.empty() ? "none" : s;
  }
};

} // namespace gptc

#endif // GPTC_PIPELINE_OPTIMIZEROPTIONS_H
