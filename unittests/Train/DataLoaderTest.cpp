//===- DataLoaderTest.cpp - Tests for the training data loader ------------===//

#include "gptc/Train/DataLoader.h"

#include "TestUtil.h"
#include "gptc/Formats/TokenFile.h"

#include <algorithm>
#include <set>

using namespace gptc;
using namespace gptc::test;
using namespace gptc::train;

namespace {

class DataLoaderTest : public TempDirTest {
protected:
  /// A shard holding 0, 1, ..., n-1.
  std::string counting(size_t n) {
    std::vector<uint16_t> tokens(n);
    for (size_t i = 0; i < n; ++i)
      tokens[i] = uint16_t(i);
    std::string path = pathOf("data.bin");
    writeTokenShard(path, tokens);
    return path;
  }
};

/// The first input token of a batch: identifies its window.
int32_t firstToken(const exec::Batch &b) { return b.tokens.i32[0]; }

TEST_F(DataLoaderTest, ConsecutiveWindowsAndTargets) {
  // B*T = 6; 20 tokens hold (20-1)/6 = 3 windows, starting at 0, 6, 12.
  DataLoader loader(counting(20), 2, 3, 100, false, 0);
  EXPECT_EQ(loader.numWindows(), 3);
  exec::Batch b = loader.next();
  EXPECT_EQ(b.tokens.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b.tokens.i32, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.targets.i32, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(firstToken(loader.next()), 6);
  b = loader.next();
  EXPECT_EQ(b.targets.i32.back(), 18); // token 19 is the unused tail
}

TEST_F(DataLoaderTest, WrapsToTheStart) {
  DataLoader loader(counting(20), 2, 3, 100, false, 0);
  for (int i = 0; i < 3; ++i)
    loader.next();
  EXPECT_EQ(loader.position().epoch, 1);
  EXPECT_EQ(loader.position().window, 0);
  EXPECT_EQ(firstToken(loader.next()), 0);
}

TEST_F(DataLoaderTest, ExactFitUsesTheLastToken) {
  DataLoader loader(counting(13), 2, 3, 100, false, 0); // 2 windows exactly
  EXPECT_EQ(loader.numWindows(), 2);
  loader.next();
  EXPECT_EQ(loader.next().targets.i32.back(), 12);
}

TEST_F(DataLoaderTest, ShuffleIsAPermutationPerEpoch) {
  std::string path = counting(6 * 50 + 1);
  DataLoader a(path, 2, 3, 1000, true, 9), b(path, 2, 3, 1000, true, 9);
  std::vector<int32_t> epoch0, epoch1;
  for (int i = 0; i < 50; ++i)
    epoch0.push_back(firstToken(a.next()));
  for (int i = 0; i < 50; ++i)
    epoch1.push_back(firstToken(a.next()));
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(firstToken(b.next()), epoch0[i]); // same seed, same order
  std::vector<int32_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(sorted[i], 6 * i); // every window once
  EXPECT_NE(epoch0, sorted);     // but not in order
  EXPECT_NE(epoch0, epoch1);     // and a new order each epoch

  DataLoader other(path, 2, 3, 1000, true, 10);
  std::vector<int32_t> seed10;
  for (int i = 0; i < 50; ++i)
    seed10.push_back(firstToken(other.next()));
  EXPECT_NE(seed10, epoch0);
}

TEST_F(DataLoaderTest, SeekReproducesTheSequence) {
  std::string path = counting(6 * 10 + 1);
  DataLoader a(path, 2, 3, 1000, true, 1);
  for (int i = 0; i < 13; ++i)
    a.next();
  DataPosition pos = a.position();
  EXPECT_EQ(pos.epoch, 1);
  EXPECT_EQ(pos.window, 3);
  std::vector<int32_t> rest;
  for (int i = 0; i < 12; ++i)
    rest.push_back(firstToken(a.next()));

  DataLoader b(path, 2, 3, 1000, true, 1);
  b.seek(pos);
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(firstToken(b.next()), rest[i]) << i;
  expectFormatError([&] { b.seek({0, 10}); }, path, {"outside", "10"});
}

TEST_F(DataLoaderTest, TooShort) {
  std::string path = counting(6);
  expectFormatError([&] { DataLoader(path, 2, 3, 100, false, 0); }, path,
                    {"holds 6 tokens", "B*T+1 = 7"});
}

TEST_F(DataLoaderTest, OutOfRangeIdAnywhere) {
  std::vector<uint16_t> tokens(100, 1);
  tokens[97] = 64; // in the unused tail: still rejected up front
  std::string path = pathOf("bad.bin");
  writeTokenShard(path, tokens);
  expectFormatError([&] { DataLoader(path, 2, 3, 64, false, 0); }, path,
                    {"token id 64", "index 97", "vocabulary of 64"});
}

TEST_F(DataLoaderTest, Unreadable) {
  std::string path = pathOf("missing.bin");
  expectFormatError([&] { DataLoader(path, 2, 3, 64, false, 0); }, path,
                    {"No such file"});
}

} // namespace
