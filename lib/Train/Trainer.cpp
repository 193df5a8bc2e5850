//===- Trainer.cpp - the training loop around the compiled step -----------===//

#include "gptc/Train/Trainer.h"

#include "gptc/Formats/Error.h"

#include <chrono>
#include <cmath>
#include <cstdio>

using namespace mlir;
using gptc::exec::HostTensor;
using Role = gptc::train::Slot::Role;

namespace gptc::train {

namespace {
const char *roleName(Role role) {
  switch (role) {
  case Role::Param:
    return "gpt.param";
  case Role::Grad:
    return "gpt.grad";
  case Role::AdamM:
    return "gpt.adam_m";
  case Role::AdamV:
    return "gpt.adam_v";
  case Role::Hyper:
    return "gpt.hyper";
  case Role::Input:
    return "gpt.input";
  case Role::Output:
    return "gpt.output";
  }
  return "?";
}

[[noreturn]] void unbound(const Slot &slot, const char *func) {
  throw TrainError(std::string("cannot bind the argument ") +
                   roleName(slot.role) + " = \"" + slot.name +
                   "\" of the compiled " + func + " function");
}

const HostTensor &bound(const std::map<std::string, HostTensor> &tensors,
                        const Slot &slot, const char *func) {
  auto it = tensors.find(slot.name);
  if (it == tensors.end())
    unbound(slot, func);
  return it->second;
}

/// A parameter or a token batch: the arguments of forward and grads.
const HostTensor &modelArgument(const std::map<std::string, HostTensor> &params,
                                const exec::Batch &batch, const Slot &slot,
                                const char *func) {
  if (slot.role == Role::Param)
    return bound(params, slot, func);
  if (slot.role == Role::Input && slot.name == "tokens")
    return batch.tokens;
  if (slot.role == Role::Input && slot.name == "targets")
    return batch.targets;
  unbound(slot, func);
}

void addInto(HostTensor &sum, const HostTensor &x) {
  for (size_t i = 0; i < sum.f32.size(); ++i)
    sum.f32[i] += x.f32[i];
}

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

FailureOr<Trainer> Trainer::create(const TrainingProgram &program,
                                   const models::GPT2Config &config,
                                   const TrainOptions &opts, RunLog &log) {
  Trainer t(config, opts, log);
  FailureOr<std::vector<ParamSpec>> specs = parameterSpecs(program.forward);
  FailureOr<StepFunction> forward = StepFunction::get(program.forward);
  FailureOr<StepFunction> grads = StepFunction::get(program.grads);
  FailureOr<StepFunction> update = StepFunction::get(program.update);
  if (failed(specs) || failed(forward) || failed(grads) || failed(update))
    return failure();
  // The results the trainer reads back.
  struct Need {
    const StepFunction *f;
    Role role;
    std::string name;
  };
  std::vector<Need> needs = {{&*forward, Role::Output, "loss"},
                             {&*grads, Role::Output, "loss"},
                             {&*update, Role::Output, "grad_norm"}};
  for (const ParamSpec &p : *specs) {
    needs.push_back({&*grads, Role::Grad, p.name});
    for (Role role : {Role::Param, Role::AdamM, Role::AdamV})
      needs.push_back({&*update, role, p.name});
  }
  for (const Need &n : needs)
    if (n.f->resultIndex(n.role, n.name) < 0)
      return n.f->func().emitError()
             << "returns no " << roleName(n.role) << " = \"" << n.name << "\"";
  for (const Slot &s : grads->args())
    t.lossScaling_ |= s.role == Role::Hyper && s.name == "loss_scale";
  t.specs_ = std::move(*specs);
  t.forward_ = std::move(*forward);
  t.grads_ = std::move(*grads);
  t.update_ = std::move(*update);
  return t;
}

void Trainer::checkParameters(const std::map<std::string, HostTensor> &params,
                              const std::string &source) const {
  for (const ParamSpec &spec : specs_) {
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
  if (params.size() != specs_.size())
    throw FormatError(source + ": holds tensors that are not parameters of "
                               "this model");
}

void Trainer::start(std::map<std::string, HostTensor> params,
                    const std::string &source) {
  checkParameters(params, source);
  state_ = TrainState();
  for (const ParamSpec &spec : specs_) {
    state_.adamM.emplace(spec.name, HostTensor::floats(spec.shape));
    state_.adamV.emplace(spec.name, HostTensor::floats(spec.shape));
  }
  state_.params = std::move(params);
  state_.lossScale = lossScaling_ ? opts_.initLossScale : 1.0;
}

void Trainer::resume(const std::string &folder) {
  TrainState state =
      fromCheckpoint(loadCheckpoint(folder), folder, config_, opts_);
  checkParameters(state.params, folder + "/model.safetensors");
  state_ = std::move(state);
  if (!lossScaling_)
    state_.lossScale = 1.0; // an fp16 checkpoint resumed in another policy
  lastCheckpoint_ = folder;
}

LogicalResult Trainer::step(DataLoader &train) {
  auto start = std::chrono::steady_clock::now();
  const int64_t K = opts_.gradAccum;
  std::map<std::string, HostTensor> gradSum;
  double lossSum = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    exec::Batch batch = train.next();
    HostTensor lossScale = HostTensor::floats({}, float(state_.lossScale));
    FailureOr<std::vector<HostTensor>> out =
        grads_->run([&](const Slot &s) -> const HostTensor & {
          if (lossScaling_ && s.role == Role::Hyper && s.name == "loss_scale")
            return lossScale;
          return modelArgument(state_.params, batch, s, "grads");
        });
    if (failed(out))
      return failure();
    for (size_t i = 0; i < out->size(); ++i) {
      const Slot &slot = grads_->results()[i];
      if (slot.role == Role::Output && slot.name == "loss")
        lossSum += (*out)[i].f32[0];
      else if (slot.role == Role::Grad && k == 0)
        gradSum[slot.name] = std::move((*out)[i]);
      else if (slot.role == Role::Grad)
        addInto(gradSum[slot.name], (*out)[i]);
    }
  }
  double loss = lossSum / double(K);

  double lr = opts_.schedule.at(state_.step);
  std::map<std::string, HostTensor> hyper = {
      {"lr", HostTensor::floats({}, float(lr))},
      {"step", HostTensor::floats({}, float(state_.updates + 1))},
      // Unscales fp16's scaled gradients along with averaging the K sums.
      {"grad_scale",
       HostTensor::floats({}, float(1.0 / (double(K) * state_.lossScale)))}};
  FailureOr<std::vector<HostTensor>> out =
      update_->run([&](const Slot &s) -> const HostTensor & {
        switch (s.role) {
        case Role::Param:
          return bound(state_.params, s, "update");
        case Role::Grad:
          return bound(gradSum, s, "update");
        case Role::AdamM:
          return bound(state_.adamM, s, "update");
        case Role::AdamV:
          return bound(state_.adamV, s, "update");
        case Role::Hyper:
          return bound(hyper, s, "update");
        default:
          unbound(s, "update");
        }
      });
  if (failed(out))
    return failure();
  double norm = (*out)[update_->resultIndex(Role::Output, "grad_norm")].f32[0];

  bool finite = std::isfinite(loss) && std::isfinite(norm);
  if (finite) {
    for (size_t i = 0; i < out->size(); ++i) {
      const Slot &slot = update_->results()[i];
      auto *dest = slot.role == Role::Param   ? &state_.params
                   : slot.role == Role::AdamM ? &state_.adamM
                   : slot.role == Role::AdamV ? &state_.adamV
                                              : nullptr;
      if (dest)
        (*dest)[slot.name] = std::move((*out)[i]);
    }
    ++state_.updates;
    state_.skips = 0;
  } else {
    ++state_.skips;
  }
  // GradScaler: back off on an overflow, grow after a run of good steps.
  double scaleUsed = state_.lossScale;
  if (lossScaling_ && !finite) {
    state_.lossScale *= 0.5;
    state_.goodSteps = 0;
  } else if (lossScaling_ && ++state_.goodSteps >= opts_.lossScaleWindow) {
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
  if (lossScaling_)
    line += format(" | loss scale %g", scaleUsed);
  if (!finite)
    line += format(" | skipped (%lld in a row)", (long long)state_.skips);
  log_.line(line);
  return success();
}

FailureOr<double> Trainer::valLoss(DataLoader &val) {
  val.seek({});
  int64_t n = std::min(opts_.valBatches, val.numWindows());
  int lossIndex = forward_->resultIndex(Role::Output, "loss");
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    exec::Batch batch = val.next();
    FailureOr<std::vector<HostTensor>> out =
        forward_->run([&](const Slot &s) -> const HostTensor & {
          return modelArgument(state_.params, batch, s, "forward");
        });
    if (failed(out))
      return failure();
    sum += (*out)[lossIndex].f32[0];
  }
  return sum / double(n);
}

void Trainer::save() {
  lastCheckpoint_ = saveCheckpoint(opts_.ckptDir, state_.step,
                                   toCheckpoint(state_, config_, opts_));
  log_.line("saved " + lastCheckpoint_);
}

LogicalResult Trainer::run(DataLoader &train, DataLoader *val) {
  train.seek(state_.data);
  auto validate = [&]() -> LogicalResult {
    FailureOr<double> loss = valLoss(*val);
    if (failed(loss))
      return failure();
    log_.line("val loss " + fixed(*loss, 6));
    return success();
  };
  // Validation before the first step; a resumed run has printed the one of
  // the step it resumes from before that checkpoint was saved.
  if (val && state_.step == 0 && failed(validate()))
    return failure();
  while (state_.step < opts_.steps) {
    if (failed(step(train)))
      return failure();
    int64_t s = state_.step;
    if (opts_.maxSkips > 0 && state_.skips >= opts_.maxSkips)
      throw TrainError("stopping: " + std::to_string(state_.skips) +
                       " steps in a row had a non-finite loss or gradient norm "
                       "(--max-skips=" +
                       std::to_string(opts_.maxSkips) + "); " +
                       (lastCheckpoint_.empty()
                            ? std::string("no checkpoint was saved")
                            : "the last checkpoint is " + lastCheckpoint_));
    bool last = s == opts_.steps;
    auto every = [&](int64_t n) { return last || (n > 0 && s % n == 0); };
    if (val && every(opts_.valEvery) && failed(validate()))
      return failure();
    if (!opts_.ckptDir.empty() && every(opts_.ckptEvery))
      save();
  }
  return success();
}

} // namespace gptc::train
