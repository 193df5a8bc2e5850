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

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Executor/Bindings.h"
#include "gptc/Executor/Executor.h"
#include "gptc/Models/GPT2.h"
#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace gptc;
using namespace mlir;

namespace {

constexpr int64_t kBatch = 2, kSeq = 16;

/// gpt2-tiny (two layers) through the optimizer stage, then fused with or
/// without the layernorm prologues.
OwningOpRef<ModuleOp> compile(MLIRContext &ctx, const std::string &precision,
                              bool prologues) {
  models::GPT2Config config = *models::gpt2Preset("gpt2-tiny");
  config.nLayer = 2;
  OwningOpRef<ModuleOp> module = models::buildGPT2(ctx, config, kBatch, kSeq);
  OptimizerOptions opts;
  opts.precision = precision;
  PassManager pm(&ctx);
  buildPipeline(pm, "optimizer", opts);
  GPTFuseElementwiseOptions fuse;
  fuse.layernormPrologue = prologues;
  pm.addPass(createGPTFuseElementwise(fuse));
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

int64_t count(func::FuncOp func, StringRef opName) {
  int64_t n = 0;
  for (Operation &op : func.getBody().front())
    n += op.getName().getStringRef() == opName;
  return n;
}

std::vector<exec::HostTensor> randomArguments(func::FuncOp func) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> weight(-0.3f, 0.3f);
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
    // Layernorm gains around one, so the normalisation matters.
    bool gain = false;
    if (auto p = func.getArgAttrOfType<StringAttr>(i, gpt::kParamAttr))
      gain = p.getValue().contains("ln_") && p.getValue().ends_with("weight");
    for (float &w : args.back().f32)
      w = gain ? 1.0f + weight(gen) : weight(gen);
  }
  return args;
}

void expectSameBits(func::FuncOp unfused, func::FuncOp fused) {
  std::vector<exec::HostTensor> args = randomArguments(unfused);
  FailureOr<std::vector<exec::HostTensor>> want =
      exec::runFunction(unfused, args);
  FailureOr<std::vector<exec::HostTensor>> got = exec::runFunction(fused, args);
  ASSERT_TRUE(succeeded(want) && succeeded(got));
  ASSERT_EQ(got->size(), want->size());
  for (unsigned i = 0; i < want->size(); ++i) {
    const std::vector<float> &a = (*got)[i].f32, &b = (*want)[i].f32;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << unfused.getSymName().str() << " result " << i;
  }
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
    EXPECT_EQ(count(before, "gpt.layernorm"), 5) << name.str();
    EXPECT_EQ(count(before, "gpt.fused_layernorm"), 0) << name.str();
    EXPECT_EQ(count(after, "gpt.layernorm"), 0) << name.str();
    EXPECT_EQ(count(after, "gpt.fused_layernorm"), 5) << name.str();
    // In the gradient function, the layernorm_grad of ln_1 and ln_2 of each
    // block takes the residual gradient's add as its epilogue; ln_f's dx is
    // read by the lm_head's backward GEMMs too, so it stays.
    bool grad = name == "gpt2_forward_grad";
    EXPECT_EQ(count(before, "gpt.layernorm_grad"), grad ? 5 : 0);
    EXPECT_EQ(count(after, "gpt.layernorm_grad"), grad ? 1 : 0);
    EXPECT_EQ(count(after, "gpt.fused_layernorm_grad"), grad ? 4 : 0);
    EXPECT_EQ(count(after, "gpt.fused_elementwise"),
              count(before, "gpt.fused_elementwise") - 5 - (grad ? 4 : 0))
        << name.str();
    expectSameBits(before, after);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, FuseLayerNormPrologue,
                         testing::Values("fp32", "bf16"));

} // namespace
