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
// and q's is left: the column sums of the first third of each row. The
// pass writes the three as one gpt.attention_bias_grad of dqkv (where the
// attention gradient wrote it) and dout: one launch reads dq in place and
// dout (a GPT-2 layer: 2 x 25 MB at B=16) and writes all three thirds.
// (Until the forty-ninth session it wrote q's sums, zeros, dout's sums as
// c_proj's bias gradient times its weight, and their concat: three
// launches a layer, 30 µs on an H200 where the two reads' floor is 10.)
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

void rewrite(ReduceSumOp rs) {
  Value x = rs.getX();
  RankedTensorType sumType = tensorOf(rs.getResult());
  if (rs.getCorner() || sumType.getRank() != 1 || tensorOf(x).getRank() < 2 ||
      sumType.getDimSize(0) != tensorOf(x).getShape().back() ||
      sumType.getDimSize(0) % 3 != 0)
    return; // not a bias gradient of packed columns
  FlashAttentionQKVGradOp grad = attentionGradOf(x);
  if (!grad)
    return;
  // dqkv where the attention gradient wrote it (the widening casts between
  // are exact, and the op widens its terms itself).
  OpBuilder b(rs);
  Location loc = b.getFusedLoc({grad.getLoc(), rs.getLoc()});
  Value db = b.create<AttentionBiasGradOp>(loc, sumType, grad.getResult(),
                                           grad.getDout());
  rs.getResult().replaceAllUsesWith(db);
  rs->erase();
}

struct GPTAttentionBiasGradPass
    : gptc::impl::GPTAttentionBiasGradBase<GPTAttentionBiasGradPass> {
  void runOnOperation() override {
    SmallVector<ReduceSumOp> sums;
    getOperation().walk([&](ReduceSumOp rs) { sums.push_back(rs); });
    for (ReduceSumOp rs : sums)
      if (rs->getParentOfType<func::FuncOp>())
        rewrite(rs);
  }
};

} // namespace
