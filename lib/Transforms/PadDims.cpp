//===- PadDims.cpp - gpt-pad-dims -----------------------------------------===//
//
// Two independent steps (see Passes.td for the contract):
//
// 1. The sequence: re-type every value that carries T with T padded, after a
//    dry run that checks every op on the way keeps real positions exact
//    (only causal reductions over T). Nothing changes if one op declines.
// 2. The projections: each matmul by a 2-D weight gets zero-padded K and a
//    padded N, sliced back for everything but the loss.
//
// Padding lives inside the function: gpt.pad on the way in, gpt.slice on the
// way out, so arguments and results keep their real shapes.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/MapVector.h"

namespace gptc {
#define GEN_PASS_DEF_GPTPADDIMS
#include "gptc/Transforms/Passes.h.inc"
} // namespace gptc

using namespace mlir;
using namespace gptc::gpt;

namespace {

/// The target id of padded positions (cross_entropy's ignore_index).
constexpr int64_t kIgnoredTarget = -1;

int64_t roundUp(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

RankedTensorType withShape(RankedTensorType type, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, type.getElementType());
}

bool isTargetsOnly(Value v) {
  return !v.use_empty() && llvm::all_of(v.getUses(), [](OpOperand &use) {
    auto ce = dyn_cast<CrossEntropyOp>(use.getOwner());
    return ce && use.getOperandNumber() == 1;
  });
}

//===----------------------------------------------------------------------===//
// Step 1: the sequence
//===----------------------------------------------------------------------===//

class SequencePadding {
public:
  SequencePadding(func::FuncOp func, int64_t multiple)
      : func(func), multiple(multiple) {}

  /// Pads T if it needs it and every op allows it; otherwise leaves the
  /// function as it is (with a remark saying which op declined).
  void run() {
    std::optional<int64_t> seq = sequenceLength();
    if (!seq || *seq % multiple == 0)
      return;
    int64_t padded = roundUp(*seq, multiple);
    // Seeds: token batches and positions, padded by a gpt.pad.
    for (BlockArgument arg : func.getArguments()) {
      RankedTensorType type = tensorType(arg);
      if (isTokenBatch(arg)) {
        SmallVector<int64_t> shape(type.getShape());
        shape.back() = padded;
        seeds.push_back(arg);
        types[arg] = withShape(type, shape);
      }
    }
    func.walk([&](IotaOp iota) {
      if (tensorType(iota).getShape()[0] == *seq) {
        seeds.push_back(iota);
        types[iota] = withShape(tensorType(iota), {padded});
      }
    });
    for (Operation &op : func.getBody().front()) {
      if (isa<func::ReturnOp>(op) ||
          llvm::none_of(op.getOperands(),
                        [&](Value v) { return types.count(v); }))
        continue;
      std::string why;
      FailureOr<SmallVector<RankedTensorType>> results = infer(&op, why);
      if (failed(results)) {
        op.emitRemark() << "did not pad the sequence " << *seq << " to "
                        << padded << ": " << why;
        return;
      }
      for (auto [result, type] : llvm::zip(op.getResults(), *results))
        if (type != result.getType())
          types[result] = type;
    }
    apply();
  }

private:
  bool isTokenBatch(BlockArgument arg) {
    auto type = tensorType(arg);
    return func.getArgAttr(arg.getArgNumber(), kInputAttr) &&
           type.getElementType().isInteger(32) && type.getRank() >= 1;
  }

  /// The last dimension of the token batches, if they agree on one.
  std::optional<int64_t> sequenceLength() {
    std::optional<int64_t> seq;
    for (BlockArgument arg : func.getArguments()) {
      if (!isTokenBatch(arg))
        continue;
      int64_t t = tensorType(arg).getShape().back();
      if (seq && *seq != t)
        return std::nullopt;
      seq = t;
    }
    return seq;
  }

  RankedTensorType typeOf(Value v) {
    auto it = types.find(v);
    return it != types.end() ? it->second : tensorType(v);
  }
  bool isPaddedDim(Value v, int64_t dim) {
    return typeOf(v).getShape()[dim] != tensorType(v).getShape()[dim];
  }

  /// Probabilities whose padded keys are exactly 0 for every real query.
  static bool isCausalSoftmax(Value v) {
    auto softmax = v.getDefiningOp<SoftmaxOp>();
    return softmax && softmax.getX().getDefiningOp<CausalMaskOp>();
  }

