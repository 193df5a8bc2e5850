//===- CpuReplayTest.cpp - a Program on the CPU backend vs the executor ---===//
//
// The check: the kernel-level Program of a small GPT-2, each launch
// replaced by its CPU counterpart (CpuBackend.cpp) and driven by the
// training program's engine (ProgramEngine.h), reproduces the CPU
// executor's training step (ExecutorEngine.h) on the same random weights,
// moments and tokens: the forward loss, the gradient function's loss and
// every gradient, then over three accumulated micro-batches (summed on the
// device by grads_accumulate) the loss, the gradient norm and every updated
// parameter and AdamW moment.
// DeviceAccumulation checks grads_accumulate alone: the Grad buffers end up
// with exactly (g1 + g2) + g3 in float32.
//
// Tolerance: none, the bits must match. Both sides run the same CPU kernels
// on the same values in the same order and round every result to its dtype
// the same way; only where the values live differs (one planned arena, with
// buffers reused and views in place of reshapes, against one host tensor
// per value). So any difference is a wrong schedule, a wrong memory plan
// (a buffer overwritten while still live), a lost rounding or a misread
// attribute, not float noise.
//
// Cases: fp32, tf32 (the same IR; only a GPU's GEMMs round), bf16 and fp16
// (with a loss scale), each at T = 16 and at T = 20 (padded to 64 by
// gpt-pad-dims), vocabulary 96 (padded to 128).
//
//===----------------------------------------------------------------------===//

#include "gptc/Conversion/LowerToKernels.h"
#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Runtime/Backend.h"
#include "gptc/Train/ExecutorEngine.h"
#include "gptc/Train/ProgramEngine.h"
#include "gptc/Train/Random.h"
#include "gptc/Train/StepFunction.h"
#include "gptc/Train/Trainer.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <cstring>
#include <tuple>

using namespace gptc;
using namespace gptc::train;
using exec::HostTensor;

namespace {

constexpr int64_t kBatch = 2;
const models::GPT2Config kModel = {"gpt2-tiny",     /*nLayer=*/2,
                                   /*nHead=*/4,
                                   /*nEmbd=*/64,    /*blockSize=*/32,
                                   /*vocabSize=*/96};

/// gpt2-tiny's training step at `precision` and `seq` in `step`, and the
/// Program gptc compile builds from that very module, planned, in
/// `program`. Fails the calling test (ASSERT) if either does not compile.
void compileTiny(mlir::MLIRContext &ctx, const std::string &precision,
                 int64_t seq, mlir::FailureOr<TrainingProgram> &step,
                 rt::Program &program, bool accumulateInPlace = true) {
  ctx.loadDialect<gpt::GPTDialect, mlir::func::FuncDialect>();
  OptimizerOptions opts;
  opts.precision = precision;
  opts.accumulateInPlace = accumulateInPlace;
  step = compileTrainingProgram(ctx, kModel, kBatch, seq, opts);
  ASSERT_TRUE(succeeded(step));
  mlir::FailureOr<rt::Program> lowered =
      lowerToKernels(*step, kModel, kBatch, seq, opts, kDefaultPadMultiple);
  ASSERT_TRUE(succeeded(lowered));
  program = std::move(*lowered);
  rt::planMemory(program);
}

/// How many elements differ in bits, and the largest difference.
struct Mismatch {
  int64_t count = 0;
  double worst = 0.0;
};
Mismatch compare(const std::vector<float> &a, const std::vector<float> &b) {
  Mismatch m;
  if (a.size() != b.size())
    return {int64_t(std::max(a.size(), b.size())), INFINITY};
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      ++m.count;
      m.worst = std::max(m.worst, std::fabs(double(a[i]) - double(b[i])));
    }
  return m;
}

void expectSame(const TensorMap &a, const TensorMap &b, const char *what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto &[name, t] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << what << " " << name;
    Mismatch m = compare(t.f32, it->second.f32);
    EXPECT_EQ(m.count, 0) << what << " " << name << ": " << m.count << " of "
                          << t.f32.size() << " elements differ, by up to "
                          << m.worst;
  }
}

