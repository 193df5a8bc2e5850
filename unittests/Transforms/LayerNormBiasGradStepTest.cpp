//===- LayerNormBiasGradStepTest.cpp - bias gradients from layernorm grads ===//
//
// gpt2-tiny's whole training step on the CPU executor, compiled through
// every fusion pass with gpt-fuse-elementwise's layernorm-bias-grads on and
// off: each output projection's bias gradient (attention's c_proj and the
// MLP's c_proj, two blocks) from its weight-gradient GEMM
// (gpt.matmul_bias_grad) or from the gpt.fused_layernorm_grad that writes
// the residual gradient it sums (FuseLayerNormBiasGrad.cpp).
//
// Tolerance: under fp32 none. The GEMM's right operand is the layernorm
// gradient's float32 value itself, and both sum it in double in row order
// (gpt.reduce_sum's kernel). Under bf16 the GEMM sums the bf16 copy and the
// layernorm gradient the float32 value it is rounded from: those four
// gradients agree to bf16 rounding of their terms (measured 0.94e-3 to
// 1.26e-3 of the largest; bound 1e-2, and not 0: the bf16 copy was
// summed before), and every other result bit for bit.
//
//===----------------------------------------------------------------------===//

#include "StepTestUtil.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace gptc;
using namespace gptc::test;
using namespace mlir;

namespace {

OwningOpRef<ModuleOp> compile(MLIRContext &ctx, const std::string &precision,
                              bool fromLayerNorm) {
  return compileFusedTinyStep(ctx, precision, [&](auto &fuse) {
    fuse.layernormBiasGrads = fromLayerNorm;
  });
}

/// The column sums the layernorm gradients of `func` take: their [C]
/// values.
int64_t columnSums(func::FuncOp func) {
  int64_t n = 0;
  func.walk([&](gpt::FusedLayerNormGradOp g) {
    auto x = cast<RankedTensorType>(g.getX().getType());
    for (Value v : g.getValues())
      n += cast<RankedTensorType>(v.getType()).getShape() !=
           x.getShape();
  });
  return n;
}

class LayerNormBiasGrad : public testing::TestWithParam<const char *> {};

TEST_P(LayerNormBiasGrad, StepGivesTheGemmsBiasGradients) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> gemm = compile(ctx, GetParam(), false);
  OwningOpRef<ModuleOp> fused = compile(ctx, GetParam(), true);
  ASSERT_TRUE(gemm && fused);
  auto before = gemm->lookupSymbol<func::FuncOp>("gpt2_forward_grad");
  auto after = fused->lookupSymbol<func::FuncOp>("gpt2_forward_grad");
  ASSERT_TRUE(before && after);
  // Four projections' bias gradients move; c_attn's and c_fc's stay in
  // their GEMMs (their output gradients come from GEMMs and attention).
  EXPECT_EQ(countTopLevel(before, "gpt.matmul_bias_grad"), 8);
  EXPECT_EQ(countTopLevel(after, "gpt.matmul_bias_grad"), 4);
  EXPECT_EQ(columnSums(before), 0);
  EXPECT_EQ(columnSums(after), 4);
  // Under fp32 ln_f's gradient was a plain gpt.layernorm_grad (its dx read
  // by the lm head's GEMMs and the last block's residual): it becomes a
  // fused one that yields dx and sums it.
  const bool bf16 = std::string(GetParam()) == "bf16";
  EXPECT_EQ(countTopLevel(before, "gpt.layernorm_grad"), bf16 ? 0 : 1);
  EXPECT_EQ(countTopLevel(after, "gpt.layernorm_grad"), 0);
  EXPECT_EQ(countTopLevel(after, "gpt.fused_layernorm_grad"),
            countTopLevel(before, "gpt.fused_layernorm_grad") + (bf16 ? 0 : 1));
  EXPECT_EQ(countTopLevel(after, "gpt.matmul"),
            countTopLevel(before, "gpt.matmul") + 4);

  auto [want, got] = runBoth(before, after, randomArguments(before, 31));
  ASSERT_TRUE(succeeded(want) && succeeded(got));
  ASSERT_EQ(got->size(), want->size());
  int moved = 0;
  for (unsigned i = 0; i < want->size(); ++i) {
    auto name = before.getResultAttrOfType<StringAttr>(i, gpt::kGradAttr);
    std::string what = name ? name.str() : "result " + std::to_string(i);
    const std::vector<float> &a = (*got)[i].f32, &b = (*want)[i].f32;
    ASSERT_EQ(a.size(), b.size()) << what;
    bool projectionBias = name && name.getValue().ends_with("c_proj.bias");
    moved += projectionBias;
    if (bf16 && projectionBias) {
      double err = infNormRelativeError((*got)[i], (*want)[i]);
      EXPECT_LT(err, 1e-2) << what;
      EXPECT_GT(err, 0.0) << what << ": the bf16 copy was summed";
      continue;
    }
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << what;
  }
  EXPECT_EQ(moved, 4);
}

INSTANTIATE_TEST_SUITE_P(Precisions, LayerNormBiasGrad,
                         testing::Values("fp32", "bf16"));

} // namespace
