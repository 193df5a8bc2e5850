//===- TrainStateTest.cpp - Tests for the resumable training state --------===//

#include "gptc/Train/TrainState.h"

#include "TestUtil.h"

using namespace gptc;
using namespace gptc::test;
using namespace gptc::train;

namespace {

const models::GPT2Config kConfig{"gpt2-tiny", 1, 2, 32, 16, 256};

TrainOptions options() {
  TrainOptions o;
  o.batch = 2;
  o.seq = 8;
  o.steps = 30;
  o.schedule.lr = 1e-3;
  o.seed = 77;
  return o;
}

TrainState state() {
  TrainState s;
  s.params["wte.weight"] = exec::HostTensor::floats({2, 2}, 0.5f);
  s.adamM["wte.weight"] = exec::HostTensor::floats({2, 2}, 0.25f);
  s.adamV["wte.weight"] = exec::HostTensor::floats({2, 2}, 0.125f);
  s.step = 12;
  s.updates = 10;
  s.skips = 2;
  s.data = {3, 4};
  return s;
}

TEST(TrainStateTest, RoundTrip) {
  Checkpoint ckpt = toCheckpoint(state(), kConfig, options());
  EXPECT_EQ(ckpt.metadata.at("lr"), "0.001");
  EXPECT_EQ(ckpt.metadata.at("seed"), "77");
  EXPECT_EQ(ckpt.metadata.at("lr_schedule"), "cosine");
  TrainState back = fromCheckpoint(ckpt, "ck", kConfig, options());
  EXPECT_EQ(back.step, 12);
  EXPECT_EQ(back.updates, 10);
  EXPECT_EQ(back.skips, 2);
  EXPECT_EQ(back.data.epoch, 3);
  EXPECT_EQ(back.data.window, 4);
  EXPECT_EQ(back.adamV.at("wte.weight").f32,
            state().adamV.at("wte.weight").f32);
  models::GPT2Config c = configOf(ckpt, "ck");
  EXPECT_EQ(c.name, "gpt2-tiny");
  EXPECT_EQ(c.nEmbd, 32);
  EXPECT_EQ(c.vocabSize, 256);
}

TEST(TrainStateTest, OtherConfigIsRejected) {
  Checkpoint ckpt = toCheckpoint(state(), kConfig, options());
  models::GPT2Config wider = kConfig;
  wider.nEmbd = 64;
  TrainOptions longer = options();
  longer.seq = 16;
  expectFormatError([&] { fromCheckpoint(ckpt, "ck", wider, longer); }, "ck",
                    {"another configuration", "n_embd=32 (this run: 64)",
                     "seq=8 (this run: 16)"});
  // Hyper-parameters may change on resume (a longer run, say).
  TrainOptions more = options();
  more.steps = 100;
  more.schedule.lr = 5e-4;
  EXPECT_EQ(fromCheckpoint(ckpt, "ck", kConfig, more).step, 12);
}

TEST(TrainStateTest, MalformedMetadata) {
  Checkpoint ckpt = toCheckpoint(state(), kConfig, options());
  ckpt.metadata["step"] = "12x";
  expectFormatError([&] { fromCheckpoint(ckpt, "ck", kConfig, options()); },
                    "ck", {"'step'", "not an integer"});
  ckpt.metadata.erase("n_head");
  expectFormatError([&] { configOf(ckpt, "ck"); }, "ck", {"'n_head'"});
  ckpt.metadata["gptc.train_state"] = "2";
  expectFormatError([&] { configOf(ckpt, "ck"); }, "ck", {"version '2'"});
}

} // namespace
