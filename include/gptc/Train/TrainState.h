//===- TrainState.h - a run's options and its resumable state ---*- C++ -*-===//
//
// Everything `--resume` needs to continue a run exactly: the parameters, the
// AdamW moments, the step, the number of updates applied (AdamW's t, which
// lags the step when steps were skipped), the run of skipped steps and the
// data position. Random state needs no record of its own: the only draws
// after initialisation are the shuffles, from Rng(seed, epoch). A
// checkpoint's metadata also records the model and the hyper-parameters, so
// a checkpoint can be checked against the command that resumes it and
// sampled from without flags.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_TRAINSTATE_H
#define GPTC_TRAIN_TRAINSTATE_H

#include "gptc/Models/GPT2Config.h"
#include "gptc/Pipeline/OptimizerOptions.h"
#include "gptc/Train/Checkpoint.h"
#include "gptc/Train/DataLoader.h"
#include "gptc/Train/LRSchedule.h"

namespace gptc::train {

struct TrainOptions {
  int64_t batch = 1, seq = 1, steps = 1;
  int64_t gradAccum = 1;
  LRSchedule schedule;
  OptimizerOptions optimizer;
  uint64_t seed = 0;
  bool shuffle = false;
  std::string data, valData;
  std::string ckptDir;   ///< "" for none
  int64_t ckptEvery = 0; ///< 0: only at the end
  int64_t valEvery = 0;  ///< 0: only at the start and the end
  int64_t valBatches = 10;
  int64_t maxSkips = 10; ///< consecutive skipped steps before stopping
  /// fp16 dynamic loss scaling (torch.cuda.amp.GradScaler's defaults): the
  /// first scale, and how many finite steps in a row double it. A step with
  /// non-finite gradients is skipped and halves it.
  double initLossScale = 65536.0;
  int64_t lossScaleWindow = 2000;
  /// The step line's MFU, printed only where both are known (> 0): the
  /// model's FLOPs per trained token and the device's peak FLOP/s.
  double flopsPerToken = 0.0;
  double peakFlops = 0.0;
};

struct TrainState {
  std::map<std::string, exec::HostTensor> params, adamM, adamV;
  int64_t step = 0;    ///< steps completed
  int64_t updates = 0; ///< AdamW updates applied
  int64_t skips = 0;   ///< consecutive skipped steps up to `step`
  double lossScale = 1.0; ///< fp16: the seed of the backward pass
  int64_t goodSteps = 0;  ///< fp16: finite steps since the scale changed
  DataPosition data;
};

Checkpoint toCheckpoint(const TrainState &state,
                        const models::GPT2Config &config,
                        const TrainOptions &opts);

/// The state in `ckpt` (read from `folder`). Throws FormatError if its
/// metadata is missing or malformed, or its model, --batch or --seq differ
/// from `config` and `opts`. Everything else (steps, schedule, seed, ...)
/// comes from the resuming command: the same command continues the run
/// exactly; another one (a longer run, say) continues it differently.
TrainState fromCheckpoint(Checkpoint ckpt, const std::string &folder,
                          const models::GPT2Config &config,
                          const TrainOptions &opts);

/// The model a checkpoint's metadata records; throws FormatError.
models::GPT2Config configOf(const Checkpoint &ckpt, const std::string &folder);

} // namespace gptc::train

#endif // GPTC_TRAIN_TRAINSTATE_H
