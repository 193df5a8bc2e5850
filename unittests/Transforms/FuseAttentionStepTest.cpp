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

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Executor/Bindings.h"
#include "gptc/Executor/Executor.h"
#include "gptc/Models/GPT2.h"
#include "gptc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace gptc;
using namespace mlir;

namespace {

constexpr int64_t kBatch = 2, kSeq = 70;
constexpr double kTolerance = 1e-5;

/// The gradient function of gpt2-tiny, with or without the fusion.
func::FuncOp compileStep(MLIRContext &ctx, OwningOpRef<ModuleOp> &module,
                         bool fuse) {
  module =
      models::buildGPT2(ctx, *models::gpt2Preset("gpt2-tiny"), kBatch, kSeq);
  PassManager pm(&ctx);
  if (fuse)
    pm.addPass(createGPTFuseAttention());
  pm.addPass(createGPTAutodiff());
  if (failed(pm.run(*module)))
    return nullptr;
  return module->lookupSymbol<func::FuncOp>("gpt2_forward_grad");
}

int64_t count(func::FuncOp func, StringRef opName) {
  int64_t n = 0;
  func.walk(
      [&](Operation *op) { n += op->getName().getStringRef() == opName; });
  return n;
}

/// Weights uniform in [-0.3, 0.3] (large enough that attention is far from
/// uniform) and random tokens, bound to the function's arguments.
std::vector<exec::HostTensor> randomArguments(func::FuncOp func) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> weight(-0.3f, 0.3f);
  std::uniform_int_distribution<int32_t> token(0, 50256);
  std::vector<exec::HostTensor> args;
  for (const exec::ArgumentInfo &info : exec::describeArguments(func)) {
    if (info.kind == exec::ArgumentInfo::Kind::Param) {
      args.push_back(exec::HostTensor::floats(info.shape));
      for (float &w : args.back().f32)
        w = weight(gen);
    } else {
      args.push_back(exec::HostTensor::ids(info.shape));
      for (int32_t &t : args.back().i32)
        t = token(gen);
    }
  }
  return args;
}

double infNormRelativeError(const exec::HostTensor &got,
                            const exec::HostTensor &want) {
  double maxDiff = 0.0, maxWant = 0.0;
  for (size_t i = 0; i < want.f32.size(); ++i) {
    maxDiff = std::max(maxDiff, std::abs(double(got.f32[i]) - want.f32[i]));
    maxWant = std::max(maxWant, std::abs(double(want.f32[i])));
  }
  return maxDiff / maxWant;
}

TEST(FuseAttention, TrainingStepMatchesTheUnfusedStep) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> unfusedModule, fusedModule;
  func::FuncOp unfused = compileStep(ctx, unfusedModule, false);
  func::FuncOp fused = compileStep(ctx, fusedModule, true);
  ASSERT_TRUE(unfused && fused);
  // The fused step really is fused: one forward and one backward op per
  // block, no softmax.
  EXPECT_EQ(count(fused, "gpt.flash_attention"), 4);
  EXPECT_EQ(count(fused, "gpt.flash_attention_grad"), 4);
  EXPECT_EQ(count(fused, "gpt.softmax"), 0);
  EXPECT_EQ(count(unfused, "gpt.softmax"), 4);

  std::vector<exec::HostTensor> args = randomArguments(unfused);
  FailureOr<std::vector<exec::HostTensor>> want =
      exec::runFunction(unfused, args);
  FailureOr<std::vector<exec::HostTensor>> got = exec::runFunction(fused, args);
  ASSERT_TRUE(succeeded(want) && succeeded(got));
  ASSERT_EQ(got->size(), want->size());

  float loss = (*want)[0].f32[0];
  EXPECT_NEAR((*got)[0].f32[0], loss, kTolerance * std::abs(loss));
  for (unsigned i = 1; i < unfused.getNumResults(); ++i) {
    auto name = unfused.getResultAttrOfType<StringAttr>(i, gpt::kGradAttr);
    ASSERT_TRUE(name);
    EXPECT_LE(infNormRelativeError((*got)[i], (*want)[i]), kTolerance)
        << "gradient of " << name.str();
  }
}

} // namespace
