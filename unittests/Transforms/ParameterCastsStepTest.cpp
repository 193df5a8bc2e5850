//===- ParameterCastsStepTest.cpp - the parameters' casts as one launch ---===//
//
// gpt2-tiny's whole training step on the CPU executor, compiled through
// every fusion pass with gpt-fuse-elementwise's parameter-casts on and off:
// the bf16 (fp16) copies of every weight and bias, one gpt.cast each, as
// one gpt.multi_tensor_elementwise whose body yields its argument and whose
// results are rounded to their type on store; the widening casts of the
// returned bias gradients as another, before the return. Compared: the forward
// function (loss and logits) and the gradient function (loss and every
// gradient) on random weights and tokens.
//
// Tolerance: none. Rounding a float32 parameter to bf16 (or widening a
// bf16 gradient) is the same whether one cast kernel or one multi-tensor
// kernel stores it; a wrong tensor order, shape or type would not agree.
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
                              bool parameterCasts) {
  return compileFusedTinyStep(ctx, precision, [&](auto &fuse) {
    fuse.parameterCasts = parameterCasts;
  });
}

/// gpt.cast ops that narrow a gpt.param argument.
int64_t parameterCasts(func::FuncOp func) {
  int64_t n = 0;
  for (auto c : func.getBody().front().getOps<gpt::CastOp>())
    if (auto arg = dyn_cast<BlockArgument>(c.getX()))
      n += bool(func.getArgAttr(arg.getArgNumber(), gpt::kParamAttr));
  return n;
}

/// gpt.cast ops that widen a 16-bit value into a returned gradient.
int64_t gradientCasts(func::FuncOp func) {
  int64_t n = 0;
  Operation *ret = func.getBody().front().getTerminator();
  for (auto c : func.getBody().front().getOps<gpt::CastOp>())
    for (OpOperand &use : c.getResult().getUses())
      n += use.getOwner() == ret &&
           bool(func.getResultAttr(use.getOperandNumber(), gpt::kGradAttr));
  return n;
}

class ParameterCasts : public testing::TestWithParam<const char *> {};

TEST_P(ParameterCasts, StepGivesTheSameBits) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> apart = compile(ctx, GetParam(), false);
  OwningOpRef<ModuleOp> merged = compile(ctx, GetParam(), true);
  ASSERT_TRUE(apart && merged);
  expectSameStepBits(*apart, *merged, 17, [](func::FuncOp before,
                                            func::FuncOp after, bool) {
    StringRef name = before.getSymName();
    // Per block the four weight matrices and their four biases (read by
    // bf16 GEMM epilogues): 2 * 8 casts, then one op.
    EXPECT_EQ(parameterCasts(before), 2 * 8) << name.str();
    EXPECT_EQ(parameterCasts(after), 0) << name.str();
    // The gradient function widens each block's c_fc bias gradient, which
    // its bf16 GEMM wrote: 2 casts, then one op before the return.
    bool grads = gradientCasts(before) > 0;
    EXPECT_EQ(gradientCasts(before), grads ? 2 : 0) << name.str();
    EXPECT_EQ(gradientCasts(after), 0) << name.str();
    EXPECT_EQ(countTopLevel(after, "gpt.multi_tensor_elementwise"),
              countTopLevel(before, "gpt.multi_tensor_elementwise") + 1 +
                  (grads ? 1 : 0))
        << name.str();
  });
}

INSTANTIATE_TEST_SUITE_P(Precisions, ParameterCasts,
                         testing::Values("bf16", "fp16"));

} // namespace
