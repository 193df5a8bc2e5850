//===- PackedAttentionStepTest.cpp - packed q|k|v attention, whole step ---===//
//
// gpt2-tiny's whole training step on the CPU executor, compiled through
// gpt-fuse-elementwise with gpt-fuse-attention's pack-qkv on and off (the
// matmul epilogues left out: packed, c_attn's output has only a bf16
// reader, so its epilogue would write bf16 and add a bf16 copy of the bias,
// cuBLASLt's one type per GEMM, while unpacked it feeds float32 head
// copies; FuseMatmulEpilogueStepTest covers that): attention reading q, k and
// v in place from c_attn's [B, T, 3C] output and writing [B, T, C]
// (gpt.flash_attention_qkv), against attention on [B, H, T, D] copies made
// by split, transpose and merge launches. Compared: the forward function
// (loss and logits) and the gradient function (loss and every gradient) on
// random weights and tokens, under fp32 and bf16.
//
// Tolerance: none. The packed ops compute each head exactly as the 4-D
// ones do (the CPU kernels unpack, call the same code, and pack back), and
// the copies they remove only move values; under bf16, rounding c_attn's
// output to bf16 once, in one cast, gives the same bits as rounding each
// head copy of it. A wrong head, part or stride would not
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
                              bool pack) {
  OptimizerOptions opts;
  opts.precision = precision;
  return compileTinyStep(
      ctx, opts,
      [&](PassManager &pm) { pm.addPass(createGPTFuseElementwise()); },
      pack);
}

class PackedAttention : public testing::TestWithParam<const char *> {};

TEST_P(PackedAttention, StepGivesTheUnpackedBits) {
  MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> unpacked = compile(ctx, GetParam(), false);
  OwningOpRef<ModuleOp> packed = compile(ctx, GetParam(), true);
  ASSERT_TRUE(unpacked && packed);
  expectSameStepBits(*unpacked, *packed, 13, [](func::FuncOp before,
                                               func::FuncOp after, bool grad) {
    StringRef name = before.getSymName();
    // Both blocks' attention is packed, forward and backward, and no head
    // split or merge is left: GPT-2 has no other transpose, split or concat.
    EXPECT_EQ(countTopLevel(before, "gpt.flash_attention"), 2) << name.str();
    EXPECT_EQ(countTopLevel(after, "gpt.flash_attention"), 0) << name.str();
    EXPECT_EQ(countTopLevel(after, "gpt.flash_attention_qkv"), 2)
        << name.str();
    EXPECT_EQ(countTopLevel(after, "gpt.flash_attention_qkv_grad"),
              grad ? 2 : 0)
        << name.str();
    for (const char *copy : {"gpt.transpose", "gpt.split", "gpt.concat"})
      EXPECT_EQ(countTopLevel(after, copy), 0) << name.str() << " " << copy;
    EXPECT_GT(countTopLevel(before, "gpt.transpose"), 0) << name.str();
  });
}

INSTANTIATE_TEST_SUITE_P(Precisions, PackedAttention,
                         testing::Values("fp32", "bf16"));

} // namespace
