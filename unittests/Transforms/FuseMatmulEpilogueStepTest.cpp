//===- FuseMatmulEpilogueStepTest.cpp - the step before and after ---------===//
//
// gpt2-tiny's whole training step (the gradient function: loss and every
// gradient) on the CPU executor, compiled through gpt-optimizer and then
// gpt-fuse-elementwise, with and without gpt-fuse-matmul-epilogue between
// them, on random weights and tokens.
//
// fp32: bit for bit. The epilogue is the same float32 GEMM, the bias added
// in float32, the tanh GELU and its derivative with the fused body's
// operations in its order, and the bias gradients summed in reduce_sum's
// order, so nothing changes; any difference is a bug.
//
// bf16: the epilogues keep the float32 accumulator where the unfused chain
// rounded the product to bf16 before the bias or GELU's derivative, and
// the bias gradients of matmul_bias_grad sum the bf16 copy of dy the GEMM
// reads (the ops' definitions). Every epilogue writes bf16, rounding once
// after its bias (and GELU), as torch.autocast's linear does; the output
// projections' result is widened for the residual add. As cuBLASLt keeps
// bias, aux and bias gradient in D's type, each reads a bf16 copy of its
// bias and c_fc's saves a bf16 aux; the weight gradients with a bias
// gradient (every one: c_fc's takes its bias gradient from the bf16
// derivative it reads) are written in float32 (never rounded to bf16). The loss and the gradients then differ by what
// one bf16 rounding (2^-9 relative) does downstream, through 2 blocks and
// the bf16 backward GEMMs. Measured: at most 8.7e-3 (forward epilogues
// alone: 9.3e-3), relative, in the infinity norm of each tensor (seed 7);
// tolerance 2e-2 (about 5 bf16 ulps of the largest element). A wrong bias,
// GELU, derivative, aux or bias gradient is off by O(1).
//
//===----------------------------------------------------------------------===//

#include "StepTestUtil.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace gptc;
using namespace gptc::test;
using namespace mlir;

