//===- LRScheduleTest.cpp - Tests for the learning-rate schedule ----------===//

#include "gptc/Train/LRSchedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

using namespace gptc::train;

namespace {

LRSchedule cosine(int64_t warmup, int64_t steps) {
  LRSchedule s;
  s.lr = 6e-4;
  s.minLr = 6e-5;
  s.warmup = warmup;
  s.steps = steps;
  return s;
}

TEST(LRScheduleTest, LinearWarmup) {
  LRSchedule s = cosine(10, 100);
  EXPECT_DOUBLE_EQ(s.at(0), 6e-4 * 1 / 10);
  EXPECT_DOUBLE_EQ(s.at(4), 6e-4 * 5 / 10);
  EXPECT_DOUBLE_EQ(s.at(9), 6e-4);
}

TEST(LRScheduleTest, CosineDecayToMin) {
  LRSchedule s = cosine(10, 110);
  EXPECT_DOUBLE_EQ(s.at(10), 6e-4);              // ratio 0
  EXPECT_DOUBLE_EQ(s.at(60), (6e-4 + 6e-5) / 2); // ratio 1/2
  double ratio = 99.0 / 100.0;                   // the last step
  EXPECT_DOUBLE_EQ(s.at(109),
                   6e-5 + 0.5 * (1 + std::cos(std::numbers::pi * ratio)) *
                              (6e-4 - 6e-5));
  EXPECT_GT(s.at(109), 6e-5);
  EXPECT_DOUBLE_EQ(s.at(110), 6e-5); // past the run
  for (int64_t i = 11; i < 110; ++i)
    EXPECT_LT(s.at(i), s.at(i - 1)) << i;
}

TEST(LRScheduleTest, NoWarmup) {
  LRSchedule s = cosine(0, 4);
  EXPECT_DOUBLE_EQ(s.at(0), 6e-4);
  EXPECT_DOUBLE_EQ(s.at(2), (6e-4 + 6e-5) / 2);
}

TEST(LRScheduleTest, WarmupLongerThanRun) {
  LRSchedule s = cosine(10, 5);
  EXPECT_DOUBLE_EQ(s.at(4), 6e-4 * 5 / 10);
}

TEST(LRScheduleTest, ConstantKeepsWarmup) {
  LRSchedule s = cosine(4, 100);
  s.kind = LRSchedule::Kind::Constant;
  EXPECT_DOUBLE_EQ(s.at(0), 6e-4 / 4);
  EXPECT_DOUBLE_EQ(s.at(3), 6e-4);
  EXPECT_DOUBLE_EQ(s.at(50), 6e-4);
  EXPECT_DOUBLE_EQ(s.at(99), 6e-4);
}

TEST(LRScheduleTest, KindNames) {
  EXPECT_EQ(parseScheduleKind("cosine"), LRSchedule::Kind::Cosine);
  EXPECT_EQ(parseScheduleKind("constant"), LRSchedule::Kind::Constant);
  EXPECT_EQ(parseScheduleKind("linear"), std::nullopt);
  EXPECT_STREQ(scheduleKindName(LRSchedule::Kind::Cosine), "cosine");
}

} // namespace
