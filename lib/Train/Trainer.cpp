//===- Trainer.cpp - the training loop around the compiled step -----------===//

#include "gptc/Train/Trainer.h"

#include "gptc/Formats/Error.h"

#include <chrono>
#include <cmath>
#include <cstdio>

using gptc::exec::HostTensor;

namespace gptc::train {

namespace {
std::string format(const char *fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

/// `x` with `decimals` decimals; a diverging value in exponent form and NaN
/// without a sign, so the field stays short and parses as a float.
std::string fixed(double x, int decimals) {
  if (std::isnan(x))
    return "nan";
  return format(std::fabs(x) < 1e6 ? "%.*f" : "%.*e", decimals, x);
}
} // namespace

Trainer::Trainer(std::unique_ptr<Engine> engine,
                 const models::GPT2Config &config, const TrainOptions &opts,
                 RunLog &log)
    : engine_(std::move(engine)), config_(config), opts_(opts), log_(log) {}

void Trainer::checkParameters(const TensorMap &params,
                              const std::string &source) const {
  for (const ParamSpec &spec : parameters()) {
    auto it = params.find(spec.name);
    if (it == params.end())
      throw FormatError(source + ": missing tensor '" + spec.name + "'");
    if (it->second.shape != spec.shape)
      throw FormatError(source + ": tensor '" + spec.name + "' has shape " +
                        exec::shapeString(it->second.shape) + ", expected " +
                        exec::shapeString(spec.shape));
    for (size_t i = 0; i < it->second.f32.size(); ++i)
      if (!std::isfinite(it->second.f32[i]))
        throw FormatError(source + ": tensor '" + spec.name +
                          "' holds a non-finite value at index " +
                          std::to_string(i));
  }
  if (params.size() != parameters().size())
    throw FormatError(source + ": holds tensors that are not parameters of "
                               "this model");
}

void Trainer::start(TensorMap params, const std::string &source) {
  checkParameters(params, source);
  state_ = TrainState();
  TensorMap adamM, adamV;
  for (const ParamSpec &spec : parameters()) {
    adamM.emplace(spec.name, HostTensor::floats(spec.shape));
    adamV.emplace(spec.name, HostTensor::floats(spec.shape));
  }
  engine_->setWeights(std::move(params), std::move(adamM), std::move(adamV));
  state_.lossScale = engine_->lossScaling() ? opts_.initLossScale : 1.0;
}

void Trainer::resume(const std::string &folder) {
  TrainState state =
      fromCheckpoint(loadCheckpoint(folder), folder, config_, opts_);
  checkParameters(state.params, folder + "/model.safetensors");
  engine_->setWeights(std::move(state.params), std::move(state.adamM),
                      std::move(state.adamV));
  state_ = std::move(state);
  state_.params.clear();
  state_.adamM.clear();
  state_.adamV.clear();
  if (!engine_->lossScaling())
    state_.lossScale = 1.0; // an fp16 checkpoint resumed in another policy
  lastCheckpoint_ = folder;
}

void Trainer::step(DataLoader &train) {
  auto start = std::chrono::steady_clock::now();
  const int64_t K = opts_.gradAccum;
  for (int64_t k = 0; k < K; ++k)
    engine_->accumulate(train.next(), float(state_.lossScale),
                        /*first=*/k == 0);

  double lr = opts_.schedule.at(state_.step);
  UpdateHypers hypers;
  hypers.lr = float(lr);
  hypers.step = float(state_.updates + 1);
  // Unscales fp16's scaled gradients along with averaging the K sums.
  hypers.gradScale = float(1.0 / (double(K) * state_.lossScale));
  double norm = engine_->prepareUpdate(hypers);
  double lossSum = 0.0;
  for (double l : engine_->takeLosses())
    lossSum += l;
  double loss = lossSum / double(K);

  bool finite = std::isfinite(loss) && std::isfinite(norm);
  if (finite) {
    engine_->applyUpdate();
    ++state_.updates;
    state_.skips = 0;
  } else {
    ++state_.skips;
  }
  // GradScaler: back off on an overflow, grow after a run of good steps.
  bool lossScaling = engine_->lossScaling();
  double scaleUsed = state_.lossScale;
  if (lossScaling && !finite) {
    state_.lossScale *= 0.5;
    state_.goodSteps = 0;
  } else if (lossScaling && ++state_.goodSteps >= opts_.lossScaleWindow) {
    state_.lossScale *= 2.0;
    state_.goodSteps = 0;
  }
  ++state_.step;
  state_.data = train.position();

  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  double tokens = double(opts_.batch * opts_.seq * K);
  std::string line = format(
      "step %lld/%lld | loss %s | lr %.2e | norm %s | %.1f ms | %.0f tok/s",
      (long long)state_.step, (long long)opts_.steps, fixed(loss, 6).c_str(),
      lr, fixed(norm, 4).c_str(), seconds * 1e3, tokens / seconds);
  if (opts_.flopsPerToken > 0 && opts_.peakFlops > 0)
    line += format(" | MFU %.1f%%", 100.0 * tokens / seconds *
                                        opts_.flopsPerToken / opts_.peakFlops);
  if (lossScaling)
    line += format(" | loss scale %g", scaleUsed);
  if (!finite)
    line += format(" | skipped (%lld in a row)", (long long)state_.skips);
  log_.line(line);
}

double Trainer::valLoss(DataLoader &val) {
  val.seek({});
  int64_t n = std::min(opts_.valBatches, val.numWindows());
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sum += engine_->loss(val.next());
  return sum / double(n);
}

void Trainer::save() {
  TrainState snapshot = state_;
  engine_->getWeights(snapshot.params, snapshot.adamM, snapshot.adamV);
  lastCheckpoint_ = saveCheckpoint(opts_.ckptDir, state_.step,
                                   toCheckpoint(snapshot, config_, opts_));
  log_.line("saved " + lastCheckpoint_);
}

bool Trainer::run(DataLoader &train, DataLoader *val) {
  try {
    train.seek(state_.data);
    auto validate = [&] { log_.line("val loss " + fixed(valLoss(*val), 6)); };
    // Validation before the first step; a resumed run has printed the one
    // of the step it resumes from before that checkpoint was saved.
    if (val && state_.step == 0)
      validate();
    while (state_.step < opts_.steps) {
      step(train);
      int64_t s = state_.step;
      if (opts_.maxSkips > 0 && state_.skips >= opts_.maxSkips)
        throw TrainError(
            "stopping: " + std::to_string(state_.skips) +
            " steps in a row had a non-finite loss or gradient norm "
            "(--max-skips=" +
            std::to_string(opts_.maxSkips) + "); " +
            (lastCheckpoint_.empty()
                 ? std::string("no checkpoint was saved")
                 : "the last checkpoint is " + lastCheckpoint_));
      bool last = s == opts_.steps;
      auto every = [&](int64_t n) { return last || (n > 0 && s % n == 0); };
      if (val && every(opts_.valEvery))
        validate();
      if (!opts_.ckptDir.empty() && every(opts_.ckptEvery))
        save();
    }
    engine_->getWeights(state_.params, state_.adamM, state_.adamV);
  } catch (const EngineFailed &) {
    return false;
  }
  return true;
}

std::string checkpointToResume(const std::string &ckptDir, bool resume) {
  std::string latest = latestCheckpoint(ckptDir);
  if (resume && latest.empty())
    throw TrainError("--resume: no complete checkpoint in " + ckptDir);
  if (!resume && !latest.empty())
    throw TrainError(ckptDir + " already holds checkpoints (newest " + latest +
                     "): pass --resume to continue, or use another --ckpt-dir");
  return latest;
}

} // namespace gptc::train