namespace {

OwningOpRef<ModuleOp> compile(MLIRContext &ctx, const std::string &precision,
                              bool epilogues, bool geluBiasGrads = false) {
  OptimizerOptions opts;
  opts.precision = precision;
  return compileTinyStep(ctx, opts, [&](PassManager &pm) {
    GPTFuseMatmulEpilogueOptions options;
    options.geluBiasGrads = geluBiasGrads;
    if (epilogues)
      pm.addPass(createGPTFuseMatmulEpilogue(options));
    // The output projections' bias gradients stay in their GEMMs
    // (LayerNormBiasGradStepTest.cpp moves them).
    GPTFuseElementwiseOptions fuse;
    fuse.layernormBiasGrads = false;
    pm.addPass(createGPTFuseElementwise(fuse));
  });
}

/// Runs the gradient function of both; returns the worst relative error.
/// geluBiasGrads: `after` took c_fc's bias gradients with GELU's
/// derivative (gelu-bias-grads).
double compare(ModuleOp before, ModuleOp after, double tolerance,
               bool geluBiasGrads = false) {
  auto unfused = before.lookupSymbol<func::FuncOp>("gpt2_forward_grad");
  auto fused = after.lookupSymbol<func::FuncOp>("gpt2_forward_grad");
  EXPECT_TRUE(unfused && fused);
  if (!unfused || !fused)
    return INFINITY;
  // Two projections with a bias per block (c_attn, c_fc: the latter with
  // its GELU and the aux pre-activation) in the recomputed forward, and
  // the attention and MLP output projections (bias, then the residual).
  EXPECT_EQ(countTopLevel(fused, "gpt.matmul_epilogue"), 2 * 4);
  // The backward: GELU's derivative (DGELU alone), and every bias
  // gradient in its weight-gradient GEMM: c_attn's, attention c_proj's,
  // c_fc's and MLP c_proj's; or c_fc's with GELU's derivative.
  EXPECT_EQ(countTopLevel(fused, "gpt.matmul_gelu_grad"), 2);
  EXPECT_EQ(countTopLevel(fused, "gpt.matmul_bias_grad"),
            2 * (geluBiasGrads ? 3 : 4));
  fused.walk([&](gpt::MatmulGeluGradOp op) {
    EXPECT_EQ(op->getNumResults(), geluBiasGrads ? 2u : 1u)
        << "c_fc's bias gradient is its weight-gradient GEMM's, or with "
           "gelu-bias-grads its derivative's";
  });
  for (const char *op : {"gpt.matmul_epilogue", "gpt.matmul_gelu_grad",
                         "gpt.matmul_bias_grad"})
    EXPECT_EQ(countTopLevel(unfused, op), 0) << op;
  // One type per GEMM (cuBLASLt's): under bf16 every epilogue (c_attn's
  // q|k|v for the packed attention, c_fc's for c_proj, the output
  // projections' too, widened for the residual add as autocast's linear
  // is) and the GELU derivatives write bf16 with their bias (gradient) and
  // aux; the weight gradients with a bias gradient are float32, as it is.
  auto dType = [](Operation *op) {
    return cast<RankedTensorType>(op->getResult(0).getType())
        .getElementType();
  };
  int narrowEpilogues = 0;
  fused.walk([&](Operation *op) {
    if (isa<gpt::MatmulEpilogueOp, gpt::MatmulGeluGradOp>(op)) {
      narrowEpilogues += dType(op).isBF16();
      for (Value v : op->getOperands().drop_front(2))
        EXPECT_EQ(cast<RankedTensorType>(v.getType()).getElementType(),
                  dType(op));
      for (Value v : op->getResults())
        EXPECT_EQ(cast<RankedTensorType>(v.getType()).getElementType(),
                  dType(op));
    }
    if (isa<gpt::MatmulBiasGradOp>(op))
      EXPECT_TRUE(dType(op).isF32());
  });
  // (fp32 has no bf16 tensor at all.)
  bool lowPrecision = false;
  fused.walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      if (auto tensor = dyn_cast<RankedTensorType>(t))
        lowPrecision |= tensor.getElementType().isBF16();
  });
  EXPECT_EQ(narrowEpilogues, lowPrecision ? 2 * (4 + 1) : 0);
  auto [want, got] = runBoth(unfused, fused, randomArguments(unfused, 7));
  EXPECT_TRUE(succeeded(want) && succeeded(got));
  if (failed(want) || failed(got) || want->size() != got->size())
    return INFINITY;
  double worst = 0;
  for (unsigned i = 0; i < want->size(); ++i) {
    double e = infNormRelativeError((*got)[i], (*want)[i]);
    worst = std::max(worst, e);
    EXPECT_LE(e, tolerance) << "result " << i << " "
                            << [&] {
                                 std::string s;
                                 llvm::raw_string_ostream(s)
                                     << unfused.getResultAttrDict(i);
                                 return s;
                               }();
  }
  return worst;
}

TEST(FuseMatmulEpilogue, Fp32StepIsBitExact) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> before = compile(ctx, "fp32", false);
  OwningOpRef<ModuleOp> after = compile(ctx, "fp32", true);
  ASSERT_TRUE(before && after);
  EXPECT_EQ(compare(*before, *after, 0.0), 0.0);
}

TEST(FuseMatmulEpilogue, Bf16StepWithinOneRounding) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> before = compile(ctx, "bf16", false);
  OwningOpRef<ModuleOp> after = compile(ctx, "bf16", true);
  ASSERT_TRUE(before && after);
  double worst = compare(*before, *after, 2e-2);
  // The definition differs from the unfused chain: if nothing differed,
  // the casts were not seen through.
  EXPECT_GT(worst, 0.0);
  std::printf("bf16: worst relative difference %.3g\n", worst);
}

// gelu-bias-grads: c_fc's bias gradient summed with GELU's derivative
// (the reduce_sum's sum of the float32 values, in its order: fp32 still
// bit-exact), its weight-gradient GEMM plain; bf16 within the same bound
// (the bias gradient rounded to the derivative's bf16).
TEST(FuseMatmulEpilogue, GeluBiasGradsStepMatches) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  for (const char *precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    OwningOpRef<ModuleOp> before = compile(ctx, precision, false);
    OwningOpRef<ModuleOp> after = compile(ctx, precision, true, true);
    ASSERT_TRUE(before && after);
    const bool fp32 = std::string(precision) == "fp32";
    double worst = compare(*before, *after, fp32 ? 0.0 : 2e-2, true);
    if (fp32)
      EXPECT_EQ(worst, 0.0);
    else
      std::printf("bf16, gelu-bias-grads: worst relative difference %.3g\n",
                  worst);
  }
}

} // namespace
