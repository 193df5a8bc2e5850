//===- Trainer.h - the training loop around the compiled step ---*- C++ -*-===//
//
// Each step runs K = grad_accum micro-batches through the grads function,
// sums their gradients and averages their losses, then runs the update
// function (AdamW in IR) with lr from the schedule, step = t (the 1-based
// number of this update) and grad_scale = 1/K. A step whose mean loss or
// gradient norm is not finite keeps the old parameters and moments; it is
// reported on its line and counted, and max_skips such steps in a row stop
// the run. Every step prints one line, llm.c style:
//
//   step 12/50 | loss 6.812345 | lr 3.00e-04 | norm 1.2345 | 93.1 ms | 176
//   tok/s
//
// (on a device whose peak is known, "| MFU 47.1%" follows tok/s; a skipped
// step ends in "| skipped (N in a row)"), and validation prints
// "val loss 6.123456": before the first step, every val_every steps and
// after the last.
//
// An Engine (Engine.h) runs the functions: the CPU executor for gptc train,
// a kernel-level Program for the training program. No MLIR here.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_TRAINER_H
#define GPTC_TRAIN_TRAINER_H

#include "gptc/Train/Engine.h"
#include "gptc/Train/RunLog.h"
#include "gptc/Train/TrainState.h"

#include <memory>
#include <stdexcept>

namespace gptc::train {

/// The run cannot go on (too many skipped steps, a function the trainer
/// cannot bind); the message is one line.
struct TrainError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The checkpoint a run with checkpoints in `ckptDir` starts from: the
/// newest complete one when `resume`, none otherwise. Throws TrainError when
/// `resume` finds none, and when `ckptDir` already holds checkpoints and
/// `resume` is off (a new run never mixes its checkpoints with another's).
std::string checkpointToResume(const std::string &ckptDir, bool resume);

class Trainer {
public:
  Trainer(std::unique_ptr<Engine> engine, const models::GPT2Config &config,
          const TrainOptions &opts, RunLog &log);

  const std::vector<ParamSpec> &parameters() const {
    return engine_->parameters();
  }

  /// Starts at step 0 from `params` (named and shaped as parameters(),
  /// finite; FormatError naming `source` otherwise), moments zero.
  void start(TensorMap params, const std::string &source);
  /// Continues from a checkpoint folder; throws FormatError.
  void resume(const std::string &folder);
  /// The step, the data position and the loss scale; the weights and
  /// moments only once run() has returned (during the run the engine holds
  /// them).
  const TrainState &state() const { return state_; }

  /// Trains up to opts.steps. Returns false if the engine failed (it has
  /// reported why); throws TrainError when too many steps in a row were
  /// skipped and FormatError when a checkpoint cannot be written.
  bool run(DataLoader &train, DataLoader *val);

private:
  void step(DataLoader &train);
  double valLoss(DataLoader &val);
  void save();
  void checkParameters(const TensorMap &params,
                       const std::string &source) const;

  std::unique_ptr<Engine> engine_;
  models::GPT2Config config_;
  TrainOptions opts_;
  RunLog &log_;
  TrainState state_;
  std::string lastCheckpoint_;
};

} // namespace gptc::train

#endif // GPTC_TRAIN_TRAINER_H
