//===- TokenFileTest.cpp - Tests for llm.c and nanoGPT token files --------===//

#include "gptc/Formats/TokenFile.h"
#include "TestUtil.h"

using namespace gptc;
using namespace gptc::test;

namespace {

using TokenFileTest = TempDirTest;

/// An llm.c header: magic, version, count, then zeros.
std::string llmcHeader(int32_t magic, int32_t version, int32_t count) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  return std::string(reinterpret_cast<const char *>(header.data()), 1024);
}

std::string tokenBytes(const std::vector<uint16_t> &tokens) {
  return std::string(reinterpret_cast<const char *>(tokens.data()),
                     tokens.size() * 2);
}

TEST_F(TokenFileTest, LlmcShardRoundTrip) {
  std::vector<uint16_t> tokens = {50256, 15496, 11, 995, 0, 65535};
  std::string path = pathOf("shard.bin");
  writeTokenShard(path, tokens);

  std::string bytes = readBytes(path);
  EXPECT_EQ(bytes, llmcHeader(20240520, 1, 6) + tokenBytes(tokens));
  EXPECT_EQ(listDir(), std::vector<std::string>{"shard.bin"});

  TokenFile file = readTokenFile(path);
  EXPECT_EQ(file.format, TokenFormat::LlmC);
  EXPECT_EQ(file.tokens, tokens);
}

TEST_F(TokenFileTest, EmptyLlmcShardIsValid) {
  std::string path = pathOf("empty.bin");
  writeTokenShard(path, {});
  EXPECT_EQ(readBytes(path).size(), 1024u);
  TokenFile file = readTokenFile(path);
  EXPECT_EQ(file.format, TokenFormat::LlmC);
  EXPECT_TRUE(file.tokens.empty());
}

TEST_F(TokenFileTest, NanoGptRoundTrip) {
  std::vector<uint16_t> tokens = {464, 2068, 7586, 21831, 50256, 1};
  std::string path = pathOf("train.bin");
  writeBytes(path, tokenBytes(tokens));
  TokenFile file = readTokenFile(path);
  EXPECT_EQ(file.format, TokenFormat::NanoGPT);
  EXPECT_EQ(file.tokens, tokens);
}

TEST_F(TokenFileTest, LargeNanoGptFileIsNotMistakenForLlmc) {
  std::vector<uint16_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = uint16_t((i * 7919) % 50257);
  std::string path = pathOf("train.bin");
  writeBytes(path, tokenBytes(tokens));
  TokenFile file = readTokenFile(path);
  EXPECT_EQ(file.format, TokenFormat::NanoGPT);
  EXPECT_EQ(file.tokens, tokens);
}

TEST_F(TokenFileTest, MissingFile) {
  std::string path = pathOf("nope.bin");
  expectFormatError([&] { (void)readTokenFile(path); }, path,
                    {"cannot open", "No such file or directory"});
}

TEST_F(TokenFileTest, DirectoryIsUnreadable) {
  std::string path = dir.string();
  expectFormatError([&] { (void)readTokenFile(path); }, path,
                    {"cannot read", "Is a directory"});
}

TEST_F(TokenFileTest, EmptyFile) {
  std::string path = pathOf("empty.bin");
  writeBytes(path, "");
  expectFormatError([&] { (void)readTokenFile(path); }, path,
                    {"empty token file"});
}

TEST_F(TokenFileTest, OddSizeNanoGpt) {
  std::string path = pathOf("odd.bin");
  writeBytes(path, "abc");
  expectFormatError([&] { (void)readTokenFile(path); }, path,
                    {"odd size 3 bytes"});
}

TEST_F(TokenFileTest, UnsupportedLlmcVersion) {
  std::string path = pathOf("v2.bin");
  writeBytes(path, llmcHeader(20240520, 2, 1) + tokenBytes({7}));
  expectFormatError([&] { (void)readTokenFile(path); }, path,
                    {"unsupported llm.c shard version 2 (expected 1)"});
}

TEST_F(TokenFileTest, LlmcLengthMismatch) {
  std::string path = pathOf("short.bin");
  writeBytes(path, llmcHeader(20240520, 1, 10) + tokenBytes({1, 2, 3}));
  expectFormatError(
      [&] { (void)readTokenFile(path); }, path,
      {"length mismatch: header says 10 tokens, file holds 6 bytes of tokens"});
  writeBytes(path, llmcHeader(20240520, 1, -1));
  expectFormatError([&] { (void)readTokenFile(path); }, path,
                    {"length mismatch: header says -1 tokens"});
}

TEST_F(TokenFileTest, LlmcHeaderCutShort) {
  std::string path = pathOf("cut.bin");
  writeBytes(path, llmcHeader(20240520, 1, 0).substr(0, 100));
  expectFormatError([&] { (void)readTokenFile(path); }, path,
                    {"truncated llm.c shard", "1024", "file has 100"});
}

TEST_F(TokenFileTest, BadMagicWithMatchingLength) {
  std::string path = pathOf("magic.bin");
  // Count matches the file; padding is not zero (so only that rule applies).
  std::string header = llmcHeader(20240521, 1, 2);
  header[500] = 1;
  writeBytes(path, header + tokenBytes({1, 2}));
  expectFormatError(
      [&] { (void)readTokenFile(path); }, path,
      {"bad magic 0x0134d889", "expected 20240520 for an llm.c shard"});
}

TEST_F(TokenFileTest, BadMagicWithZeroPadding) {
  std::string path = pathOf("magic.bin");
  // Count does not match (a truncated shard) but the header's zero padding
  // gives it away.
  writeBytes(path, llmcHeader(0x12345678, 1, 1000) + tokenBytes({1, 2}));
  expectFormatError([&] { (void)readTokenFile(path); }, path,
                    {"bad magic 0x12345678"});
}

TEST_F(TokenFileTest, FailedShardWriteLeavesNothing) {
  std::string path = pathOf("missing-dir/shard.bin");
  expectFormatError(
      [&] {
        writeTokenShard(path, {1, 2, 3});
      },
      path, {"cannot create"});
  EXPECT_TRUE(listDir().empty());
}

} // namespace
