//===- GPTOps.cpp - gpt dialect op verifiers and folders ------------------===//
//
// Verifiers speak in the user's terms: which operand, which dimension, what
// was expected. Each rule has a negative lit test in test/Dialect/invalid.mlir.
//
//===----------------------------------------------------------------------===//

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace gptc::gpt;

std::string gptc::gpt::shapeStr(ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleave(shape, os, "x");
  return s;
}

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}
Type elemOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

LogicalResult expectShape(Operation *op, StringRef what,
                          ArrayRef<int64_t> actual,
                          ArrayRef<int64_t> expected) {
  if (actual == expected)
    return success();
  return op->emitOpError() << what << " has shape " << shapeStr(actual)
                           << ", expected " << shapeStr(expected);
}
} // namespace

FailureOr<SmallVector<int64_t>>
gptc::gpt::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      return failure();
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// CastOp
//===----------------------------------------------------------------------===//

OpFoldResult CastOp::fold(FoldAdaptor) {
  return getX().getType() == getType() ? getX() : Value();
}

//===----------------------------------------------------------------------===//
// EmbeddingOp
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  ArrayRef<int64_t> table = shapeOf(getTable());
  if (table.size() != 2)
    return emitOpError() << "table must be 2-D [vocab, channels], got "
                         << shapeStr(table);
  SmallVector<int64_t> expected(shapeOf(getIds()));
  expected.push_back(table[1]);
  if (elemOf(getResult()) != elemOf(getTable()))
    return emitOpError("result element type must match the table's");
  return expectShape(*this, "result", shapeOf(getResult()), expected);
}

/// Whether `ids` are gpt.iota's 0, 1, ..., n - 1.
static bool isIota(Value ids) { return bool(ids.getDefiningOp<IotaOp>()); }

OpFoldResult EmbeddingOp::fold(FoldAdaptor) {
  // Every row of the table, in order.
  if (isIota(getIds()) && getType() == getTable().getType())
    return getTable();
  return {};
}

namespace {
/// embedding(table, iota(n)) with n < V: the table's first n rows.
struct EmbeddingOfIotaIsSlice : OpRewritePattern<EmbeddingOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(EmbeddingOp op,
                                PatternRewriter &rewriter) const override {
    if (!isIota(op.getIds()) || op.getType() == op.getTable().getType() ||
        shapeOf(op.getIds())[0] > shapeOf(op.getTable())[0])
      return failure();
    rewriter.replaceOpWithNewOp<SliceOp>(op, op.getType(), op.getTable());
    return success();
  }
};

/// embedding_grad(dy, iota(n)) into V > n rows, no addend: dy padded with
/// zero rows.
struct EmbeddingGradOfIotaIsPad : OpRewritePattern<EmbeddingGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(EmbeddingGradOp op,
                                PatternRewriter &rewriter) const override {
    if (!isIota(op.getIds()) || op.getAddend() ||
        op.getType() == op.getDy().getType() ||
        elemOf(op.getDy()) != elemOf(op.getResult()) ||
        shapeOf(op.getIds())[0] > shapeOf(op.getResult())[0])
      return failure();
    rewriter.replaceOpWithNewOp<PadOp>(op, op.getType(), op.getDy());
    return success();
  }
};
} // namespace

void EmbeddingOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                              MLIRContext *context) {
  patterns.add<EmbeddingOfIotaIsSlice>(context);
}

OpFoldResult EmbeddingGradOp::fold(FoldAdaptor) {
  // One term a row, dy's own: the sum is dy.
  if (isIota(getIds()) && !getAddend() && getType() == getDy().getType())
    return getDy();
  return {};
}

void EmbeddingGradOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                                  MLIRContext *context) {
  patterns.add<EmbeddingGradOfIotaIsPad>(context);
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::verify() {
  ArrayRef<int64_t> a = shapeOf(getA()), b = shapeOf(getB());
  if (a.size() < 2)
    return emitOpError() << "operand a must have rank >= 2, got "
                         << shapeStr(a);
  if (b.size() != 2 && b.size() != a.size())
    return emitOpError() << "operand b must be 2-D or have the rank of a ("
                         << a.size() << "), got " << shapeStr(b);
  if (elemOf(getA()) != elemOf(getB()))
    return emitOpError("operands a and b must have the same element type");
  size_t ra = a.size(), rb = b.size();
  int64_t m = getTransposeA() ? a[ra - 1] : a[ra - 2];
  int64_t ka = getTransposeA() ? a[ra - 2] : a[ra - 1];
  int64_t kb = getTransposeB() ? b[rb - 1] : b[rb - 2];
  int64_t n = getTransposeB() ? b[rb - 2] : b[rb - 1];
  if (ka != kb)
    return emitOpError() << "contraction dimensions differ: a has K=" << ka
                         << ", b has K=" << kb;
  if (rb == ra && a.drop_back(2) != b.drop_back(2))
    return emitOpError() << "batch dimensions differ: "
                         << shapeStr(a.drop_back(2)) << " vs "
                         << shapeStr(b.drop_back(2));
  SmallVector<int64_t> expected(a.drop_back(2));
  expected.append({m, n});
  return expectShape(*this, "result", shapeOf(getResult()), expected);
}

//===----------------------------------------------------------------------===//
// LayerNormOp
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getX());
  if (x.empty())
    return emitOpError("input must have rank >= 1");
  int64_t c = x.back();
  if (failed(expectShape(*this, "gamma", shapeOf(getGamma()), {c})) ||
      failed(expectShape(*this, "beta", shapeOf(getBeta()), {c})))
    return failure();
  if (getEpsilon().convertToFloat() <= 0.0f)
    return emitOpError("epsilon must be positive");
  return success();
}

//===----------------------------------------------------------------------===//
// CausalMaskOp, GeluOp
//===----------------------------------------------------------------------===//

LogicalResult CausalMaskOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getX());
  if (x.size() < 2)
    return emitOpError() << "input must have rank >= 2 [..., queries, keys], "
                            "got "
                         << shapeStr(x);
  if (x[x.size() - 1] != x[x.size() - 2])
    return emitOpError() << "needs as many keys as queries, got "
                         << x[x.size() - 2] << " queries and "
                         << x[x.size() - 1] << " keys";
  return success();
}

LogicalResult GeluOp::verify() {
  if (getApproximate() != "tanh" && getApproximate() != "none")
    return emitOpError() << "approximate must be \"tanh\" or \"none\", got \""
                         << getApproximate() << "\"";
  return success();
}

//===----------------------------------------------------------------------===//
// FlashAttentionOp, FlashAttentionGradOp
//===----------------------------------------------------------------------===//

/// The checks both attention ops share: q [B, H, T, D], k and v [B, H, S, D]
/// of one element type, lse [B, H, T], S = T when causal, a usable scale.
static LogicalResult verifyAttention(Operation *op, Value q, Value k, Value v,
                                     Value lse, APFloat scale, bool causal) {
  ArrayRef<int64_t> qs = shapeOf(q), ks = shapeOf(k);
  if (qs.size() != 4)
    return op->emitOpError() << "q must be [batch, heads, queries, head_dim], "
                                "got "
                             << shapeStr(qs);
  if (ks.size() != 4 || ks[0] != qs[0] || ks[1] != qs[1] || ks[3] != qs[3])
    return op->emitOpError() << "k has shape " << shapeStr(ks) << ", expected "
                             << qs[0] << "x" << qs[1] << "xSx" << qs[3]
                             << " (S keys)";
  if (failed(expectShape(op, "v", shapeOf(v), ks)))
    return failure();
  if (elemOf(k) != elemOf(q) || elemOf(v) != elemOf(q))
    return op->emitOpError("q, k and v must have the same element type");
  if (failed(expectShape(op, "lse", shapeOf(lse), qs.drop_back())))
    return failure();
  if (causal && ks[2] != qs[2])
    return op->emitOpError() << "causal attention needs as many keys as "
                                "queries, got "
                             << qs[2] << " queries and " << ks[2] << " keys";
  if (!scale.isFiniteNonZero() || scale.isNegative())
    return op->emitOpError("scale must be a positive finite number");
  return success();
}

