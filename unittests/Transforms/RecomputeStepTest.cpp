//===- RecomputeStepTest.cpp - gpt-recompute, whole step ------------------===//
//
// gpt2-tiny's whole training step (two blocks) on the CPU executor, with
// and without gpt-recompute (ops=gelu,layernorm), on random weights and
// tokens, under fp32 and bf16.
//
// Right after the pass (the optimizer stage plus gpt-recompute): bit for
// bit. A copy is the same op on the same operands, so the backward reads
// the very values it read before; a copy of the wrong op, of a value at the
// wrong point, or a backward op left reading the original would not agree.
//
// Through the whole pipeline (the fusion passes after it): fp32 bit for
// bit too. The forward GELU runs in its GEMM's epilogue and the copy as a
// fused body on the aux pre-activation, with the same float32 operations
// in the same order; the layernorm copies run the same row kernel on the
// residual sum the forward wrote. bf16: the copy computes GELU of the bf16
// aux (the pre-activation rounded once, as autocast saves GELU's input)
// and rounds the result, where the forward rounded GELU of the float32
// pre-activation: the c_proj weight gradients read a slightly different
// bf16 operand (llm.c's recomputation does the same). Measured: at most
// 4.9e-3 relative in the infinity norm of each gradient (seed 11);
// tolerance 1e-2. A copy of the wrong value is off by O(1).
//
//===----------------------------------------------------------------------===//

#include "StepTestUtil.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

using namespace gptc;
using namespace gptc::test;
using namespace mlir;

namespace {

OptimizerOptions options(const std::string &precision, bool recompute) {
  OptimizerOptions opts;
  opts.precision = precision;
  if (recompute)
    opts.recompute = {std::string("gelu"), std::string("layernorm")};
  return opts;
}

/// gpt2-tiny through the optimizer stage and gpt-recompute, if `recompute`.
OwningOpRef<ModuleOp> compileUnfused(MLIRContext &ctx,
                                     const std::string &precision,
                                     bool recompute) {
  // The pass options hold an ArrayRef: the list must outlive them.
  std::vector<std::string> ops = options(precision, true).recompute;
  return compileTinyStep(ctx, options(precision, false), [&](PassManager &pm) {
    if (recompute) {
      GPTRecomputeOptions r;
      r.ops = ops;
      pm.addPass(createGPTRecompute(r));
    }
  });
}

/// gpt2-tiny through the whole pipeline, as gptc compiles it.
OwningOpRef<ModuleOp> compileFused(MLIRContext &ctx,
                                   const std::string &precision,
                                   bool recompute) {
  OwningOpRef<ModuleOp> module = buildTiny(ctx, 2, 16, /*nLayer=*/2);
  PassManager pm(&ctx);
  buildPipeline(pm, "fused", options(precision, recompute));
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

/// gpt-autodiff's backward ops, not gpt-recompute's copies.
bool isVjp(Operation *op) {
  auto fused = dyn_cast<FusedLoc>(op->getLoc());
  auto tag = fused ? dyn_cast_or_null<StringAttr>(fused.getMetadata())
                   : StringAttr();
  return tag && tag.getValue() == "vjp";
}

/// How many backward ops read a forward GELU's or layernorm's value (or a
/// cast of it) directly.
int64_t backwardReadsOfForwardActivations(func::FuncOp func) {
  int64_t n = 0;
  func.walk([&](Operation *op) {
    if (!isVjp(op))
      return;
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      while (auto c = dyn_cast_or_null<gpt::CastOp>(def))
        def = c.getX().getDefiningOp();
      n += def && !isVjp(def) && !isRecomputed(def) &&
           isa<gpt::GeluOp, gpt::LayerNormOp>(def);
    }
  });
  return n;
}

class Recompute : public testing::TestWithParam<const char *> {};

TEST_P(Recompute, StepGivesTheSameBits) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> before = compileUnfused(ctx, GetParam(), false);
  OwningOpRef<ModuleOp> after = compileUnfused(ctx, GetParam(), true);
  ASSERT_TRUE(before && after);
  expectSameStepBits(
      *before, *after, 11, [&](func::FuncOp b, func::FuncOp a, bool grad) {
        // Two blocks: 2 GELUs and 5 layernorms (ln_1, ln_2, ln_f), each
        // computed once more in the backward; the forward alone has none.
        EXPECT_EQ(countTopLevel(b, "gpt.gelu"), 2);
        EXPECT_EQ(countTopLevel(b, "gpt.layernorm"), 5);
        EXPECT_EQ(countTopLevel(a, "gpt.gelu"), grad ? 4 : 2);
        EXPECT_EQ(countTopLevel(a, "gpt.layernorm"), grad ? 10 : 5);
        int64_t copies = 0;
        a.walk([&](Operation *op) { copies += isRecomputed(op); });
        // Each op, and under bf16 its cast for the GEMM.
        int64_t perOp = std::string(GetParam()) == "bf16" ? 2 : 1;
        EXPECT_EQ(copies, grad ? (2 + 5) * perOp : 0);
        if (grad) {
          EXPECT_GT(backwardReadsOfForwardActivations(b), 0);
          EXPECT_EQ(backwardReadsOfForwardActivations(a), 0);
        }
      });
}

