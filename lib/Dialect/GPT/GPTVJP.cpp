//===- GPTVJP.cpp - vector-Jacobian products of the gpt ops ---------------===//
//
// One rule per op (DifferentiableOpInterface::buildVJP). Each rule is built
// from gpt ops, so the backward pass is ordinary IR that the fusion passes
// and the CPU executor see like the forward pass. Comments give the maths;
// `dy` is the gradient of the op's result, `dx` the one it produces.
//
//===----------------------------------------------------------------------===//

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace gptc::gpt;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

Value scalar(OpBuilder &b, Location loc, Type elem, double value) {
  auto type = RankedTensorType::get({}, elem);
  return b.create<ConstantOp>(loc, type,
                              DenseElementsAttr::get(
                                  type, b.getFloatAttr(elem, value)))
      .getResult();
}

/// Sums `grad` down to `target`'s shape: the adjoint of numpy broadcasting.
Value reduceTo(OpBuilder &b, Location loc, Value grad, Value target) {
  if (typeOf(grad) == typeOf(target))
    return grad;
  return b.create<ReduceSumOp>(loc, typeOf(target), grad);
}

template <typename OpTy>
Value binary(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  FailureOr<SmallVector<int64_t>> shape =
      broadcastShapes(typeOf(lhs).getShape(), typeOf(rhs).getShape());
  auto type = RankedTensorType::get(*shape, typeOf(lhs).getElementType());
  return b.create<OpTy>(loc, type, lhs, rhs);
}

Value swapLastTwo(OpBuilder &b, Location loc, Value x) {
  ArrayRef<int64_t> shape = typeOf(x).getShape();
  SmallVector<int64_t> perm, out;
  for (int64_t i = 0, r = shape.size(); i < r; ++i)
    perm.push_back(i < r - 2 ? i : (i == r - 2 ? r - 1 : r - 2));
  for (int64_t p : perm)
    out.push_back(shape[p]);
  return b.create<TransposeOp>(
      loc, RankedTensorType::get(out, typeOf(x).getElementType()), x,
      b.getDenseI64ArrayAttr(perm));
}

Value matmulOf(OpBuilder &b, Location loc, Value x, Value y, bool tx,
               bool ty) {
  ArrayRef<int64_t> xs = typeOf(x).getShape(), ys = typeOf(y).getShape();
  SmallVector<int64_t> shape(xs.drop_back(2));
  shape.push_back(tx ? xs.back() : xs[xs.size() - 2]);
  shape.push_back(ty ? ys[ys.size() - 2] : ys.back());
  return b.create<MatmulOp>(
      loc, RankedTensorType::get(shape, typeOf(x).getElementType()), x, y,
      tx, ty);
}

Value reshapeTo(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> shape) {
  return b.create<ReshapeOp>(
      loc, RankedTensorType::get(shape, typeOf(x).getElementType()), x);
}

} // namespace

//===----------------------------------------------------------------------===//
// Embedding, matmul
//===----------------------------------------------------------------------===//

// d table = scatter-add of dy rows at the ids; ids get no gradient.
LogicalResult EmbeddingOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<EmbeddingGradOp>(getLoc(), getTable().getType(),
                                          dys[0], getIds(), Value()));
  dxs.push_back(nullptr);
  return success();
}

// With A = op(a), B = op(b) and Y = A·B: dA = dY·Bᵀ and dB = Aᵀ·dY; a
// transposed operand takes the transpose of its gradient. A weight shared
// over the batch sums dB over it, as one GEMM over the flattened rows.
LogicalResult MatmulOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                 SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value dy = dys[0], a = getA(), w = getB();
  bool ta = getTransposeA(), tb = getTransposeB();

  Value dA = matmulOf(b, loc, dy, w, false, !tb);
  dxs.push_back(ta ? swapLastTwo(b, loc, dA) : dA);

  ArrayRef<int64_t> as = typeOf(a).getShape();
  if (typeOf(w).getRank() == typeOf(a).getRank()) {
    // dB = Aᵀ·dY, and db = dBᵀ = dYᵀ·A when b is transposed.
    dxs.push_back(tb ? matmulOf(b, loc, dy, a, true, ta)
                     : matmulOf(b, loc, a, dy, !ta, false));
    return success();
  }
  Value aRows = ta ? swapLastTwo(b, loc, a) : a;
  int64_t k = ta ? as[as.size() - 2] : as.back();
  int64_t n = typeOf(dy).getShape().back();
  int64_t rows = typeOf(aRows).getNumElements() / k;
  Value a2 = reshapeTo(b, loc, aRows, {rows, k});
  Value dy2 = reshapeTo(b, loc, dy, {rows, n});
  dxs.push_back(tb ? matmulOf(b, loc, dy2, a2, true, false)   // [N, K]
                   : matmulOf(b, loc, a2, dy2, true, false)); // [K, N]
  return success();
}

