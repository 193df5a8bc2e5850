//===- FuseElementwiseStepTest.cpp - the training step before and after ---===//
//
// gpt2-tiny's whole training step on the CPU executor, compiled through
// gpt-optimizer with and without gpt-fuse-elementwise (elementwise chains,
// multi-tensor AdamW, the loss with its gradient): the gradient function
// (loss and every gradient) on random weights and tokens, then one
// adamw_update (every updated parameter, both moments and the gradient
// norm) on random gradients and moments, with a fixed lr and step.
//
// Tolerance 1e-5, relative, in the infinity norm of each tensor (as in
// FuseAttentionStepTest). Fused chains compute in float32 per element in the
// same order as the unfused kernels, so AdamW's parameters and moments and
// the loss agree bit for bit; GELU and its gradient differ in the last bits
// (the unfused kernels evaluate them in double, the fused bodies in
// float32), which reaches the gradients as about 4e-7. The gradient norm is
// one gpt.multi_tensor_reduce, one double sum over all parameters, where
// the unfused step rounds each parameter's sum to float32 and adds those:
// they agree to 1e-6 relative, and through the clipping coefficient the
// update then differs in the last bits (AdamWIsBitExactWithoutClipping
// checks the update alone bit for bit). A fused op that reads the wrong
// operand or broadcasts wrongly is off by far more.
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

constexpr double kTolerance = 1e-5;

/// gpt2-tiny (two layers) through the optimizer stage, then optionally fused.
OwningOpRef<ModuleOp> compile(MLIRContext &ctx, bool fuse,
                              const OptimizerOptions &options = {}) {
  return compileTinyStep(ctx, options, [&](PassManager &pm) {
    if (fuse)
      pm.addPass(createGPTFuseElementwise());
  });
}

/// Random values for every argument of `func`: floats uniform in
/// [-0.3, 0.3] (second moments in [0, 0.01]), token ids, and the fixed
/// scalars lr = 3e-4, step = 3, grad_scale = 0.5.
std::vector<exec::HostTensor> randomArguments(func::FuncOp func) {
  return test::randomArguments(
      func, 11, [&](unsigned i, std::vector<float> &values, std::mt19937 &gen) {
        std::uniform_real_distribution<float> weight(-0.3f, 0.3f),
            second(0, 0.01f);
        if (auto hyper =
                func.getArgAttrOfType<StringAttr>(i, gpt::kHyperAttr)) {
          values[0] = hyper.getValue() == "lr"     ? 3e-4f
                      : hyper.getValue() == "step" ? 3.0f
                                                   : 0.5f;
          return;
        }
        bool isV = bool(func.getArgAttr(i, gpt::kAdamVAttr));
        for (float &w : values)
          w = isV ? second(gen) : weight(gen);
      });
}

void expectSameResults(func::FuncOp unfused, func::FuncOp fused) {
  auto [want, got] = runBoth(unfused, fused, randomArguments(unfused));
  ASSERT_TRUE(succeeded(want) && succeeded(got));
  ASSERT_EQ(got->size(), want->size());
  for (unsigned i = 0; i < want->size(); ++i) {
    std::string what;
    llvm::raw_string_ostream(what) << unfused.getSymName() << " result " << i
                                   << " " << unfused.getResultAttrDict(i);
    EXPECT_LE(infNormRelativeError((*got)[i], (*want)[i]), kTolerance)
        << what;
  }
}

TEST(FuseElementwise, TrainingStepMatchesTheUnfusedStep) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> unfused = compile(ctx, false);
  OwningOpRef<ModuleOp> fused = compile(ctx, true);
  ASSERT_TRUE(unfused && fused);
  for (StringRef name : {"gpt2_forward_grad", "adamw_update"}) {
    auto before = unfused->lookupSymbol<func::FuncOp>(name);
    auto after = fused->lookupSymbol<func::FuncOp>(name);
    ASSERT_TRUE(before && after) << name.str();
    // Every elementwise op went into a fused kernel.
    for (StringRef op : {"gpt.add", "gpt.mul", "gpt.sub", "gpt.div",
                         "gpt.sqrt", "gpt.gelu", "gpt.gelu_grad"})
      EXPECT_EQ(countTopLevel(after, op), 0) << name.str() << " " << op.str();
    expectSameResults(before, after);
  }
  // The loss and its gradient read the logits once.
  auto grads = fused->lookupSymbol<func::FuncOp>("gpt2_forward_grad");
  EXPECT_EQ(countTopLevel(grads, "gpt.cross_entropy_with_grad"), 1);
  EXPECT_EQ(countTopLevel(grads, "gpt.cross_entropy_grad"), 0);
  // AdamW over every parameter is one multi-tensor kernel (the weight decay
  // per tensor), the global norm one multi-tensor reduction.
  auto update = fused->lookupSymbol<func::FuncOp>("adamw_update");
  EXPECT_EQ(countTopLevel(update, "gpt.multi_tensor_elementwise"), 1);
  EXPECT_EQ(countTopLevel(update, "gpt.multi_tensor_reduce"), 1);
  EXPECT_EQ(countTopLevel(update, "gpt.reduce_sum"), 0);
}

// Without clipping the norm does not feed the update: every parameter and
// moment is bit for bit the unfused one (the per-tensor decay 1 − lr·0 is
// exactly 1 for biases and gains), and the norm's only difference is the
// order of its sum.
TEST(FuseElementwise, AdamWIsBitExactWithoutClipping) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OptimizerOptions options;
  options.clip = 0;
  OwningOpRef<ModuleOp> unfused = compile(ctx, false, options);
  OwningOpRef<ModuleOp> fused = compile(ctx, true, options);
  ASSERT_TRUE(unfused && fused);
  auto before = unfused->lookupSymbol<func::FuncOp>("adamw_update");
  auto after = fused->lookupSymbol<func::FuncOp>("adamw_update");
  ASSERT_TRUE(before && after);
  auto [want, got] = runBoth(before, after, randomArguments(before));
  ASSERT_TRUE(succeeded(want) && succeeded(got));
  ASSERT_EQ(got->size(), want->size());
  for (unsigned i = 0; i < want->size(); ++i) {
    std::string what;
    llvm::raw_string_ostream(what) << "result " << i << " "
                                   << before.getResultAttrDict(i);
    if (before.getResultAttr(i, gpt::kOutputAttr)) { // grad_norm
      EXPECT_LE(infNormRelativeError((*got)[i], (*want)[i]), 1e-6) << what;
      continue;
    }
    EXPECT_EQ((*got)[i].f32, (*want)[i].f32) << what;
  }
}

} // namespace
