//===- FuseElementwise.cpp - gpt-fuse-elementwise -------------------------===//
//
// Step 1 forms groups the way XLA's producer-consumer fusion does: walk the
// function from the end; the last op not yet in a group starts one, which
// pulls in its elementwise producers of the same shape while that is legal
// (formGroups). Each group becomes one gpt.fused_elementwise placed at its
// last op (buildGroup). Step 2 merges fused ops with identical bodies into
// one gpt.multi_tensor_elementwise (mergeMultiTensor); bodies that differ
// only in constant values merge too, with those constants per tensor. Before
// both, the loss and its gradient become one op (FuseLoss.cpp), a tied
// table's two gradients the scatter-add with an addend
// (FuseEmbeddingGrad.cpp) and a sum of full reductions one
// gpt.multi_tensor_reduce; after them, the reduction
// takes in the multi-tensor body that feeds it (MultiTensorReduce.cpp).
//
// Why a producer may join a group (the fused op sits at the group's root,
// its last op): every user of the producer outside the group must run after
// the root, so the producer's value can be one more result of the group.
// Producers whose other users run earlier are not computed twice, with one
// exception that costs nothing: a single cheap op of values from outside
// any group with at most one non-scalar operand (AdamW's `g · grad_scale`)
// is recomputed in the group, which then reads that operand instead.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <map>

namespace gptc {
#define GEN_PASS_DEF_GPTFUSEELEMENTWISE
#include "gptc/Transforms/Passes.h.inc"
} // namespace gptc

using namespace mlir;
using namespace gptc::gpt;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool allF32(Operation *op) {
  auto isF32 = [](Type t) {
    return cast<RankedTensorType>(t).getElementType().isF32();
  };
  return llvm::all_of(op->getOperandTypes(), isF32) &&
         llvm::all_of(op->getResultTypes(), isF32);
}

bool isElementwise(Operation *op) {
  return isa<AddOp, SubOp, MulOp, DivOp, MaxOp, MinOp, NegOp, ExpOp, LogOp,
             TanhOp, SqrtOp, RsqrtOp, GeluOp, GeluGradOp>(op) &&
         allF32(op);
}

/// Cheap enough to recompute rather than read back (see the file comment).
bool isCheap(Operation *op) {
  return isa<AddOp, SubOp, MulOp, MaxOp, MinOp, NegOp>(op);
}

/// The splat value of a float constant, to be materialised in a body.
std::optional<APFloat> splatOf(Value v) {
  auto constant = v.getDefiningOp<ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseFPElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat() || !dense.getElementType().isF32())
    return std::nullopt;
  return dense.getSplatValue<APFloat>();
}

//===----------------------------------------------------------------------===//
// Scalar code of each elementwise op
//===----------------------------------------------------------------------===//

struct ScalarBuilder {
  OpBuilder &b;
  Location loc;

