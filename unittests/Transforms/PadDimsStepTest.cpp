//===- PadDimsStepTest.cpp - the training step padded and unpadded --------===//
//
// GPT-2 with every dimension awkward — n_embd 100 (n_head 4, head size 25),
// sequence 100, vocabulary 1000, batch 13 — compiled through the whole
// pipeline with gpt-pad-dims (multiple 64) and without, run on the CPU
// executor on the same random weights and tokens.
//
// Tolerance 1e-6: the loss relative, each gradient in the infinity-norm
// relative error
// max|padded - unpadded| / max|unpadded|. Padding adds exact zeros to
// sums, so the two differ only in how BLAS and the attention tiles group
// the additions (K = 128 against 100, T = 128 against 100): float32
// rounding, about 1e-7. A padded column that leaked into the softmax, a
// padded position counted by the loss or a padded key seen by a query
// moves the loss by more than 1e-3.
//
// Inside the padded step, the gradients of the padded weights (before the
// slice that returns their real part) must be exactly zero on the padding.
//
//===----------------------------------------------------------------------===//

#include "StepTestUtil.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Executor/Bindings.h"
#include "gptc/Executor/Executor.h"
#include "gptc/Pipeline/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

using namespace gptc;
using namespace gptc::test;
using namespace mlir;
using exec::HostTensor;

namespace {

constexpr int64_t kBatch = 13, kSeq = 100;
constexpr double kTolerance = 1e-6;
constexpr float kLearningRate = 1e-3f;

models::GPT2Config awkwardConfig() {
  return {"awkward", /*nLayer=*/2, /*nHead=*/4, /*nEmbd=*/100,
          /*blockSize=*/128, /*vocabSize=*/1000};
}

TrainingProgram compile(MLIRContext &ctx, int64_t padMultiple) {
  FailureOr<TrainingProgram> program = compileTrainingProgram(
      ctx, awkwardConfig(), kBatch, kSeq, OptimizerOptions(), padMultiple);
  if (failed(program))
    return {};
  return std::move(*program);
}

/// Random parameters by name (uniform in [-0.3, 0.3]) and one batch.
struct Inputs {
  std::map<std::string, HostTensor> params;
  exec::Batch batch;
};
Inputs randomInputs(func::FuncOp func) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> weight(-0.3f, 0.3f);
  std::uniform_int_distribution<int32_t> token(0, 999);
  Inputs in{{}, {HostTensor::ids({kBatch, kSeq}), HostTensor::ids({kBatch, kSeq})}};
  for (const exec::ArgumentInfo &info : exec::describeArguments(func)) {
    if (info.kind != exec::ArgumentInfo::Kind::Param)
      continue;
    HostTensor t = HostTensor::floats(info.shape);
    for (float &w : t.f32)
      w = weight(gen);
    in.params.emplace(info.name, std::move(t));
  }
  for (int32_t &t : in.batch.tokens.i32)
    t = token(gen);
  for (int32_t &t : in.batch.targets.i32)
    t = token(gen);
  return in;
}

/// {loss, gradients by parameter name}.
std::pair<float, std::map<std::string, HostTensor>>
runGrads(func::FuncOp grads, const Inputs &in) {
  std::vector<exec::ArgumentInfo> info = exec::describeArguments(grads);
  FailureOr<std::vector<HostTensor>> out = exec::runFunction(
      grads, exec::bindArguments(info, in.params, in.batch));
  EXPECT_TRUE(succeeded(out));
  std::pair<float, std::map<std::string, HostTensor>> result;
  for (unsigned i = 0; i < grads.getNumResults(); ++i) {
    if (auto name = grads.getResultAttrOfType<StringAttr>(i, gpt::kGradAttr))
      result.second[name.str()] = (*out)[i];
    else
      result.first = (*out)[i].f32[0];
  }
  return result;
}