LogicalResult FlashAttentionOp::verify() {
  if (failed(expectShape(*this, "out", shapeOf(getOut()), shapeOf(getQ()))))
    return failure();
  if (elemOf(getOut()) != elemOf(getQ()))
    return emitOpError("out must have the element type of q");
  return verifyAttention(*this, getQ(), getK(), getV(), getLse(), getScale(),
                         getCausal());
}

/// A gradient's `delta`, when it has one, has lse's shape.
static LogicalResult verifyDelta(Operation *op, Value delta, Value lse) {
  if (!delta)
    return success();
  return expectShape(op, "delta", shapeOf(delta), shapeOf(lse));
}

LogicalResult FlashAttentionGradOp::verify() {
  if (failed(verifyAttention(*this, getQ(), getK(), getV(), getLse(),
                             getScale(), getCausal())))
    return failure();
  return verifyDelta(*this, getDelta(), getLse());
}

//===----------------------------------------------------------------------===//
// FlashAttentionQKVOp, FlashAttentionQKVGradOp
//===----------------------------------------------------------------------===//

/// The checks both packed attention ops share: qkv [B, T, 3·H·D], out
/// [B, T, H·D] of qkv's element type, lse [B, H, T], a usable scale.
static LogicalResult verifyPackedAttention(Operation *op, Value qkv, Value out,
                                           Value lse, int64_t heads,
                                           APFloat scale) {
  ArrayRef<int64_t> qs = shapeOf(qkv);
  if (qs.size() != 3)
    return op->emitOpError() << "qkv must be [batch, positions, 3 * channels], "
                                "got "
                             << shapeStr(qs);
  if (heads <= 0)
    return op->emitOpError() << "num_heads must be positive, got " << heads;
  if (qs[2] % (3 * heads) != 0)
    return op->emitOpError()
           << "qkv's last dimension " << qs[2] << " is not 3 x num_heads ("
           << heads << ") x a head size";
  int64_t channels = qs[2] / 3;
  if (failed(expectShape(op, "out", shapeOf(out), {qs[0], qs[1], channels})))
    return failure();
  if (elemOf(out) != elemOf(qkv))
    return op->emitOpError("out must have the element type of qkv");
  if (failed(expectShape(op, "lse", shapeOf(lse), {qs[0], heads, qs[1]})))
    return failure();
  if (!scale.isFiniteNonZero() || scale.isNegative())
    return op->emitOpError("scale must be a positive finite number");
  return success();
}

LogicalResult FlashAttentionQKVOp::verify() {
  return verifyPackedAttention(*this, getQkv(), getOut(), getLse(),
                               getNumHeads(), getScale());
}

LogicalResult FlashAttentionQKVGradOp::verify() {
  if (failed(verifyPackedAttention(*this, getQkv(), getOut(), getLse(),
                                   getNumHeads(), getScale())))
    return failure();
  return verifyDelta(*this, getDelta(), getLse());
}

LogicalResult AttentionRowDotOp::verify() {
  ArrayRef<int64_t> s = shapeOf(getOut());
  std::optional<uint64_t> heads = getNumHeads();
  SmallVector<int64_t> rows; // [B, H, T]
  if (s.size() == 4 && !heads) {
    rows = {s[0], s[1], s[2]};
  } else if (s.size() == 3 && heads) {
    const int64_t h = int64_t(*heads);
    if (h <= 0 || s[2] % h != 0)
      return emitOpError() << "num_heads " << h
                           << " does not divide out's last dimension " << s[2];
    rows = {s[0], h, s[1]};
  } else {
    return emitOpError() << "out must be [batch, heads, positions, head_dim], "
                            "or [batch, positions, channels] with num_heads; "
                            "got "
                         << shapeStr(s)
                         << (heads ? " with num_heads" : " without num_heads");
  }
  return expectShape(*this, "delta", shapeOf(getDelta()), rows);
}