  Value c(double v) {
    return b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(float(v)));
  }
  Value add(Value x, Value y) { return b.create<arith::AddFOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<arith::SubFOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<arith::MulFOp>(loc, x, y); }

  /// tanh(√(2/π)·(x + 0.044715·x³)), GELU's inner term.
  Value geluTanh(Value x) {
    Value cube = mul(mul(x, x), x);
    return b.create<math::TanhOp>(
        loc, mul(c(std::sqrt(2.0 / M_PI)), add(x, mul(c(0.044715), cube))));
  }
  /// Φ(x) = 0.5·(1 + erf(x/√2)).
  Value normalCdf(Value x) {
    Value erf = b.create<math::ErfOp>(loc, mul(x, c(M_SQRT1_2)));
    return mul(c(0.5), add(c(1.0), erf));
  }

  Value gelu(Value x, bool tanh) {
    Value half = mul(c(0.5), x);
    if (tanh)
      return mul(half, add(c(1.0), geluTanh(x)));
    return mul(x, normalCdf(x));
  }

  Value geluGrad(Value x, Value dy, bool tanh) {
    Value slope;
    if (tanh) {
      Value t = geluTanh(x);
      Value dInner = mul(c(std::sqrt(2.0 / M_PI)),
                         add(c(1.0), mul(c(3.0 * 0.044715), mul(x, x))));
      Value left = mul(c(0.5), add(c(1.0), t));
      Value right =
          mul(mul(mul(c(0.5), x), sub(c(1.0), mul(t, t))), dInner);
      slope = add(left, right);
    } else {
      Value pdf = mul(
          b.create<math::ExpOp>(loc, mul(c(-0.5), mul(x, x))),
          c(1.0 / std::sqrt(2.0 * M_PI)));
      slope = add(normalCdf(x), mul(x, pdf));
    }
    return mul(slope, dy);
  }

  /// The scalar code of `op` on the scalars `in` (one per operand).
  Value emit(Operation *op, ArrayRef<Value> in) {
    return llvm::TypeSwitch<Operation *, Value>(op)
        .Case([&](AddOp) { return add(in[0], in[1]); })
        .Case([&](SubOp) { return sub(in[0], in[1]); })
        .Case([&](MulOp) { return mul(in[0], in[1]); })
        .Case([&](DivOp) {
          return b.create<arith::DivFOp>(loc, in[0], in[1]);
        })
        .Case([&](MaxOp) {
          return b.create<arith::MaximumFOp>(loc, in[0], in[1]);
        })
        .Case([&](MinOp) {
          return b.create<arith::MinimumFOp>(loc, in[0], in[1]);
        })
        .Case([&](NegOp) { return b.create<arith::NegFOp>(loc, in[0]); })
        .Case([&](ExpOp) { return b.create<math::ExpOp>(loc, in[0]); })
        .Case([&](LogOp) { return b.create<math::LogOp>(loc, in[0]); })
        .Case([&](TanhOp) { return b.create<math::TanhOp>(loc, in[0]); })
        .Case([&](SqrtOp) { return b.create<math::SqrtOp>(loc, in[0]); })
        .Case([&](RsqrtOp) { return b.create<math::RsqrtOp>(loc, in[0]); })
        .Case([&](GeluOp g) {
          return gelu(in[0], g.getApproximate() == "tanh");
        })
        .Case([&](GeluGradOp g) {
          return geluGrad(in[0], in[1], g.getApproximate() == "tanh");
        });
  }
};

//===----------------------------------------------------------------------===//
// Step 1: groups of elementwise ops
//===----------------------------------------------------------------------===//

struct Group {
  Operation *root;
  llvm::SetVector<Operation *> members; // owned and recomputed, any order
  llvm::SmallPtrSet<Operation *, 4> recomputed;
  ArrayRef<int64_t> shape() const {
    return typeOf(root->getResult(0)).getShape();
  }
};

class GroupFormer {
public:
  explicit GroupFormer(Block &block) : block(block) {
    for (auto [i, op] : llvm::enumerate(block))
      position[&op] = i;
  }

  std::vector<std::unique_ptr<Group>> form() {
    for (Operation &op : llvm::reverse(block)) {
      if (!isElementwise(&op) || owner.count(&op))
        continue;
      groups.push_back(std::make_unique<Group>());
      Group &g = *groups.back();
      g.root = &op;
      g.members.insert(&op);
      owner[&op] = &g;
      grow(g);
    }
    explainDeclines();
    return std::move(groups);
  }

private:
  Block &block;
  DenseMap<Operation *, size_t> position;
  DenseMap<Operation *, Group *> owner;
  std::vector<std::unique_ptr<Group>> groups;

  /// Where `op` runs once fused: at its group's root.
  size_t runsAt(Operation *op) {
    Group *g = owner.lookup(op);
    return position.lookup(g ? g->root : op);
  }

  /// Every user of `producer` outside `g` runs after `g`'s root.
  bool canOwn(Group &g, Operation *producer) {
    for (Operation *user : producer->getUsers())
      if (!g.members.contains(user) && runsAt(user) <= position[g.root])
        return false;
    return true;
  }

  /// A cheap op of values from outside any group, reading at most one
  /// non-scalar tensor: recomputing it in `g` costs no extra traffic.
  bool canRecompute(Operation *producer) {
    if (!isCheap(producer))
      return false;
    int nonScalar = 0;
    for (Value v : producer->getOperands()) {
      if (Operation *def = v.getDefiningOp(); def && isElementwise(def)) {
        if (!readsNoTensor(def))
          return false;
        continue;
      }
      nonScalar += typeOf(v).getRank() > 0 && !splatOf(v);
    }
    return nonScalar <= 1;
  }