/// Three AdamW steps on the same batch; returns the parameters.
std::map<std::string, HostTensor> train(const TrainingProgram &program,
                                        Inputs in) {
  std::map<std::string, HostTensor> m, v;
  for (const auto &[name, p] : in.params) {
    m[name] = HostTensor::floats(p.shape);
    v[name] = HostTensor::floats(p.shape);
  }
  func::FuncOp update = program.update;
  for (int step = 1; step <= 3; ++step) {
    std::map<std::string, HostTensor> grads = runGrads(program.grads, in).second;
    std::map<std::string, HostTensor> hyper = {
        {"lr", HostTensor::floats({}, kLearningRate)},
        {"step", HostTensor::floats({}, float(step))},
        {"grad_scale", HostTensor::floats({}, 1.0f)}};
    std::vector<HostTensor> args;
    for (unsigned i = 0; i < update.getNumArguments(); ++i) {
      auto attr = [&](StringRef key) {
        auto a = update.getArgAttrOfType<StringAttr>(i, key);
        return a ? a.str() : std::string();
      };
      if (std::string n = attr(gpt::kParamAttr); !n.empty())
        args.push_back(in.params.at(n));
      else if (std::string n = attr(gpt::kGradAttr); !n.empty())
        args.push_back(grads.at(n));
      else if (std::string n = attr(gpt::kAdamMAttr); !n.empty())
        args.push_back(m.at(n));
      else if (std::string n = attr(gpt::kAdamVAttr); !n.empty())
        args.push_back(v.at(n));
      else
        args.push_back(hyper.at(attr(gpt::kHyperAttr)));
    }
    FailureOr<std::vector<HostTensor>> out = exec::runFunction(update, args);
    EXPECT_TRUE(succeeded(out));
    for (unsigned i = 0; i < update.getNumResults(); ++i) {
      auto attr = [&](StringRef key) {
        auto a = update.getResultAttrOfType<StringAttr>(i, key);
        return a ? a.str() : std::string();
      };
      if (std::string n = attr(gpt::kParamAttr); !n.empty())
        in.params[n] = (*out)[i];
      else if (std::string n = attr(gpt::kAdamMAttr); !n.empty())
        m[n] = (*out)[i];
      else if (std::string n = attr(gpt::kAdamVAttr); !n.empty())
        v[n] = (*out)[i];
    }
  }
  return in.params;
}

class PadDims : public ::testing::Test {
protected:
  void SetUp() override {
    ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
    padded = compile(ctx, 64);
    unpadded = compile(ctx, 0);
    ASSERT_TRUE(padded.grads && unpadded.grads);
    inputs = randomInputs(unpadded.forward);
  }
  MLIRContext ctx;
  TrainingProgram padded, unpadded;
  Inputs inputs;
};

TEST_F(PadDims, TheStepIsPadded) {
  // Unpadded, the one pad is the position table's gradient: kSeq rows of
  // dy into the block size's 128 (GPTOps.td: embedding_grad over iota).
  int64_t pads = 0;
  unpadded.grads.walk([&](gpt::PadOp pad) {
    ++pads;
    EXPECT_EQ(pad.getX().getType(),
              RankedTensorType::get({kSeq, 100}, Float32Type::get(&ctx)));
    EXPECT_EQ(cast<RankedTensorType>(pad.getResult().getType()).getShape(),
              ArrayRef<int64_t>({128, 100}));
  });
  EXPECT_EQ(pads, 1);
  EXPECT_GT(countNested(padded.grads, "gpt.pad"), 0);
  // The loss (gpt.cross_entropy, or the fused loss-and-gradient kernel
  // gpt-fuse-elementwise makes of it) reads padded logits and targets.
  int64_t losses = 0;
  padded.grads.walk([&](Operation *op) {
    auto numClasses = op->getAttrOfType<IntegerAttr>("num_classes");
    auto ignore = op->getAttrOfType<IntegerAttr>("ignore_index");
    if (!numClasses)
      return;
    ++losses;
    EXPECT_EQ(numClasses.getInt(), 1000);
    EXPECT_TRUE(ignore && ignore.getInt() == -1);
    EXPECT_EQ(cast<RankedTensorType>(op->getOperand(0).getType()).getShape(),
              ArrayRef<int64_t>({kBatch, 128, 1024}));
  });
  EXPECT_GE(losses, 1);
  // Arguments keep their real shapes: the same bindings run both.
  EXPECT_EQ(padded.grads.getFunctionType(), unpadded.grads.getFunctionType());
  EXPECT_EQ(padded.update.getFunctionType(),
            unpadded.update.getFunctionType());
}