//===----------------------------------------------------------------------===//
// Normalisation, masking, activation, loss
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  auto grad = b.create<LayerNormGradOp>(
      getLoc(), getX().getType(), getGamma().getType(), getBeta().getType(),
      getX(), getGamma(), dys[0], getEpsilonAttr());
  dxs.append({grad.getDx(), grad.getDgamma(), grad.getDbeta()});
  return success();
}

LogicalResult SoftmaxOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                  SmallVectorImpl<Value> &dxs) {
  dxs.push_back(
      b.create<SoftmaxGradOp>(getLoc(), getType(), getResult(), dys[0]));
  return success();
}

// Masked entries are constants: their gradient is zero.
LogicalResult CausalMaskOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                     SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<CausalMaskOp>(getLoc(), getType(), dys[0],
                                       b.getF32FloatAttr(0.0f)));
  return success();
}

// The backward recomputes the probabilities from q, k and the forward's lse
// (flash_attention_grad). lse itself only ever feeds that op, so it has no
// gradient rule: a graph whose loss depends on lse is refused. The row term
// D = rowsum(dout ∘ out) comes first, as its own op (FlashAttention-2's
// preprocessing): the gradient's kernels then read it rather than
// recomputing it in every key tile.
LogicalResult FlashAttentionOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &dxs) {
  if (dys[1])
    return emitOpError("has no gradient rule for its lse result (the loss "
                       "depends on the logsumexp); only out is differentiable");
  auto delta = b.create<AttentionRowDotOp>(getLoc(), getLse().getType(),
                                           getOut(), dys[0], IntegerAttr());
  auto grad = b.create<FlashAttentionGradOp>(
      getLoc(), getQ().getType(), getK().getType(), getV().getType(), getQ(),
      getK(), getV(), getOut(), getLse(), dys[0], delta, getScaleAttr(),
      getCausalAttr());
  dxs.append({grad.getDq(), grad.getDk(), grad.getDv()});
  return success();
}

// The packed op's gradient is packed too: dq, dk and dv land side by side in
// one [B, T, 3C] tensor, the layout the c_attn backward GEMMs read.
LogicalResult FlashAttentionQKVOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                            SmallVectorImpl<Value> &dxs) {
  if (dys[1])
    return emitOpError("has no gradient rule for its lse result (the loss "
                       "depends on the logsumexp); only out is differentiable");
  auto delta =
      b.create<AttentionRowDotOp>(getLoc(), getLse().getType(), getOut(),
                                  dys[0], getNumHeadsAttr());
  dxs.push_back(b.create<FlashAttentionQKVGradOp>(
      getLoc(), getQkv().getType(), getQkv(), getOut(), getLse(), dys[0],
      delta, getNumHeadsAttr(), getScaleAttr(), getCausalAttr()));
  return success();
}

LogicalResult GeluOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                               SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<GeluGradOp>(getLoc(), getType(), getX(), dys[0],
                                     getApproximateAttr()));
  return success();
}

LogicalResult CrossEntropyOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<CrossEntropyGradOp>(
      getLoc(), getLogits().getType(), getLogits(), getTargets(), dys[0],
      getNumClassesAttr(), getIgnoreIndexAttr()));
  dxs.push_back(nullptr);
  return success();
}

// Padding and slicing are each other's adjoints. Integer tensors (padded
// token ids) have no gradient.
LogicalResult PadOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                              SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<SliceOp>(getLoc(), getX().getType(), dys[0]));
  return success();
}

LogicalResult SliceOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<PadOp>(getLoc(), getX().getType(), dys[0]));
  return success();
}

// The gradient goes back in the input's precision: under bf16 autocast the
// float32 master weights receive float32 gradients.
LogicalResult CastOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                               SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<CastOp>(getLoc(), getX().getType(), dys[0]));
  return success();
}

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                  SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<ReshapeOp>(getLoc(), getX().getType(), dys[0]));
  return success();
}

LogicalResult TransposeOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &dxs) {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  dxs.push_back(b.create<TransposeOp>(getLoc(), getX().getType(), dys[0],
                                      b.getDenseI64ArrayAttr(inverse)));
  return success();
}