  /// A chain of cheap ops on rank-0 values and splats only (AdamW's
  /// 1 − lr·wd, shared by every parameter of one shape after CSE): free to
  /// recompute per element, so each group recomputes it.
  bool readsNoTensor(Operation *op) {
    if (!isElementwise(op) || !isCheap(op))
      return false;
    for (Value v : op->getOperands()) {
      if (typeOf(v).getRank() == 0 || splatOf(v))
        continue;
      Operation *def = v.getDefiningOp();
      if (!def || !readsNoTensor(def))
        return false;
    }
    return true;
  }

  void grow(Group &g) {
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < g.members.size(); ++i) {
        // What a recomputed op reads is recomputed too, never owned.
        bool viaRecomputed = g.recomputed.contains(g.members[i]);
        for (Value v : g.members[i]->getOperands()) {
          Operation *producer = v.getDefiningOp();
          if (!producer || !isElementwise(producer) ||
              g.members.contains(producer) ||
              typeOf(v).getShape() != g.shape())
            continue;
          if (!viaRecomputed && !owner.count(producer) &&
              canOwn(g, producer)) {
            owner[producer] = &g;
          } else if (canRecompute(producer)) {
            g.recomputed.insert(producer);
          } else {
            continue;
          }
          g.members.insert(producer);
          changed = true;
        }
      }
    }
  }

  /// Remarks where a user would wonder why a producer stayed outside the
  /// group of its elementwise consumer: it is broadcast (fusing would
  /// compute it once per element it is stretched to), or it is an
  /// expensive op whose value is needed elsewhere before the group runs.
  /// Scalar chains and cheap ops (the residual stream) stay quiet.
  void explainDeclines() {
    llvm::SmallPtrSet<Operation *, 16> explained;
    for (auto &g : groups)
      for (Operation *member : g->members)
        for (Value v : member->getOperands()) {
          Operation *producer = v.getDefiningOp();
          if (!producer || !isElementwise(producer) ||
              g->members.contains(producer) || explained.count(producer))
            continue;
          ArrayRef<int64_t> shape = typeOf(v).getShape();
          if (shape != g->shape() && !shape.empty()) {
            producer->emitRemark()
                << "did not fuse '" << producer->getName() << "' into its "
                << "consumer '" << member->getName() << "': it is broadcast "
                << "from " << shapeStr(shape) << " to "
                << shapeStr(g->shape())
                << ", and fusing would compute it once per element";
            explained.insert(producer);
          } else if (shape == g->shape() && !isCheap(producer)) {
            Operation *blocker = nullptr;
            for (Operation *user : producer->getUsers())
              if (!g->members.contains(user) &&
                  runsAt(user) <= position[g->root])
                blocker = user;
            if (!blocker)
              continue;
            producer->emitRemark()
                << "did not fuse '" << producer->getName() << "' into its "
                << "consumer '" << member->getName() << "': its result is "
                << "also used by '" << blocker->getName()
                << "' before the consumer's group runs, and fusing would "
                << "compute it twice";
            explained.insert(producer);
          }
        }
  }
};

