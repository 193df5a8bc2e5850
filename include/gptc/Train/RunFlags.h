//===- RunFlags.h - the run flags both trainers take ------------*- C++ -*-===//
//
// gptc train (LLVM's command-line parser, the executor or a Program) and a
// compiled training program (its own parser, no LLVM) take the same run
// flags with the same defaults, check them with the same messages, open
// the data and the run folder in the same order, start from the same
// three sources and log the same lines. This is that part, once; each
// tool adds what is its own (gptc train: the model and precision flags and
// the weight decay and clip; the program: what its compiler fixed).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_RUNFLAGS_H
#define GPTC_TRAIN_RUNFLAGS_H

#include "gptc/Train/Trainer.h"

#include <optional>
#include <string>

namespace gptc::train {

/// The flags (their defaults here) and whether the ones that need another
/// flag were given.
struct RunFlags {
  std::string data, valData, initFrom, ckptDir, logDir;
  std::string schedule = "cosine";
  int64_t steps = 50, gradAccum = 1, warmup = 0, ckptEvery = 0,
          valEvery = 0, valBatches = 10, maxSkips = 10,
          lossScaleWindow = 2000;
  double lr = 6e-4, minLr = 6e-5, lossScale = 65536.0;
  uint64_t seed = 1337;
  bool shuffle = false, resume = false;
  bool ckptEveryGiven = false, valEveryGiven = false, valBatchesGiven = false;
};

/// The first thing wrong with `f` as its error line says it ("--steps must
/// be at least 1, got 0"), or "" when nothing is.
std::string checkRunFlags(const RunFlags &f);

/// The run's options for batch × seq with `optimizer`; `f` is checked.
TrainOptions trainOptions(const RunFlags &f, int64_t batch, int64_t seq,
                          const OptimizerOptions &optimizer);

/// What a run reads before it touches a device or writes anything, so that
/// bad data or a run folder that cannot be resumed is one error line with
/// nothing left behind: the token data, the run folder (--ckpt-dir, else
/// --log-dir, else none) and the checkpoint to resume ("" for none).
struct RunInputs {
  DataLoader train;
  std::optional<DataLoader> val;
  std::string runDir, resumeFrom;
};
/// Throws FormatError (the data) and TrainError (the checkpoints).
RunInputs openRunInputs(const RunFlags &f, const TrainOptions &opts,
                        int64_t vocabSize);

/// Creates the run folder (if any): the first thing a run writes.
void makeRunDir(const RunInputs &in);

/// Starts `trainer` from the checkpoint to resume, else the --init-from
/// weights, else fresh ones from the seed.
void startTrainer(Trainer &trainer, const RunFlags &f, const RunInputs &in);

/// Logs the data (and where the run resumes) and trains; false when the
/// engine failed (it said why).
bool trainLogged(Trainer &trainer, RunLog &log, const RunFlags &f,
                 RunInputs &in);

} // namespace gptc::train

#endif // GPTC_TRAIN_RUNFLAGS_H
