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
// (a skipped step ends in "| skipped (N in a row)"), and validation prints
// "val loss 6.123456": before the first step, every val_every steps and
// after the last.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_TRAINER_H
#define GPTC_TRAIN_TRAINER_H

#include "gptc/Train/Init.h"
#include "gptc/Train/RunLog.h"
#include "gptc/Train/StepFunction.h"
#include "gptc/Train/TrainState.h"

#include <stdexcept>

namespace gptc::train {

/// The run cannot go on (too many skipped steps, a function the trainer
/// cannot bind); the message is one line.
struct TrainError : std::runtime_error {
  using runtime_error::runtime_error;
};

class Trainer {
public:
  /// Reads the roles of the program's functions; fails with an error at a
  /// function that lacks one the trainer needs.
  static mlir::FailureOr<Trainer> create(const TrainingProgram &program,
                                         const models::GPT2Config &config,
                                         const TrainOptions &opts, RunLog &log);

  const std::vector<ParamSpec> &parameters() const { return specs_; }

  /// Starts at step 0 from `params` (named and shaped as parameters(),
  /// finite; FormatError naming `source` otherwise), moments zero.
  void start(std::map<std::string, exec::HostTensor> params,
             const std::string &source);
  /// Continues from a checkpoint folder; throws FormatError.
  void resume(const std::string &folder);
  const TrainState &state() const { return state_; }

  /// Trains up to opts.steps. Fails if the executor reported an error;
  /// throws TrainError when too many steps in a row were skipped and
  /// FormatError when a checkpoint cannot be written.
  mlir::LogicalResult run(DataLoader &train, DataLoader *val);

private:
  Trainer(const models::GPT2Config &config, const TrainOptions &opts,
          RunLog &log)
      : config_(config), opts_(opts), log_(log) {}

  mlir::LogicalResult step(DataLoader &train);
  mlir::FailureOr<double> valLoss(DataLoader &val);
  void save();
  void checkParameters(const std::map<std::string, exec::HostTensor> &params,
                       const std::string &source) const;

  models::GPT2Config config_;
  TrainOptions opts_;
  RunLog &log_;
  std::vector<ParamSpec> specs_;
  std::optional<StepFunction> forward_, grads_, update_;
  bool lossScaling_ = false; ///< grads takes gpt.hyper = "loss_scale" (fp16)
  TrainState state_;
  std::string lastCheckpoint_;
};

} // namespace gptc::train

#endif // GPTC_TRAIN_TRAINER_H
