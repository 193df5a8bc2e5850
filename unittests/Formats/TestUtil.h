//===- TestUtil.h - Scratch directories and raw files for tests -*- C++ -*-===//

#ifndef GPTC_UNITTESTS_FORMATS_TESTUTIL_H
#define GPTC_UNITTESTS_FORMATS_TESTUTIL_H

#include "gptc/Formats/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace gptc::test {

/// A fresh directory per test, removed afterwards.
class TempDirTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "gptc-formats-XXXXXX")
            .string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  std::string pathOf(const std::string &name) const {
    return (dir / name).string();
  }
  std::vector<std::string> listDir() const {
    std::vector<std::string> names;
    for (const auto &entry : std::filesystem::directory_iterator(dir))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::filesystem::path dir;
};

inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// The bytes of a trivially copyable value, as the host lays it out.
template <typename T> std::string bytesOf(const T &value) {
  return std::string(reinterpret_cast<const char *>(&value), sizeof(T));
}

/// Runs `body`, expecting a FormatError whose message starts with `path` and
/// contains each of `words`.
template <typename F>
void expectFormatError(F body, const std::string &path,
                       std::initializer_list<std::string> words) {
  try {
    body();
    ADD_FAILURE() << "expected a FormatError about " << path;
  } catch (const FormatError &e) {
    std::string message = e.what();
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const std::string &word : words)
      EXPECT_NE(message.find(word), std::string::npos)
          << "'" << word << "' not in: " << message;
  }
}

} // namespace gptc::test

#endif // GPTC_UNITTESTS_FORMATS_TESTUTIL_H