LogicalResult AttentionBiasGradOp::verify() {
  ArrayRef<int64_t> dqkv = shapeOf(getDqkv()), dout = shapeOf(getDout());
  if (dqkv.empty() || dout.empty())
    return emitOpError("dqkv and dout must have rank >= 1");
  const int64_t C = dout.back();
  if (dqkv.back() != 3 * C)
    return emitOpError() << "dqkv's last dimension must be 3 times dout's ("
                         << 3 * C << "), got " << dqkv.back();
  if (ShapedType::getNumElements(dqkv) / 3 != ShapedType::getNumElements(dout))
    return emitOpError() << "dqkv " << shapeStr(dqkv) << " and dout "
                         << shapeStr(dout) << " must have as many rows";
  return expectShape(*this, "result", shapeOf(getResult()), {3 * C});
}

//===----------------------------------------------------------------------===//
// ReshapeOp, TransposeOp, SplitOp
//===----------------------------------------------------------------------===//

/// Layout ops (transpose, split, concat, pad, slice) may convert between
/// float types, rounding as gpt.cast: gpt-fuse-elementwise folds casts into
/// them (FoldCasts.cpp). Integer tensors keep their type.
static LogicalResult verifyConversion(Operation *op, Type from, Type to) {
  if (from == to || (isa<FloatType>(from) && isa<FloatType>(to)))
    return success();
  return op->emitOpError("changes the element type only between float types");
}

LogicalResult ReshapeOp::verify() {
  auto in = cast<RankedTensorType>(getX().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getElementType() != out.getElementType())
    return emitOpError("cannot change the element type");
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "cannot reshape " << shapeStr(in.getShape())
                         << " (" << in.getNumElements() << " elements) into "
                         << shapeStr(out.getShape()) << " ("
                         << out.getNumElements() << " elements)";
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getX().getType() == getResult().getType())
    return getX();
  return {};
}

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getX());
  ArrayRef<int64_t> perm = getPermutation();
  if (perm.size() != in.size())
    return emitOpError() << "permutation has " << perm.size()
                         << " entries for an input of rank " << in.size();
  SmallVector<bool> seen(in.size(), false);
  SmallVector<int64_t> expected;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(in.size()) || seen[p])
      return emitOpError("permutation must hold each dimension exactly once");
    seen[p] = true;
    expected.push_back(in[p]);
  }
  if (failed(verifyConversion(*this, elemOf(getX()), elemOf(getResult()))))
    return failure();
  return expectShape(*this, "result", shapeOf(getResult()), expected);
}

LogicalResult SplitOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getX());
  int64_t axis = getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(in.size()))
    return emitOpError() << "axis " << axis << " is out of range for rank "
                         << in.size();
  if (getResults().empty())
    return emitOpError("needs at least one result");
  int64_t total = 0;
  for (auto [i, r] : llvm::enumerate(getResults())) {
    ArrayRef<int64_t> out = shapeOf(r);
    SmallVector<int64_t> expected(in);
    if (out.size() == in.size())
      expected[axis] = out[axis];
    if (failed(expectShape(*this, "result #" + std::to_string(i), out,
                           expected)))
      return failure();
    if (elemOf(r) != elemOf(getResults()[0]))
      return emitOpError("results must share one element type");
    if (failed(verifyConversion(*this, elemOf(getX()), elemOf(r))))
      return failure();
    total += out[axis];
  }
  if (total != in[axis])
    return emitOpError() << "pieces add up to " << total << " along axis "
                         << axis << ", but the input has " << in[axis];
  return success();
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

