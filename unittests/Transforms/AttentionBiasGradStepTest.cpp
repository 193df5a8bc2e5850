//===- AttentionBiasGradStepTest.cpp - c_attn's bias gradient by identity -===//
//
// gpt2-tiny's whole training step on the CPU executor, compiled through
// the fusion passes with and without gpt-attention-bias-grad before them:
// c_attn's bias gradient from its weight-gradient GEMM (matmul_bias_grad:
// the column sums of dq|dk|dv) or from attention's identities (dq's sums,
// zero for k, dout's sums for v: AttentionBiasGrad.cpp).
//
// What each third must be:
// - q: bit for bit. Both sum the same dq values in double in row order.
// - k: exactly zero after. Before, the sums of dk's terms cancel up to
//   their rounding: the test checks that they were small against the
//   whole bias gradient, so that zero is their value. Measured (seed 41):
//   1.7e-8 and 2.5e-8 of its largest element under fp32, 2.7e-4 and
//   2.8e-4 under bf16; bounds 1e-6 and 5e-3.
// - v: dout's sums (gpt.attention_bias_grad sums dout itself) against
//   dv's: equal up to the rounding of P, and under bf16 of dv. Measured:
//   8.2e-8 and 8.6e-8 of the largest element (fp32), 8.8e-4 and 6.9e-4
//   (bf16; 3.0e-3 and 3.3e-3 when v's third was c_proj's bias gradient
//   times its weight); bounds 1e-6 and 1e-2. A wrong third is off by O(1).
// Every other result (the loss, every other gradient) bit for bit.
//
//===----------------------------------------------------------------------===//

#include "StepTestUtil.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace gptc;
using namespace gptc::test;
using namespace mlir;

namespace {

OwningOpRef<ModuleOp> compile(MLIRContext &ctx, const std::string &precision,
                              bool identities) {
  OptimizerOptions opts;
  opts.precision = precision;
  return compileTinyStep(ctx, opts, [&](PassManager &pm) {
    if (identities)
      pm.addPass(createGPTAttentionBiasGrad());
    pm.addPass(createGPTFuseMatmulEpilogue());
    pm.addPass(createGPTFuseElementwise());
  });
}

/// max |x[i]| over [begin, end).
double maxAbs(const std::vector<float> &x, size_t begin, size_t end) {
  double m = 0;
  for (size_t i = begin; i < end; ++i)
    m = std::max(m, std::abs(double(x[i])));
  return m;
}

class AttentionBiasGrad : public testing::TestWithParam<const char *> {};

TEST_P(AttentionBiasGrad, IdentitiesGiveTheGemmsBiasGradient) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> gemm = compile(ctx, GetParam(), false);
  OwningOpRef<ModuleOp> ident = compile(ctx, GetParam(), true);
  ASSERT_TRUE(gemm && ident);
  auto before = gemm->lookupSymbol<func::FuncOp>("gpt2_forward_grad");
  auto after = ident->lookupSymbol<func::FuncOp>("gpt2_forward_grad");
  ASSERT_TRUE(before && after);
  // Two blocks: each c_attn weight gradient is a plain GEMM now, and its
  // bias gradient one gpt.attention_bias_grad of the attention gradient's
  // dqkv and dout: no reduction, slice or concat of its own.
  EXPECT_EQ(countTopLevel(after, "gpt.matmul_bias_grad"),
            countTopLevel(before, "gpt.matmul_bias_grad") - 2);
  EXPECT_EQ(countTopLevel(after, "gpt.matmul"),
            countTopLevel(before, "gpt.matmul") + 2);
  EXPECT_EQ(countTopLevel(after, "gpt.attention_bias_grad"), 2);
  EXPECT_EQ(countTopLevel(before, "gpt.attention_bias_grad"), 0);
  EXPECT_EQ(countTopLevel(after, "gpt.reduce_sum"),
            countTopLevel(before, "gpt.reduce_sum"));
  EXPECT_EQ(countTopLevel(after, "gpt.concat"),
            countTopLevel(before, "gpt.concat"));
  EXPECT_EQ(countTopLevel(after, "gpt.slice"),
            countTopLevel(before, "gpt.slice"))
      << "q's third is read in place, not copied";

  const bool bf16 = std::string(GetParam()) == "bf16";
  auto [want, got] = runBoth(before, after, randomArguments(before, 41));
  ASSERT_TRUE(succeeded(want) && succeeded(got));
  ASSERT_EQ(got->size(), want->size());
  int biases = 0;
  for (unsigned i = 0; i < want->size(); ++i) {
    auto name = before.getResultAttrOfType<StringAttr>(i, gpt::kGradAttr);
    std::string what = name ? name.str() : "result " + std::to_string(i);
    const std::vector<float> &a = (*got)[i].f32, &b = (*want)[i].f32;
    ASSERT_EQ(a.size(), b.size()) << what;
    if (!name || !name.getValue().ends_with("c_attn.bias")) {
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << what;
      continue;
    }
    ++biases;
    const size_t C = a.size() / 3;
    const double largest = maxAbs(b, 0, b.size());
    ASSERT_GT(largest, 0.0) << what;
    // q: the same sums.
    EXPECT_EQ(std::memcmp(a.data(), b.data(), C * sizeof(float)), 0) << what;
    // k: zero, where the GEMM summed dk's rounding.
    EXPECT_EQ(maxAbs(a, C, 2 * C), 0.0) << what;
    double kNoise = maxAbs(b, C, 2 * C) / largest;
    EXPECT_LT(kNoise, bf16 ? 5e-3 : 1e-6) << what;
    // v: dout's sums against dv's.
    double vErr = 0;
    for (size_t c = 2 * C; c < 3 * C; ++c)
      vErr = std::max(vErr, std::abs(double(a[c]) - b[c]));
    EXPECT_LT(vErr / largest, bf16 ? 1e-2 : 1e-6) << what;
    std::printf("%s (%s): k's summed rounding %.3g, v's difference %.3g of "
                "the largest\n",
                what.c_str(), GetParam(), kNoise, vErr / largest);
  }
  EXPECT_EQ(biases, 2);
}

INSTANTIATE_TEST_SUITE_P(Precisions, AttentionBiasGrad,
                         testing::Values("fp32", "bf16"));

} // namespace