/// One micro-batch through `e`, and its loss.
double lossOf(Engine &e, const exec::Batch &batch, float lossScale,
              bool first) {
  e.accumulate(batch, lossScale, first);
  std::vector<double> losses = e.takeLosses();
  EXPECT_EQ(losses.size(), 1u);
  return losses.empty() ? 0.0 : losses[0];
}

exec::Batch randomBatch(Rng &rng, int64_t seq) {
  exec::Batch b{HostTensor::ids({kBatch, seq}), HostTensor::ids({kBatch, seq})};
  for (int32_t &id : b.tokens.i32)
    id = int32_t(rng.below(uint64_t(kModel.vocabSize)));
  for (int32_t &id : b.targets.i32)
    id = int32_t(rng.below(uint64_t(kModel.vocabSize)));
  return b;
}

class CpuReplayTest
    : public ::testing::TestWithParam<std::tuple<const char *, int64_t>> {};

TEST_P(CpuReplayTest, MatchesTheExecutorBitForBit) {
  auto [precision, seq] = GetParam();
  mlir::MLIRContext ctx;
  mlir::FailureOr<TrainingProgram> step = mlir::failure();
  rt::Program program;
  ASSERT_NO_FATAL_FAILURE(compileTiny(ctx, precision, seq, step, program));

  mlir::FailureOr<std::unique_ptr<Engine>> made = makeExecutorEngine(*step);
  ASSERT_TRUE(succeeded(made));
  std::unique_ptr<Engine> executor = std::move(*made);
  std::unique_ptr<rt::Backend> cpu = rt::makeCpuBackend();
  std::unique_ptr<Engine> replay = makeProgramEngine(program, *cpu);
  ASSERT_EQ(executor->lossScaling(), replay->lossScaling());
  ASSERT_EQ(executor->lossScaling(), std::string(precision) == "fp16");

  // Random weights, and moments as after a few steps (v > 0).
  Rng rng(7);
  TensorMap params = initParameters(replay->parameters(), 1234), adamM, adamV;
  for (const ParamSpec &spec : replay->parameters()) {
    HostTensor m = HostTensor::floats(spec.shape);
    HostTensor v = HostTensor::floats(spec.shape);
    for (float &x : m.f32)
      x = float(rng.normal() * 1e-2);
    for (float &x : v.f32)
      x = float(rng.uniform() * 1e-4);
    adamM.emplace(spec.name, std::move(m));
    adamV.emplace(spec.name, std::move(v));
  }
  executor->setWeights(params, adamM, adamV);
  replay->setWeights(params, adamM, adamV);
  exec::Batch first = randomBatch(rng, seq), second = randomBatch(rng, seq),
              third = randomBatch(rng, seq);
  float lossScale = executor->lossScaling() ? 1024.0f : 1.0f;

  // forward
  EXPECT_EQ(executor->loss(first), replay->loss(first));

  // grads on one micro-batch: the gradients the update will read.
  mlir::FailureOr<StepFunction> grads = StepFunction::get(step->grads);
  ASSERT_TRUE(succeeded(grads));
  HostTensor scale = HostTensor::floats({}, lossScale);
  TensorMap casts; // the weights' bf16 copies (gpt-weight-copies)
  mlir::FailureOr<std::vector<HostTensor>> expected =
      grads->run([&](const Slot &s) -> const HostTensor & {
        if (s.role == Slot::Role::Param)
          return params.at(s.name);
        if (s.role == Slot::Role::Hyper)
          return scale;
        if (s.role == Slot::Role::ParamCopy)
          return casts
              .try_emplace(s.name, exec::paramCopy(params.at(s.name), s.shape,
                                                   s.storage))
              .first->second;
        return s.name == "tokens" ? first.tokens : first.targets;
      });
  ASSERT_TRUE(succeeded(expected));
  double replayLoss = lossOf(*replay, first, lossScale, /*first=*/true);
  TensorMap expectedGrads, replayGrads;
  for (size_t i = 0; i < grads->results().size(); ++i) {
    const Slot &slot = grads->results()[i];
    if (slot.role == Slot::Role::Output && slot.name == "loss")
      EXPECT_EQ(double((*expected)[i].f32[0]), replayLoss);
    if (slot.role != Slot::Role::Grad)
      continue;
    HostTensor g = HostTensor::floats(slot.shape);
    cpu->download(program.gradient(slot.name), g.data());
    replayGrads.emplace(slot.name, std::move(g));
    expectedGrads.emplace(slot.name, std::move((*expected)[i]));
  }
  EXPECT_EQ(replayGrads.size(), replay->parameters().size());
  expectSame(expectedGrads, replayGrads, "gradient");

  // A step over three micro-batches (the replay sums on the device).
  // The replay's three losses come together (takeLosses), in order.
  executor->accumulate(first, lossScale, true);
  executor->accumulate(second, lossScale, false);
  executor->accumulate(third, lossScale, false);
  std::vector<double> executorLosses = executor->takeLosses();
  ASSERT_EQ(executorLosses.size(), 3u);
  EXPECT_EQ(executorLosses[0], replayLoss);
  replay->accumulate(second, lossScale, false);
  replay->accumulate(third, lossScale, false);
  std::vector<double> replayLosses = replay->takeLosses();
  ASSERT_EQ(replayLosses.size(), 2u);
  EXPECT_EQ(executorLosses[1], replayLosses[0]);
  EXPECT_EQ(executorLosses[2], replayLosses[1]);
  EXPECT_NE(replayLosses[0], replayLosses[1]); // three batches, not one
  EXPECT_TRUE(executor->takeLosses().empty());
  UpdateHypers hypers{/*lr=*/1e-3f, /*step=*/3.0f,
                      /*gradScale=*/1.0f / (3.0f * lossScale)};
  double norm = executor->prepareUpdate(hypers);
  EXPECT_TRUE(std::isfinite(norm));
  EXPECT_EQ(norm, replay->prepareUpdate(hypers));
  executor->applyUpdate();
  replay->applyUpdate();
  TensorMap p1, m1, v1, p2, m2, v2;
  executor->getWeights(p1, m1, v1);
  replay->getWeights(p2, m2, v2);
  expectSame(p1, p2, "parameter");
  expectSame(m1, m2, "adam_m");
  expectSame(v1, v2, "adam_v");
  // The update moved the weights: the comparison is not of two no-ops.
  EXPECT_GT(compare(p1.at("wte.weight").f32, params.at("wte.weight").f32).count,
            0);

  // Under autocast the update wrote the weights' bf16 (fp16) copies: each
  // is the new weight rounded, its padding (the lm_head's rows past the
  // vocabulary) still zero.
  int copies = 0;
  for (size_t id = 0; id < program.buffers.size(); ++id) {
    const rt::Buffer &b = program.buffers[id];
    if (b.role != rt::Role::ParamCopy || b.viewOf >= 0)
      continue;
    ++copies;
    std::vector<uint8_t> got(size_t(b.bytes()));
    cpu->download(int(id), got.data());
    const HostTensor &w = p1.at(b.binding);
    EXPECT_EQ(got, rt::paramCopyBytes(b, w.data(), w.shape)) << b.binding;
  }
  EXPECT_EQ(copies > 0, std::string(precision) == "bf16" ||
                            std::string(precision) == "fp16");

  // And forward and a gradient again, on the updated weights (and copies).
  EXPECT_EQ(executor->loss(second), replay->loss(second));
  EXPECT_EQ(lossOf(*executor, third, lossScale, true),
            lossOf(*replay, third, lossScale, true));
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, CpuReplayTest,
    ::testing::Combine(::testing::Values("fp32", "tf32", "bf16", "fp16"),
                       ::testing::Values(int64_t(16), int64_t(20))),
    [](const auto &info) {
      return std::string(std::get<0>(info.param)) + "_T" +
             std::to_string(std::get<1>(info.param));
    });

