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
  // A 16-bit result may be yielded as float32: it is rounded when written
  // (a narrowing gpt.cast folded into the group).
  SmallVector<Type> yields = elementTypes(getResults());
  auto yield = dyn_cast<YieldOp>(getBody().front().getTerminator());
  if (yield && yield.getValues().size() == yields.size())
    for (auto [i, t] : llvm::enumerate(yields))
      if ((t.isBF16() || t.isF16()) &&
          yield.getValues()[i].getType().isF32())
        t = yield.getValues()[i].getType();
  return verifyBody(*this, getBody(), elementTypes(getInputs()), yields);
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
  // Value i belongs to tensor i % n and must have its shape.
  for (auto [what, values] : {std::pair<const char *, ValueRange>{
                                  "operand", getTensors()},
                              {"result", getResults()}})
    for (auto [i, v] : llvm::enumerate(values))
      if (tensorOf(v).getShape() != shapeOfTensor(i % n))
        return emitOpError()
               << what << " #" << i << " has shape "
               << shapeStr(tensorOf(v).getShape()) << ", expected tensor "
               << i % n << "'s shape " << shapeStr(shapeOfTensor(i % n));
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
  // One kernel stores result r of every tensor: one element type each. The
  // body computes in float32, and each result is rounded to its element
  // type when written (the parameters' bf16 copies are such results).
  for (auto [i, v] : llvm::enumerate(getResults()))
    if (tensorOf(v).getElementType() !=
        tensorOf(getResults()[i / n * n]).getElementType())
      return emitOpError() << "result #" << i
                           << " differs in element type from tensor 0's";
  resultTypes.assign(getResults().size() / n, Float32Type::get(getContext()));
  // Each per-tensor constant is one f32 body argument before the scalars.
  if (std::optional<ArrayRef<float>> perTensor = getPerTensor()) {
    if (perTensor->empty() || perTensor->size() % n)
      return emitOpError() << "per_tensor has " << perTensor->size()
                           << " values, expected a positive multiple of "
                              "num_tensors ("
                           << n << ")";
    argTypes.append(perTensor->size() / n, Float32Type::get(getContext()));
  }
  argTypes.append(elementTypes(getScalars()));
  return verifyBody(*this, getBody(), argTypes, resultTypes);
}

LogicalResult MultiTensorReduceOp::verify() {
  int64_t n = getNumTensors();
  if (n <= 0)
    return emitOpError("num_tensors must be positive");
  if (getTensors().empty() || getTensors().size() % n)
    return emitOpError() << "needs a positive multiple of num_tensors (" << n
                         << ") tensors";
  // Tensor t's shape is that of its first argument, tensors[t].
  for (auto [i, v] : llvm::enumerate(getTensors())) {
    ArrayRef<int64_t> shape = tensorOf(getTensors()[i % n]).getShape();
    if (tensorOf(v).getShape() != shape)
      return emitOpError() << "operand #" << i << " has shape "
                           << shapeStr(tensorOf(v).getShape())
                           << ", expected tensor " << i % n << "'s shape "
                           << shapeStr(shape);
  }
  for (Value s : getScalars())
    if (tensorOf(s).getRank() != 0)
      return emitOpError("scalars must be rank-0 tensors");
  SmallVector<Type> argTypes;
  for (size_t j = 0; j < getTensors().size() / n; ++j)
    argTypes.push_back(tensorOf(getTensors()[j * n]).getElementType());
  for (auto [i, v] : llvm::enumerate(getTensors()))
    if (tensorOf(v).getElementType() != argTypes[i / n])
      return emitOpError() << "operand #" << i
                           << " differs in element type from its argument";
  argTypes.append(elementTypes(getScalars()));
  return verifyBody(*this, getBody(), argTypes,
                    TypeRange{Float32Type::get(getContext())});
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

LogicalResult FusedLayerNormOp::verify() {
  ArrayRef<int64_t> shape = tensorOf(getResult()).getShape();
  if (shape.empty())
    return emitOpError("normalises rows: the result needs rank 1 or more");
  for (Value r : getValues())
    if (tensorOf(r).getShape() != shape)
      return emitOpError() << "values must have the result's shape "
                           << shapeStr(shape) << ", found "
                           << shapeStr(tensorOf(r).getShape());
  for (Value v : getInputs())
    if (!broadcastsTo(tensorOf(v).getShape(), shape))
      return emitOpError() << "input of shape "
                           << shapeStr(tensorOf(v).getShape())
                           << " does not broadcast to " << shapeStr(shape);
  for (Value p : {getGamma(), getBeta()})
    if (tensorOf(p).getShape() != ArrayRef<int64_t>{shape.back()})
      return emitOpError() << "gamma and beta must be [" << shape.back()
                           << "], found " << shapeStr(tensorOf(p).getShape());
  SmallVector<Type> yielded{Float32Type::get(getContext())};
  yielded.append(elementTypes(getValues()));
  return verifyBody(*this, getBody(), elementTypes(getInputs()), yielded);
}

LogicalResult FusedLayerNormGradOp::verify() {
  ArrayRef<int64_t> shape = tensorOf(getX()).getShape();
  if (shape.empty())
    return emitOpError("normalises rows: x needs rank 1 or more");
  if (tensorOf(getDy()).getShape() != shape)
    return emitOpError("dy must have the shape of x");
  for (Value p : {getGamma(), getDgamma(), getDbeta()})
    if (tensorOf(p).getShape() != ArrayRef<int64_t>{shape.back()})
      return emitOpError() << "gamma, dgamma and dbeta must be ["
                           << shape.back() << "]";
  if (getValues().empty())
    return emitOpError("must have at least one value");
  // A value of x's shape is written; one of [C] (x having more than one
  // row) is the column sums of what the body yields for it.
  bool written = false;
  for (Value r : getValues()) {
    ArrayRef<int64_t> got = tensorOf(r).getShape();
    bool sums = got != shape && got == ArrayRef<int64_t>{shape.back()};
    if (got != shape && !sums)
      return emitOpError() << "values must have the shape of x, "
                           << shapeStr(shape) << ", or of its column sums, "
                           << shape.back() << "; found " << shapeStr(got);
    if (sums && !tensorOf(r).getElementType().isF32())
      return emitOpError("column sums must be float32");
    written |= !sums;
  }
  if (!written)
    return emitOpError("must write at least one value of the shape of x");
  for (Value v : getInputs())
    if (!broadcastsTo(tensorOf(v).getShape(), shape))
      return emitOpError() << "input of shape "
                           << shapeStr(tensorOf(v).getShape())
                           << " does not broadcast to " << shapeStr(shape);
  SmallVector<Type> args{Float32Type::get(getContext())};
  args.append(elementTypes(getInputs()));
  // The body computes in float32; each value is rounded to its own type
  // when written.
  return verifyBody(*this, getBody(), args,
                    SmallVector<Type>(getValues().size(),
                                      Float32Type::get(getContext())));
}
