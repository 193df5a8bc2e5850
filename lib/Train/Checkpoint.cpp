//===- Checkpoint.cpp - training checkpoints on disk ----------------------===//

#include "gptc/Train/Checkpoint.h"

#include "gptc/Formats/AtomicFile.h"
#include "gptc/Formats/Error.h"
#include "gptc/Formats/Safetensors.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

namespace fs = std::filesystem;

namespace gptc::train {

namespace {
const char *const kModelFile = "model.safetensors";
const char *const kStateFile = "state.safetensors";
const char *const kDoneFile = "DONE";
const char *const kMomentM = "adam_m.";
const char *const kMomentV = "adam_v.";

void syncDirectory(const fs::path &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // Some file systems cannot sync a directory (EINVAL); nothing to lose there.
  if (fd < 0 || (::fsync(fd) != 0 && errno != EINVAL)) {
    int err = errno;
    if (fd >= 0)
      ::close(fd);
    throw FormatError(dir.string() + ": cannot sync: " + std::strerror(err));
  }
  ::close(fd);
}

void addTensors(SafetensorsWriter &writer, const std::string &prefix,
                const std::map<std::string, exec::HostTensor> &tensors) {
  for (const auto &[name, t] : tensors)
    writer.add(prefix + name, DType::F32, t.shape, t.data());
}

/// The step of a folder named step_<digits>, or -1.
int64_t stepOfName(const std::string &name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5)
    return -1;
  int64_t step = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9' || step > (INT64_MAX - 9) / 10)
      return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

exec::HostTensor finiteTensor(const SafetensorsFile &file,
                              const TensorInfo &t) {
  if (t.dtype != DType::F32)
    throw FormatError(file.path() + ": tensor '" + t.name + "' has dtype " +
                      dtypeName(t.dtype) + ", expected F32");
  exec::HostTensor h;
  h.shape = t.shape;
  h.f32 = file.toFloat(t);
  for (size_t i = 0; i < h.f32.size(); ++i)
    if (!std::isfinite(h.f32[i]))
      throw FormatError(file.path() + ": tensor '" + t.name + "' holds " +
                        (std::isnan(h.f32[i]) ? "NaN" : "an infinity") +
                        " at index " + std::to_string(i));
  return h;
}
} // namespace

std::string checkpointName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%06lld", (long long)step);
  return name;
}

std::string saveCheckpoint(const std::string &dir, int64_t step,
                           const Checkpoint &ckpt) {
  fs::path root(dir);
  fs::path final = root / checkpointName(step);
  fs::path temp = root / (checkpointName(step) + ".tmp");
  std::error_code ec;
  if (fs::exists(final / kDoneFile, ec))
    throw FormatError(final.string() + ": a complete checkpoint of step " +
                      std::to_string(step) + " is already there");
  try {
    fs::create_directories(root);
    fs::remove_all(temp); // left by a crash: never complete
    fs::create_directory(temp);

    SafetensorsWriter model;
    addTensors(model, "", ckpt.params);
    model.setMetadata("format", "pt"); // what Hugging Face's loader expects
    model.write((temp / kModelFile).string());

    SafetensorsWriter state;
    addTensors(state, kMomentM, ckpt.adamM);
    addTensors(state, kMomentV, ckpt.adamV);
    for (const auto &[key, value] : ckpt.metadata)
      state.setMetadata(key, value);
    state.write((temp / kStateFile).string());

    fs::remove_all(final); // a folder without DONE: a crash after the rename
    fs::rename(temp, final);
    syncDirectory(root);
  } catch (const fs::filesystem_error &e) {
    fs::remove_all(temp, ec);
    throw FormatError(e.path1().string() + ": " + e.code().message());
  } catch (const FormatError &) {
    fs::remove_all(temp, ec);
    throw;
  }
  try {
    std::string done = "step " + std::to_string(step) + "\n";
    writeFileAtomically((final / kDoneFile).string(), done.data(), done.size());
  } catch (const FormatError &) {
    fs::remove_all(final, ec);
    throw;
  }
  return final.string();
}

std::string latestCheckpoint(const std::string &dir) {
  std::error_code ec;
  int64_t best = -1;
  fs::path bestPath;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    int64_t step = stepOfName(entry.path().filename().string());
    if (step > best && fs::is_regular_file(entry.path() / kDoneFile, ec)) {
      best = step;
      bestPath = entry.path();
    }
  }
  return bestPath.string();
}

Checkpoint loadCheckpoint(const std::string &folder) {
  fs::path root(folder);
  std::error_code ec;
  if (!fs::is_regular_file(root / kDoneFile, ec))
    throw FormatError(folder + ": not a complete checkpoint (no " + kDoneFile +
                      " file)");
  Checkpoint ckpt;
  SafetensorsFile model = SafetensorsFile::open((root / kModelFile).string());
  for (const TensorInfo &t : model.tensors())
    ckpt.params.emplace(t.name, finiteTensor(model, t));

  SafetensorsFile state = SafetensorsFile::open((root / kStateFile).string());
  ckpt.metadata = state.metadata();
  for (const TensorInfo &t : state.tensors()) {
    const std::string &name = t.name;
    bool isM = name.rfind(kMomentM, 0) == 0;
    if (!isM && name.rfind(kMomentV, 0) != 0)
      throw FormatError(state.path() + ": unexpected tensor '" + name +
                        "' (expected adam_m.<param> or adam_v.<param>)");
    auto &moments = isM ? ckpt.adamM : ckpt.adamV;
    std::string param = name.substr(std::strlen(isM ? kMomentM : kMomentV));
    auto p = ckpt.params.find(param);
    if (p == ckpt.params.end() || p->second.shape != t.shape)
      throw FormatError(state.path() + ": tensor '" + name +
                        "' matches no parameter of the same shape in " +
                        model.path());
    moments.emplace(param, finiteTensor(state, t));
  }
  for (const auto &[name, t] : ckpt.params)
    if (!ckpt.adamM.count(name) || !ckpt.adamV.count(name))
      throw FormatError(state.path() + ": no AdamW moments for parameter '" +
                        name + "'");
  return ckpt;
}

} // namespace gptc::train