/// num_classes, where set, is a real vocabulary inside the logits' last
/// dimension.
static LogicalResult verifyNumClasses(Operation *op, Value logits,
                                      std::optional<uint64_t> numClasses) {
  if (!numClasses)
    return success();
  int64_t v = shapeOf(logits).back(), n = int64_t(*numClasses);
  if (n < 1 || n > v)
    return op->emitOpError() << "num_classes " << n
                             << " must be in [1, " << v
                             << "] (the logits' last dimension)";
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  ArrayRef<int64_t> targets = shapeOf(getTargets());
  if (logits.size() != targets.size() + 1 ||
      logits.drop_back() != targets)
    return emitOpError() << "logits " << shapeStr(logits)
                         << " must be the target shape " << shapeStr(targets)
                         << " followed by the vocabulary";
  return verifyNumClasses(*this, getLogits(), getNumClasses());
}

//===----------------------------------------------------------------------===//
// Binary elementwise ops
//===----------------------------------------------------------------------===//

static LogicalResult verifyBinary(Operation *op) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Value result = op->getResult(0);
  if (elemOf(lhs) != elemOf(rhs) || elemOf(lhs) != elemOf(result))
    return op->emitOpError(
        "operands and result must have the same element type");
  FailureOr<SmallVector<int64_t>> shape =
      broadcastShapes(shapeOf(lhs), shapeOf(rhs));
  if (failed(shape))
    return op->emitOpError() << "cannot broadcast " << shapeStr(shapeOf(lhs))
                             << " with " << shapeStr(shapeOf(rhs));
  return expectShape(op, "result", shapeOf(result), *shape);
}

LogicalResult AddOp::verify() { return verifyBinary(*this); }
LogicalResult SubOp::verify() { return verifyBinary(*this); }
LogicalResult MulOp::verify() { return verifyBinary(*this); }
LogicalResult DivOp::verify() { return verifyBinary(*this); }
LogicalResult MaxOp::verify() { return verifyBinary(*this); }
LogicalResult MinOp::verify() { return verifyBinary(*this); }

//===----------------------------------------------------------------------===//
// ReduceSumOp, ConcatOp
//===----------------------------------------------------------------------===//

