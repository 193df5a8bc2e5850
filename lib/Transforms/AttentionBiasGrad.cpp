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
// Where the unfused graph summed dk's rounded terms (noise that AdamW's
// normalised step would follow; gpt2-tiny under bf16: 2.7e-4 of the bias
// gradient's largest element, AttentionBiasGradStepTest), the result is
// now the exact zero; v's differs from dv's sums by P's rounding.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace gptc {
#define GEN_PASS_DEF_GPTATTENTIONBIASGRAD
#include "gptc/Transforms/Passes.h.inc"
} // namespace gptc

using namespace mlir;
using namespace gptc::gpt;

namespace {

RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

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
    if (auto widen = dyn_cast_or_null<CastOp>(def);
        widen && tensorOf(x).getElementType().isF32() &&
        tensorOf(widen.getX()).getElementTypeBitWidth() < 32) {
      x = widen.getX();
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
          DenseElementsAttr::get(
              type, b.getFloatAttr(type.getElementType(), 0.0)));
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
  Value q = b.create<SliceOp>(loc, RankedTensorType::get({rows, 1, C}, xElement),
                              byThirds);
  auto vector = RankedTensorType::get({C}, sum);
  Value dq = b.create<ReduceSumOp>(loc, vector, q, DenseI64ArrayAttr());
  // k: zero.
  Value dk = zeros.get(rs->getParentOfType<func::FuncOp>(), vector);
  // v: dout's column sums.
  Value o = dout;
  if (tensorOf(dout).getElementType() != sum)
    o = b.create<CastOp>(loc, tensorOf(dout).clone(sum), dout);
  Value dv = b.create<ReduceSumOp>(loc, vector, o, DenseI64ArrayAttr());
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
