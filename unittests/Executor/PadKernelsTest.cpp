//===- PadKernelsTest.cpp - gpt.pad, gpt.slice and the padded loss --------===//
//
// The kernels behind gpt-pad-dims: pad then slice is the identity, the
// padding holds the fill value, and cross-entropy over padded logits and
// targets (num_classes, ignore_index) is the loss of the real ones, with a
// gradient that is the real one inside and exactly zero on the padding.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace gptc::exec;

namespace {

HostTensor counting(std::vector<int64_t> shape) {
  HostTensor t = HostTensor::floats(std::move(shape));
  for (size_t i = 0; i < t.f32.size(); ++i)
    t.f32[i] = std::sin(float(i) * 0.37f);
  return t;
}

TEST(PadKernels, PadThenSliceIsTheIdentity) {
  HostTensor x = counting({2, 3, 5});
  HostTensor p = pad(x, {2, 4, 8}, 0);
  ASSERT_EQ(p.shape, (std::vector<int64_t>{2, 4, 8}));
  EXPECT_EQ(p.f32[0 * 32 + 1 * 8 + 4], x.f32[0 * 15 + 1 * 5 + 4]);
  EXPECT_EQ(p.f32[1 * 32 + 2 * 8 + 0], x.f32[1 * 15 + 2 * 5 + 0]);
  EXPECT_EQ(p.f32[1 * 32 + 3 * 8 + 0], 0.0f); // padded row
  EXPECT_EQ(p.f32[0 * 32 + 0 * 8 + 5], 0.0f); // padded column
  HostTensor s = slice(p, {2, 3, 5});
  EXPECT_EQ(s.shape, x.shape);
  EXPECT_EQ(s.f32, x.f32);
}

TEST(PadKernels, IdsPadWithTheirValue) {
  HostTensor ids = HostTensor::ids({2, 3}, 7);
  HostTensor p = pad(ids, {2, 5}, -1);
  EXPECT_EQ(p.i32, (std::vector<int32_t>{7, 7, 7, -1, -1, 7, 7, 7, -1, -1}));
  EXPECT_EQ(slice(p, {2, 3}).i32, ids.i32);
}

TEST(PadKernels, PaddedLossIsTheRealLoss) {
  HostTensor logits = counting({3, 5, 10});
  HostTensor targets = HostTensor::ids({3, 5});
  for (size_t i = 0; i < targets.i32.size(); ++i)
    targets.i32[i] = int32_t(i * 7 % 10);
  // Padding: positions 5 -> 8 (targets -1), classes 10 -> 16, filled with
  // large logits that would dominate a softmax that saw them.
  HostTensor paddedLogits = pad(logits, {3, 8, 16}, 0);
  for (int64_t r = 0; r < 3 * 8; ++r)
    for (int64_t c = 10; c < 16; ++c)
      paddedLogits.f32[r * 16 + c] = 50.0f;
  HostTensor paddedTargets = pad(targets, {3, 8}, -1);

  HostTensor want = crossEntropy(logits, targets);
  HostTensor got = crossEntropy(paddedLogits, paddedTargets, 10, -1);
  EXPECT_NEAR(got.f32[0], want.f32[0], 1e-6 * std::abs(want.f32[0]));

  HostTensor dloss = HostTensor::floats({}, 1.0f);
  HostTensor wantGrad = crossEntropyGrad(logits, targets, dloss);
  HostTensor gotGrad =
      crossEntropyGrad(paddedLogits, paddedTargets, dloss, 10, -1);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < 8; ++t)
      for (int64_t c = 0; c < 16; ++c) {
        float g = gotGrad.f32[(b * 8 + t) * 16 + c];
        if (t < 5 && c < 10)
          EXPECT_NEAR(g, wantGrad.f32[(b * 5 + t) * 10 + c], 1e-7);
        else
          EXPECT_EQ(g, 0.0f) << "padding at " << b << "," << t << "," << c;
      }
}

} // namespace