// Pieces that do not reach the loss contribute zeros.
LogicalResult SplitOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                SmallVectorImpl<Value> &dxs) {
  SmallVector<Value> pieces;
  for (auto [result, dy] : llvm::zip(getResults(), dys)) {
    if (dy) {
      pieces.push_back(dy);
      continue;
    }
    auto type = typeOf(result);
    pieces.push_back(b.create<ConstantOp>(
        getLoc(), type,
        DenseElementsAttr::get(type,
                               b.getFloatAttr(type.getElementType(), 0.0))));
  }
  dxs.push_back(b.create<ConcatOp>(getLoc(), getX().getType(), pieces,
                                   getAxisAttr()));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                              SmallVectorImpl<Value> &dxs) {
  dxs.push_back(reduceTo(b, getLoc(), dys[0], getLhs()));
  dxs.push_back(reduceTo(b, getLoc(), dys[0], getRhs()));
  return success();
}

LogicalResult SubOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                              SmallVectorImpl<Value> &dxs) {
  Value neg = b.create<NegOp>(getLoc(), dys[0].getType(), dys[0]);
  dxs.push_back(reduceTo(b, getLoc(), dys[0], getLhs()));
  dxs.push_back(reduceTo(b, getLoc(), neg, getRhs()));
  return success();
}

LogicalResult MulOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                              SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  dxs.push_back(
      reduceTo(b, loc, binary<MulOp>(b, loc, dys[0], getRhs()), getLhs()));
  dxs.push_back(
      reduceTo(b, loc, binary<MulOp>(b, loc, dys[0], getLhs()), getRhs()));
  return success();
}

// y = l / r: dl = dy / r, dr = -dy · y / r.
LogicalResult DivOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                              SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value dl = binary<DivOp>(b, loc, dys[0], getRhs());
  Value dr = b.create<NegOp>(
      loc, getType(),
      binary<DivOp>(b, loc, binary<MulOp>(b, loc, dys[0], getResult()),
                    getRhs()));
  dxs.push_back(reduceTo(b, loc, dl, getLhs()));
  dxs.push_back(reduceTo(b, loc, dr, getRhs()));
  return success();
}

// max and min appear in the optimizer, never between a parameter and the
// loss; a rule would need a comparison op the dialect does not have yet.
LogicalResult MaxOp::buildVJP(OpBuilder &, ArrayRef<Value>,
                              SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule");
}
LogicalResult MinOp::buildVJP(OpBuilder &, ArrayRef<Value>,
                              SmallVectorImpl<Value> &) {
  return emitOpError("has no gradient rule");
}

LogicalResult NegOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                              SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<NegOp>(getLoc(), getType(), dys[0]));
  return success();
}

// d exp(x) = exp(x) dx
LogicalResult ExpOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                              SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<MulOp>(getLoc(), getType(), dys[0], getResult()));
  return success();
}

// d log(x) = dx / x
LogicalResult LogOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                              SmallVectorImpl<Value> &dxs) {
  dxs.push_back(b.create<DivOp>(getLoc(), getType(), dys[0], getX()));
  return success();
}

// d tanh(x) = (1 - y²) dx
LogicalResult TanhOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                               SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value one = scalar(b, loc, getType().getElementType(), 1.0);
  Value y2 = b.create<MulOp>(loc, getType(), getResult(), getResult());
  Value slope = binary<SubOp>(b, loc, one, y2);
  dxs.push_back(b.create<MulOp>(loc, getType(), dys[0], slope));
  return success();
}

// d sqrt(x) = dx / (2y)
LogicalResult SqrtOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                               SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value half = scalar(b, loc, getType().getElementType(), 0.5);
  Value q = b.create<DivOp>(loc, getType(), dys[0], getResult());
  dxs.push_back(binary<MulOp>(b, loc, q, half));
  return success();
}

// d x^-1/2 = -1/2 · y³ dx
LogicalResult RsqrtOp::buildVJP(OpBuilder &b, ArrayRef<Value> dys,
                                SmallVectorImpl<Value> &dxs) {
  Location loc = getLoc();
  Value k = scalar(b, loc, getType().getElementType(), -0.5);
  Value y = getResult();
  Value y3 = b.create<MulOp>(loc, getType(),
                             b.create<MulOp>(loc, getType(), y, y), y);
  dxs.push_back(binary<MulOp>(
      b, loc, b.create<MulOp>(loc, getType(), dys[0], y3), k));
  return success();
}
