//===- Engine.h - what runs the training step for the Trainer ---*- C++ -*-===//
//
// The Trainer (Trainer.h) owns the loop: the schedule, the micro-batches,
// the skip decision, loss scaling, validation and checkpoints. An Engine
// owns the weights and runs the three compiled functions on them:
//
//   ExecutorEngine.h  the fused IR on the CPU executor (gptc train), with
//                     the weights in host tensors
//   ProgramEngine.h   the kernel-level Program on a Backend (CUDA, or the
//                     CPU backend's executor kernels), with the weights in
//                     the backend's arena, updated in place
//
// A step is accumulate() once per micro-batch, then prepareUpdate(), which
// returns the gradient norm and changes nothing, and takeLosses(), then
// applyUpdate() only if the Trainer keeps the step. No MLIR here: the
// training program links the Trainer with a ProgramEngine alone.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_ENGINE_H
#define GPTC_TRAIN_ENGINE_H

#include "gptc/Executor/Arguments.h"
#include "gptc/Train/ParamSpec.h"

#include <exception>
#include <map>
#include <string>
#include <vector>

namespace gptc::train {

/// An engine failed and has already reported why (the executor prints a
/// diagnostic at the op that failed).
struct EngineFailed : std::exception {
  const char *what() const noexcept override { return "engine failed"; }
};

/// The update function's scalar inputs, as the Trainer computes them.
struct UpdateHypers {
  float lr = 0.0f;
  float step = 0.0f;      ///< AdamW's 1-based t
  float gradScale = 1.0f; ///< 1 / (grad_accum * loss scale)
};

using TensorMap = std::map<std::string, exec::HostTensor>;

class Engine {
public:
  virtual ~Engine() = default;

  /// The model's parameters in argument order.
  virtual const std::vector<ParamSpec> &parameters() const = 0;
  /// Whether the gradient function takes a loss scale (fp16).
  virtual bool lossScaling() const = 0;

  /// Makes these the weights and AdamW moments, each named and shaped as
  /// parameters() (the Trainer has checked them).
  virtual void setWeights(TensorMap params, TensorMap adamM,
                          TensorMap adamV) = 0;
  /// The current weights and moments.
  virtual void getWeights(TensorMap &params, TensorMap &adamM,
                          TensorMap &adamV) = 0;

  /// Runs the gradient function on one micro-batch, or queues it (a GPU's
  /// ProgramEngine does not wait for it, so that the micro-batches of a
  /// step run back to back). `first` starts a new sum of gradients; later
  /// micro-batches add theirs. Its loss is one of the next takeLosses().
  virtual void accumulate(const exec::Batch &batch, float lossScale,
                          bool first) = 0;
  /// The losses of the micro-batches accumulated since the last call, in
  /// their order; waits for them.
  virtual std::vector<double> takeLosses() = 0;
  /// The global norm of the summed gradients as the update sees them
  /// (scaled by h.gradScale, before clipping); changes no weight.
  virtual double prepareUpdate(const UpdateHypers &h) = 0;
  /// Applies the update prepareUpdate() computed.
  virtual void applyUpdate() = 0;

  /// The forward function's loss on one batch.
  virtual double loss(const exec::Batch &batch) = 0;
};

} // namespace gptc::train

#endif // GPTC_TRAIN_ENGINE_H
