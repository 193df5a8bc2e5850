//===- GPTDialect.cpp - the gpt dialect -----------------------------------===//

#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace gptc::gpt;

#include "gptc/Dialect/GPT/GPTDialect.cpp.inc"
#include "gptc/Dialect/GPT/GPTInterfaces.cpp.inc"

void GPTDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "gptc/Dialect/GPT/GPTOps.cpp.inc"
      >();
}

namespace {
LogicalResult expectString(Operation *op, NamedAttribute attr,
                           ArrayRef<StringRef> allowed = {}) {
  auto str = dyn_cast<StringAttr>(attr.getValue());
  if (!str)
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' must be a string";
  if (!allowed.empty() && !llvm::is_contained(allowed, str.getValue())) {
    std::string list;
    llvm::raw_string_ostream os(list);
    llvm::interleave(allowed, os, ", ");
    return op->emitError() << "'" << attr.getName().getValue() << "' is \""
                           << str.getValue() << "\", expected one of: " << list;
  }
  return success();
}
} // namespace

LogicalResult GPTDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                   unsigned argIndex,
                                                   NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  auto func = dyn_cast<FunctionOpInterface>(op);
  // A parameter and its low-precision copy name the parameter, and are
  // float tensors.
  if (name == kParamAttr || name == kParamCopyAttr) {
    if (failed(expectString(op, attr)))
      return failure();
    if (func && !isa<FloatType>(getElementTypeOrSelf(
                    func.getArgumentTypes()[argIndex])))
      return op->emitError()
             << (name == kParamAttr ? "parameter '"
                                    : "the copy of parameter '")
             << cast<StringAttr>(attr.getValue()).getValue()
             << "' must be a float tensor";
    return success();
  }
  if (name == kInitAttr)
    return expectString(op, attr, {"normal", "zeros", "ones"});
  if (name == kInitStdAttr) {
    auto std = dyn_cast<FloatAttr>(attr.getValue());
    if (!std || std.getValueAsDouble() <= 0.0)
      return op->emitError() << "'" << name << "' must be a positive float";
    return success();
  }
  if (name == kGradAttr || name == kAdamMAttr || name == kAdamVAttr)
    return expectString(op, attr);
  if (name == kHyperAttr)
    return expectString(op, attr, {"lr", "step", "grad_scale", "loss_scale"});
  if (name == kInputAttr) {
    if (failed(expectString(op, attr, {"tokens", "targets"})))
      return failure();
    if (func && !getElementTypeOrSelf(func.getArgumentTypes()[argIndex])
                     .isInteger(32))
      return op->emitError() << "input '"
                             << cast<StringAttr>(attr.getValue()).getValue()
                             << "' must be a tensor of i32 token ids";
    return success();
  }
  return op->emitError() << "unknown gpt argument attribute '" << name << "'";
}

LogicalResult GPTDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                      unsigned,
                                                      NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kOutputAttr)
    return expectString(op, attr, {"loss", "logits", "grad_norm"});
  if (name == kGradAttr || name == kParamAttr || name == kAdamMAttr ||
      name == kAdamVAttr || name == kParamCopyAttr)
    return expectString(op, attr);
  return op->emitError() << "unknown gpt result attribute '" << name << "'";
}
