//===- GPTFusedOps.cpp - verifiers of the fused elementwise ops -----------===//
//
// A fused op is only as printable as its body is simple: scalars in, arith
// and math on them, scalars out. The verifiers hold every fused op to that,
// so the executor and the CUDA emitter never meet anything else.
//
//===----------------------------------------------------------------------===//

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;
using namespace gptc::gpt;

namespace {
RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// `shape` broadcasts (numpy rules) to `target` without stretching target.
bool broadcastsTo(ArrayRef<int64_t> shape, ArrayRef<int64_t> target) {
  if (shape.size() > target.size())
    return false;
  size_t offset = target.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1 && shape[i] != target[offset + i])
      return false;
  return true;
}

/// The body: `argTypes` block arguments, arith/math on scalars only, and a
/// gpt.yield of `resultTypes`.
LogicalResult verifyBody(Operation *op, Region &body, TypeRange argTypes,
                         TypeRange resultTypes) {
  Block &block = body.front();
  if (block.getNumArguments() != argTypes.size())
    return op->emitOpError() << "body has " << block.getNumArguments()
                             << " arguments, expected " << argTypes.size();
  for (auto [i, arg, type] :
       llvm::enumerate(block.getArgumentTypes(), argTypes))
    if (arg != type)
      return op->emitOpError() << "body argument #" << i << " is " << arg
                               << ", expected the element type " << type;
  for (Operation &inner : block.without_terminator()) {
    if (!isa<arith::ArithDialect, math::MathDialect>(inner.getDialect()))
      return op->emitOpError() << "body may hold only arith and math ops, "
                                  "found '"
                               << inner.getName() << "'";
    for (Type t : inner.getResultTypes())
      if (!isa<FloatType>(t))
        return op->emitOpError() << "body computes on float scalars, found "
                                 << t;
  }
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield)
    return op->emitOpError("body must end in gpt.yield");
  if (yield.getValues().getTypes() != resultTypes)
    return op->emitOpError() << "body yields " << yield.getValues().size()
                             << " values of types "
                             << yield.getValues().getTypes()
                             << ", expected the result element types "
                             << resultTypes;
  return success();
}

SmallVector<Type> elementTypes(ValueRange values) {
  SmallVector<Type> types;
  for (Value v : values)
    types.push_back(tensorOf(v).getElementType());
  return types;
}
} // namespace

LogicalResult FusedElementwiseOp::verify() {
  if (getResults().empty())
    return emitOpError("must have at least one result");
  ArrayRef<int64_t> shape = tensorOf(getResult(0)).getShape();
  for (Value r : getResults())
    if (tensorOf(r).getShape() != shape)
      return emitOpError() << "results must share one shape: "
                           << shapeStr(shape) << " and "
                           << shapeStr(tensorOf(r).getShape());
  for (auto [i, in] : llvm::enumerate(getInputs()))
    if (!broadcastsTo(tensorOf(in).getShape(), shape))
      return emitOpError() << "input #" << i << " of shape "
                           << shapeStr(tensorOf(in).getShape())
                           << " does not broadcast to the result shape "
                           << shapeStr(shape);
  return verifyBody(*this, getBody(), elementTypes(getInputs()),
                    elementTypes(getResults()));
}

LogicalResult MultiTensorElementwiseOp::verify() {
  int64_t n = getNumTensors();
  if (n <= 0)
    return emitOpError("num_tensors must be positive");
  if (getTensors().size() % n || getResults().size() % n ||
      getResults().empty())
    return emitOpError() << "needs a multiple of num_tensors (" << n
                         << ") tensors and results";
  auto shapeOfTensor = [&](int64_t t) {
    return tensorOf(getResults()[t]).getShape();
  };
  for (auto [i, v] : llvm::enumerate(getTensors()))
    if (tensorOf(v).getShape() != shapeOfTensor(i % n))
      return emitOpError() << "operand #" << i << " has shape "
                           << shapeStr(tensorOf(v).getShape())
                           << ", expected tensor " << i % n << "'s shape "
                           << shapeStr(shapeOfTensor(i % n));
  for (auto [i, v] : llvm::enumerate(getResults()))
    if (tensorOf(v).getShape() != shapeOfTensor(i % n))
      return emitOpError() << "result #" << i << " has shape "
                           << shapeStr(tensorOf(v).getShape())
                           << ", expected tensor " << i % n << "'s shape "
                           << shapeStr(shapeOfTensor(i % n));
  for (Value s : getScalars())
    if (tensorOf(s).getRank() != 0)
      return emitOpError("scalars must be rank-0 tensors");
  // Argument j of every tensor must share an element type: one body.
  SmallVector<Type> argTypes, resultTypes;
  for (size_t j = 0; j < getTensors().size() / n; ++j)
    argTypes.push_back(tensorOf(getTensors()[j * n]).getElementType());
  for (auto [i, v] : llvm::enumerate(getTensors()))
    if (tensorOf(v).getElementType() != argTypes[i / n])
      return emitOpError() << "operand #" << i
                           << " differs in element type from its argument";
  for (size_t r = 0; r < getResults().size() / n; ++r)
    resultTypes.push_back(tensorOf(getResults()[r * n]).getElementType());
  argTypes.append(elementTypes(getScalars()));
  return verifyBody(*this, getBody(), argTypes, resultTypes);
}

LogicalResult CrossEntropyWithGradOp::verify() {
  ArrayRef<int64_t> logits = tensorOf(getLogits()).getShape();
  ArrayRef<int64_t> targets = tensorOf(getTargets()).getShape();
  if (logits.size() != targets.size() + 1 || logits.drop_back() != targets)
    return emitOpError() << "logits " << shapeStr(logits)
                         << " must be the target shape " << shapeStr(targets)
                         << " followed by the vocabulary";
  if (getDlogits().getType() != getLogits().getType())
    return emitOpError("dlogits must have the type of the logits");
  if (std::optional<uint64_t> n = getNumClasses();
      n && (*n == 0 || int64_t(*n) > logits.back()))
    return emitOpError() << "num_classes " << *n
                         << " must be in [1, " << logits.back() << "]";
  return success();
}
