//===- CheckpointTest.cpp - Tests for checkpoint files and atomicity ------===//

#include "gptc/Train/Checkpoint.h"

#include "TestUtil.h"
#include "gptc/Formats/Safetensors.h"

#include <csignal>
#include <limits>
#include <sys/mount.h>
#include <sys/resource.h>

using namespace gptc;
using namespace gptc::test;
using namespace gptc::train;
namespace fs = std::filesystem;

namespace {

Checkpoint sample(float base, int64_t n = 6) {
  Checkpoint c;
  for (const char *name : {"wte.weight", "ln_f.bias"}) {
    exec::HostTensor t = exec::HostTensor::floats({2, n / 2});
    for (int64_t i = 0; i < n; ++i)
      t.f32[i] = base + float(i);
    c.params[name] = t;
    for (float &x : t.f32)
      x *= 0.5f;
    c.adamM[name] = t;
    for (float &x : t.f32)
      x *= x;
    c.adamV[name] = t;
  }
  c.metadata["step"] = "3";
  c.metadata["note"] = "x y";
  return c;
}

void expectSame(const Checkpoint &a, const Checkpoint &b) {
  auto same = [](const auto &x, const auto &y) {
    ASSERT_EQ(x.size(), y.size());
    for (const auto &[name, t] : x) {
      EXPECT_EQ(t.shape, y.at(name).shape) << name;
      EXPECT_EQ(t.f32, y.at(name).f32) << name;
    }
  };
  same(a.params, b.params);
  same(a.adamM, b.adamM);
  same(a.adamV, b.adamV);
  EXPECT_EQ(a.metadata, b.metadata);
}

using CheckpointTest = TempDirTest;

TEST_F(CheckpointTest, RoundTrip) {
  std::string folder = saveCheckpoint(dir.string(), 12, sample(1));
  EXPECT_EQ(folder, pathOf("step_000012"));
  EXPECT_EQ(listDir(), std::vector<std::string>{"step_000012"});
  expectSame(loadCheckpoint(folder), sample(1));
  EXPECT_EQ(readBytes(folder + "/DONE"), "step 12\n");
}

TEST_F(CheckpointTest, ModelFileIsHuggingFaceStyle) {
  std::string folder = saveCheckpoint(dir.string(), 1, sample(1));
  SafetensorsFile model = SafetensorsFile::open(folder + "/model.safetensors");
  ASSERT_EQ(model.tensors().size(), 2u);
  EXPECT_NE(model.find("wte.weight"), nullptr);
  EXPECT_EQ(model.find("wte.weight")->dtype, DType::F32);
  EXPECT_EQ(model.metadata().at("format"), "pt");
  SafetensorsFile state = SafetensorsFile::open(folder + "/state.safetensors");
  EXPECT_NE(state.find("adam_m.wte.weight"), nullptr);
  EXPECT_NE(state.find("adam_v.ln_f.bias"), nullptr);
  EXPECT_EQ(state.metadata().at("note"), "x y");
}

TEST_F(CheckpointTest, LatestSkipsIncompleteFolders) {
  EXPECT_EQ(latestCheckpoint(pathOf("none")), "");
  EXPECT_EQ(latestCheckpoint(dir.string()), "");
  saveCheckpoint(dir.string(), 5, sample(1));
  saveCheckpoint(dir.string(), 20, sample(2));
  // What crashes leave behind: a renamed folder without DONE, a temporary
  // folder, and unrelated names.
  std::string noDone = saveCheckpoint(dir.string(), 30, sample(3));
  fs::remove(noDone + "/DONE");
  fs::create_directory(pathOf("step_000040.tmp"));
  writeBytes(pathOf("step_000040.tmp/DONE"), "");
  fs::create_directory(pathOf("step_x"));
  writeBytes(pathOf("step_x/DONE"), "");
  EXPECT_EQ(latestCheckpoint(dir.string()), pathOf("step_000020"));
  // Steps compare as numbers, not strings.
  saveCheckpoint(dir.string(), 1000000, sample(4));
  EXPECT_EQ(latestCheckpoint(dir.string()), pathOf("step_1000000"));
}

TEST_F(CheckpointTest, ReplacesLeftoversButNotACompleteCheckpoint) {
  fs::create_directory(pathOf("step_000007.tmp"));
  writeBytes(pathOf("step_000007.tmp/junk"), "x");
  std::string folder = saveCheckpoint(dir.string(), 7, sample(1));
  fs::remove(folder + "/DONE"); // as if the process died before DONE
  saveCheckpoint(dir.string(), 7, sample(2));
  expectSame(loadCheckpoint(folder), sample(2));
  EXPECT_EQ(listDir(), std::vector<std::string>{"step_000007"});
  expectFormatError([&] { saveCheckpoint(dir.string(), 7, sample(3)); }, folder,
                    {"already there"});
  expectSame(loadCheckpoint(folder), sample(2));
}

TEST_F(CheckpointTest, RejectsIncompleteTruncatedOrNonFinite) {
  std::string folder = saveCheckpoint(dir.string(), 1, sample(1));
  std::string model = folder + "/model.safetensors";
  std::string state = folder + "/state.safetensors";
  std::string goodModel = readBytes(model), goodState = readBytes(state);

  fs::remove(folder + "/DONE");
  expectFormatError([&] { loadCheckpoint(folder); }, folder, {"DONE"});
  writeBytes(folder + "/DONE", "step 1\n");

  writeBytes(model, goodModel.substr(0, goodModel.size() - 5));
  expectFormatError([&] { loadCheckpoint(folder); }, model, {"truncated"});

  Checkpoint nan = sample(1);
  nan.params["ln_f.bias"].f32[4] = std::numeric_limits<float>::quiet_NaN();
  SafetensorsWriter w;
  for (const auto &[name, t] : nan.params)
    w.add(name, DType::F32, t.shape, t.data());
  w.write(model);
  expectFormatError([&] { loadCheckpoint(folder); }, model,
                    {"ln_f.bias", "NaN", "index 4"});
  writeBytes(model, goodModel);

  Checkpoint inf = sample(1);
  inf.adamV["wte.weight"].f32[0] = std::numeric_limits<float>::infinity();
  SafetensorsWriter ws;
  for (const auto &[name, t] : inf.adamV)
    ws.add("adam_v." + name, DType::F32, t.shape, t.data());
  for (const auto &[name, t] : inf.adamM)
    ws.add("adam_m." + name, DType::F32, t.shape, t.data());
  ws.write(state);
  expectFormatError([&] { loadCheckpoint(folder); }, state,
                    {"adam_v.wte.weight", "infinity"});

  SafetensorsWriter missing;
  for (const auto &[name, t] : inf.adamM)
    missing.add("adam_m." + name, DType::F32, t.shape, t.data());
  missing.write(state);
  expectFormatError([&] { loadCheckpoint(folder); }, state,
                    {"no AdamW moments"});
  writeBytes(state, goodState);
  expectSame(loadCheckpoint(folder), sample(1));
}

/// Lowers RLIMIT_FSIZE for its lifetime: writes past `bytes` fail with EFBIG
/// (SIGXFSZ ignored), the way a full disk fails them with ENOSPC.
class FileSizeLimit {
public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    handler_ = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = saved_;
    small.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &small);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, handler_);
  }

