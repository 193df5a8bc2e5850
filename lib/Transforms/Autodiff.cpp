//===- Autodiff.cpp - gpt-autodiff: reverse-mode gradients ----------------===//
//
// Reverse mode over one block: find the ops that lie on a path from a
// parameter to the loss, walk them backwards, and ask each for its
// vector-Jacobian product (DifferentiableOpInterface). The pass knows no op;
// the rules live with the ops in lib/Dialect/GPT/GPTVJP.cpp.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/RegionUtils.h"

namespace gptc {
#define GEN_PASS_DEF_GPTAUTODIFF
#include "gptc/Transforms/Passes.h.inc"
} // namespace gptc

using namespace mlir;
using namespace gptc::gpt;

namespace gptc {

namespace {

std::optional<unsigned> lossResult(func::FuncOp func) {
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto kind = func.getResultAttrOfType<StringAttr>(i, kOutputAttr))
      if (kind.getValue() == "loss")
        return i;
  return std::nullopt;
}

/// Values that depend on a parameter (forward) and ops whose results reach
/// `loss` (backward): only ops in both need a gradient.
struct Activity {
  DenseSet<Value> varied;
  DenseSet<Operation *> useful;

  bool isActive(Operation *op) const {
    return useful.contains(op) &&
           llvm::any_of(op->getResults(),
                        [&](Value r) { return varied.contains(r); });
  }
};

Activity analyse(func::FuncOp func, Value loss) {
  Activity a;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, kParamAttr))
      a.varied.insert(func.getArgument(i));
  for (Operation &op : func.front())
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return a.varied.contains(v); }))
      a.varied.insert(op.result_begin(), op.result_end());
  SmallVector<Operation *> work;
  if (Operation *def = loss.getDefiningOp())
    work.push_back(def);
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!a.useful.insert(op).second)
      continue;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        work.push_back(def);
  }
  return a;
}

Value zerosOf(OpBuilder &b, Location loc, Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return b.create<ConstantOp>(
      loc, tensor,
      DenseElementsAttr::get(
          tensor, b.getFloatAttr(tensor.getElementType(), 0.0)));
}

} // namespace

FailureOr<func::FuncOp> buildGradientFunction(func::FuncOp forward) {
  std::optional<unsigned> lossIndex = lossResult(forward);
  if (!lossIndex)
    return forward.emitError("gpt-autodiff: no result is tagged "
                             "gpt.output = \"loss\"");
  auto lossType = dyn_cast<RankedTensorType>(
      forward.getResultTypes()[*lossIndex]);
  if (!lossType || lossType.getRank() != 0)
    return forward.emitError("gpt-autodiff: the loss must be a scalar "
                             "tensor<f32>");

  OpBuilder b(forward);
  b.setInsertionPointAfter(forward);
  auto grad = cast<func::FuncOp>(b.clone(*forward));
  grad.setSymName((forward.getSymName() + "_grad").str());
  Block &body = grad.front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Value loss = ret.getOperand(*lossIndex);
  Activity activity = analyse(grad, loss);

  MLIRContext *ctx = grad.getContext();
  auto vjpLoc = [&](Location loc) {
    return FusedLoc::get(ctx, {loc}, StringAttr::get(ctx, "vjp"));
  };

  // Seed d loss / d loss = 1, then sweep the active ops in reverse order.
  // Under fp16 (gpt-mixed-precision) the seed is a run-time loss scale, so
  // the gradients come out scaled; the update's grad_scale unscales them.
  b.setInsertionPoint(ret);
  DenseMap<Value, Value> grads;
  if (grad->hasAttr(kLossScalingAttr)) {
    grad->removeAttr(kLossScalingAttr);
    unsigned index = grad.getNumArguments();
    grad.insertArgument(
        index, lossType,
        b.getDictionaryAttr(
            b.getNamedAttr(kHyperAttr, b.getStringAttr("loss_scale"))),
        loss.getLoc());
    grads[loss] = grad.getArgument(index);
  } else {
    grads[loss] = b.create<ConstantOp>(
        loss.getLoc(), lossType,
        DenseElementsAttr::get(lossType, b.getF32FloatAttr(1.0f)));
  }

  SmallVector<Operation *> forwardOps;
  for (Operation &op : body.without_terminator())
    forwardOps.push_back(&op);
  for (Operation *op : llvm::reverse(forwardOps)) {
    if (!activity.isActive(op))
      continue;
    SmallVector<Value> dys;
    for (Value r : op->getResults())
      dys.push_back(grads.lookup(r));
    if (llvm::all_of(dys, [](Value v) { return !v; }))
      continue;
    auto rule = dyn_cast<DifferentiableOpInterface>(op);
    if (!rule)
      return op->emitError() << "gpt-autodiff: '" << op->getName()
                             << "' has no gradient rule";

    Operation *lastBefore = ret->getPrevNode();
    SmallVector<Value> dxs;
    if (failed(rule.buildVJP(b, dys, dxs)))
      return failure();
    for (Operation *made = lastBefore->getNextNode(); made != ret;
         made = made->getNextNode())
      made->setLoc(vjpLoc(op->getLoc()));

    for (auto [operand, dx] : llvm::zip(op->getOperands(), dxs)) {
      if (!dx || !activity.varied.contains(operand))
        continue;
      Value &sum = grads[operand];
      sum = sum ? b.create<AddOp>(vjpLoc(op->getLoc()), dx.getType(), sum, dx)
                      .getResult()
                : dx;
    }
  }

  // Return the loss and one gradient per parameter, in argument order.
  SmallVector<Value> results{loss};
  SmallVector<DictionaryAttr> resultAttrs{b.getDictionaryAttr(
      b.getNamedAttr(kOutputAttr, b.getStringAttr("loss")))};
  for (unsigned i = 0; i < grad.getNumArguments(); ++i) {
    auto name = grad.getArgAttrOfType<StringAttr>(i, kParamAttr);
    if (!name)
      continue;
    Value arg = grad.getArgument(i);
    Value g = grads.lookup(arg);
    results.push_back(g ? g : zerosOf(b, arg.getLoc(), arg.getType()));
    resultAttrs.push_back(
        b.getDictionaryAttr(b.getNamedAttr(kGradAttr, name)));
  }
  b.create<func::ReturnOp>(ret.getLoc(), results);
  ret.erase();
  SmallVector<Type> types;
  for (Value v : results)
    types.push_back(v.getType());
  grad.setFunctionType(b.getFunctionType(grad.getArgumentTypes(), types));
  grad.setAllResultAttrs(resultAttrs);

  // The forward results the step no longer returns (logits) leave dead ops.
  IRRewriter rewriter(ctx);
  (void)runRegionDCE(rewriter, grad.getBody());
  return grad;
}

namespace {
struct GPTAutodiffPass : impl::GPTAutodiffBase<GPTAutodiffPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> forwards;
    for (auto func : module.getOps<func::FuncOp>())
      if (lossResult(func) && !func.getSymName().ends_with("_grad") &&
          !module.lookupSymbol((func.getSymName() + "_grad").str()))
        forwards.push_back(func);
    for (func::FuncOp func : forwards)
      if (failed(buildGradientFunction(func)))
        return signalPassFailure();
  }
};
} // namespace

} // namespace gptc
