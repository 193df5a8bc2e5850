//===- MultiTensorReduce.cpp - many-tensor sums ---------------------------===//
//
// The global gradient norm of gpt-optimizer is Σ_t reduce_sum(g_t · g_t):
// one full reduction per parameter (148 for GPT-2) and a chain of scalar
// adds. gpt-fuse-elementwise turns it into one gpt.multi_tensor_reduce in
// two steps:
//
// 1. formMultiTensorReduce, before the chains are fused: a tree of rank-0
//    gpt.add whose leaves are all full gpt.reduce_sum (each used only by the
//    tree) becomes one gpt.multi_tensor_reduce of the reduced tensors with
//    an identity body, the tensors in the order the adds met them.
// 2. foldReducePrologues, after the multi-tensor merge: when the reduced
//    tensors are exactly the results of one gpt.multi_tensor_elementwise
//    (the squares) and nothing else reads them, that body moves into the
//    reduction, which then reads the gradients themselves: the squares are
//    never written.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace gptc::gpt;

namespace {

bool isRank0F32(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getRank() == 0 && t.getElementType().isF32();
}

/// A gpt.add of two rank-0 f32 values.
bool isScalarAdd(Operation *op) {
  auto add = dyn_cast_or_null<AddOp>(op);
  return add && isRank0F32(add.getResult()) && isRank0F32(add.getLhs()) &&
         isRank0F32(add.getRhs());
}

/// An add of the tree above it: its only user is another scalar add.
bool isInnerAdd(Operation *op) {
  return isScalarAdd(op) && op->hasOneUse() &&
         isScalarAdd(*op->getUsers().begin());
}

/// A reduce_sum of a whole f32 tensor to a rank-0 value.
ReduceSumOp fullReduce(Value v) {
  auto r = v.getDefiningOp<ReduceSumOp>();
  if (!r || r.getCorner() || !isRank0F32(r.getResult()) ||
      !cast<RankedTensorType>(r.getX().getType()).getElementType().isF32())
    return {};
  return r;
}

/// Leaves of the add tree under `op`, left to right; `adds` gets the adds.
void collectLeaves(Operation *op, SmallVectorImpl<Value> &leaves,
                   SmallVectorImpl<Operation *> &adds) {
  adds.push_back(op);
  for (Value v : op->getOperands()) {
    Operation *def = v.getDefiningOp();
    if (def && isInnerAdd(def))
      collectLeaves(def, leaves, adds);
    else
      leaves.push_back(v);
  }
}

} // namespace

void gptc::formMultiTensorReduce(func::FuncOp func) {
  SmallVector<Operation *> roots;
  func.walk([&](Operation *op) {
    if (isScalarAdd(op) && !isInnerAdd(op))
      roots.push_back(op);
  });
  for (Operation *root : roots) {
    SmallVector<Value> leaves;
    SmallVector<Operation *> adds;
    collectLeaves(root, leaves, adds);
    SmallVector<ReduceSumOp> reduces;
    for (Value v : leaves)
      if (ReduceSumOp r = fullReduce(v))
        reduces.push_back(r);
    if (reduces.size() < 2)
      continue; // not a sum of reductions: nothing to say
    // Every leaf must be a reduction the tree alone reads; otherwise say why
    // the sum stays as it is.
    if (reduces.size() != leaves.size()) {
      root->emitRemark() << "did not form a gpt.multi_tensor_reduce: the sum "
                         << "also adds " << leaves.size() - reduces.size()
                         << " value(s) that are not full reductions";
      continue;
    }
    ReduceSumOp shared;
    for (ReduceSumOp r : reduces)
      if (!r->hasOneUse())
        shared = r;
    if (shared) {
      Operation *other = nullptr;
      for (Operation *user : shared->getUsers())
        if (!llvm::is_contained(adds, user))
          other = user;
      shared->emitRemark()
          << "did not form a gpt.multi_tensor_reduce of the sum it feeds: "
          << "its result is also used by '"
          << (other ? other->getName().getStringRef() : StringRef("?")) << "'";
      continue;
    }

    OpBuilder b(root);
    SmallVector<Value> tensors;
    SmallVector<Location> locs;
    for (ReduceSumOp r : reduces) {
      tensors.push_back(r.getX());
      locs.push_back(r.getLoc());
    }
    auto multi = b.create<MultiTensorReduceOp>(
        b.getFusedLoc(locs), root->getResult(0).getType(), tensors,
        ValueRange{}, b.getI64IntegerAttr(int64_t(tensors.size())));
    Block *body = b.createBlock(&multi.getBody());
    Value x = body->addArgument(b.getF32Type(), root->getLoc());
    b.create<YieldOp>(root->getLoc(), x);
    root->getResult(0).replaceAllUsesWith(multi.getResult());
    // Users first: the adds from the root down, then the reductions.
    for (Operation *add : adds)
      add->erase();
    for (ReduceSumOp r : reduces)
      r->erase();
  }
}

void gptc::foldReducePrologues(func::FuncOp func) {
  SmallVector<MultiTensorReduceOp> reduces;
  func.walk([&](MultiTensorReduceOp r) { reduces.push_back(r); });
  for (MultiTensorReduceOp r : reduces) {
    auto producer =
        r.getTensors().front().getDefiningOp<MultiTensorElementwiseOp>();
    if (!producer || producer.getPerTensor() ||
        producer.getNumTensors() != r.getNumTensors() ||
        producer.getResults().size() != r.getTensors().size())
      continue;
    // The reduction reads exactly the producer's results, in order, and is
    // their only reader.
    bool exact = true;
    for (auto [v, result] : llvm::zip(r.getTensors(), producer.getResults()))
      exact &= v == result && result.hasOneUse();
    if (!exact)
      continue;

    OpBuilder b(r);
    SmallVector<Value> scalars(producer.getScalars());
    llvm::append_range(scalars, r.getScalars());
    auto fused = b.create<MultiTensorReduceOp>(
        b.getFusedLoc({producer.getLoc(), r.getLoc()}), r.getType(),
        producer.getTensors(), scalars, r.getNumTensorsAttr());
    // Arguments: the producer's (its per-tensor elements, its scalars),
    // then the reduction's scalars; the reduction's per-tensor arguments
    // are the producer's yielded values.
    Block *body = b.createBlock(&fused.getBody());
    Block &pBody = producer.getBody().front(), &rBody = r.getBody().front();
    IRMapping map;
    for (BlockArgument a : pBody.getArguments())
      map.map(a, body->addArgument(a.getType(), a.getLoc()));
    size_t rPerTensor = r.getTensors().size() / r.getNumTensors();
    for (BlockArgument a : rBody.getArguments().drop_front(rPerTensor))
      map.map(a, body->addArgument(a.getType(), a.getLoc()));
    for (Operation &op : pBody.without_terminator())
      b.clone(op, map);
    for (auto [a, y] : llvm::zip(rBody.getArguments().take_front(rPerTensor),
                                 pBody.getTerminator()->getOperands()))
      map.map(a, map.lookup(y));
    for (Operation &op : rBody)
      b.clone(op, map);
    r.getResult().replaceAllUsesWith(fused.getResult());
    r->erase();
    producer->erase();
  }
}
