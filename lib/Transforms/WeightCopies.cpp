//===- WeightCopies.cpp - gpt-weight-copies -------------------------------===//
//
// Under autocast the gradient function narrows every float32 master weight
// it multiplies, each micro-batch, though the weights change only in the
// update. This pass makes the narrowed copies state of the training run,
// like the AdamW moments: the gradient function takes them as arguments
// (`gpt.param_copy`), the update returns them beside the new weights, and
// gpt-fuse-elementwise then folds each cast into AdamW's kernel, which
// stores the new weight once more in bf16.
//
// What a copy holds is fixed by its type alone (the parameter rounded to
// its element type, zero-padded to its shape; GPTDialect.h), so a runtime
// can make the copies from the weights at load or resume without running
// any IR, and every engine agrees on them to the bit.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace gptc {
#define GEN_PASS_DEF_GPTWEIGHTCOPIES
#include "gptc/Transforms/Passes.h.inc"
} // namespace gptc

using namespace mlir;
using namespace gptc::gpt;

namespace {

constexpr llvm::StringLiteral kUpdateName = "adamw_update";

RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

bool isLowFloat(Type t) { return t.isBF16() || t.isF16(); }

/// A low-precision cast of a float32 value: what a copy ends in.
CastOp narrowing(Operation *op) {
  auto c = dyn_cast<CastOp>(op);
  if (c && tensorOf(c.getX()).getElementType().isF32() &&
      isLowFloat(tensorOf(c.getResult()).getElementType()))
    return c;
  return nullptr;
}

/// The copies a parameter argument is read through: its narrowing casts,
/// and those of its zero pads.
SmallVector<CastOp> copiesOf(BlockArgument param) {
  SmallVector<CastOp> ends;
  llvm::SetVector<Operation *> users(param.getUsers().begin(),
                                     param.getUsers().end());
  for (Operation *user : users) {
    if (CastOp c = narrowing(user)) {
      ends.push_back(c);
    } else if (auto pad = dyn_cast<PadOp>(user); pad && pad.getValue() == 0) {
      llvm::SetVector<Operation *> padUsers(pad->getUsers().begin(),
                                            pad->getUsers().end());
      for (Operation *padUser : padUsers)
        if (CastOp c = narrowing(padUser))
          ends.push_back(c);
    }
  }
  // In program order, whatever the use lists' order.
  llvm::sort(ends, [](CastOp a, CastOp b) {
    return a->isBeforeInBlock(b.getOperation());
  });
  return ends;
}

/// A copy the update writes by its leading rows: the parameter's shape but
/// for a longer leading dimension (the padded vocabulary).
bool paddedInLeadingRowsOnly(RankedTensorType param, RankedTensorType copy) {
  if (param.getRank() != copy.getRank() || param.getRank() == 0)
    return false;
  for (int64_t d = 1; d < param.getRank(); ++d)
    if (param.getDimSize(d) != copy.getDimSize(d))
      return false;
  return copy.getDimSize(0) >= param.getDimSize(0);
}

struct Hoisted {
  std::string name;
  RankedTensorType type; ///< the copy's type, as the gradient function reads it
  Location loc;
};

struct GPTWeightCopiesPass
    : gptc::impl::GPTWeightCopiesBase<GPTWeightCopiesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto update = module.lookupSymbol<func::FuncOp>(kUpdateName);
    if (!update || update.getBody().empty())
      return;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func == update || func.getBody().empty() || !isGradFunction(func))
        continue;
      std::vector<Hoisted> hoisted = hoistCopies(func);
      if (hoisted.empty())
        continue;
      if (failed(writeCopiesInUpdate(update, hoisted)))
        return signalPassFailure();
    }
  }

  static bool isGradFunction(func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (func.getResultAttr(i, kGradAttr))
        return true;
    return false;
  }

  /// Replaces each parameter's copy in `func` with a new argument; returns
  /// the copies, in the order of the arguments they were added as.
  std::vector<Hoisted> hoistCopies(func::FuncOp func) {
    std::vector<Hoisted> hoisted;
    MLIRContext *ctx = func.getContext();
    unsigned params = func.getNumArguments();
    for (unsigned i = 0; i < params; ++i) {
      auto name = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
      BlockArgument arg = func.getArgument(i);
      if (!name || !tensorOf(arg).getElementType().isF32())
        continue;
      SmallVector<CastOp> ends = copiesOf(arg);
      if (ends.empty())
        continue;
      RankedTensorType type = tensorOf(ends.front().getResult());
      auto other = llvm::find_if(
          ends, [&](CastOp c) { return tensorOf(c.getResult()) != type; });
      if (other != ends.end()) {
        mlir::emitRemark(arg.getLoc())
            << "kept the casts of parameter '" << name.getValue()
            << "' in @" << func.getSymName() << ": it is read as " << type
            << " and as " << tensorOf(other->getResult())
            << ", and one copy can hold only one";
        continue;
      }
      auto attrs = DictionaryAttr::get(
          ctx, {NamedAttribute(StringAttr::get(ctx, kParamCopyAttr), name)});
      func.insertArgument(func.getNumArguments(), type, attrs, arg.getLoc());
      Value copy = func.getArgument(func.getNumArguments() - 1);
      for (CastOp c : ends) {
        auto pad = c.getX().getDefiningOp<PadOp>();
        c.getResult().replaceAllUsesWith(copy);
        c->erase();
        if (pad && pad->use_empty())
          pad->erase();
      }
      hoisted.push_back({name.str(), type, arg.getLoc()});
    }
    return hoisted;
  }

  /// Appends to the update one result per copy: the cast of the new weight
  /// (its leading rows, or padded whole).
  LogicalResult writeCopiesInUpdate(func::FuncOp update,
                                    const std::vector<Hoisted> &hoisted) {
    MLIRContext *ctx = update.getContext();
    auto ret = cast<func::ReturnOp>(update.getBody().front().getTerminator());
    llvm::StringMap<Value> newWeights;
    for (unsigned i = 0; i < update.getNumResults(); ++i)
      if (auto name = update.getResultAttrOfType<StringAttr>(i, kParamAttr))
        newWeights[name.getValue()] = ret.getOperand(i);
    OpBuilder b(ret);
    for (const Hoisted &h : hoisted) {
      Value weight = newWeights.lookup(h.name);
      if (!weight)
        return update.emitError()
               << "gpt-weight-copies: @" << update.getSymName()
               << " returns no gpt.param = \"" << h.name
               << "\" to write its copy from";
      RankedTensorType wt = tensorOf(weight);
      if (!paddedInLeadingRowsOnly(wt, h.type) &&
          llvm::any_of(llvm::zip(wt.getShape(), h.type.getShape()),
                       [](auto d) { return std::get<0>(d) > std::get<1>(d); }))
        return update.emitError()
               << "gpt-weight-copies: the copy of '" << h.name << "' ("
               << h.type << ") is smaller than the parameter (" << wt << ")";
      Value copy = b.create<CastOp>(h.loc, wt.clone(h.type.getElementType()),
                                    weight);
      if (!paddedInLeadingRowsOnly(wt, h.type))
        copy = b.create<PadOp>(h.loc, h.type, copy, /*value=*/0);
      auto attrs = DictionaryAttr::get(
          ctx, {NamedAttribute(StringAttr::get(ctx, kParamCopyAttr),
                               StringAttr::get(ctx, h.name))});
      update.insertResult(update.getNumResults(), copy.getType(), attrs);
      ret.getOperandsMutable().append(copy);
    }
    return success();
  }
};

} // namespace
