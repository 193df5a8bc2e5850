//===- Bindings.cpp - a function's arguments from its attributes ----------===//

#include "gptc/Executor/Bindings.h"

#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Executor/Executor.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace gptc::exec {

std::vector<ArgumentInfo> describeArguments(func::FuncOp func) {
  std::vector<ArgumentInfo> out;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    ArgumentInfo info;
    info.shape.assign(type.getShape().begin(), type.getShape().end());
    if (auto name = func.getArgAttrOfType<StringAttr>(i, gpt::kParamAttr)) {
      info.kind = ArgumentInfo::Kind::Param;
      info.name = name.str();
    } else if (auto name = func.getArgAttrOfType<StringAttr>(
                   i, gpt::kParamCopyAttr)) {
      info.kind = ArgumentInfo::Kind::ParamCopy;
      info.name = name.str();
      info.storage = storageOf(type);
    } else if (auto input =
                   func.getArgAttrOfType<StringAttr>(i, gpt::kInputAttr)) {
      info.kind = input.getValue() == "tokens" ? ArgumentInfo::Kind::Tokens
                                               : ArgumentInfo::Kind::Targets;
      info.name = input.str();
    } else {
      llvm::report_fatal_error(
          "argument without gpt.param, gpt.param_copy or gpt.input");
    }
    out.push_back(std::move(info));
  }
  return out;
}

} // namespace gptc::exec
