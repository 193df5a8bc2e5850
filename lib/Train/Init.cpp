//===- Init.cpp - parameters at the start of training ---------------------===//

#include "gptc/Train/Init.h"

#include "gptc/Dialect/GPT/GPTDialect.h"

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

} // namespace gptc::train