  /// The new result types of `op`, or failure with `why`.
  FailureOr<SmallVector<RankedTensorType>> infer(Operation *op,
                                                 std::string &why) {
    auto fail = [&](const std::string &reason) {
      why = reason;
      return failure();
    };
    auto same = [&](Value from, Value result) {
      return SmallVector<RankedTensorType>{
          withShape(tensorType(result), typeOf(from).getShape())};
    };
    if (isa<NegOp, ExpOp, LogOp, TanhOp, SqrtOp, RsqrtOp, GeluOp>(op) ||
        op->getName().getStringRef() == "gpt.cast")
      return same(op->getOperand(0), op->getResult(0));
    if (auto ln = dyn_cast<LayerNormOp>(op)) {
      if (isPaddedDim(ln.getX(), tensorType(ln.getX()).getRank() - 1))
        return fail("gpt.layernorm normalises over it");
      return same(ln.getX(), ln.getResult());
    }
    if (auto mask = dyn_cast<CausalMaskOp>(op)) {
      int64_t r = tensorType(mask.getX()).getRank();
      if (isPaddedDim(mask.getX(), r - 1) != isPaddedDim(mask.getX(), r - 2))
        return fail("the causal mask's queries and keys would differ");
      return same(mask.getX(), mask.getResult());
    }
    if (auto softmax = dyn_cast<SoftmaxOp>(op)) {
      if (isPaddedDim(softmax.getX(), tensorType(softmax.getX()).getRank() - 1) &&
          !softmax.getX().getDefiningOp<CausalMaskOp>())
        return fail("gpt.softmax over padded keys that no causal mask hides");
      return same(softmax.getX(), softmax.getResult());
    }
    if (auto emb = dyn_cast<EmbeddingOp>(op)) {
      if (types.count(emb.getTable()))
        return fail("the embedding table would be padded");
      SmallVector<int64_t> shape(typeOf(emb.getIds()).getShape());
      shape.push_back(tensorType(emb.getTable()).getShape().back());
      return SmallVector<RankedTensorType>{
          withShape(tensorType(emb.getResult()), shape)};
    }
    if (auto mm = dyn_cast<MatmulOp>(op))
      return inferMatmul(mm, why);
    if (auto fa = dyn_cast<FlashAttentionOp>(op)) {
      if (!fa.getCausal())
        return fail("padded keys would be visible to a non-causal "
                    "gpt.flash_attention");
      ArrayRef<int64_t> q = typeOf(fa.getQ()).getShape();
      if (typeOf(fa.getK()).getShape() != q ||
          typeOf(fa.getV()).getShape() != q)
        return fail("q, k and v would be padded differently");
      return SmallVector<RankedTensorType>{
          withShape(tensorType(fa.getOut()), q),
          withShape(tensorType(fa.getLse()), q.drop_back())};
    }
    if (auto fa = dyn_cast<FlashAttentionQKVOp>(op)) {
      if (!fa.getCausal())
        return fail("padded keys would be visible to a non-causal "
                    "gpt.flash_attention_qkv");
      ArrayRef<int64_t> qkv = typeOf(fa.getQkv()).getShape();
      ArrayRef<int64_t> lse = typeOf(fa.getLse()).getShape();
      return SmallVector<RankedTensorType>{
          withShape(tensorType(fa.getOut()), {qkv[0], qkv[1], qkv[2] / 3}),
          withShape(tensorType(fa.getLse()), {lse[0], lse[1], qkv[1]})};
    }
    if (auto reshape = dyn_cast<ReshapeOp>(op))
      return inferReshape(reshape, why);
    if (auto transpose = dyn_cast<TransposeOp>(op)) {
      ArrayRef<int64_t> in = typeOf(transpose.getX()).getShape();
      SmallVector<int64_t> shape;
      for (int64_t p : transpose.getPermutation())
        shape.push_back(in[p]);
      return SmallVector<RankedTensorType>{
          withShape(tensorType(transpose.getResult()), shape)};
    }
    if (auto split = dyn_cast<SplitOp>(op)) {
      int64_t axis = split.getAxis();
      if (isPaddedDim(split.getX(), axis))
        return fail("gpt.split cuts along it");
      SmallVector<RankedTensorType> results;
      for (Value r : split.getResults()) {
        SmallVector<int64_t> shape(typeOf(split.getX()).getShape());
        shape[axis] = tensorType(r).getShape()[axis];
        results.push_back(withShape(tensorType(r), shape));
      }
      return results;
    }
    if (isa<AddOp, SubOp, MulOp, DivOp, MaxOp, MinOp>(op)) {
      FailureOr<SmallVector<int64_t>> shape =
          broadcastShapes(typeOf(op->getOperand(0)).getShape(),
                          typeOf(op->getOperand(1)).getShape());
      if (failed(shape))
        return fail("an operand of '" + op->getName().getStringRef().str() +
                    "' that does not carry it would have to broadcast");
      return SmallVector<RankedTensorType>{
          withShape(tensorType(op->getResult(0)), *shape)};
    }
    if (auto ce = dyn_cast<CrossEntropyOp>(op)) {
      auto arg = dyn_cast<BlockArgument>(ce.getTargets());
      if (!arg || !isTargetsOnly(arg))
        return fail("the targets of gpt.cross_entropy are not a token batch "
                    "used as targets only");
      if (typeOf(ce.getLogits()).getShape().drop_back() !=
          typeOf(ce.getTargets()).getShape())
        return fail("the logits would not be padded like the targets");
      return SmallVector<RankedTensorType>{tensorType(ce.getLoss())};
    }
    return fail("'" + op->getName().getStringRef().str() +
                "' is not known to keep padded positions apart");
  }