/// Replaces the group by one gpt.fused_elementwise at its root. Returns the
/// original values the fused op now computes and their replacements; the
/// caller swaps uses once all groups are built (so that a recomputed
/// producer's uses inside other groups are still the original value).
void buildGroup(Group &g, const DenseMap<Operation *, SmallVector<Group *>> &in,
                DenseMap<Value, Value> &replacements) {
  // Members in program order.
  SmallVector<Operation *> ops(g.members.begin(), g.members.end());
  llvm::sort(ops, [](Operation *a, Operation *b) {
    return a->isBeforeInBlock(b);
  });
  auto inGroup = [&](Operation *op) { return op && g.members.contains(op); };

  llvm::SetVector<Value> inputs;
  for (Operation *op : ops)
    for (Value v : op->getOperands())
      if (!inGroup(v.getDefiningOp()) && !splatOf(v))
        inputs.insert(v);

  // A result leaves the group if some user is in no group that computes it.
  SmallVector<Value> outputs;
  for (Operation *op : ops) {
    if (g.recomputed.contains(op))
      continue;
    Value r = op->getResult(0);
    bool external = llvm::any_of(r.getUsers(), [&](Operation *user) {
      if (g.members.contains(user))
        return false;
      auto it = in.find(user);
      if (it == in.end())
        return true;
      return !llvm::any_of(it->second, [&](Group *other) {
        return other->members.contains(op);
      });
    });
    if (external)
      outputs.push_back(r);
  }
  if (outputs.empty())
    return; // everything it computed is recomputed where it is needed

  OpBuilder b(g.root);
  SmallVector<Type> resultTypes;
  for (Value r : outputs)
    resultTypes.push_back(r.getType());
  // A widened 16-bit input is read narrow and widened in the body (extf:
  // the same values), so its float32 copy need not exist.
  SmallVector<Value> operands;
  for (Value v : inputs)
    operands.push_back(gptc::widenedFrom(v) ? gptc::widenedFrom(v) : v);
  auto fused = b.create<FusedElementwiseOp>(g.root->getLoc(), resultTypes,
                                            operands);
  Block *body = b.createBlock(&fused.getBody());
  IRMapping scalars;
  for (auto [v, operand] : llvm::zip(inputs, operands)) {
    Value arg = body->addArgument(typeOf(operand).getElementType(),
                                  v.getLoc());
    if (operand != v)
      arg = b.create<arith::ExtFOp>(v.getLoc(), b.getF32Type(), arg);
    scalars.map(v, arg);
  }
  for (Operation *op : ops) {
    ScalarBuilder sb{b, op->getLoc()};
    SmallVector<Value> operands;
    for (Value v : op->getOperands()) {
      if (!scalars.contains(v)) // a splat constant
        scalars.map(v, b.create<arith::ConstantOp>(
                           v.getLoc(), b.getFloatAttr(b.getF32Type(),
                                                      *splatOf(v))));
      operands.push_back(scalars.lookup(v));
    }
    scalars.map(op->getResult(0), sb.emit(op, operands));
  }
  SmallVector<Value> yielded;
  for (Value r : outputs)
    yielded.push_back(scalars.lookup(r));
  b.create<YieldOp>(g.root->getLoc(), yielded);
  for (auto [r, f] : llvm::zip(outputs, fused.getResults()))
    replacements[r] = f;
}

void fuseChains(func::FuncOp func) {
  Block &block = func.getBody().front();
  std::vector<std::unique_ptr<Group>> groups = GroupFormer(block).form();
  DenseMap<Operation *, SmallVector<Group *>> groupsOf;
  for (auto &g : groups)
    for (Operation *op : g->members)
      groupsOf[op].push_back(g.get());
  DenseMap<Value, Value> replacements;
  for (auto &g : groups)
    buildGroup(*g, groupsOf, replacements);
  for (auto [from, to] : replacements)
    from.replaceUsesWithIf(to, [&](OpOperand &use) {
      return !groupsOf.count(use.getOwner());
    });
  // The originals are used only by each other now; erase users first.
  // Widening casts that only groups read are read narrow now.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (groupsOf.count(&op) ||
        (isa<ConstantOp>(op) && op.use_empty()) ||
        (isa<CastOp>(op) && op.use_empty() &&
         gptc::widenedFrom(op.getResult(0))))
      op.erase();
}

//===----------------------------------------------------------------------===//
// Step 2: multi-tensor ops
//===----------------------------------------------------------------------===//

/// The body as text, which identifies it up to the order of its arguments
/// and the values of its float constants: bodies that differ only there
/// merge, the differing constants becoming per-tensor constants (AdamW's
/// weight decay, 0.1 or 0 per parameter).
std::string bodyKey(FusedElementwiseOp op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  AsmState state(op, OpPrintingFlags().printGenericOpForm());
  Block &body = op.getBody().front();
  for (Type t : body.getArgumentTypes())
    os << t << ',';
  os << '\n';
  for (Operation &inner : body) {
    if (auto c = dyn_cast<arith::ConstantOp>(inner);
        c && isa<FloatAttr>(c.getValue()))
      os << "const " << c.getType() << '\n';
    else
      inner.print(os, state);
    os << '\n';
  }
  return s;
}