LogicalResult ReduceSumOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getX()), out = shapeOf(getResult());
  Type from = elemOf(getX()), to = elemOf(getResult());
  if (from != to && !(to.isF32() && from.getIntOrFloatBitWidth() < 32))
    return emitOpError() << "cannot sum " << from << " into " << to
                         << " (only bf16 or f16 terms into an f32 sum)";
  std::optional<ArrayRef<int64_t>> corner = getCorner();
  if (corner) {
    if (corner->size() != in.size())
      return emitOpError() << "corner " << shapeStr(*corner)
                           << " is not of the input's rank " << in.size();
    for (size_t d = 0; d < in.size(); ++d)
      if ((*corner)[d] < 1 || (*corner)[d] > in[d])
        return emitOpError() << "corner " << shapeStr(*corner)
                             << " does not fit the input " << shapeStr(in);
    in = *corner;
  }
  FailureOr<SmallVector<int64_t>> back = broadcastShapes(out, in);
  if (failed(back) || ArrayRef<int64_t>(*back) != in)
    return emitOpError() << "result " << shapeStr(out)
                         << " does not broadcast back to the "
                         << (corner ? "corner " : "input ") << shapeStr(in);
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  ArrayRef<int64_t> out = shapeOf(getResult());
  int64_t axis = getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(out.size()))
    return emitOpError() << "axis " << axis << " is out of range for rank "
                         << out.size();
  int64_t total = 0;
  for (auto [i, in] : llvm::enumerate(getInputs())) {
    ArrayRef<int64_t> shape = shapeOf(in);
    SmallVector<int64_t> expected(out);
    if (shape.size() == out.size())
      expected[axis] = shape[axis];
    if (failed(expectShape(*this, "input #" + std::to_string(i), shape,
                           expected)))
      return failure();
    if (elemOf(in) != elemOf(getInputs()[0]))
      return emitOpError("inputs must share one element type");
    if (failed(verifyConversion(*this, elemOf(in), elemOf(getResult()))))
      return failure();
    total += shape[axis];
  }
  if (total != out[axis])
    return emitOpError() << "inputs add up to " << total << " along axis "
                         << axis << ", but the result has " << out[axis];
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingGradOp::verify() {
  ArrayRef<int64_t> table = shapeOf(getResult());
  if (table.size() != 2)
    return emitOpError() << "result must be 2-D [vocab, channels], got "
                         << shapeStr(table);
  SmallVector<int64_t> expected(shapeOf(getIds()));
  expected.push_back(table[1]);
  if (failed(expectShape(*this, "dy", shapeOf(getDy()), expected)))
    return failure();
  if (!getAddend())
    return success();
  if (getAddend().getType() != getType())
    return emitOpError() << "addend must have the result's type "
                         << getType() << ", got " << getAddend().getType();
  // Float32 sums need no rounding between the scatter and the add.
  if (!getType().getElementType().isF32())
    return emitOpError("with an addend, the result must be float32");
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getX());
  if (x.empty())
    return emitOpError("input must have rank >= 1");
  if (failed(expectShape(*this, "dy", shapeOf(getDy()), x)) ||
      failed(expectShape(*this, "gamma", shapeOf(getGamma()), {x.back()})))
    return failure();
  if (getEpsilon().convertToFloat() <= 0.0f)
    return emitOpError("epsilon must be positive");
  return success();
}

LogicalResult GeluGradOp::verify() {
  if (getApproximate() != "tanh" && getApproximate() != "none")
    return emitOpError() << "approximate must be \"tanh\" or \"none\", got \""
                         << getApproximate() << "\"";
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  ArrayRef<int64_t> targets = shapeOf(getTargets());
  if (logits.size() != targets.size() + 1 || logits.drop_back() != targets)
    return emitOpError() << "logits " << shapeStr(logits)
                         << " must be the target shape " << shapeStr(targets)
                         << " followed by the vocabulary";
  return verifyNumClasses(*this, getLogits(), getNumClasses());
}

//===----------------------------------------------------------------------===//
// PadOp, SliceOp
//===----------------------------------------------------------------------===//

/// `small` fits inside `large`: same rank, no dimension larger, a float
/// conversion at most.
static LogicalResult verifyCorner(Operation *op, Value small, Value large,
                                  StringRef relation) {
  ArrayRef<int64_t> s = shapeOf(small), l = shapeOf(large);
  if (failed(verifyConversion(op, elemOf(op->getOperand(0)),
                              elemOf(op->getResult(0)))))
    return failure();
  if (s.size() != l.size())
    return op->emitOpError() << "cannot change the rank (" << shapeStr(shapeOf(
                                    op->getOperand(0)))
                             << " to " << shapeStr(shapeOf(op->getResult(0)))
                             << ")";
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] > l[i])
      return op->emitOpError()
             << "result dimension " << i << " is " << shapeOf(op->getResult(0))[i]
             << ", " << relation << " the input's " << shapeOf(op->getOperand(0))[i];
  return success();
}

LogicalResult PadOp::verify() {
  if (failed(verifyCorner(*this, getX(), getResult(), "smaller than")))
    return failure();
  if (getValue() != 0 && !isa<IntegerType>(elemOf(getX())))
    return emitOpError("pads a float tensor with 0 only");
  return success();
}

LogicalResult SliceOp::verify() {
  return verifyCorner(*this, getResult(), getX(), "larger than");
}

#define GET_OP_CLASSES
#include "gptc/Dialect/GPT/GPTOps.cpp.inc"