  FailureOr<SmallVector<RankedTensorType>> inferMatmul(MatmulOp mm,
                                                       std::string &why) {
    ArrayRef<int64_t> a = typeOf(mm.getA()).getShape();
    ArrayRef<int64_t> b = typeOf(mm.getB()).getShape();
    size_t ra = a.size(), rb = b.size();
    bool ta = mm.getTransposeA(), tb = mm.getTransposeB();
    int64_t ka = ta ? a[ra - 2] : a[ra - 1], kb = tb ? b[rb - 1] : b[rb - 2];
    if (ka != kb) {
      why = "the contraction of a gpt.matmul would be padded on one side only";
      return failure();
    }
    bool paddedK = isPaddedDim(mm.getA(), ta ? ra - 2 : ra - 1);
    if (paddedK && (ta || !isCausalSoftmax(mm.getA()))) {
      why = "a gpt.matmul contracts over it with something other than "
            "causal attention probabilities";
      return failure();
    }
    if (rb == ra && a.drop_back(2) != b.drop_back(2)) {
      why = "the batch dimensions of a gpt.matmul would differ";
      return failure();
    }
    SmallVector<int64_t> shape(a.drop_back(2));
    shape.push_back(ta ? a[ra - 1] : a[ra - 2]);
    shape.push_back(tb ? b[rb - 2] : b[rb - 1]);
    return SmallVector<RankedTensorType>{
        withShape(tensorType(mm.getResult()), shape)};
  }

  /// A padded input dimension must reshape to one output dimension of the
  /// same size (size-1 dimensions aside), which is then padded alike.
  FailureOr<SmallVector<RankedTensorType>> inferReshape(ReshapeOp reshape,
                                                        std::string &why) {
    ArrayRef<int64_t> in = tensorType(reshape.getX()).getShape();
    ArrayRef<int64_t> out = tensorType(reshape.getResult()).getShape();
    SmallVector<int64_t> shape(out);
    size_t i = 0, j = 0;
    while (i < in.size() || j < out.size()) {
      // One group: the shortest runs of dimensions with equal products.
      size_t i0 = i, j0 = j;
      int64_t pi = i < in.size() ? in[i++] : 1;
      int64_t pj = j < out.size() ? out[j++] : 1;
      while (pi != pj) {
        if (pi < pj && i < in.size())
          pi *= in[i++];
        else if (j < out.size())
          pj *= out[j++];
        else
          break;
      }
      for (size_t d = i0; d < i; ++d) {
        if (!isPaddedDim(reshape.getX(), d))
          continue;
        SmallVector<size_t> outDims, inDims;
        for (size_t e = j0; e < j; ++e)
          if (out[e] != 1)
            outDims.push_back(e);
        for (size_t e = i0; e < i; ++e)
          if (in[e] != 1)
            inDims.push_back(e);
        if (inDims.size() != 1 || outDims.size() != 1) {
          why = "gpt.reshape merges or splits it";
          return failure();
        }
        shape[outDims[0]] = typeOf(reshape.getX()).getShape()[d];
      }
    }
    return SmallVector<RankedTensorType>{
        withShape(tensorType(reshape.getResult()), shape)};
  }

