//===- BrownCorpusTest.cpp - The whole Brown corpus through the tokenizer -===//
//
// Encodes .deps/brown/brown.txt (500 documents, each after "<|endoftext|>",
// as scripts/fetch-data.sh writes it) the way `gptc tokenize` does, checks the
// ids against GPT-2's and the decoded bytes against the file, and prints the
// encoding speed.
//
//===----------------------------------------------------------------------===//

#include "TestData.h"

#include "gptc/Support/Sha256.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

namespace gptc::test {
namespace {

TEST(BrownCorpus, EncodesToGpt2IdsAndDecodesByteExact) {
  std::ifstream in(depsDir() + "/brown/brown.txt", std::ios::binary);
  ASSERT_TRUE(in) << fetchHint();
  std::ostringstream buffer;
  buffer << in.rdbuf();
  std::string text = std::move(buffer).str();

  // A fresh tokenizer, so the piece cache starts cold as in `gptc tokenize`.
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = std::make_unique<Tokenizer>(vocabDir());
  } catch (const TokenizerError &e) {
    FAIL() << fetchHint() << "\n" << e.what();
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<int> ids = tokenizer->encode(text, /*allowSpecial=*/true);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::cout << "[ BROWN    ] " << text.size() << " bytes -> " << ids.size()
            << " tokens in " << seconds
            << " s: " << static_cast<long>(ids.size() / seconds)
            << " tokens/s\n";
  ::testing::Test::RecordProperty("tokens_per_second",
                                  std::to_string(ids.size() / seconds));

  EXPECT_EQ(std::count(ids.begin(), ids.end(), Tokenizer::kEndOfText), 500);
  // GPT-2's ids for this file, from the replica of OpenAI's encoder.py that
  // TokenizerTest.cpp describes (document by document, EOT between): their
  // count and the SHA-256 of them as little-endian int32.
  EXPECT_EQ(ids.size(), 1304451u);
  std::string bytes;
  for (int id : ids)
    for (int shift = 0; shift < 32; shift += 8)
      bytes += static_cast<char>(uint32_t(id) >> shift);
  EXPECT_EQ(sha256Hex(bytes),
            "aedc363549ef4608350b14d4877c7f44324ef4c10759f7e2f5941d7baeb19df2");

  EXPECT_TRUE(tokenizer->decode(ids) == text)
      << "decode(encode(brown.txt)) differs from brown.txt";
}

} // namespace
} // namespace gptc::test