/// The values of the body's float constants, in body order.
SmallVector<float> constantsOf(FusedElementwiseOp op) {
  SmallVector<float> values;
  for (auto c : op.getBody().front().getOps<arith::ConstantOp>())
    if (auto f = dyn_cast<FloatAttr>(c.getValue()))
      values.push_back(float(f.getValueAsDouble()));
  return values;
}

/// One gpt.multi_tensor_elementwise at `b` in place of `casts` (of one
/// type pair): its body yields its argument as f32 (extf from a 16-bit
/// one), each result rounded to its type on store.
void castsAsOneMultiTensor(OpBuilder &b, ArrayRef<CastOp> casts) {
  SmallVector<Value> inputs;
  SmallVector<Type> types;
  SmallVector<Location> locs;
  for (CastOp c : casts) {
    inputs.push_back(c.getX());
    types.push_back(c.getResult().getType());
    locs.push_back(c.getLoc());
  }
  auto multi = b.create<MultiTensorElementwiseOp>(
      b.getFusedLoc(locs), types, inputs, ValueRange{},
      b.getI64IntegerAttr(int64_t(casts.size())), DenseF32ArrayAttr());
  Block *body = b.createBlock(&multi.getBody());
  Value arg = body->addArgument(typeOf(inputs.front()).getElementType(),
                                multi.getLoc());
  if (!arg.getType().isF32())
    arg = b.create<arith::ExtFOp>(multi.getLoc(), b.getF32Type(), arg);
  b.create<YieldOp>(multi.getLoc(), ValueRange{arg});
  for (auto [t, c] : llvm::enumerate(casts)) {
    CastOp cast = c;
    cast.getResult().replaceAllUsesWith(multi.getResult(t));
    cast->erase();
  }
}

/// The parameters' low-precision copies (a gpt.cast per weight and bias,
/// narrowing a function argument) become one gpt.multi_tensor_elementwise
/// per target type: a body that yields its argument, each result rounded
/// to its type on store. One launch instead of one per parameter.
void mergeParameterCasts(func::FuncOp func) {
  Block &block = func.getBody().front();
  std::map<std::string, SmallVector<CastOp>> byType;
  for (auto c : block.getOps<CastOp>()) {
    auto arg = dyn_cast<BlockArgument>(c.getX());
    Type from = typeOf(c.getX()).getElementType(),
         to = typeOf(c.getResult()).getElementType();
    if (!arg || arg.getOwner() != &block ||
        !func.getArgAttr(arg.getArgNumber(), kParamAttr) ||
        !from.isF32() || !(to.isBF16() || to.isF16()))
      continue;
    std::string key;
    llvm::raw_string_ostream(key) << to;
    byType[key].push_back(c);
  }
  for (auto &[key, casts] : byType) {
    if (casts.size() < 2)
      continue;
    OpBuilder b = OpBuilder::atBlockBegin(&block);
    castsAsOneMultiTensor(b, casts);
  }
}

/// The gradients' widening casts (a gpt.cast from bf16 or f16 to f32 whose
/// only user is the return, as a result marked gpt.grad: the bias gradients
/// a bf16 GEMM epilogue writes) become one gpt.multi_tensor_elementwise per
/// type pair, just before the return. Widening is exact, so this only
/// saves launches; the 16-bit gradients stay alive until the end, which
/// costs no more than their casts' f32 results would.
void mergeGradientCasts(func::FuncOp func) {
  Block &block = func.getBody().front();
  Operation *ret = block.getTerminator();
  std::map<std::string, SmallVector<CastOp>> byTypes;
  for (auto c : block.getOps<CastOp>()) {
    Type from = typeOf(c.getX()).getElementType(),
         to = typeOf(c.getResult()).getElementType();
    if (!(from.isBF16() || from.isF16()) || !to.isF32() ||
        !c.getResult().hasOneUse() || *c->user_begin() != ret)
      continue;
    unsigned result = c.getResult().use_begin()->getOperandNumber();
    if (!func.getResultAttr(result, kGradAttr))
      continue;
    std::string key;
    llvm::raw_string_ostream(key) << from << "->" << to;
    byTypes[key].push_back(c);
  }
  for (auto &[key, casts] : byTypes) {
    if (casts.size() < 2)
      continue;
    OpBuilder b(ret);
    castsAsOneMultiTensor(b, casts);
  }
}

