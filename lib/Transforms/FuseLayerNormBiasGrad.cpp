//===- FuseLayerNormBiasGrad.cpp - bias gradients from layernorm grads ----===//
//
// Part of gpt-fuse-elementwise, after the layernorm gradients have taken
// their epilogues and casts. In GPT-2 an output projection (attention's
// c_proj, the MLP's c_proj) adds into the residual stream, so its output
// gradient is the residual gradient, which the next layernorm's gradient
// writes (its epilogue adds dx to the residual gradient it reads):
//
//   %dg, %db, %dres, %dres16 = gpt.fused_layernorm_grad ... {
//     ...  gpt.yield %s, %s : f32, f32 }
//   %b = gpt.reshape %dres16 -> [M, C]
//   %dw, %dbias = gpt.matmul_bias_grad %h, %b {transpose_a}
//
// becomes
//
//   %dg, %db, %dres, %dres16, %dbias = gpt.fused_layernorm_grad ... {
//     ...  gpt.yield %s, %s, %s : f32, f32, f32 }
//   %dw = gpt.matmul %h, %b {transpose_a}
//
// The column sums are taken while the kernel has each row in registers (a
// third sum beside dgamma's and dbeta's), where the GEMM's BGRADA epilogue
// cost a pass over dy inside the weight-gradient GEMM. They sum the
// float32 value the body yields, which the bf16 copy the GEMM reads is
// rounded from: the unfused graph's sum (gpt.reduce_sum of the float32
// gradient), one rounding fewer than matmul_bias_grad's.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "TensorOf.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace gptc::gpt;

namespace {

/// The value of a layernorm gradient that `v` is, through reshapes that
/// keep the last dimension (so column sums stay column sums): a plain
/// gpt.layernorm_grad's dx or a gpt.fused_layernorm_grad value of x's
/// shape; null otherwise.
Value layerNormGradValue(Value v) {
  const int64_t columns = tensorOf(v).getShape().back();
  while (auto reshape = v.getDefiningOp<ReshapeOp>()) {
    v = reshape.getX();
    if (tensorOf(v).getRank() == 0 || tensorOf(v).getShape().back() != columns)
      return {};
  }
  if (auto plain = v.getDefiningOp<LayerNormGradOp>())
    return v == plain.getDx() ? v : Value();
  auto grad = v.getDefiningOp<FusedLayerNormGradOp>();
  if (!grad || cast<OpResult>(v).getResultNumber() < 2 ||
      tensorOf(v).getShape() != tensorOf(grad.getX()).getShape())
    return {}; // dgamma, dbeta, or already a column sum
  return v;
}

void fuseOne(MatmulBiasGradOp mbg) {
  Value written = layerNormGradValue(mbg.getB());
  if (!written)
    return;
  Value biasGrad = mbg.getBiasGrad();
  if (!tensorOf(biasGrad).getElementType().isF32()) {
    mbg->emitRemark() << "did not take the bias gradient from the "
                         "layernorm gradient that writes its right operand: "
                         "the bias gradient is "
                      << tensorOf(biasGrad).getElementType()
                      << ", the layernorm gradient sums in float32";
    return;
  }
  // Under fp32 ln_f's gradient is a plain one (its dx read by the lm
  // head's GEMMs and the last block's projection): fused, it yields dx.
  FusedLayerNormGradOp grad;
  unsigned value = 0;
  if (auto plain = written.getDefiningOp<LayerNormGradOp>()) {
    grad = gptc::asFusedLayerNormGrad(plain);
  } else {
    grad = written.getDefiningOp<FusedLayerNormGradOp>();
    value = cast<OpResult>(written).getResultNumber() - 2;
  }
  // One more value: the column sums of what the body yields for `value`.
  FusedLayerNormGradOp wider = gptc::addLayerNormGradValue(
      grad, value, biasGrad.getType(),
      FusedLoc::get(mbg.getContext(), {grad.getLoc(), mbg.getLoc()}));

  OpBuilder b(mbg);
  SmallVector<NamedAttribute> attrs;
  if (mbg.getTransposeA())
    attrs.push_back(b.getNamedAttr("transpose_a", b.getUnitAttr()));
  auto weightGrad = b.create<MatmulOp>(
      mbg.getLoc(), TypeRange{mbg.getResult().getType()},
      ValueRange{mbg.getA(), mbg.getB()}, attrs);
  mbg.getResult().replaceAllUsesWith(weightGrad.getResult());
  biasGrad.replaceAllUsesWith(wider->getResults().back());
  mbg->erase();
}

} // namespace

void gptc::fuseBiasGradsIntoLayerNormGrads(func::FuncOp func) {
  SmallVector<MatmulBiasGradOp> grads;
  func.walk([&](MatmulBiasGradOp g) { grads.push_back(g); });
  for (MatmulBiasGradOp g : grads)
    fuseOne(g);
}
