//===- PrecisionTest.cpp - bf16 and fp16 rounding -------------------------===//

#include "gptc/Executor/Precision.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace gptc::exec;

namespace {

TEST(Precision, BF16RoundsToNearestEven) {
  // bf16 has 7 stored significand bits: one ulp at 1.0 is 2^-7.
  EXPECT_EQ(roundToBF16(1.0f), 1.0f);
  EXPECT_EQ(roundToBF16(1.0f + 0x1p-9f), 1.0f);              // below half
  EXPECT_EQ(roundToBF16(1.0f + 0x1p-8f), 1.0f);              // tie: to even
  EXPECT_EQ(roundToBF16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f); // tie: to even
  EXPECT_EQ(roundToBF16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(roundToBF16(-1.0f - 0x1p-8f - 0x1p-20f), -1.0f - 0x1p-7f);
  EXPECT_TRUE(std::isfinite(roundToBF16(3.0e38f)));    // below 3.39e38
  EXPECT_EQ(roundToBF16(3.4e38f), INFINITY); // past bf16's largest finite
  EXPECT_EQ(roundToBF16(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(roundToBF16(NAN)));
}

TEST(Precision, F16RoundsToNearestEvenWithOverflowAndSubnormals) {
  // fp16 has 10 stored significand bits: one ulp at 1.0 is 2^-10.
  EXPECT_EQ(roundToF16(1.0f + 0x1p-11f), 1.0f);
  EXPECT_EQ(roundToF16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
  EXPECT_EQ(roundToF16(0.1f), 0.0999755859375f);
  EXPECT_EQ(roundToF16(65504.0f), 65504.0f);  // the largest half
  EXPECT_EQ(roundToF16(65519.0f), 65504.0f);
  EXPECT_EQ(roundToF16(65520.0f), INFINITY);  // the tie rounds up: overflow
  EXPECT_EQ(roundToF16(-1.0e6f), -INFINITY);
  EXPECT_EQ(roundToF16(0x1p-24f), 0x1p-24f);  // the smallest subnormal
  EXPECT_EQ(roundToF16(0x1p-25f), 0.0f);      // tie: to even (zero)
  EXPECT_EQ(roundToF16(3 * 0x1p-25f), 0x1p-23f);
  EXPECT_EQ(roundToF16(0x1p-14f - 0x1p-30f), 0x1p-14f); // into the normals
  EXPECT_TRUE(std::isnan(roundToF16(NAN)));
}

TEST(Precision, RoundsWholeTensors) {
  HostTensor t = HostTensor::floats({3}, 0.0f);
  t.f32 = {1.0f + 0x1p-11f, 70000.0f, -2.0f};
  HostTensor f16 = t;
  roundTo(f16, StorageKind::F16);
  EXPECT_EQ(f16.f32, (std::vector<float>{1.0f, INFINITY, -2.0f}));
  HostTensor f32 = t;
  roundTo(f32, StorageKind::F32);
  EXPECT_EQ(f32.f32, t.f32);
}

} // namespace