/// A program whose weight copy the engine cannot make is refused when it
/// loads, in one line that names the buffer: one that copies no parameter,
/// one of 32-bit floats, one smaller than its parameter.
TEST(CpuReplayCopies, UnmakeableCopiesAreRefusedAtLoad) {
  mlir::MLIRContext ctx;
  mlir::FailureOr<TrainingProgram> step = mlir::failure();
  rt::Program program;
  ASSERT_NO_FATAL_FAILURE(compileTiny(ctx, "bf16", 16, step, program));
  const int copy = program.find(rt::Role::ParamCopy, "wte.weight");
  ASSERT_GE(copy, 0);
  auto refusal = [&](const std::function<void(rt::Buffer &)> &damage) {
    rt::Program bad = program;
    damage(bad.buffers[size_t(copy)]);
    std::unique_ptr<rt::Backend> cpu = rt::makeCpuBackend();
    try {
      makeProgramEngine(bad, *cpu);
    } catch (const TrainError &e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  EXPECT_EQ(refusal([](rt::Buffer &b) { b.binding = "nope"; }),
            "cannot train the program of gpt2-tiny: its param_copy buffer "
            "'nope' copies no parameter of the program");
  EXPECT_EQ(refusal([](rt::Buffer &b) { b.dtype = rt::DType::F32; }),
            "cannot train the program of gpt2-tiny: its param_copy buffer "
            "'wte.weight' is f32, expected bf16 or f16");
  EXPECT_EQ(refusal([](rt::Buffer &b) { b.shape[0] = 95; }),
            "cannot train the program of gpt2-tiny: its param_copy buffer "
            "'wte.weight' has shape 95x64, which cannot hold the "
            "parameter's 96x64");
}

/// The program's engine on `backend`, its weights drawn from `seed` and
/// its moments zero.
std::unique_ptr<Engine> engineWithWeights(const rt::Program &program,
                                          rt::Backend &backend, uint64_t seed) {
  std::unique_ptr<Engine> engine = makeProgramEngine(program, backend);
  TensorMap params = initParameters(engine->parameters(), seed), adamM, adamV;
  for (const ParamSpec &spec : engine->parameters()) {
    adamM.emplace(spec.name, HostTensor::floats(spec.shape));
    adamV.emplace(spec.name, HostTensor::floats(spec.shape));
  }
  engine->setWeights(params, adamM, adamV);
  return engine;
}

/// A program that cannot accumulate trains with one micro-batch and
/// refuses a second in one line: one without grads_accumulate, one whose
/// grads_accumulate does not read a gradient (so cannot add to it), one
/// that returns other buffers than grads.
TEST(CpuReplayAccumulationRefusal, AProgramThatCannotAccumulateSaysSo) {
  const int64_t seq = 16;
  mlir::MLIRContext ctx;
  mlir::FailureOr<TrainingProgram> step = mlir::failure();
  rt::Program program;
  ASSERT_NO_FATAL_FAILURE(compileTiny(ctx, "fp32", seq, step, program));
  Rng rng(5);
  const exec::Batch batch = randomBatch(rng, seq);
  auto refusal = [&](const std::function<void(rt::Program &)> &damage) {
    rt::Program bad = program;
    damage(bad);
    std::unique_ptr<rt::Backend> cpu = rt::makeCpuBackend();
    std::unique_ptr<Engine> engine = engineWithWeights(bad, *cpu, 3);
    engine->accumulate(batch, 1.0f, /*first=*/true); // one is fine
    try {
      engine->accumulate(batch, 1.0f, /*first=*/false);
    } catch (const TrainError &e) {
      return std::string(e.what());
    }
    return std::string("(accumulated)");
  };
  auto accumulating = [](rt::Program &p) -> rt::Function & {
    for (rt::Function &f : p.functions)
      if (f.name == "grads_accumulate")
        return f;
    throw std::runtime_error("no grads_accumulate");
  };
  EXPECT_EQ(refusal([](rt::Program &) {}), "(accumulated)");
  EXPECT_EQ(refusal([&](rt::Program &p) { accumulating(p).name = "other"; }),
            "cannot train the program of gpt2-tiny: it has no "
            "grads_accumulate function, so it cannot accumulate gradients "
            "(--grad-accum)");
  EXPECT_EQ(refusal([&](rt::Program &p) {
              std::vector<int> &args = accumulating(p).arguments;
              args.erase(std::find(args.begin(), args.end(),
                                   p.gradient("wte.weight")));
            }),
            "cannot train the program of gpt2-tiny: its grads_accumulate "
            "function does not add to the gradient of 'wte.weight'");
  EXPECT_EQ(refusal([&](rt::Program &p) {
              accumulating(p).results.pop_back();
            }),
            "cannot train the program of gpt2-tiny: its grads_accumulate "
            "function does not return what grads returns");
}

/// grads_accumulate, driven by the engine: after micro-batch k the Grad
/// buffers hold the float32 sum of g1..gk in order, to the bit, where gk is
/// what grads alone gives on micro-batch k; and its loss is grads' loss.
/// The same whether the weight gradients' GEMMs and the embedding gradients
/// add to the sums themselves (accumulate, the default) or write temps
/// that the add adds.
class CpuReplayAccumulation : public testing::TestWithParam<bool> {};

TEST_P(CpuReplayAccumulation, DeviceAccumulationIsTheHostSum) {
  const int64_t seq = 16;
  mlir::MLIRContext ctx;
  mlir::FailureOr<TrainingProgram> step = mlir::failure();
  rt::Program program;
  ASSERT_NO_FATAL_FAILURE(
      compileTiny(ctx, "fp32", seq, step, program, GetParam()));
  // In place: each block's 4 weight gradients (their GEMMs) and the
  // embedding gradients.
  int accumulating = 0, embeddings = 0;
  for (const rt::Launch &l : program.function("grads_accumulate")->launches) {
    accumulating += l.ints.count("accumulate");
    embeddings += l.kernel == "embedding_grad";
  }
  EXPECT_GE(embeddings, 1);
  EXPECT_EQ(accumulating, GetParam() ? 4 * kModel.nLayer + embeddings : 0);
  std::unique_ptr<rt::Backend> cpu = rt::makeCpuBackend();
  std::unique_ptr<Engine> engine = engineWithWeights(program, *cpu, 99);
  Rng rng(11);
  std::vector<exec::Batch> batches;
  for (int k = 0; k < 3; ++k)
    batches.push_back(randomBatch(rng, seq));

  auto read = [&](rt::Role role) {
    TensorMap out;
    for (const ParamSpec &spec : engine->parameters()) {
      HostTensor t = HostTensor::floats(spec.shape);
      cpu->download(role == rt::Role::Grad ? program.gradient(spec.name)
                                           : program.find(role, spec.name),
                    t.data());
      out.emplace(spec.name, std::move(t));
    }
    return out;
  };
  // Each micro-batch's gradients on their own.
  std::vector<TensorMap> alone;
  std::vector<double> losses;
  for (const exec::Batch &b : batches) {
    losses.push_back(lossOf(*engine, b, 1.0f, /*first=*/true));
    alone.push_back(read(rt::Role::Grad));
  }
  TensorMap want = alone[0];
  engine->accumulate(batches[0], 1.0f, /*first=*/true);
  EXPECT_EQ(engine->takeLosses(), std::vector<double>{losses[0]});
  for (size_t k = 1; k < batches.size(); ++k) {
    EXPECT_EQ(lossOf(*engine, batches[k], 1.0f, /*first=*/false), losses[k]);
    for (auto &[name, sum] : want)
      for (size_t i = 0; i < sum.f32.size(); ++i)
        sum.f32[i] += alone[k].at(name).f32[i];
    expectSame(want, read(rt::Role::Grad), "accumulated gradient");
  }
  // Not a sum of zeros.
  EXPECT_GT(compare(want.at("wte.weight").f32, alone[0].at("wte.weight").f32)
                .count,
            0);
}

INSTANTIATE_TEST_SUITE_P(GemmsOrAdd, CpuReplayAccumulation, testing::Bool(),
                         [](const testing::TestParamInfo<bool> &info) {
                           return info.param ? "InPlace" : "ByTheAdd";
                         });

/// The check has teeth: the same program with one temporary placed over
/// another that is still live (a plan whose liveness ends too early) gives
/// other gradients.
TEST(CpuReplayPlan, ABufferReusedTooEarlyShows) {
  mlir::MLIRContext ctx;
  mlir::FailureOr<TrainingProgram> step = mlir::failure();
  rt::Program program;
  ASSERT_NO_FATAL_FAILURE(compileTiny(ctx, "fp32", 16, step, program));

  auto base = [&](int id) {
    while (program.buffers[id].viewOf >= 0)
      id = program.buffers[id].viewOf;
    return id;
  };
  // Float temps only: garbage in an i32 one (positions) would stop the
  // replay with an out-of-range id rather than change its numbers.
  auto isTemp = [&](int id) {
    return program.buffers[base(id)].role == rt::Role::Temp &&
           program.buffers[base(id)].dtype == rt::DType::F32;
  };
  // A temp T written by launch i and last read by launch j, and a temp U
  // written by a launch k in between that does not read T: put U on T.
  const rt::Function &grads = *program.function("grads");
  const std::vector<rt::Launch> &ls = grads.launches;
  bool moved = false;
  for (size_t i = 0; i < ls.size() && !moved; ++i)
    for (int t : ls[i].outputs) {
      if (moved || !isTemp(t))
        continue;
      size_t last = i;
      for (size_t j = i + 1; j < ls.size(); ++j)
        for (int in : ls[j].inputs)
          if (base(in) == base(t))
            last = j;
      for (size_t k = i + 1; k < last && !moved; ++k) {
        bool readsT = false;
        for (int in : ls[k].inputs)
          readsT |= base(in) == base(t);
        for (int u : ls[k].outputs)
          if (!readsT && !moved && isTemp(u) && base(u) != base(t) &&
              program.buffers[base(u)].bytes() <=
                  program.buffers[base(t)].bytes()) {
            program.buffers[base(u)].offset = program.buffers[base(t)].offset;
            moved = true;
          }
      }
    }
  ASSERT_TRUE(moved);

  mlir::FailureOr<std::unique_ptr<Engine>> made = makeExecutorEngine(*step);
  ASSERT_TRUE(succeeded(made));
  std::unique_ptr<rt::Backend> cpu = rt::makeCpuBackend();
  std::unique_ptr<Engine> replay = makeProgramEngine(program, *cpu);
  TensorMap params = initParameters(replay->parameters(), 1234), m, v;
  for (const ParamSpec &spec : replay->parameters()) {
    m.emplace(spec.name, HostTensor::floats(spec.shape));
    v.emplace(spec.name, HostTensor::floats(spec.shape));
  }
  (*made)->setWeights(params, m, v);
  replay->setWeights(params, m, v);
  Rng rng(7);
  exec::Batch batch = randomBatch(rng, 16);
  double loss = lossOf(**made, batch, 1.0f, true);
  double replayLoss = lossOf(*replay, batch, 1.0f, true);
  UpdateHypers hypers{1e-3f, 1.0f, 1.0f};
  double norm = (*made)->prepareUpdate(hypers);
  double replayNorm = replay->prepareUpdate(hypers);
  EXPECT_TRUE(loss != replayLoss || norm != replayNorm)
      << "a temporary overwritten while live went unnoticed";
}

} // namespace

/// The memory line names the CUDA kernels' module scratch beside the arena
/// when the program runs its kernels (the CUDA backend), not otherwise.
TEST(ProgramMemoryLine, KernelScratchOnlyWithKernels) {
  mlir::MLIRContext ctx;
  mlir::FailureOr<TrainingProgram> step = mlir::failure();
  rt::Program program;
  ASSERT_NO_FATAL_FAILURE(compileTiny(ctx, "bf16", 16, step, program));
  std::string plain = programMemoryLine(program);
  EXPECT_EQ(programMemoryLine(program, true), plain) << "no kernels yet";
  rt::DeviceKernel a, b;
  a.scratchBytes = 1 << 20;
  b.scratchBytes = 1 << 19;
  program.kernels = {a, b};
  EXPECT_EQ(programMemoryLine(program), plain);
  EXPECT_EQ(programMemoryLine(program, true),
            plain + " | kernel scratch 1.5 MiB");
}