void mergeMultiTensor(func::FuncOp func) {
  Block &block = func.getBody().front();
  DenseMap<Operation *, size_t> position;

  // Candidates: inputs of the iteration shape or rank 0 (shared scalars).
  // Key: body, which inputs are per tensor, and the scalars themselves.
  std::map<std::string, SmallVector<FusedElementwiseOp>> classes;
  for (auto op : block.getOps<FusedElementwiseOp>()) {
    ArrayRef<int64_t> shape = typeOf(op.getResult(0)).getShape();
    if (shape.empty())
      continue;
    // gpt-recompute's copies stay where they are, each just before its
    // reader: merged, they would all run (and be kept) at once.
    if (gptc::isRecomputed(op))
      continue;
    std::string key = bodyKey(op);
    llvm::raw_string_ostream os(key);
    bool ok = true;
    for (Value v : op.getInputs()) {
      if (typeOf(v).getShape() == shape)
        os << "|T";
      else if (typeOf(v).getRank() == 0)
        os << "|S" << v.getAsOpaquePointer();
      else
        ok = false;
    }
    if (ok)
      classes[key].push_back(op);
  }

  for (auto &[key, ops] : classes) {
    if (ops.size() < 2)
      continue;
    position.clear(); // earlier merges moved ops
    for (auto [i, op] : llvm::enumerate(block))
      position[&op] = i;
    // One place that sees every input and precedes every user, and no
    // member reads another's result.
    llvm::SmallPtrSet<Operation *, 16> members;
    for (FusedElementwiseOp op : ops)
      members.insert(op);
    int64_t lastDef = -1;
    size_t firstUse = SIZE_MAX;
    bool chained = false;
    for (FusedElementwiseOp op : ops) {
      for (Value v : op.getInputs())
        if (Operation *def = v.getDefiningOp()) {
          lastDef = std::max<int64_t>(lastDef, position[def]);
          chained |= members.contains(def);
        }
      for (Operation *user : op->getUsers())
        firstUse = std::min(firstUse, position[user]);
    }
    if (chained || (lastDef >= 0 && size_t(lastDef) >= firstUse))
      continue;
    FusedElementwiseOp first = ops.front();
    OpBuilder b(func.getContext());
    if (lastDef < 0)
      b.setInsertionPointToStart(&block);
    else
      b.setInsertionPointAfter(&*std::next(block.begin(), lastDef));

    size_t n = ops.size();
    // Constants that differ between members become per-tensor constants;
    // bitwise comparison, so that 0 and -0 stay apart.
    SmallVector<SmallVector<float>> constants;
    for (FusedElementwiseOp op : ops)
      constants.push_back(constantsOf(op));
    SmallVector<unsigned> lifted;
    for (unsigned c = 0; c < constants.front().size(); ++c)
      for (auto &values : constants)
        if (llvm::bit_cast<uint32_t>(values[c]) !=
            llvm::bit_cast<uint32_t>(constants.front()[c])) {
          lifted.push_back(c);
          break;
        }
    SmallVector<unsigned> perTensor, shared;
    for (auto [j, v] : llvm::enumerate(first.getInputs()))
      (typeOf(v).getShape() == typeOf(first.getResult(0)).getShape()
           ? perTensor
           : shared)
          .push_back(j);
    SmallVector<Value> tensors, scalars;
    for (unsigned j : perTensor)
      for (FusedElementwiseOp op : ops)
        tensors.push_back(op.getInputs()[j]);
    for (unsigned j : shared)
      scalars.push_back(first.getInputs()[j]);
    SmallVector<Type> resultTypes;
    for (unsigned r = 0; r < first.getNumResults(); ++r)
      for (FusedElementwiseOp op : ops)
        resultTypes.push_back(op.getResult(r).getType());
    SmallVector<Location> locs;
    for (FusedElementwiseOp op : ops)
      locs.push_back(op.getLoc());
    SmallVector<float> perTensorValues;
    for (unsigned c : lifted)
      for (auto &values : constants)
        perTensorValues.push_back(values[c]);
    auto multi = b.create<MultiTensorElementwiseOp>(
        b.getFusedLoc(locs), resultTypes, tensors, scalars,
        b.getI64IntegerAttr(n),
        lifted.empty() ? DenseF32ArrayAttr()
                       : b.getDenseF32ArrayAttr(perTensorValues));
    // The body, its arguments reordered: per-tensor ones, the lifted
    // constants, then scalars.
    Block *body = b.createBlock(&multi.getBody());
    IRMapping map;
    Block &old = first.getBody().front();
    for (unsigned j : perTensor)
      map.map(old.getArgument(j),
              body->addArgument(old.getArgument(j).getType(), first.getLoc()));
    SmallVector<Operation *> oldConstants;
    for (auto c : old.getOps<arith::ConstantOp>())
      if (isa<FloatAttr>(c.getValue()))
        oldConstants.push_back(c);
    for (unsigned c : lifted)
      map.map(oldConstants[c]->getResult(0),
              body->addArgument(b.getF32Type(), oldConstants[c]->getLoc()));
    for (unsigned j : shared)
      map.map(old.getArgument(j),
              body->addArgument(old.getArgument(j).getType(), first.getLoc()));
    for (Operation &op : old)
      if (op.getNumResults() == 0 || !map.contains(op.getResult(0)))
        b.clone(op, map); // lifted constants are arguments now
    for (auto [t, op] : llvm::enumerate(ops)) {
      for (unsigned r = 0; r < op.getNumResults(); ++r)
        op.getResult(r).replaceAllUsesWith(multi.getResult(r * n + t));
      op.erase();
    }
  }
}

