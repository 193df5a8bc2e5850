//===- InitTest.cpp - Tests for parameter initialisation ------------------===//

#include "gptc/Train/Init.h"

#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Models/GPT2.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace gptc;
using namespace gptc::train;

namespace {

class InitTest : public ::testing::Test {
protected:
  void SetUp() override {
    ctx.loadDialect<gpt::GPTDialect, mlir::func::FuncDialect>();
    models::GPT2Config config{"test", 2, 2, 32, 16, 64};
    module = models::buildGPT2(ctx, config, 1, 8);
    auto func = *module->getOps<mlir::func::FuncOp>().begin();
    auto found = parameterSpecs(func);
    ASSERT_TRUE(mlir::succeeded(found));
    specs = *found;
  }
  const ParamSpec &spec(const std::string &name) const {
    for (const ParamSpec &s : specs)
      if (s.name == name)
        return s;
    throw std::out_of_range(name);
  }

  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<ParamSpec> specs;
};

TEST_F(InitTest, ReadsInitAttributes) {
  EXPECT_EQ(specs.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(spec("wte.weight").init, ParamSpec::Init::Normal);
  EXPECT_EQ(spec("wte.weight").shape, (std::vector<int64_t>{64, 32}));
  EXPECT_NEAR(spec("wte.weight").std, 0.02, 1e-8);
  EXPECT_NEAR(spec("h.1.mlp.c_proj.weight").std, 0.02 / 2, 1e-8);
  EXPECT_EQ(spec("h.0.ln_1.weight").init, ParamSpec::Init::Ones);
  EXPECT_EQ(spec("h.0.attn.c_attn.bias").init, ParamSpec::Init::Zeros);
}

TEST_F(InitTest, ConstantsAreExact) {
  auto params = initParameters(specs, 1);
  for (float x : params.at("h.0.ln_1.weight").f32)
    EXPECT_EQ(x, 1.0f);
  for (float x : params.at("ln_f.bias").f32)
    EXPECT_EQ(x, 0.0f);
}

TEST_F(InitTest, DeterministicPerSeed) {
  auto a = initParameters(specs, 7), b = initParameters(specs, 7);
  auto c = initParameters(specs, 8);
  for (const ParamSpec &s : specs)
    EXPECT_EQ(a.at(s.name).f32, b.at(s.name).f32) << s.name;
  EXPECT_NE(a.at("wte.weight").f32, c.at("wte.weight").f32);
}

TEST_F(InitTest, IndependentOfOtherParameters) {
  // Same values alone as among all the others, in any order.
  auto all = initParameters(specs, 5);
  EXPECT_EQ(initParameter(spec("h.1.attn.c_proj.weight"), 5).f32,
            all.at("h.1.attn.c_proj.weight").f32);
  // Two parameters of the same size and std still differ.
  EXPECT_NE(all.at("h.0.attn.c_proj.weight").f32,
            all.at("h.1.attn.c_proj.weight").f32);
}

TEST_F(InitTest, NormalStatistics) {
  ParamSpec big{"big", {1000, 200}, ParamSpec::Init::Normal, 0.02};
  exec::HostTensor t = initParameter(big, 3);
  double sum = 0, sq = 0, maxAbs = 0;
  for (float x : t.f32) {
    sum += x;
    sq += double(x) * x;
    maxAbs = std::max(maxAbs, double(std::fabs(x)));
  }
  double n = double(t.f32.size());
  double mean = sum / n, std = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02 * 5 / std::sqrt(n));
  EXPECT_NEAR(std, 0.02, 0.02 * 0.01);
  EXPECT_LT(maxAbs, 0.02 * 6.5); // no outliers from a broken transform
}

} // namespace
