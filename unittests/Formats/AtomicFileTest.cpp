//===- AtomicFileTest.cpp - Tests for AtomicFile --------------------------===//

#include "gptc/Formats/AtomicFile.h"
#include "TestUtil.h"

#include <csignal>
#include <sys/resource.h>

using namespace gptc;
using namespace gptc::test;

namespace {

using AtomicFileTest = TempDirTest;

TEST_F(AtomicFileTest, WritesNewFileAndReplacesOld) {
  std::string path = pathOf("out.bin");
  writeFileAtomically(path, "first", 5);
  EXPECT_EQ(readBytes(path), "first");
  writeFileAtomically(path, "second version", 14);
  EXPECT_EQ(readBytes(path), "second version");
  EXPECT_EQ(listDir(), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFileTest, RelativePathInCurrentDirectory) {
  std::filesystem::path saved = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  writeFileAtomically("rel.bin", "abc", 3);
  std::filesystem::current_path(saved);
  EXPECT_EQ(readBytes(pathOf("rel.bin")), "abc");
  EXPECT_EQ(listDir(), std::vector<std::string>{"rel.bin"});
}

TEST_F(AtomicFileTest, StreamsPiecesIntoTempUntilCommit) {
  std::string path = pathOf("out.bin");
  writeBytes(path, "old");
  AtomicFile file(path);
  EXPECT_EQ(file.tempPath(), path + ".tmp." + std::to_string(::getpid()));
  file.write("ab", 2);
  file.write("cd", 2);
  EXPECT_EQ(readBytes(path), "old") << "target changed before commit";
  file.commit();
  EXPECT_EQ(readBytes(path), "abcd");
  EXPECT_EQ(listDir(), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFileTest, DestroyedWithoutCommitLeavesOldFile) {
  std::string path = pathOf("out.bin");
  writeBytes(path, "old");
  {
    AtomicFile file(path);
    file.write("new", 3);
  }
  EXPECT_EQ(readBytes(path), "old");
  EXPECT_EQ(listDir(), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFileTest, MissingDirectoryThrowsAndCreatesNothing) {
  std::string path = pathOf("no-such-dir/out.bin");
  expectFormatError([&] { writeFileAtomically(path, "x", 1); }, path,
                    {"cannot create", "No such file or directory"});
  EXPECT_TRUE(listDir().empty());
}

// A real write failure: with RLIMIT_FSIZE below the data size, write(2)
// fails with EFBIG part-way through, as it would with ENOSPC.
TEST_F(AtomicFileTest, FailedWriteKeepsOldFileAndRemovesTemp) {
  std::string path = pathOf("ckpt.bin");
  writeBytes(path, "old contents");

  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto savedHandler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);

  std::string big(1 << 20, 'x');
  expectFormatError([&] { writeFileAtomically(path, big.data(), big.size()); },
                    path, {"cannot write", "File too large"});

  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, savedHandler);
  EXPECT_EQ(readBytes(path), "old contents");
  EXPECT_EQ(listDir(), std::vector<std::string>{"ckpt.bin"});
}

TEST_F(AtomicFileTest, FailedRenameKeepsTargetAndRemovesTemp) {
  // A non-empty directory cannot be replaced by a file.
  std::string path = pathOf("target");
  std::filesystem::create_directory(path);
  writeBytes(path + "/inside", "keep");
  expectFormatError([&] { writeFileAtomically(path, "x", 1); }, path,
                    {"cannot rename", "Is a directory"});
  EXPECT_EQ(readBytes(path + "/inside"), "keep");
  EXPECT_EQ(listDir(), std::vector<std::string>{"target"});
}

TEST_F(AtomicFileTest, ReplacesStaleTempFromSamePid) {
  std::string path = pathOf("out.bin");
  writeBytes(path + ".tmp." + std::to_string(::getpid()), "stale leftover");
  writeFileAtomically(path, "new", 3);
  EXPECT_EQ(readBytes(path), "new");
  EXPECT_EQ(listDir(), std::vector<std::string>{"out.bin"});
}

} // namespace