private:
  struct rlimit saved_;
  void (*handler_)(int);
};

TEST_F(CheckpointTest, FailedWriteLeavesPreviousCheckpointWhole) {
  std::string first = saveCheckpoint(dir.string(), 1, sample(1));
  // 10 bytes: model.safetensors fails; 200 kB: model.safetensors (160 kB)
  // is written and state.safetensors (320 kB) fails.
  for (auto [limit, file] :
       {std::pair<rlim_t, const char *>{10, "model"}, {200000, "state"}}) {
    std::string path = pathOf("step_000002.tmp/") + file + ".safetensors";
    {
      FileSizeLimit small(limit);
      expectFormatError(
          [&] { saveCheckpoint(dir.string(), 2, sample(2, 20000)); }, path,
          {"cannot write", "File too large"});
    }
    EXPECT_EQ(listDir(), std::vector<std::string>{"step_000001"}) << file;
    EXPECT_EQ(latestCheckpoint(dir.string()), first);
    expectSame(loadCheckpoint(first), sample(1));
  }
}

// The real thing where the test may mount: a 64 KiB tmpfs that fills up.
TEST_F(CheckpointTest, FullDiskLeavesPreviousCheckpointWhole) {
  std::string mnt = pathOf("disk");
  fs::create_directory(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount(path.c_str()); }
  } unmount{mnt};
  std::string first = saveCheckpoint(mnt, 1, sample(1));
  expectFormatError([&] { saveCheckpoint(mnt, 2, sample(2, 20000)); },
                    mnt + "/step_000002.tmp/model.safetensors",
                    {"No space left on device"});
  std::vector<std::string> names;
  for (const auto &entry : fs::directory_iterator(mnt))
    names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"step_000001"});
  EXPECT_EQ(latestCheckpoint(mnt), first);
  expectSame(loadCheckpoint(first), sample(1));
}

} // namespace
