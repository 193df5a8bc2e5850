//===- FoldCastsStepTest.cpp - casts folded into layout ops, whole step ---===//
//
// gpt2-tiny's whole training step on the CPU executor, compiled through
// gpt-optimizer, gpt-fuse-matmul-epilogue and gpt-fuse-elementwise with and
// without its cast folding (FoldCasts.cpp): first into the transposes,
// splits, concats, pads and slices next to them, the loss's widened logits
// and narrowed gradient into the loss, then a layernorm result's cast into
// the layernorm. Compared: the forward function (loss and
// logits) and the gradient function (loss and every gradient) on random
// weights and tokens, under bf16 and fp16. Attention is left on [B, H, T,
// D] head copies (gpt-fuse-attention's pack-qkv off), so that GPT-2 has
// head transposes to fold casts into; PackedAttentionStepTest.cpp covers
// the packed step, where they do not exist.
//
// Tolerance: none. A layout op only moves values, so converting before or
// after the move gives the same bits; a layernorm rounds its float32 result
// once either way; and two conversions are only merged
// when the first is exact; a fold that merged f32 -> bf16 -> f32 into
// nothing, or a retyped reshape that reinterpreted the bytes, would not
// agree.
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
                              bool foldCasts) {
  // Attention on [B, H, T, D] head copies (pack-qkv off): the head splits
  // and merges are the layout ops whose casts are folded. The output
  // projections' bias gradients stay in their GEMMs: taken from a
  // layernorm gradient (only where its bf16 copy is folded into it) they
  // sum the float32 terms (LayerNormBiasGradStepTest.cpp).
  return compileFusedTinyStep(
      ctx, precision,
      [&](auto &fuse) {
        fuse.foldCasts = foldCasts;
        fuse.layernormBiasGrads = false;
      },
      /*packAttention=*/false);
}

/// Transposes that read one type and write another.
int64_t convertingTransposes(func::FuncOp func) {
  int64_t n = 0;
  func.walk([&](gpt::TransposeOp t) {
    n += t.getX().getType().getElementType() !=
         t.getResult().getType().getElementType();
  });
  return n;
}

class FoldCasts : public testing::TestWithParam<const char *> {};

TEST_P(FoldCasts, StepGivesTheUnfoldedBits) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> unfolded = compile(ctx, GetParam(), false);
  OwningOpRef<ModuleOp> folded = compile(ctx, GetParam(), true);
  ASSERT_TRUE(unfolded && folded);
  expectSameStepBits(*unfolded, *folded, 11, [](func::FuncOp before,
                                                func::FuncOp after, bool grad) {
    StringRef name = before.getSymName();
    // Per block: the three head splits (transpose, then the cast to the
    // attention's type) become converting transposes, and the head merge
    // (cast back, transpose, cast to the projection's type) a bf16 -> bf16
    // transpose: 5 casts fewer. Once: the padded wte's cast goes into its
    // pad. The gradient function adds, per block, the output gradient's
    // head split (2 casts, bf16 -> bf16), the merges of dq, dk and dv
    // (3 converting transposes) and the concat's cast to the GEMM's type:
    // 6 casts (wte's gradient has none left to fold into its slice:
    // gpt-fuse-matmul-epilogue made its GEMM write float32). Last, each
    // of the 5 layernorms (ln_1, ln_2 of two blocks, ln_f) writes the bf16
    // its GEMM reads instead of float32 for a cast. In the gradient
    // function the loss reads the bf16 logits and writes the bf16 gradient
    // the lm_head's backward GEMMs read: 2 casts; and each of the 5
    // layernorm gradients reads the bf16 dy its GEMM wrote, not a widened
    // copy: 5 casts; and each fused layernorm gradient whose residual
    // gradient the next GEMM reads writes that bf16 copy itself: 3 casts
    // (all but block 0's ln_1, whose gradient goes to the embeddings), and
    // so does ln_f's layernorm_grad, which becomes a fused one to: 1 cast.
    // And per block, in each function's forward: c_attn's epilogue writes
    // bf16 (every 16-bit GEMM does), widened for the head split; the
    // widening goes with the split's narrowing casts: 1 cast. The
    // forward's loss reads the bf16 logits too, but no cast goes: the
    // widened logits are also returned.
    EXPECT_EQ(convertingTransposes(before), 0) << name.str();
    EXPECT_EQ(convertingTransposes(after), 2 * (grad ? 3 + 3 : 3))
        << name.str();
    int64_t castsBefore = countTopLevel(before, "gpt.cast"),
            castsAfter = countTopLevel(after, "gpt.cast");
    EXPECT_EQ(castsBefore - castsAfter,
              (grad ? 2 * (5 + 6) + 1 + 2 + 5 + 3 + 1 : 2 * 5 + 1) + 5 + 2)
        << name.str();
  });
}

INSTANTIATE_TEST_SUITE_P(Precisions, FoldCasts,
                         testing::Values("bf16", "fp16"));

/// fp32 has no casts to fold: the pass changes nothing.
TEST(FoldCastsFp32, NothingToFold) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> folded = compile(ctx, "fp32", true);
  ASSERT_TRUE(folded);
  for (auto func : folded->getOps<func::FuncOp>())
    EXPECT_EQ(convertingTransposes(func), 0) << func.getSymName().str();
}

} // namespace
