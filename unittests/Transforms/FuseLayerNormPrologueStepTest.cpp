//===- FuseLayerNormPrologueStepTest.cpp - layernorm prologues, whole step ===//
//
// gpt2-tiny's whole training step on the CPU executor, compiled through
// gpt-optimizer and gpt-fuse-elementwise with and without its layernorm
// prologues and epilogues (gpt.fused_layernorm in place of a
// gpt.fused_elementwise and the gpt.layernorm that reads it,
// gpt.fused_layernorm_grad in place of a gpt.layernorm_grad and the
// gpt.fused_elementwise that reads its dx): the forward function (loss and logits)
// and the gradient function (loss and every gradient) on random weights and
// tokens, under fp32 and bf16.
//
// Tolerance: none. The fused op runs the same ScalarProgram and then the
// same layernorm kernel on the float32 value, and the same layernorm_grad
// kernel then the same ScalarProgram on dx (FusedLayerNorm.h), so every
// result must agree bit for bit; an op that normalised the wrong value,
// dropped a written value or read an input at the wrong broadcast index
// would not.
//
//===----------------------------------------------------------------------===//

#include "StepTestUtil.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Transforms/Passes.h"

#include <gtest/gtest.h>


using namespace gptc;
using namespace gptc::test;
using namespace mlir;

namespace {

/// gpt2-tiny (two layers) through the optimizer stage, then fused with or
/// without the layernorm prologues.
OwningOpRef<ModuleOp> compile(MLIRContext &ctx, const std::string &precision,
                              bool prologues) {
  OptimizerOptions opts;
  opts.precision = precision;
  return compileTinyStep(ctx, opts, [&](PassManager &pm) {
    GPTFuseElementwiseOptions fuse;
    fuse.layernormPrologue = prologues;
    pm.addPass(createGPTFuseElementwise(fuse));
  });
}

std::vector<exec::HostTensor> randomArguments(func::FuncOp func) {
  return test::randomArguments(
      func, 5, [&](unsigned i, std::vector<float> &values, std::mt19937 &gen) {
        std::uniform_real_distribution<float> weight(-0.3f, 0.3f);
        // Layernorm gains around one, so the normalisation matters.
        bool gain = false;
        if (auto p = func.getArgAttrOfType<StringAttr>(i, gpt::kParamAttr))
          gain =
              p.getValue().contains("ln_") && p.getValue().ends_with("weight");
        for (float &w : values)
          w = gain ? 1.0f + weight(gen) : weight(gen);
      });
}

class FuseLayerNormPrologue : public testing::TestWithParam<const char *> {};

TEST_P(FuseLayerNormPrologue, StepGivesTheUnfusedBits) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> unfused = compile(ctx, GetParam(), false);
  OwningOpRef<ModuleOp> fused = compile(ctx, GetParam(), true);
  ASSERT_TRUE(unfused && fused);
  for (StringRef name : {"gpt2_forward", "gpt2_forward_grad"}) {
    auto before = unfused->lookupSymbol<func::FuncOp>(name);
    auto after = fused->lookupSymbol<func::FuncOp>(name);
    ASSERT_TRUE(before && after) << name.str();
    // Every layernorm (ln_1, ln_2 of two blocks, ln_f) took its prologue:
    // the embedding add, the residual adds (with the projection's bias).
    EXPECT_EQ(countTopLevel(before, "gpt.layernorm"), 5) << name.str();
    EXPECT_EQ(countTopLevel(before, "gpt.fused_layernorm"), 0) << name.str();
    EXPECT_EQ(countTopLevel(after, "gpt.layernorm"), 0) << name.str();
    EXPECT_EQ(countTopLevel(after, "gpt.fused_layernorm"), 5) << name.str();
    // In the gradient function, the layernorm_grad of ln_1 and ln_2 of each
    // block takes the residual gradient's add as its epilogue; ln_f's dx is
    // read by the lm_head's backward GEMMs too, so it stays, except under
    // bf16: then its narrowing for those GEMMs makes it a fused one that
    // yields dx twice (foldCastsIntoLayerNormGradValues).
    bool grad = name == "gpt2_forward_grad";
    bool bf16 = std::string(GetParam()) == "bf16";
    EXPECT_EQ(countTopLevel(before, "gpt.layernorm_grad"),
              grad ? (bf16 ? 4 : 5) : 0);
    EXPECT_EQ(countTopLevel(after, "gpt.layernorm_grad"),
              grad && !bf16 ? 1 : 0);
    EXPECT_EQ(countTopLevel(after, "gpt.fused_layernorm_grad"),
              grad ? (bf16 ? 5 : 4) : 0);
    EXPECT_EQ(countTopLevel(after, "gpt.fused_elementwise"),
              countTopLevel(before, "gpt.fused_elementwise") - 5 - (grad ? 4 : 0))
        << name.str();
    expectSameBits(before, after, randomArguments(before));
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, FuseLayerNormPrologue,
                         testing::Values("fp32", "bf16"));

} // namespace
