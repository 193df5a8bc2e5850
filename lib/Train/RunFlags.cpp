//===- RunFlags.cpp - what both trainers take from their command lines ----===//

#include "gptc/Train/RunFlags.h"

#include "gptc/Executor/Arguments.h"

#include <cmath>
#include <filesystem>

namespace gptc::train {

std::string checkRunFlags(const RunFlags &f) {
  if (!parseScheduleKind(f.schedule))
    return "unknown --lr-schedule '" + f.schedule + "' (cosine, constant)";
  const std::pair<const char *, std::pair<int64_t, int64_t>> atLeast[] = {
      {"steps", {f.steps, 1}},
      {"grad-accum", {f.gradAccum, 1}},
      {"warmup", {f.warmup, 0}},
      {"ckpt-every", {f.ckptEvery, 0}},
      {"val-every", {f.valEvery, 0}},
      {"val-batches", {f.valBatches, 1}},
      {"max-skips", {f.maxSkips, 0}},
      {"loss-scale-window", {f.lossScaleWindow, 1}}};
  for (const auto &[name, valueAndMin] : atLeast)
    if (valueAndMin.first < valueAndMin.second)
      return std::string("--") + name + " must be at least " +
             std::to_string(valueAndMin.second) + ", got " +
             std::to_string(valueAndMin.first);
  if (!(f.lossScale > 0) || !std::isfinite(f.lossScale))
    return "--loss-scale must be a positive number";
  if (!(f.lr >= 0) || !(f.minLr >= 0))
    return "--lr and --min-lr must be non-negative";
  if (f.ckptEveryGiven && f.ckptDir.empty())
    return "--ckpt-every needs --ckpt-dir";
  if (f.resume && f.ckptDir.empty())
    return "--resume needs --ckpt-dir";
  if (f.resume && !f.initFrom.empty())
    return "--resume and --init-from exclude each other";
  if (f.valData.empty() && (f.valEveryGiven || f.valBatchesGiven))
    return "--val-every and --val-batches need --val-data";
  return "";
}

TrainOptions trainOptions(const RunFlags &f, int64_t batch, int64_t seq,
                          const OptimizerOptions &optimizer) {
  TrainOptions opts;
  opts.batch = batch;
  opts.seq = seq;
  opts.steps = f.steps;
  opts.gradAccum = f.gradAccum;
  opts.schedule = {*parseScheduleKind(f.schedule), f.lr, f.minLr, f.warmup,
                   f.steps};
  opts.optimizer = optimizer;
  opts.seed = f.seed;
  opts.shuffle = f.shuffle;
  opts.data = f.data;
  opts.valData = f.valData;
  opts.ckptDir = f.ckptDir;
  opts.ckptEvery = f.ckptEvery;
  opts.valEvery = f.valEvery;
  opts.valBatches = f.valBatches;
  opts.maxSkips = f.maxSkips;
  opts.initLossScale = f.lossScale;
  opts.lossScaleWindow = f.lossScaleWindow;
  return opts;
}

RunInputs openRunInputs(const RunFlags &f, const TrainOptions &opts,
                        int64_t vocabSize) {
  RunInputs in{DataLoader(f.data, opts.batch, opts.seq, vocabSize, f.shuffle,
                          f.seed),
               std::nullopt,
               f.ckptDir.empty() ? f.logDir : f.ckptDir,
               ""};
  if (!f.valData.empty())
    in.val.emplace(f.valData, opts.batch, opts.seq, vocabSize, false, 0);
  if (!f.ckptDir.empty())
    in.resumeFrom = checkpointToResume(f.ckptDir, f.resume);
  return in;
}

void makeRunDir(const RunInputs &in) {
  if (!in.runDir.empty())
    std::filesystem::create_directories(in.runDir);
}

void startTrainer(Trainer &trainer, const RunFlags &f, const RunInputs &in) {
  if (!in.resumeFrom.empty()) {
    trainer.resume(in.resumeFrom);
  } else if (!f.initFrom.empty()) {
    std::vector<exec::ArgumentInfo> args;
    for (const ParamSpec &p : trainer.parameters())
      args.push_back({exec::ArgumentInfo::Kind::Param, p.name, p.shape});
    trainer.start(exec::loadParametersFromFile(args, f.initFrom), f.initFrom);
  } else {
    trainer.start(initParameters(trainer.parameters(), f.seed), "init");
  }
}

namespace {
std::string describe(const char *what, const std::string &path,
                     const DataLoader &data) {
  return std::string(what) + " " + path + ": " +
         std::to_string(data.numTokens()) + " tokens, " +
         std::to_string(data.numWindows()) + " batches per epoch";
}
} // namespace

bool trainLogged(Trainer &trainer, RunLog &log, const RunFlags &f,
                 RunInputs &in) {
  log.line(describe("train", f.data, in.train));
  if (in.val)
    log.line(describe("val", f.valData, *in.val));
  if (!in.resumeFrom.empty())
    log.line("resuming from " + in.resumeFrom + " at step " +
             std::to_string(trainer.state().step));
  return trainer.run(in.train, in.val ? &*in.val : nullptr);
}

} // namespace gptc::train
