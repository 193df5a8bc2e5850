//===- FuseAttentionStepTest.cpp - the training step before and after -----===//
//
// gpt2-tiny's training step (loss and the gradient of every parameter) on
// the CPU executor, compiled with and without gpt-fuse-attention, on random
// weights and tokens. T = 70 is not a multiple of the kernels' 64-row tiles.
//
// Tolerance: the loss to 1e-5 relative, each gradient to 1e-5 in the
// infinity-norm relative error max|fused - unfused| / max|unfused| (the
// metric of test/reference/eval_matches_torch.py, and why: a gradient
// element's rounding error scales with the tensor, not with the element).
// Both sides are float32 and differ only in summation order (tiled online
// softmax against BLAS GEMMs and a row softmax); they agree to about 1e-6,
// and a wrong mask or scale moves them by far more than 1e-5.
//
//===----------------------------------------------------------------------===//

#include "StepTestUtil.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace gptc;
using namespace gptc::test;
using namespace mlir;

namespace {

constexpr int64_t kBatch = 2, kSeq = 70;
constexpr double kTolerance = 1e-5;

/// The gradient function of gpt2-tiny, with or without the fusion.
func::FuncOp compileStep(MLIRContext &ctx, OwningOpRef<ModuleOp> &module,
                         bool fuse) {
  module = buildTiny(ctx, kBatch, kSeq);
  PassManager pm(&ctx);
  if (fuse)
    pm.addPass(createGPTFuseAttention());
  pm.addPass(createGPTAutodiff());
  if (failed(pm.run(*module)))
    return nullptr;
  return module->lookupSymbol<func::FuncOp>("gpt2_forward_grad");
}

TEST(FuseAttention, TrainingStepMatchesTheUnfusedStep) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> unfusedModule, fusedModule;
  func::FuncOp unfused = compileStep(ctx, unfusedModule, false);
  func::FuncOp fused = compileStep(ctx, fusedModule, true);
  ASSERT_TRUE(unfused && fused);
  // The fused step really is fused: one forward and one backward op per
  // block, on the packed c_attn output (GPT-2's layout), no softmax.
  EXPECT_EQ(countNested(fused, "gpt.flash_attention_qkv"), 4);
  EXPECT_EQ(countNested(fused, "gpt.flash_attention_qkv_grad"), 4);
  EXPECT_EQ(countNested(fused, "gpt.flash_attention"), 0);
  EXPECT_EQ(countNested(fused, "gpt.softmax"), 0);
  EXPECT_EQ(countNested(unfused, "gpt.softmax"), 4);

  // Weights uniform in [-0.3, 0.3] (large enough that attention is far
  // from uniform) and random tokens.
  auto [want, got] = runBoth(unfused, fused, randomArguments(unfused, 7));
  ASSERT_TRUE(succeeded(want) && succeeded(got));
  ASSERT_EQ(got->size(), want->size());

  float loss = (*want)[0].f32[0];
  EXPECT_NEAR((*got)[0].f32[0], loss, kTolerance * std::abs(loss));
  for (unsigned i = 1; i < unfused.getNumResults(); ++i) {
    auto name = unfused.getResultAttrOfType<StringAttr>(i, gpt::kGradAttr);
    ASSERT_TRUE(name);
    EXPECT_LE(infNormRelativeError((*got)[i], (*want)[i],
                                   /*absoluteIfZero=*/false),
              kTolerance)
        << "gradient of " << name.str();
  }
}

} // namespace
