//===- EmbeddingGradAddendStepTest.cpp - the tied table's gradient sum ----===//
//
// gpt2-tiny's whole training step on the CPU executor, compiled through
// every fusion pass with gpt-fuse-elementwise's embedding-grad-addend on
// and off: wte's two gradients (the lm_head GEMM's, cut from the padded
// vocabulary, and the token embedding's scatter-add) summed by a
// gpt.fused_elementwise, or by the scatter-add itself with the GEMM's as
// its addend (FuseEmbeddingGrad.cpp). Compared: the forward function (loss
// and logits) and the gradient function (loss and every gradient) on
// random weights and tokens.
//
// Tolerance: none. The fused op adds the same two float32 values once; an
// addend read at the wrong row, or left out, would not agree.
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

OwningOpRef<ModuleOp> compile(MLIRContext &ctx, const std::string &precision,
                              bool addend) {
  return compileFusedTinyStep(ctx, precision, [&](auto &fuse) {
    fuse.embeddingGradAddend = addend;
  });
}

/// gpt.embedding_grad ops with an addend.
int64_t withAddend(func::FuncOp func) {
  int64_t n = 0;
  func.walk([&](gpt::EmbeddingGradOp g) { n += bool(g.getAddend()); });
  return n;
}

class EmbeddingGradAddend : public testing::TestWithParam<const char *> {};

TEST_P(EmbeddingGradAddend, StepGivesTheSameBits) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> apart = compile(ctx, GetParam(), false);
  OwningOpRef<ModuleOp> fused = compile(ctx, GetParam(), true);
  ASSERT_TRUE(apart && fused);
  expectSameStepBits(*apart, *fused, 23, [](func::FuncOp before,
                                           func::FuncOp after, bool grad) {
    StringRef name = before.getSymName();
    // The gradient function sums wte's two gradients; wpe has one, and the
    // forward function none.
    EXPECT_EQ(withAddend(before), 0) << name.str();
    EXPECT_EQ(withAddend(after), grad ? 1 : 0) << name.str();
    EXPECT_EQ(countTopLevel(after, "gpt.embedding_grad"),
              countTopLevel(before, "gpt.embedding_grad"))
        << name.str();
    EXPECT_EQ(countTopLevel(before, "gpt.fused_elementwise") -
                  countTopLevel(after, "gpt.fused_elementwise"),
              grad ? 1 : 0)
        << name.str();
  });
}

INSTANTIATE_TEST_SUITE_P(Precisions, EmbeddingGradAddend,
                         testing::Values("fp32", "bf16"));

} // namespace
