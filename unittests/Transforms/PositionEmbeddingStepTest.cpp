//===- PositionEmbeddingStepTest.cpp - the position gather folded away ----===//
//
// gpt2-tiny's step (one block, T = 64) on the CPU executor, at stage
// "autodiff" (the position embedding a gather by gpt.iota, its gradient a
// scatter) and at stage "optimizer", after the canonicalizer has folded
// them (GPTOps.td: the table's first T rows, a gpt.slice of it or the
// table itself; the gradient dy, padded with zero rows or itself).
// Compared: the forward function (loss and logits) and the gradient
// function (loss and every gradient), with a block size of 256 (slice and
// pad) and of 64 (the table and dy themselves).
//
// Tolerance: none. A gather by 0..T-1 copies rows, a scatter of one term a
// row adds it to zero, and the canonicalizer changes nothing else a float
// depends on; a row taken from the wrong end, or a pad that dropped dy,
// would not agree.
//
//===----------------------------------------------------------------------===//

#include "StepTestUtil.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Models/GPT2.h"

#include <gtest/gtest.h>

using namespace gptc;
using namespace gptc::test;
using namespace mlir;

namespace {

OwningOpRef<ModuleOp> compile(MLIRContext &ctx, int64_t blockSize,
                              llvm::StringRef stage) {
  models::GPT2Config config = *models::gpt2Preset("gpt2-tiny");
  config.nLayer = 1;
  config.blockSize = blockSize;
  OwningOpRef<ModuleOp> module = models::buildGPT2(ctx, config, 2, 64);
  PassManager pm(&ctx);
  OptimizerOptions opts;
  opts.precision = "bf16";
  buildPipeline(pm, stage, opts);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

class PositionEmbedding : public testing::TestWithParam<int64_t> {};

TEST_P(PositionEmbedding, StepGivesTheGathersBits) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  const int64_t blockSize = GetParam();
  OwningOpRef<ModuleOp> gathered = compile(ctx, blockSize, "autodiff");
  OwningOpRef<ModuleOp> folded = compile(ctx, blockSize, "optimizer");
  ASSERT_TRUE(gathered && folded);
  const bool whole = blockSize == 64;
  expectSameStepBits(*gathered, *folded, 41, [&](func::FuncOp before,
                                                 func::FuncOp after,
                                                 bool grad) {
    // Before: the tokens' gather and the positions'; the gradient
    // function also scatters into both tables.
    EXPECT_EQ(countTopLevel(before, "gpt.iota"), 1);
    EXPECT_EQ(countTopLevel(before, "gpt.embedding"), 2);
    EXPECT_EQ(countTopLevel(before, "gpt.embedding_grad"), grad ? 2 : 0);
    // After: the tokens' alone.
    EXPECT_EQ(countTopLevel(after, "gpt.iota"), 0);
    EXPECT_EQ(countTopLevel(after, "gpt.embedding"), 1);
    EXPECT_EQ(countTopLevel(after, "gpt.embedding_grad"), grad ? 1 : 0);
    EXPECT_EQ(countTopLevel(after, "gpt.slice") -
                  countTopLevel(before, "gpt.slice"),
              whole ? 0 : 1);
    EXPECT_EQ(countTopLevel(after, "gpt.pad") - countTopLevel(before, "gpt.pad"),
              whole || !grad ? 0 : 1);
  });
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, PositionEmbedding,
                         testing::Values(int64_t(256), int64_t(64)));

} // namespace
