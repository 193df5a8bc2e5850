//===- Recompute.cpp - gpt-recompute: activations computed twice ----------===//
//
// The backward reads forward values: each one the step keeps from the
// forward until its last backward reader. Some are cheap to compute again
// from values the backward keeps anyway. GELU's output is a function of
// the pre-activation that gelu_grad reads; a layernorm's output is a
// function of its input, which layernorm_grad reads. Computing them again
// in the backward costs one elementwise or row kernel, and frees the
// forward's copy as soon as the forward's own reader is done with it
// (the memory plan reuses buffers by liveness). llm.c's `-r 1` and `-r 2`
// do the same by hand.
//
// The copy goes right before the first backward op that reads the value,
// so it lives no longer than that op needs it: one layer's worth at a time.
// It is legal only if every input of the copied chain is alive there
// anyway (a parameter, or a value some op at or after that point reads);
// otherwise recomputing would trade one kept value for another.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace gptc {
#define GEN_PASS_DEF_GPTRECOMPUTE
#include "gptc/Transforms/Passes.h.inc"
} // namespace gptc

using namespace mlir;
using namespace gptc::gpt;

namespace {

bool taggedAs(Operation *op, StringRef tag) {
  auto fused = dyn_cast<FusedLoc>(op->getLoc());
  auto meta = fused ? dyn_cast_or_null<StringAttr>(fused.getMetadata())
                    : StringAttr();
  return meta && meta.getValue() == tag;
}

struct Recomputable {
  bool gelu = false;
  bool layernorm = false;
  bool root(Operation *op) const {
    return (gelu && isa<GeluOp>(op)) || (layernorm && isa<LayerNormOp>(op));
  }
};

/// The ops that compute `v` from the root (a recomputable op) through
/// casts, root first; empty if `v` is not such a chain.
SmallVector<Operation *> chainOf(Value v, const Recomputable &what) {
  SmallVector<Operation *> chain;
  Operation *def = v.getDefiningOp();
  while (auto c = dyn_cast_or_null<CastOp>(def)) {
    chain.push_back(c);
    def = c.getX().getDefiningOp();
  }
  if (!def || gptc::isBackward(def) || !what.root(def))
    return {};
  chain.push_back(def);
  std::reverse(chain.begin(), chain.end());
  return chain;
}

/// True if `x` is alive at `point` without the copy: an argument, or a
/// value that some op other than `chain`'s reads at or after `point`.
bool aliveAt(Value x, Operation *point, ArrayRef<Operation *> chain) {
  if (isa<BlockArgument>(x))
    return true;
  if (isa_and_nonnull<ConstantOp>(x.getDefiningOp()))
    return true;
  for (Operation *user : x.getUsers())
    if (!llvm::is_contained(chain, user) &&
        user->getBlock() == point->getBlock() &&
        (user == point || point->isBeforeInBlock(user)))
      return true;
  return false;
}

void recompute(func::FuncOp func, const Recomputable &what) {
  if (func.getBody().empty())
    return;
  Block &block = func.getBody().front();
  // Forward values backward ops read, each with its first backward reader.
  SmallVector<std::pair<Value, Operation *>> kept;
  DenseSet<Value> seen;
  for (Operation &op : block.without_terminator()) {
    if (!gptc::isBackward(&op))
      continue;
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp();
          def && !gptc::isBackward(def) && seen.insert(v).second)
        kept.push_back({v, &op});
  }

  MLIRContext *ctx = func.getContext();
  for (auto [v, first] : kept) {
    SmallVector<Operation *> chain = chainOf(v, what);
    if (chain.empty())
      continue;
    Operation *root = chain.front();
    bool alive = true;
    for (auto [i, x] : llvm::enumerate(root->getOperands()))
      if (!aliveAt(x, first, chain)) {
        root->emitRemark()
            << "not recomputed for the backward: operand #" << i
            << " is not kept until '" << first->getName()
            << "' reads the result, and recomputing would keep it longer";
        alive = false;
        break;
      }
    if (!alive)
      continue;

    OpBuilder b(first);
    IRMapping map;
    Operation *copy = nullptr;
    for (Operation *op : chain) {
      copy = b.clone(*op, map);
      copy->setLoc(FusedLoc::get(ctx, {op->getLoc()},
                                 StringAttr::get(ctx, "recompute")));
    }
    Value recomputed = copy->getResult(0);
    v.replaceUsesWithIf(recomputed, [&](OpOperand &use) {
      Operation *user = use.getOwner();
      return user != copy && gptc::isBackward(user) &&
             !gptc::isRecomputed(user);
    });
  }
}

struct GPTRecomputePass : gptc::impl::GPTRecomputeBase<GPTRecomputePass> {
  using GPTRecomputeBase::GPTRecomputeBase;

  void runOnOperation() override {
    Recomputable what;
    for (const std::string &op : ops) {
      if (op == "gelu")
        what.gelu = true;
      else if (op == "layernorm")
        what.layernorm = true;
      else {
        getOperation().emitError()
            << "gpt-recompute: unknown op '" << op
            << "' (recomputable: gelu, layernorm)";
        return signalPassFailure();
      }
    }
    if (!what.gelu && !what.layernorm)
      return;
    for (auto func : getOperation().getOps<func::FuncOp>())
      recompute(func, what);
  }
};

} // namespace

bool gptc::isRecomputed(Operation *op) { return taggedAs(op, "recompute"); }

bool gptc::isBackward(Operation *op) {
  return taggedAs(op, "vjp") || isRecomputed(op);
}