struct GPTFuseElementwisePass
    : gptc::impl::GPTFuseElementwiseBase<GPTFuseElementwisePass> {
  using GPTFuseElementwiseBase::GPTFuseElementwiseBase;
  void runOnOperation() override {
    gptc::GPTFuseElementwiseOptions options;
    options.layernormPrologue = layernormPrologue;
    options.foldCasts = foldCasts;
    options.embeddingGradAddend = embeddingGradAddend;
    options.layernormBiasGrads = layernormBiasGrads;
    options.parameterCasts = parameterCasts;
    for (auto func : getOperation().getOps<func::FuncOp>())
      gptc::fuseElementwise(func, options);
  }
};

} // namespace

void gptc::fuseElementwise(func::FuncOp func,
                           const GPTFuseElementwiseOptions &options) {
  if (func.getBody().empty())
    return;
  const bool foldCasts = options.foldCasts;
  const bool layernormPrologue = options.layernormPrologue;
  if (foldCasts) {
    foldCastPairs(func);
    foldCastsIntoLayoutOps(func);
  }
  fuseCrossEntropyWithGrad(func);
  if (foldCasts)
    foldCastsIntoLoss(func);
  if (options.embeddingGradAddend)
    fuseEmbeddingGradAddends(func);
  formMultiTensorReduce(func);
  foldIntoReduceSums(func, foldCasts);
  fuseChains(func);
  if (foldCasts)
    foldCastsIntoGroups(func);
  if (layernormPrologue)
    fuseLayerNormPrologues(func);
  if (foldCasts) {
    // Plain layernorms become fused ones only where fused ones are made.
    foldCastsIntoLayerNorms(func, /*plainLayerNorms=*/layernormPrologue);
    foldCastsIntoLayerNormGrads(func);
    foldCastsIntoLayerNormGradValues(func);
  }
  if (options.layernormBiasGrads)
    fuseBiasGradsIntoLayerNormGrads(func);
  mergeMultiTensor(func);
  if (options.parameterCasts) {
    mergeParameterCasts(func);
    mergeGradientCasts(func);
  }
  foldReducePrologues(func);
}
