//===- ProgramKernelsTest.cpp - a real program's kernels compile ----------===//
//
// gpt2-tiny lowered to a kernel-level Program (gptc/Conversion), in fp32 and
// bf16, through the CUDA emitter and NVRTC: every launch but the GEMMs
// (matmul, matmul_epilogue) gets a kernel, every kernel compiles for sm_80,
// none spills. The fp32 program covers the f32 paths the GPT-2 lit test
// (bf16) does not.
//
//===----------------------------------------------------------------------===//

#include "HostKernels.h"
#include "TargetTestUtil.h"

#include "gptc/Conversion/LowerToKernels.h"
#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Models/GPT2.h"
#include "gptc/Runtime/Backend.h"
#include "gptc/Runtime/KernelCheck.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Target/CUDA/CompileKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <sstream>

using namespace gptc;
using namespace gptc::test;

namespace {

/// A fresh kernel cache for this binary's NVRTC compiles.
FreshKernelCache freshKernelCache;

rt::Program tinyProgram(const std::string &precision,
                        models::GPT2Config cfg = *models::gpt2Preset("gpt2-tiny"),
                        int64_t batch = 2, int64_t seq = 0,
                        std::vector<std::string> recompute = {}) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect>();
  OptimizerOptions opts;
  opts.precision = precision;
  opts.recompute = std::move(recompute);
  mlir::FailureOr<rt::Program> p =
      compileKernelProgram(ctx, cfg, batch, seq ? seq : cfg.blockSize, opts);
  if (mlir::failed(p))
    throw std::runtime_error("compileKernelProgram failed");
  return std::move(*p);
}

void compileTiny(const std::string &precision) {
  if (!haveNvrtc())
    GTEST_SKIP() << "no NVRTC";
  rt::Program p = tinyProgram(precision);
  std::ostringstream report;
  std::vector<cuda::KernelResources> rs;
  try {
    rs = compileKernelsReporting(p, "sm_80", report);
  } catch (const std::exception &e) {
    FAIL() << e.what();
  }
  SCOPED_TRACE(report.str());
  // (The report counts grads_accumulate's repeats of grads' launches once,
  // in grads.)
  size_t launches = 0;
  for (const rt::Function &f : p.functions)
    for (size_t i = 0; i < f.launches.size(); ++i) {
      const rt::Launch &l = f.launches[i];
      // GEMMs, with or without an epilogue, are cuBLASLt's.
      bool gemm = rt::isGemm(l.kernel);
      EXPECT_EQ(l.deviceKernel < 0, gemm) << l.kernel;
      launches += !gemm && !rt::repeatsGrads(f, i);
    }
  size_t shared = 0;
  for (const cuda::KernelResources &r : rs) {
    EXPECT_FALSE(p.kernels[&r - rs.data()].cubin.empty()) << r.name;
    EXPECT_EQ(p.kernels[&r - rs.data()].arch, "sm_80");
    // gpt2-tiny's head dim is small enough for the simple f32 attention to
    // keep its rows in registers too.
    EXPECT_EQ(r.spillStores, 0) << r.name;
    shared += r.launches;
  }
  EXPECT_EQ(shared, launches);
  EXPECT_LT(rs.size(), launches) << "identical launches share kernels";
}

void expectHostMatchesCpu(const rt::Program &p, HostTarget target);

/// What `train_gpt2 --check-kernels` does on a GPU, with the host in its
/// place: every function of a program launch by launch, each generated
/// kernel run from its emitted CUDA source (HostKernels) against the CPU
/// backend on the same inputs. This catches what the per-kernel tests
/// cannot: the arguments, grids and shapes the lowering gives real
/// launches, and the kernels each function really uses.
void checkOnHost(const models::GPT2Config &cfg, int64_t batch, int64_t seq,
                 const std::string &precision,
                 std::vector<std::string> recompute = {},
                 HostTarget target = HostTarget::Sm80,
                 AttentionBackward backward = AttentionBackward::Split) {
  rt::Program p =
      tinyProgram(precision, cfg, batch, seq, std::move(recompute));
  emitForHost(p, target, backward);
  if (backward != AttentionBackward::Split)
    EXPECT_TRUE(std::any_of(p.kernels.begin(), p.kernels.end(),
                            [&](const rt::DeviceKernel &k) {
                              return k.source.find(
                                         backward == AttentionBackward::Wgmma
                                             ? "\n  attentionBackwardTensorCores<"
                                             : "\n  attentionBackwardAtomic<") !=
                                         std::string::npos &&
                                     (backward != AttentionBackward::Atomic128 ||
                                      k.source.find("AtomicBackwardShared<64, 2>") !=
                                          std::string::npos);
                            }));
  expectHostMatchesCpu(p, target);
}

/// Every launch of p, run on the host from its kernel, matches the CPU
/// backend.
void expectHostMatchesCpu(const rt::Program &p, HostTarget target) {
  std::unique_ptr<rt::Backend> host = makeHostKernelBackend(target);
  std::unique_ptr<rt::Backend> cpu = rt::makeCpuBackend();
  std::ostringstream out;
  int failed = rt::checkKernels(p, *host, *cpu, out);
  EXPECT_EQ(failed, 0) << out.str();
  // (grads_accumulate's launches but its last repeat grads': checked once.)
  size_t launches = 0, passed = 0;
  for (const rt::Function &f : p.functions)
    for (size_t i = 0; i < f.launches.size(); ++i)
      launches += !rt::repeatsGrads(f, i);
  for (size_t at = out.str().find("PASS"); at != std::string::npos;
       at = out.str().find("PASS", at + 4))
    ++passed;
  EXPECT_EQ(passed, launches) << out.str();
}

