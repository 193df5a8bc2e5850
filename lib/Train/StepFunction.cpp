//===- StepFunction.cpp - run a step function by its attributes -----------===//

#include "gptc/Train/StepFunction.h"

#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Executor/Executor.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace gptc::train {

namespace {
/// The one role attribute in `attrs`, or nullopt if there is none.
std::optional<Slot> slotOf(DictionaryAttr attrs, Type type) {
  static const std::pair<StringRef, Slot::Role> kRoles[] = {
      {gpt::kParamAttr, Slot::Role::Param},
      {gpt::kGradAttr, Slot::Role::Grad},
      {gpt::kAdamMAttr, Slot::Role::AdamM},
      {gpt::kAdamVAttr, Slot::Role::AdamV},
      {gpt::kHyperAttr, Slot::Role::Hyper},
      {gpt::kInputAttr, Slot::Role::Input},
      {gpt::kOutputAttr, Slot::Role::Output},
      {gpt::kParamCopyAttr, Slot::Role::ParamCopy},
  };
  if (!attrs)
    return std::nullopt;
  for (auto [attrName, role] : kRoles) {
    auto value = attrs.getAs<StringAttr>(attrName);
    if (!value)
      continue;
    auto shape = cast<RankedTensorType>(type).getShape();
    return Slot{role, value.str(), {shape.begin(), shape.end()},
                exec::storageOf(type)};
  }
  return std::nullopt;
}
} // namespace

FailureOr<StepFunction> StepFunction::get(func::FuncOp func) {
  StepFunction f;
  f.func_ = func;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    std::optional<Slot> slot =
        slotOf(func.getArgAttrDict(i), func.getArgument(i).getType());
    if (!slot)
      return func.emitError() << "argument " << i
                              << " has no gpt.param/grad/adam_m/adam_v/"
                                 "hyper/input/param_copy attribute";
    f.args_.push_back(std::move(*slot));
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    std::optional<Slot> slot =
        slotOf(func.getResultAttrDict(i), func.getResultTypes()[i]);
    if (!slot)
      return func.emitError() << "result " << i
                              << " has no gpt.param/grad/adam_m/adam_v/"
                                 "output/param_copy attribute";
    f.results_.push_back(std::move(*slot));
  }
  return f;
}

int StepFunction::resultIndex(Slot::Role role, const std::string &name) const {
  for (size_t i = 0; i < results_.size(); ++i)
    if (results_[i].role == role && results_[i].name == name)
      return int(i);
  return -1;
}

FailureOr<std::vector<exec::HostTensor>> StepFunction::run(
    llvm::function_ref<const exec::HostTensor &(const Slot &)> lookup) const {
  std::vector<exec::HostTensor> args;
  args.reserve(args_.size());
  for (const Slot &slot : args_)
    args.push_back(lookup(slot));
  return exec::runFunction(func_, args);
}

} // namespace gptc::train
