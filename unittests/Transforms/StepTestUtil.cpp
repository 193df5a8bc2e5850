//===- StepTestUtil.cpp - shared scaffolding of the step tests ------------===//
//
// gpt2-tiny through two pipelines, random arguments, both functions run on
// the CPU executor, and the comparison metrics (StepTestUtil.h).
//
//===----------------------------------------------------------------------===//

#include "StepTestUtil.h"

#include "gptc/Executor/Executor.h"
#include "gptc/Models/GPT2.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

using namespace mlir;

namespace gptc::test {

OwningOpRef<ModuleOp> buildTiny(MLIRContext &ctx, int64_t batch, int64_t seq,
                                int64_t nLayer) {
  models::GPT2Config config = *models::gpt2Preset("gpt2-tiny");
  if (nLayer)
    config.nLayer = nLayer;
  return models::buildGPT2(ctx, config, batch, seq);
}

OwningOpRef<ModuleOp>
compileTinyStep(MLIRContext &ctx, const OptimizerOptions &options,
                llvm::function_ref<void(PassManager &)> addPasses,
                bool packAttention) {
  OwningOpRef<ModuleOp> module = buildTiny(ctx, 2, 16, /*nLayer=*/2);
  PassManager pm(&ctx);
  buildPipeline(pm, "optimizer", options, kDefaultPadMultiple, packAttention);
  addPasses(pm);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

OwningOpRef<ModuleOp> compileFusedTinyStep(
    MLIRContext &ctx, const std::string &precision,
    llvm::function_ref<void(GPTFuseElementwiseOptions &)> configure,
    bool packAttention) {
  OptimizerOptions opts;
  opts.precision = precision;
  return compileTinyStep(
      ctx, opts,
      [&](PassManager &pm) {
        pm.addPass(createGPTFuseMatmulEpilogue());
        GPTFuseElementwiseOptions fuse;
        configure(fuse);
        pm.addPass(createGPTFuseElementwise(fuse));
      },
      packAttention);
}

int64_t countTopLevel(func::FuncOp func, StringRef opName) {
  int64_t n = 0;
  for (Operation &op : func.getBody().front())
    n += op.getName().getStringRef() == opName;
  return n;
}

int64_t countNested(func::FuncOp func, StringRef opName) {
  int64_t n = 0;
  func.walk(
      [&](Operation *op) { n += op->getName().getStringRef() == opName; });
  return n;
}

double infNormRelativeError(const exec::HostTensor &got,
                            const exec::HostTensor &want, bool absoluteIfZero) {
  double maxDiff = 0.0, maxWant = 0.0;
  for (size_t i = 0; i < want.f32.size(); ++i) {
    maxDiff = std::max(maxDiff, std::abs(double(got.f32[i]) - want.f32[i]));
    maxWant = std::max(maxWant, std::abs(double(want.f32[i])));
  }
  return absoluteIfZero && maxWant == 0.0 ? maxDiff : maxDiff / maxWant;
}

void uniformWeights(unsigned, std::vector<float> &values, std::mt19937 &gen) {
  std::uniform_real_distribution<float> weight(-0.3f, 0.3f);
  for (float &w : values)
    w = weight(gen);
}

std::vector<exec::HostTensor> randomArguments(func::FuncOp func, unsigned seed,
                                              FloatFiller fill) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> token(0, 50256);
  std::vector<exec::HostTensor> args;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    if (type.getElementType().isInteger(32)) {
      args.push_back(exec::HostTensor::ids(shape));
      for (int32_t &t : args.back().i32)
        t = token(gen);
      continue;
    }
    args.push_back(exec::HostTensor::floats(shape));
    fill(i, args.back().f32, gen);
  }
  return args;
}

BothResults runBoth(func::FuncOp unfused, func::FuncOp fused,
                    const std::vector<exec::HostTensor> &args) {
  return {exec::runFunction(unfused, args), exec::runFunction(fused, args)};
}

void expectSameBits(func::FuncOp unfused, func::FuncOp fused,
                    const std::vector<exec::HostTensor> &args) {
  auto [want, got] = runBoth(unfused, fused, args);
  ASSERT_TRUE(succeeded(want) && succeeded(got));
  ASSERT_EQ(got->size(), want->size());
  for (unsigned i = 0; i < want->size(); ++i) {
    const std::vector<float> &a = (*got)[i].f32, &b = (*want)[i].f32;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << unfused.getSymName().str() << " result " << i;
  }
}

void expectSameStepBits(ModuleOp before, ModuleOp after, unsigned seed,
                        StepCheck check, FloatFiller fill) {
  for (StringRef name : {"gpt2_forward", "gpt2_forward_grad"}) {
    auto a = before.lookupSymbol<func::FuncOp>(name);
    auto b = after.lookupSymbol<func::FuncOp>(name);
    ASSERT_TRUE(a && b) << name.str();
    check(a, b, name == "gpt2_forward_grad");
    expectSameBits(a, b, randomArguments(a, seed, fill));
  }
}

} // namespace gptc::test