/// GPT-2's widths (C = 768, heads of 64) in one layer with a vocabulary
/// of 1000: the benchmark's attention kernels, a program the CPU backend
/// runs in seconds.
models::GPT2Config gpt2WidthsOneLayer() {
  models::GPT2Config cfg = *models::gpt2Preset("gpt2");
  cfg.nLayer = 1;
  cfg.vocabSize = 1000;
  return cfg;
}

/// The program bench/gpu/prepare.sh compiles for the GPU's kernel check:
/// gpt2-tiny at B=4, T=64 (the bf16 attention takes the tensor-core path,
/// head size 32).
void checkTinyOnHost(const std::string &precision) {
  checkOnHost(*models::gpt2Preset("gpt2-tiny"), 4, 64, precision);
}

} // namespace

TEST(ProgramKernelsOnHost, Fp32TinyMatchesTheCpuBackend) {
  checkTinyOnHost("fp32");
}

TEST(ProgramKernelsOnHost, Bf16TinyMatchesTheCpuBackend) {
  checkTinyOnHost("bf16");
}

// GPT-2 124M's widths, the kernels the benchmark runs (C=768: the
// layernorms' rows, 12 heads of 64 in the tensor-core attention), with one
// layer, B=2, T=128 (two query tiles) and a vocabulary of 1000 (padded to
// 1024; the tiny test has the real one): ~10 s of emulation, not a minute.
TEST(ProgramKernelsOnHost, Bf16Gpt2WidthsMatchTheCpuBackend) {
  checkOnHost(gpt2WidthsOneLayer(), 2, 128, "bf16");
}

// The same on sm_90a's code paths: the forward attention on warpgroup MMA
// (wgmma, emulated), at the benchmark's head size.
TEST(ProgramKernelsOnHost, Bf16Gpt2WidthsOnSm90aMatchTheCpuBackend) {
  checkOnHost(gpt2WidthsOneLayer(), 2, 128, "bf16", {}, HostTarget::Sm90a);
}

// With --attention-backward=atomic: dq summed with atomics into the
// kernel's scratch, written to the packed bf16 dqkv by each query tile's
// last block.
TEST(ProgramKernelsOnHost, Bf16Gpt2WidthsWithAtomicBackwardMatchTheCpuBackend) {
  checkOnHost(gpt2WidthsOneLayer(), 2, 128, "bf16", {}, HostTarget::Sm80,
              AttentionBackward::Atomic);
}

// --attention-backward=atomic128: 128 keys a block of 8 warps (T = 128:
// one block a head, each query tile written by it).
TEST(ProgramKernelsOnHost, Bf16Gpt2WidthsWithAtomic128BackwardMatchTheCpuBackend) {
  checkOnHost(gpt2WidthsOneLayer(), 2, 128, "bf16", {}, HostTarget::Sm80,
              AttentionBackward::Atomic128);
}

// --attention-forward=auto --attention-backward=auto on sm_90a: the program
// carries every attention algorithm (mma128, mma2, wgmma, wgmma-overlap,
// mma-pipe, wgmma128, wgmma-k128 and wgmma-ss beside mma; atomic,
// atomic128, wgmma, wgmma-overlap, wgmma-split, wgmma-split-ss, wgmma-ds,
// wgmma-bulk and wgmma-ordered beside split), and each variant, put in its
// launch's place with its grid and shared memory, matches the CPU backend
// as the launch's own kernel does (the tests above): nine programs, the
// first eight each with a forward and a backward variant, the last with a
// backward one, the first
// also with the loss gradient's max-first form (emitCUDA's twin of every
// bf16 cross_entropy_with_grad) and the layernorm gradients' staged form
// (emitCUDA's twin of each on sm_90a), the second and third with its
// cluster forms (2 and 4 blocks a row, launched in clusters).
TEST(ProgramKernelsOnHost, Bf16Gpt2WidthsEveryAttentionVariantMatchesTheCpuBackend) {
  rt::Program p = tinyProgram("bf16", gpt2WidthsOneLayer(), 1, 128);
  cuda::EmitOptions opts;
  opts.forwardVariants = opts.backwardVariants = cuda::AttentionVariants::All;
  emitForHost(p, HostTarget::Sm90a, opts);
  for (size_t v = 0; v < 9; ++v) {
    rt::Program q = p;
    std::set<std::string> labels;
    for (rt::Function &f : q.functions)
      for (rt::Launch &l : f.launches)
        if (l.variants.size() > v) {
          rt::setOwnVariant(l, l.variants[v]);
          l.variants.clear();
          labels.insert(l.kernel + " " + l.variant);
        }
    std::string said;
    for (const std::string &label : labels)
      said += label + "; ";
    SCOPED_TRACE(said);
    // (8 forward variants, 9 backward; the loss gradient's three,
    // maxfirst, cluster2 and cluster4, with the first three, and the
    // layernorm gradients' one, staged, with the first)
    EXPECT_EQ(labels.size(), v == 0  ? 4u
                             : v < 3 ? 3u
                             : v < 8 ? 2u
                                     : 1u)
        << "a forward and a backward variant, the last a backward alone";
    expectHostMatchesCpu(q, HostTarget::Sm90a);
  }
}

// With gpt-recompute's copies: a gpt.fused_layernorm of the residual sum
// alone (the identity prologue) writing bf16, and a GELU group on the bf16
// aux that writes bf16, each in the backward.
TEST(ProgramKernelsOnHost, Bf16TinyRecomputingMatchesTheCpuBackend) {
  checkOnHost(*models::gpt2Preset("gpt2-tiny"), 4, 64, "bf16",
              {std::string("gelu"), std::string("layernorm")});
}

TEST(ProgramKernels, Fp32TinyCompilesForSm80) { compileTiny("fp32"); }

TEST(ProgramKernels, Bf16TinyCompilesForSm80) { compileTiny("bf16"); }
