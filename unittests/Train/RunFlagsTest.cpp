//===- RunFlagsTest.cpp - the run flags both trainers share ---------------===//

#include "gptc/Train/RunFlags.h"

#include <gtest/gtest.h>

#include <functional>

using namespace gptc;
using namespace gptc::train;

// The defaults pass; each bad setting gets its one line, the same in gptc
// train and a compiled training program.
TEST(RunFlags, EachBadSettingGetsItsLine) {
  EXPECT_EQ(checkRunFlags(RunFlags{}), "");
  const std::pair<std::function<void(RunFlags &)>, std::string> cases[] = {
      {[](RunFlags &f) { f.schedule = "linear"; },
       "unknown --lr-schedule 'linear' (cosine, constant)"},
      {[](RunFlags &f) { f.steps = 0; }, "--steps must be at least 1, got 0"},
      {[](RunFlags &f) { f.gradAccum = 0; },
       "--grad-accum must be at least 1, got 0"},
      {[](RunFlags &f) { f.warmup = -1; },
       "--warmup must be at least 0, got -1"},
      {[](RunFlags &f) { f.valBatches = 0; },
       "--val-batches must be at least 1, got 0"},
      {[](RunFlags &f) { f.lossScaleWindow = 0; },
       "--loss-scale-window must be at least 1, got 0"},
      {[](RunFlags &f) { f.lossScale = 0; },
       "--loss-scale must be a positive number"},
      {[](RunFlags &f) { f.minLr = -1e-5; },
       "--lr and --min-lr must be non-negative"},
      {[](RunFlags &f) { f.ckptEveryGiven = true; },
       "--ckpt-every needs --ckpt-dir"},
      {[](RunFlags &f) { f.resume = true; }, "--resume needs --ckpt-dir"},
      {[](RunFlags &f) {
         f.ckptDir = "run";
         f.resume = true;
         f.initFrom = "w.safetensors";
       },
       "--resume and --init-from exclude each other"},
      {[](RunFlags &f) { f.valBatchesGiven = true; },
       "--val-every and --val-batches need --val-data"},
  };
  for (const auto &[spoil, message] : cases) {
    RunFlags f;
    spoil(f);
    EXPECT_EQ(checkRunFlags(f), message);
  }
  // Given --val-data, --val-every is fine.
  RunFlags val;
  val.valData = "val.bin";
  val.valEveryGiven = true;
  EXPECT_EQ(checkRunFlags(val), "");
}

TEST(RunFlags, TrainOptionsCarryTheFlags) {
  RunFlags f;
  f.steps = 7;
  f.schedule = "constant";
  f.lr = 1e-3;
  f.warmup = 2;
  f.lossScale = 1024;
  OptimizerOptions optimizer;
  optimizer.clip = 0.5;
  TrainOptions o = trainOptions(f, 4, 32, optimizer);
  EXPECT_EQ(o.batch, 4);
  EXPECT_EQ(o.seq, 32);
  EXPECT_EQ(o.steps, 7);
  EXPECT_EQ(o.schedule.kind, LRSchedule::Kind::Constant);
  EXPECT_EQ(o.schedule.lr, 1e-3);
  EXPECT_EQ(o.schedule.warmup, 2);
  EXPECT_EQ(o.schedule.steps, 7);
  EXPECT_EQ(o.initLossScale, 1024);
  EXPECT_EQ(o.optimizer.clip, 0.5);
  EXPECT_EQ(o.seed, 1337u);
}
