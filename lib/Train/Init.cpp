//===- Init.cpp - parameters at the start of training ---------------------===//

#include "gptc/Train/Init.h"

#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Train/Random.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace gptc::train {

FailureOr<std::vector<ParamSpec>> parameterSpecs(func::FuncOp func) {
  std::vector<ParamSpec> specs;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, gpt::kParamAttr);
    if (!name)
      continue;
    ParamSpec spec;
    spec.name = name.str();
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    spec.shape.assign(type.getShape().begin(), type.getShape().end());
    auto init = func.getArgAttrOfType<StringAttr>(i, gpt::kInitAttr);
    auto std = func.getArgAttrOfType<FloatAttr>(i, gpt::kInitStdAttr);
    if (!init || (init.getValue() == "normal" && !std))
      return func.emitError() << "parameter '" << spec.name
                              << "' has no gpt.init (or no gpt.init_std)";
    if (init.getValue() == "normal") {
      spec.init = ParamSpec::Init::Normal;
      spec.std = std.getValueAsDouble();
    } else {
      spec.init = init.getValue() == "ones" ? ParamSpec::Init::Ones
                                            : ParamSpec::Init::Zeros;
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

exec::HostTensor initParameter(const ParamSpec &spec, uint64_t seed) {
  switch (spec.init) {
  case ParamSpec::Init::Zeros:
    return exec::HostTensor::floats(spec.shape, 0.0f);
  case ParamSpec::Init::Ones:
    return exec::HostTensor::floats(spec.shape, 1.0f);
  case ParamSpec::Init::Normal:
    break;
  }
  exec::HostTensor t = exec::HostTensor::floats(spec.shape);
  Rng rng(seed, streamOf(spec.name));
  for (float &x : t.f32)
    x = float(rng.normal() * spec.std);
  return t;
}

std::map<std::string, exec::HostTensor>
initParameters(const std::vector<ParamSpec> &specs, uint64_t seed) {
  std::map<std::string, exec::HostTensor> params;
  for (const ParamSpec &spec : specs)
    params.emplace(spec.name, initParameter(spec, seed));
  return params;
}

} // namespace gptc::train
