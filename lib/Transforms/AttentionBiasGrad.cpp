//===- AttentionBiasGrad.cpp - gpt-attention-bias-grad --------------------===//
//
// GPT-2's c_attn projects to q|k|v in one GEMM with one bias, so its bias
// gradient is the column sums of the packed attention gradient dq|dk|dv:
// cuBLASLt's BGRADA epilogue on the weight-gradient GEMM, a pass over all
// of dqkv (on an H200 about 46 µs of that GEMM's 127.5 at GPT-2's sizes,
// a6be447). Attention itself says what two of the three thirds are:
//
// - k's is zero. With S = scale · q kᵀ, a bias b on k adds scale · q_i · b
//   to every score of row i, which the softmax takes away. In the
//   backward's own terms: dS_ij = P_ij (dP_ij − D_i) with D_i = Σ_j P_ij
//   dP_ij, so Σ_j dS_ij = 0 and Σ_j dk_j = scale · Σ_i (Σ_j dS_ij) q_i = 0.
// - v's is the column sums of dout: dv = Pᵀ dout and Σ_j P_ij = 1, so
//   Σ_j dv_j = Σ_i dout_i. (Causal or not; padded rows have dout = 0.)
//
// and q's is left: the column sums of the first third of each row, which
// gpt-fuse-elementwise lets one reduction read in place (FoldIntoReduceSum).
// dout's sums need not read dout either where dout is a GEMM's product
// A·W whose A the function already sums (GPT-2: attention's c_proj, dout
// = dy·Wᵀ, and c_proj's bias gradient is dy's column sums): they are those
// sums times W, a [1, C] by [C, C] product.
// Where the unfused graph summed dk's rounded terms (noise that AdamW's
// normalised step would follow; gpt2-tiny under bf16: 2.7e-4 of the bias
// gradient's largest element, AttentionBiasGradStepTest), the result is
// now the exact zero; v's differs from dv's sums by P's rounding.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "TensorOf.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace gptc {
#define GEN_PASS_DEF_GPTATTENTIONBIASGRAD
#include "gptc/Transforms/Passes.h.inc"
} // namespace gptc

using namespace mlir;
using namespace gptc::gpt;