  void apply() {
    OpBuilder b(func.getContext());
    for (Value seed : seeds) {
      if (auto arg = dyn_cast<BlockArgument>(seed))
        b.setInsertionPointToStart(arg.getOwner());
      else
        b.setInsertionPointAfter(seed.getDefiningOp());
      int64_t fill = isTargetsOnly(seed) ? kIgnoredTarget : 0;
      auto pad = b.create<PadOp>(seed.getLoc(), types[seed], seed,
                                 b.getI64IntegerAttr(fill));
      seed.replaceAllUsesExcept(pad, pad);
      types.erase(seed);
    }
    for (auto [value, type] : types)
      value.setType(type);
    func.walk([&](CrossEntropyOp ce) {
      if (ce.getTargets().getDefiningOp<PadOp>())
        ce.setIgnoreIndexAttr(b.getI64IntegerAttr(kIgnoredTarget));
    });
    sliceResults(func);
  }

  /// Slices back every returned value whose type no longer matches the
  /// function's result.
  static void sliceResults(func::FuncOp func) {
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    OpBuilder b(ret);
    for (auto [i, operand] : llvm::enumerate(ret.getOperands())) {
      Type want = func.getResultTypes()[i];
      if (operand.getType() != want)
        ret.setOperand(i, b.create<SliceOp>(operand.getLoc(), want, operand));
    }
  }

  func::FuncOp func;
  int64_t multiple;
  SmallVector<Value> seeds;
  llvm::MapVector<Value, RankedTensorType> types;
};

//===----------------------------------------------------------------------===//
// Step 2: the projections
//===----------------------------------------------------------------------===//

/// Pads K and N of a matmul by a 2-D weight (the projections, the lm_head).
void padProjection(MatmulOp mm, int64_t multiple) {
  RankedTensorType aType = tensorType(mm.getA()), bType = tensorType(mm.getB());
  if (bType.getRank() != 2 || mm.getTransposeA())
    return;
  bool tb = mm.getTransposeB();
  int64_t k = aType.getShape().back(), n = bType.getShape()[tb ? 0 : 1];
  int64_t kp = roundUp(k, multiple), np = roundUp(n, multiple);
  if (k == kp && n == np)
    return;
  OpBuilder b(mm);
  Location loc = mm.getLoc();
  Value a = mm.getA();
  if (k != kp) {
    SmallVector<int64_t> shape(aType.getShape());
    shape.back() = kp;
    a = b.create<PadOp>(loc, withShape(aType, shape), a);
  }
  SmallVector<int64_t> wShape = tb ? SmallVector<int64_t>{np, kp}
                                   : SmallVector<int64_t>{kp, np};
  Value w = b.create<PadOp>(loc, withShape(bType, wShape), mm.getB());
  RankedTensorType resultType = tensorType(mm.getResult());
  SmallVector<int64_t> rShape(resultType.getShape());
  rShape.back() = np;
  auto padded = b.create<MatmulOp>(loc, withShape(resultType, rShape), a, w,
                                   mm.getTransposeAAttr(),
                                   mm.getTransposeBAttr());
  Value result = padded;
  if (n != np) {
    // The loss takes the padded logits and ignores the padded columns;
    // everything else gets the real ones.
    result = b.create<SliceOp>(loc, resultType, padded);
    for (OpOperand &use : llvm::make_early_inc_range(mm->getUses()))
      if (auto ce = dyn_cast<CrossEntropyOp>(use.getOwner());
          ce && use.getOperandNumber() == 0) {
        use.set(padded);
        ce.setNumClassesAttr(b.getI64IntegerAttr(n));
      }
  }
  mm.replaceAllUsesWith(result);
  mm.erase();
  if (result.use_empty())
    result.getDefiningOp()->erase();
}

bool isForwardFunction(func::FuncOp func) {
  bool loss = false;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    if (func.getResultAttr(i, kGradAttr))
      return false;
    auto out = func.getResultAttrOfType<StringAttr>(i, kOutputAttr);
    loss |= out && out.getValue() == "loss";
  }
  return loss;
}

struct GPTPadDims : gptc::impl::GPTPadDimsBase<GPTPadDims> {
  using GPTPadDimsBase::GPTPadDimsBase;

  void runOnOperation() override {
    if (multiple <= 0) {
      getOperation().emitError()
          << "gpt-pad-dims: multiple must be positive, got "
          << static_cast<int64_t>(multiple);
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (!isForwardFunction(func) || func.isExternal())
        continue;
      SequencePadding(func, multiple).run();
      SmallVector<MatmulOp> matmuls;
      func.walk([&](MatmulOp mm) { matmuls.push_back(mm); });
      for (MatmulOp mm : matmuls)
        padProjection(mm, multiple);
    }
  }
};

} // namespace
