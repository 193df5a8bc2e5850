//===- ExecutorEngine.cpp - the training step on the CPU executor ---------===//

#include "gptc/Train/ExecutorEngine.h"

#include "gptc/Train/Init.h"
#include "gptc/Train/StepFunction.h"
#include "gptc/Train/Trainer.h"

#include <utility>

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
  case Role::ParamCopy:
    return "gpt.param_copy";
  }
  return "?";
}

[[noreturn]] void unbound(const Slot &slot, const char *func) {
  throw TrainError(std::string("cannot bind the argument ") +
                   roleName(slot.role) + " = \"" + slot.name +
                   "\" of the compiled " + func + " function");
}

const HostTensor &bound(const TensorMap &tensors, const Slot &slot,
                        const char *func) {
  auto it = tensors.find(slot.name);
  if (it == tensors.end())
    unbound(slot, func);
  return it->second;
}

/// A parameter or a token batch: the arguments of forward and grads.
const HostTensor &modelArgument(const TensorMap &params,
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

std::vector<HostTensor> orFail(FailureOr<std::vector<HostTensor>> out) {
  if (failed(out))
    throw EngineFailed(); // the executor has reported the error at its op
  return std::move(*out);
}

class ExecutorEngine : public Engine {
public:
  ExecutorEngine(std::vector<ParamSpec> specs, StepFunction forward,
                 StepFunction grads, StepFunction update)
      : specs_(std::move(specs)), forward_(std::move(forward)),
        grads_(std::move(grads)), update_(std::move(update)) {
    for (const Slot &s : grads_.args())
      lossScaling_ |= s.role == Role::Hyper && s.name == "loss_scale";
  }

  const std::vector<ParamSpec> &parameters() const override { return specs_; }
  bool lossScaling() const override { return lossScaling_; }

  void setWeights(TensorMap params, TensorMap adamM, TensorMap adamV) override {
    params_ = std::move(params);
    adamM_ = std::move(adamM);
    adamV_ = std::move(adamV);
    // The weights' low-precision copies follow the weights; from here on
    // the update writes them.
    copies_.clear();
    for (const Slot &s : grads_.args())
      if (s.role == Role::ParamCopy)
        copies_[s.name] =
            exec::paramCopy(bound(params_, s, "grads"), s.shape, s.storage);
  }
  void getWeights(TensorMap &params, TensorMap &adamM,
                  TensorMap &adamV) override {
    params = params_;
    adamM = adamM_;
    adamV = adamV_;
  }

  void accumulate(const exec::Batch &batch, float lossScale,
                  bool first) override {
    HostTensor scale = HostTensor::floats({}, lossScale);
    std::vector<HostTensor> out =
        orFail(grads_.run([&](const Slot &s) -> const HostTensor & {
          if (lossScaling_ && s.role == Role::Hyper && s.name == "loss_scale")
            return scale;
          if (s.role == Role::ParamCopy)
            return bound(copies_, s, "grads");
          return modelArgument(params_, batch, s, "grads");
        }));
    double loss = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      const Slot &slot = grads_.results()[i];
      if (slot.role == Role::Output && slot.name == "loss")
        loss = out[i].f32[0];
      else if (slot.role == Role::Grad && first)
        gradSum_[slot.name] = std::move(out[i]);
      else if (slot.role == Role::Grad)
        addInto(gradSum_[slot.name], out[i]);
    }
    losses_.push_back(loss);
  }

  std::vector<double> takeLosses() override {
    return std::exchange(losses_, {});
  }

  double prepareUpdate(const UpdateHypers &h) override {
    TensorMap hyper = {{"lr", HostTensor::floats({}, h.lr)},
                       {"step", HostTensor::floats({}, h.step)},
                       {"grad_scale", HostTensor::floats({}, h.gradScale)}};
    updated_ = orFail(update_.run([&](const Slot &s) -> const HostTensor & {
      switch (s.role) {
      case Role::Param:
        return bound(params_, s, "update");
      case Role::Grad:
        return bound(gradSum_, s, "update");
      case Role::AdamM:
        return bound(adamM_, s, "update");
      case Role::AdamV:
        return bound(adamV_, s, "update");
      case Role::Hyper:
        return bound(hyper, s, "update");
      default:
        unbound(s, "update");
      }
    }));
    gradSum_.clear();
    return updated_[update_.resultIndex(Role::Output, "grad_norm")].f32[0];
  }

  void applyUpdate() override {
    for (size_t i = 0; i < updated_.size(); ++i) {
      const Slot &slot = update_.results()[i];
      TensorMap *dest = slot.role == Role::Param   ? &params_
                        : slot.role == Role::AdamM ? &adamM_
                        : slot.role == Role::AdamV ? &adamV_
                                                   : nullptr;
      if (dest)
        (*dest)[slot.name] = std::move(updated_[i]);
      else if (slot.role == Role::ParamCopy)
        writeCopy(slot, updated_[i]);
    }
    updated_.clear();
  }

  double loss(const exec::Batch &batch) override {
    std::vector<HostTensor> out =
        orFail(forward_.run([&](const Slot &s) -> const HostTensor & {
          return modelArgument(params_, batch, s, "forward");
        }));
    return out[forward_.resultIndex(Role::Output, "loss")].f32[0];
  }

private:
  /// The update's copy of a weight: all of it, or its leading rows (the
  /// rest is padding, which stays zero).
  void writeCopy(const Slot &slot, HostTensor &written) {
    HostTensor &copy = copies_.at(slot.name);
    if (written.shape == copy.shape) {
      copy = std::move(written);
      return;
    }
    std::copy(written.f32.begin(), written.f32.end(), copy.f32.begin());
  }

  std::vector<ParamSpec> specs_;
  StepFunction forward_, grads_, update_;
  bool lossScaling_ = false; ///< grads takes gpt.hyper = "loss_scale" (fp16)
  TensorMap params_, adamM_, adamV_, gradSum_;
  std::vector<double> losses_; ///< since the last takeLosses()
  TensorMap copies_; ///< gpt.param_copy arguments of grads, by parameter
  std::vector<HostTensor> updated_; ///< update's results, until applied
};
} // namespace

FailureOr<std::unique_ptr<Engine>>
makeExecutorEngine(const TrainingProgram &program) {
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
  // A copy grads reads is one the update writes: the same type, or its
  // leading rows.
  for (const Slot &s : grads->args()) {
    if (s.role != Role::ParamCopy)
      continue;
    int i = update->resultIndex(Role::ParamCopy, s.name);
    if (i < 0)
      return update->func().emitError()
             << "returns no gpt.param_copy = \"" << s.name
             << "\", which the gradient function reads";
    const Slot &w = update->results()[size_t(i)];
    if (w.storage != s.storage || !exec::isLeadingRows(w.shape, s.shape))
      return update->func().emitError()
             << "writes gpt.param_copy = \"" << s.name
             << "\" in another type than the gradient function reads";
  }
  for (const Need &n : needs)
    if (n.f->resultIndex(n.role, n.name) < 0)
      return n.f->func().emitError()
             << "returns no " << roleName(n.role) << " = \"" << n.name << "\"";
  return std::unique_ptr<Engine>(
      std::make_unique<ExecutorEngine>(std::move(*specs), std::move(*forward),
                                       std::move(*grads), std::move(*update)));
}

} // namespace gptc::train