TEST_F(PadDims, LossAndGradientsMatchTheUnpaddedStep) {
  auto [wantLoss, want] = runGrads(unpadded.grads, inputs);
  auto [gotLoss, got] = runGrads(padded.grads, inputs);
  EXPECT_NEAR(gotLoss, wantLoss, kTolerance * std::abs(wantLoss));
  ASSERT_EQ(got.size(), want.size());
  for (const auto &[name, w] : want)
    EXPECT_LE(infNormRelativeError(got.at(name), w, /*absoluteIfZero=*/false),
              kTolerance)
        << "gradient of " << name;
}

/// AdamW divides each gradient element by its own running RMS, so an
/// element whose gradient is as small as the GEMMs' float32 rounding noise
/// steps by up to lr either way, whatever the padding. The parameters must
/// agree to 5% of the farthest any element can move in three steps (3·lr).
TEST_F(PadDims, AdamWStepsMatchTheUnpaddedOnes) {
  std::map<std::string, HostTensor> want = train(unpadded, inputs);
  std::map<std::string, HostTensor> got = train(padded, inputs);
  for (const auto &[name, w] : want) {
    double maxDiff = 0.0;
    for (size_t i = 0; i < w.f32.size(); ++i)
      maxDiff = std::max(maxDiff, std::abs(double(got.at(name).f32[i]) -
                                           double(w.f32[i])));
    EXPECT_LE(maxDiff, 0.05 * 3 * kLearningRate) << "parameter " << name;
  }
}

/// The padded weights' gradients are exactly zero on the padding: returned
/// whole (before their slice), every element outside the real corner is 0.
TEST_F(PadDims, PaddedGradientsAreExactlyZero) {
  func::FuncOp grads = padded.grads;
  auto ret = cast<func::ReturnOp>(grads.getBody().front().getTerminator());
  std::vector<std::pair<std::string, Value>> whole;
  // A returned gradient is a slice, or (the tied wte: embedding + lm_head)
  // a sum (gpt.add, or its fused kernel) with a slice.
  auto sliceOf = [](Value v) {
    if (auto slice = v.getDefiningOp<gpt::SliceOp>())
      return slice;
    if (Operation *sum = v.getDefiningOp())
      for (Value operand : sum->getOperands())
        if (auto slice = operand.getDefiningOp<gpt::SliceOp>();
            slice && slice.getType() == v.getType())
          return slice;
    return gpt::SliceOp();
  };
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (auto slice = sliceOf(v))
      if (auto name = grads.getResultAttrOfType<StringAttr>(i, gpt::kGradAttr))
        whole.emplace_back(name.str(), slice.getX());
  // wte (vocabulary and n_embd) and the four projections of each block.
  EXPECT_EQ(whole.size(), 1u + 4u * 2u);
  SmallVector<Value> results(ret.getOperands());
  for (auto &entry : whole)
    results.push_back(entry.second);
  ret->setOperands(results);
  SmallVector<Type> types;
  for (Value r : results)
    types.push_back(r.getType());
  grads.setFunctionType(FunctionType::get(
      &ctx, grads.getFunctionType().getInputs(), types));

  std::vector<exec::ArgumentInfo> info = exec::describeArguments(grads);
  FailureOr<std::vector<HostTensor>> out = exec::runFunction(
      grads, exec::bindArguments(info, inputs.params, inputs.batch));
  ASSERT_TRUE(succeeded(out));
  size_t first = out->size() - whole.size();
  for (size_t w = 0; w < whole.size(); ++w) {
    const HostTensor &g = (*out)[first + w];
    const std::vector<int64_t> &real = inputs.params.at(whole[w].first).shape;
    ASSERT_EQ(g.shape.size(), 2u);
    int64_t padding = 0, nonzero = 0;
    for (int64_t r = 0; r < g.shape[0]; ++r)
      for (int64_t c = 0; c < g.shape[1]; ++c)
        if (r >= real[0] || c >= real[1]) {
          ++padding;
          nonzero += g.f32[r * g.shape[1] + c] != 0.0f;
        }
    EXPECT_GT(padding, 0) << whole[w].first;
    EXPECT_EQ(nonzero, 0) << "padded gradient entries of " << whole[w].first;
  }
}

} // namespace