TEST_P(Recompute, FusedStepMatches) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> before = compileFused(ctx, GetParam(), false);
  OwningOpRef<ModuleOp> after = compileFused(ctx, GetParam(), true);
  ASSERT_TRUE(before && after);
  bool bf16 = std::string(GetParam()) == "bf16";
  auto b = before->lookupSymbol<func::FuncOp>("gpt2_forward_grad");
  auto a = after->lookupSymbol<func::FuncOp>("gpt2_forward_grad");
  // The copies: one GELU kernel per block (writing bf16 under autocast)
  // and five layernorms more (under bf16 each takes its cast as a
  // gpt.fused_layernorm; fp32 has no cast); the forward GELU stays in its
  // epilogue.
  EXPECT_EQ(countTopLevel(a, "gpt.fused_layernorm"),
            countTopLevel(b, "gpt.fused_layernorm") + (bf16 ? 5 : 0));
  EXPECT_EQ(countTopLevel(a, "gpt.layernorm"),
            countTopLevel(b, "gpt.layernorm") + (bf16 ? 0 : 5));
  EXPECT_EQ(countTopLevel(a, "gpt.fused_elementwise"),
            countTopLevel(b, "gpt.fused_elementwise") + 2);
  EXPECT_EQ(countTopLevel(a, "gpt.cast"), countTopLevel(b, "gpt.cast"));
  int64_t narrowCopies = 0;
  for (auto f : a.getOps<gpt::FusedElementwiseOp>())
    narrowCopies += isRecomputed(f) &&
                    cast<RankedTensorType>(f.getResult(0).getType())
                        .getElementType()
                        .isBF16();
  EXPECT_EQ(narrowCopies, bf16 ? 2 : 0);
  int64_t geluEpilogues = 0;
  for (auto ep : a.getOps<gpt::MatmulEpilogueOp>())
    geluEpilogues += ep.getGelu();
  EXPECT_EQ(geluEpilogues, 2);

  std::vector<exec::HostTensor> args = randomArguments(b, 11);
  if (!bf16)
    return expectSameBits(b, a, args);
  auto [want, got] = runBoth(b, a, args);
  ASSERT_TRUE(succeeded(want) && succeeded(got));
  ASSERT_EQ(got->size(), want->size());
  double worst = 0.0;
  int64_t differ = 0;
  for (size_t i = 0; i < want->size(); ++i) {
    double e = infNormRelativeError((*got)[i], (*want)[i]);
    worst = std::max(worst, e);
    differ += e > 0.0;
    EXPECT_LT(e, 1e-2) << "result " << i;
  }
  // The c_proj weight gradients read the copy: not a no-op.
  EXPECT_GT(differ, 0);
  std::printf("bf16 recompute: worst relative error %.3g over %zu results\n",
              worst, want->size());
}

INSTANTIATE_TEST_SUITE_P(Precisions, Recompute,
                         testing::Values("fp32", "bf16"));

} // namespace