namespace {

/// The packed attention gradient whose dqkv `x` is, through widening casts
/// and reshapes that keep the last dimension (the q|k|v columns); null if
/// none.
FlashAttentionQKVGradOp attentionGradOf(Value x) {
  const int64_t columns = tensorOf(x).getShape().back();
  for (;;) {
    if (auto grad = x.getDefiningOp<FlashAttentionQKVGradOp>())
      return grad;
    Operation *def = x.getDefiningOp();
    // (Exact ones only: bf16 or f16 to f32. So the sum is of dout's type
    // or f32, and dout's sums need at most a widening cast.)
    if (Value narrow = gptc::widenedFrom(x)) {
      x = narrow;
      continue;
    }
    if (auto reshape = dyn_cast_or_null<ReshapeOp>(def)) {
      x = reshape.getX();
      if (tensorOf(x).getRank() == 0 ||
          tensorOf(x).getShape().back() != columns)
        return {};
      continue;
    }
    return {};
  }
}

/// `v` through casts: the value they convert (a rounding or not).
Value throughCasts(Value v) {
  while (auto c = v.getDefiningOp<CastOp>())
    v = c.getX();
  return v;
}

/// dout's column sums without reading dout, where dout is (through casts)
/// the product A·W of a GEMM whose left operand's column sums the function
/// already takes before `point`: GPT-2's attention output gradient is its
/// c_proj's output gradient times the weight, and c_proj's bias gradient
/// is that gradient's column sums. Σ_i (A·W)_i = (Σ_i A_i)·W: a [1, K] by
/// [K, N] product in float32, of the float32 weight where W is a copy of
/// one. Null where that is not so (the caller sums dout).
Value doutSumsByLinearity(OpBuilder &b, Location loc, Value dout,
                          Operation *point) {
  auto mm = throughCasts(dout).getDefiningOp<MatmulOp>();
  if (!mm || mm.getTransposeA() || tensorOf(mm.getB()).getRank() != 2)
    return {};
  // A's column sums: a float32 reduce_sum to [K] of A's source (through
  // casts), already computed before `point`.
  Value a = throughCasts(mm.getA());
  const int64_t K = tensorOf(a).getShape().back();
  ReduceSumOp sums;
  for (Operation *user : a.getUsers()) {
    auto rs = dyn_cast<ReduceSumOp>(user);
    if (rs && !rs.getCorner() && rs->getBlock() == point->getBlock() &&
        rs->isBeforeInBlock(point) &&
        tensorOf(rs.getResult()).getShape() == ArrayRef<int64_t>{K} &&
        tensorOf(rs.getResult()).getElementType().isF32()) {
      sums = rs;
      break;
    }
  }
  if (!sums)
    return {};
  Value w = throughCasts(mm.getB());
  if (Operation *def = w.getDefiningOp();
      def &&
      (def->getBlock() != point->getBlock() || !def->isBeforeInBlock(point)))
    return {};
  auto f32 = b.getF32Type();
  if (!tensorOf(w).getElementType().isF32())
    w = b.create<CastOp>(loc, tensorOf(w).clone(f32), w);
  const int64_t N = tensorOf(dout).getShape().back();
  Value row = b.create<ReshapeOp>(loc, RankedTensorType::get({1, K}, f32),
                                  sums.getResult());
  auto product =
      b.create<MatmulOp>(loc, RankedTensorType::get({1, N}, f32), row, w);
  if (mm.getTransposeB())
    product.setTransposeB(true);
  return b.create<ReshapeOp>(loc, RankedTensorType::get({N}, f32), product);
}

/// One zero vector of each type per function, at its entry: every block's
/// k third reads the same constant.
class Zeros {
public:
  Value get(func::FuncOp func, RankedTensorType type) {
    Value &v = made[{func.getOperation(), type}];
    if (!v) {
      OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
      v = b.create<ConstantOp>(
          func.getLoc(), type,
          DenseElementsAttr::get(type,
                                 b.getFloatAttr(type.getElementType(), 0.0)));
    }
    return v;
  }

private:
  llvm::DenseMap<std::pair<Operation *, Type>, Value> made;
};

void rewrite(ReduceSumOp rs, Zeros &zeros) {
  Value x = rs.getX();
  RankedTensorType sumType = tensorOf(rs.getResult());
  if (rs.getCorner() || sumType.getRank() != 1 || tensorOf(x).getRank() < 2 ||
      sumType.getDimSize(0) != tensorOf(x).getShape().back() ||
      sumType.getDimSize(0) % 3 != 0)
    return; // not a bias gradient of packed columns
  FlashAttentionQKVGradOp grad = attentionGradOf(x);
  if (!grad)
    return;
  const int64_t C = sumType.getDimSize(0) / 3;
  Value dout = grad.getDout();
  Type sum = sumType.getElementType();

  OpBuilder b(rs);
  Location loc = b.getFusedLoc({grad.getLoc(), rs.getLoc()});
  Type xElement = tensorOf(x).getElementType();
  const int64_t rows = tensorOf(x).getNumElements() / (3 * C);
  // q: the first of the three [C] groups of each row.
  Value byThirds = b.create<ReshapeOp>(
      loc, RankedTensorType::get({rows, 3, C}, xElement), x);
  Value q = b.create<SliceOp>(
      loc, RankedTensorType::get({rows, 1, C}, xElement), byThirds);
  auto vector = RankedTensorType::get({C}, sum);
  Value dq = b.create<ReduceSumOp>(loc, vector, q, DenseI64ArrayAttr());
  // k: zero.
  Value dk = zeros.get(rs->getParentOfType<func::FuncOp>(), vector);
  // v: dout's column sums, from its GEMM's left operand's where the
  // function has them, else summed.
  Value dv = sum.isF32() ? doutSumsByLinearity(b, loc, dout, rs) : Value();
  if (!dv) {
    Value o = dout;
    if (tensorOf(dout).getElementType() != sum)
      o = b.create<CastOp>(loc, tensorOf(dout).clone(sum), dout);
    dv = b.create<ReduceSumOp>(loc, vector, o, DenseI64ArrayAttr());
  }
  Value db = b.create<ConcatOp>(loc, sumType, ValueRange{dq, dk, dv},
                                b.getI64IntegerAttr(0));
  rs.getResult().replaceAllUsesWith(db);
  rs->erase();
}

struct GPTAttentionBiasGradPass
    : gptc::impl::GPTAttentionBiasGradBase<GPTAttentionBiasGradPass> {
  void runOnOperation() override {
    SmallVector<ReduceSumOp> sums;
    getOperation().walk([&](ReduceSumOp rs) { sums.push_back(rs); });
    Zeros zeros;
    for (ReduceSumOp rs : sums)
      if (rs->getParentOfType<func::FuncOp>())
        rewrite(rs, zeros);
  }
};

} // namespace
