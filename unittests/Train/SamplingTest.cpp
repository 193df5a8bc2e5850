//===- SamplingTest.cpp - Tests for next-token sampling -------------------===//

#include "gptc/Train/Sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace gptc::train;

namespace {

TEST(SamplingTest, GreedyAndTopOne) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f};
  Rng rng(1);
  EXPECT_EQ(sampleToken(logits, 0.0, 0, rng), 1); // ties: the lower id
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(sampleToken(logits, 1.0, 1, rng), 1);
}

TEST(SamplingTest, FollowsTheSoftmax) {
  std::vector<float> logits = {0.0f, std::log(3.0f), -100.0f};
  Rng rng(2);
  int counts[3] = {};
  for (int i = 0; i < 40000; ++i)
    ++counts[sampleToken(logits, 1.0, 0, rng)];
  EXPECT_NEAR(counts[0], 10000, 300);
  EXPECT_NEAR(counts[1], 30000, 300);
  EXPECT_EQ(counts[2], 0);
}

TEST(SamplingTest, TemperatureAndTopK) {
  std::vector<float> logits = {0.0f, std::log(3.0f), 1.0f, -5.0f};
  Rng rng(3);
  int counts[4] = {};
  // Temperature 2 halves the logits: weights 1, sqrt(3) over the top two.
  for (int i = 0; i < 40000; ++i)
    ++counts[sampleToken(logits, 2.0, 2, rng)];
  EXPECT_EQ(counts[0] + counts[3], 0);
  double p1 = std::sqrt(3.0) / (std::sqrt(3.0) + std::exp(0.5));
  EXPECT_NEAR(counts[1], 40000 * p1, 350);
}

TEST(SamplingTest, DeterministicPerSeed) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i)
    logits[i] = float(i % 7);
  Rng a(5), b(5);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(sampleToken(logits, 1.0, 0, a), sampleToken(logits, 1.0, 0, b));
}

} // namespace
