//===- NVRTC.cpp - compile generated CUDA C++ to cubin --------------------===//
//
// libnvrtc is opened with dlopen (its few entry points declared here, so
// building needs no CUDA headers) and compiled sources are cached on disk by
// content hash.
//
//===----------------------------------------------------------------------===//

#include "gptc/Runtime/NVRTC.h"
#include "gptc/Formats/AtomicFile.h"
#include "gptc/Runtime/Backend.h"
#include "gptc/Support/Sha256.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace gptc::rt {

namespace {

// The subset of nvrtc.h we call; the ABI is stable across NVRTC versions.
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram *;

struct NvrtcApi {
  void *handle = nullptr;
  std::string error; // why it could not be loaded
  const char *(*getErrorString)(nvrtcResult);
  nvrtcResult (*version)(int *, int *);
  nvrtcResult (*createProgram)(nvrtcProgram *, const char *, const char *, int,
                               const char *const *, const char *const *);
  nvrtcResult (*destroyProgram)(nvrtcProgram *);
  nvrtcResult (*compileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*getCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*getCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*getProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*getProgramLog)(nvrtcProgram, char *);
  nvrtcResult (*getNumSupportedArchs)(int *);
  nvrtcResult (*getSupportedArchs)(int *);
};

template <typename F> bool bind(NvrtcApi &api, F &fn, const char *symbol) {
  fn = reinterpret_cast<F>(dlsym(api.handle, symbol));
  if (!fn)
    api.error = std::string("libnvrtc has no ") + symbol;
  return fn != nullptr;
}

NvrtcApi loadNvrtc() {
  NvrtcApi api;
  std::vector<std::string> candidates = {"libnvrtc.so.13", "libnvrtc.so"};
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *dir = std::getenv(var); dir && *dir)
      candidates.push_back(std::string(dir) + "/lib64/libnvrtc.so");
  candidates.push_back("/usr/local/cuda/lib64/libnvrtc.so.13");
  candidates.push_back("/usr/local/cuda/lib64/libnvrtc.so");
  for (const std::string &name : candidates)
    if ((api.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!api.handle) {
    api.error = "NVRTC not found: no libnvrtc.so.13 on the library path or "
                "in /usr/local/cuda/lib64 (install the CUDA 13 toolkit)";
    return api;
  }
  bool ok = bind(api, api.getErrorString, "nvrtcGetErrorString") &&
            bind(api, api.version, "nvrtcVersion") &&
            bind(api, api.createProgram, "nvrtcCreateProgram") &&
            bind(api, api.destroyProgram, "nvrtcDestroyProgram") &&
            bind(api, api.compileProgram, "nvrtcCompileProgram") &&
            bind(api, api.getCUBINSize, "nvrtcGetCUBINSize") &&
            bind(api, api.getCUBIN, "nvrtcGetCUBIN") &&
            bind(api, api.getProgramLogSize, "nvrtcGetProgramLogSize") &&
            bind(api, api.getProgramLog, "nvrtcGetProgramLog") &&
            bind(api, api.getNumSupportedArchs, "nvrtcGetNumSupportedArchs") &&
            bind(api, api.getSupportedArchs, "nvrtcGetSupportedArchs");
  if (!ok)
    api.handle = nullptr;
  return api;
}

const NvrtcApi &nvrtc() {
  static NvrtcApi api = loadNvrtc();
  if (!api.handle)
    throw DeviceError(api.error);
  return api;
}

void check(const NvrtcApi &api, nvrtcResult r, const char *what) {
  if (r != 0)
    throw DeviceError(std::string("NVRTC: ") + what + " failed: " +
                      api.getErrorString(r));
}

/// The first line of an NVRTC log that reports an error, else its first line.
std::string firstError(const std::string &log) {
  size_t at = log.find("error");
  size_t begin = at == std::string::npos ? 0 : log.rfind('\n', at);
  begin = begin == std::string::npos || at == std::string::npos ? 0 : begin + 1;
  size_t end = log.find('\n', begin);
  return log.substr(begin, end == std::string::npos ? std::string::npos
                                                    : end - begin);
}

/// The integer right before `suffix` in `line`, or -1.
int numberBefore(const std::string &line, const std::string &suffix) {
  size_t at = line.find(suffix);
  if (at == std::string::npos)
    return -1;
  size_t end = at;
  while (end > 0 && line[end - 1] == ' ')
    --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1])))
    --begin;
  if (begin == end)
    return -1;
  return std::stoi(line.substr(begin, end - begin));
}

std::string readWholeFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return {};
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string malformedArch(const std::string &arch) {
  return "unknown GPU architecture '" + arch +
         "' (expected sm_80, sm_86, sm_89, sm_90, sm_90a, ...)";
}

} // namespace

bool isSupportedArch(const std::string &arch) {
  if (arch.size() < 5 || arch.compare(0, 3, "sm_") != 0)
    return false;
  size_t i = 3;
  while (i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i])))
    ++i;
  if (i == 3 || std::stoi(arch.substr(3, i - 3)) < 80)
    return false; // bf16 tensor cores and cp.async need sm_80
  return i == arch.size() || (i + 1 == arch.size() && arch[i] == 'a');
}

std::vector<std::string> nvrtcOptions(const std::string &arch) {
  if (!isSupportedArch(arch))
    throw DeviceError(malformedArch(arch));
  // No --use_fast_math: the CPU reference computes expf/logf/tanhf/erff
  // exactly, and the checks against it should only see summation-order
  // differences. Kernels call the approximate special-function unit where
  // they can afford it, visibly in their source (fastExp2 in types.cuh:
  // the tensor-core flash attention's softmax).
  return {"-std=c++17", "--gpu-architecture=" + arch, "-default-device",
          "--ptxas-options=-v", "-lineinfo"};
}

std::string nvrtcArchProblem(const std::string &arch) {
  if (!isSupportedArch(arch))
    return malformedArch(arch);
  std::vector<int> known;
  try {
    const NvrtcApi &api = nvrtc();
    int n = 0;
    check(api, api.getNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
    known.resize(size_t(std::max(n, 0)));
    check(api, api.getSupportedArchs(known.data()), "nvrtcGetSupportedArchs");
  } catch (const DeviceError &) {
    return ""; // no NVRTC: whoever compiles says so
  }
  const int number = std::stoi(arch.substr(3));
  if (std::find(known.begin(), known.end(), number) != known.end())
    return "";
  std::string list;
  for (int k : known)
    if (k >= 80) // (isSupportedArch's floor)
      list += (list.empty() ? "sm_" : ", sm_") + std::to_string(k);
  return "NVRTC " + nvrtcVersion() + " does not compile for " + arch +
         " (it does for " + (list.empty() ? "none from sm_80 on" : list) + ")";
}

std::string nvrtcVersion() {
  const NvrtcApi &api = nvrtc();
  int major = 0, minor = 0;
  check(api, api.version(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

void parsePtxasInfo(const std::string &log, CompiledKernel &k) {
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string::npos)
      end = log.size();
    std::string line = log.substr(pos, end - pos);
    pos = end + 1;
    auto raise = [](int &field, int value) {
      if (value >= 0)
        field = std::max(field, value);
    };
    if (line.find("registers") != std::string::npos) {
      raise(k.registers, numberBefore(line, "registers"));
      raise(k.sharedBytes, numberBefore(line, "bytes smem"));
      if (k.sharedBytes < 0)
        k.sharedBytes = 0;
    }
    if (line.find("stack frame") != std::string::npos) {
      raise(k.localBytes, numberBefore(line, "bytes stack frame"));
      raise(k.spillStores, numberBefore(line, "bytes spill stores"));
      raise(k.spillLoads, numberBefore(line, "bytes spill loads"));
    }
  }
}

CompiledKernel compileCuda(const std::string &source, const std::string &name,
                           const std::string &arch,
                           const std::vector<std::string> &extraOptions) {
  std::vector<std::string> options = nvrtcOptions(arch);
  options.insert(options.end(), extraOptions.begin(), extraOptions.end());
  const NvrtcApi &api = nvrtc();

  nvrtcProgram prog = nullptr;
  std::string file = name + ".cu";
  check(api,
        api.createProgram(&prog, source.c_str(), file.c_str(), 0, nullptr,
                          nullptr),
        "nvrtcCreateProgram");
  struct Destroy {
    const NvrtcApi &api;
    nvrtcProgram &prog;
    ~Destroy() { api.destroyProgram(&prog); }
  } destroy{api, prog};

  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  nvrtcResult compiled =
      api.compileProgram(prog, static_cast<int>(argv.size()), argv.data());

  CompiledKernel k;
  size_t logSize = 0;
  check(api, api.getProgramLogSize(prog, &logSize), "nvrtcGetProgramLogSize");
  k.log.assign(logSize, '\0');
  if (logSize)
    check(api, api.getProgramLog(prog, k.log.data()), "nvrtcGetProgramLog");
  while (!k.log.empty() && k.log.back() == '\0')
    k.log.pop_back();
  if (compiled != 0)
    throw DeviceError("NVRTC: " + name + " does not compile for " + arch +
                      ": " + firstError(k.log));

  size_t cubinSize = 0;
  check(api, api.getCUBINSize(prog, &cubinSize), "nvrtcGetCUBINSize");
  k.cubin.resize(cubinSize);
  check(api, api.getCUBIN(prog, reinterpret_cast<char *>(k.cubin.data())),
        "nvrtcGetCUBIN");
  parsePtxasInfo(k.log, k);
  return k;
}

std::string kernelCacheDir() {
  if (const char *dir = std::getenv("GPTC_CACHE_DIR"); dir && *dir)
    return dir;
  if (const char *dir = std::getenv("XDG_CACHE_HOME"); dir && *dir)
    return std::string(dir) + "/gptc";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/gptc";
  return {};
}

CompiledKernel
compileCachedKernel(const std::string &source, const std::string &name,
                    const std::string &arch,
                    const std::vector<std::string> &extraOptions) {
  std::vector<std::string> options = nvrtcOptions(arch);
  options.insert(options.end(), extraOptions.begin(), extraOptions.end());
  std::string dir = kernelCacheDir();
  if (dir.empty())
    return compileCuda(source, name, arch, extraOptions);

  // Fields are separated by NUL so no two different inputs hash alike.
  Sha256 h;
  const std::string version = nvrtcVersion();
  for (const std::string *field : {&version, &arch})
    h.update(field->c_str(), field->size() + 1);
  for (const std::string &o : options)
    h.update(o.c_str(), o.size() + 1);
  h.update(source);
  std::string stem = dir + "/" + h.hexDigest();

  // The log is written last: a present log means a complete entry.
  if (std::string log = readWholeFile(stem + ".log"); !log.empty()) {
    std::string cubin = readWholeFile(stem + ".cubin");
    if (!cubin.empty()) {
      CompiledKernel k;
      k.cubin.assign(cubin.begin(), cubin.end());
      k.log = log.substr(1); // a leading marker keeps an empty log non-empty
      parsePtxasInfo(k.log, k);
      return k;
    }
  }

  CompiledKernel k = compileCuda(source, name, arch, extraOptions);
  try {
    // A cache we cannot write is no error, only slower: a directory that
    // is not made fails the write, which is ignored below.
    std::error_code ignored;
    std::filesystem::create_directories(dir, ignored);
    writeFileAtomically(stem + ".cubin", k.cubin.data(), k.cubin.size());
    std::string marked = "#" + k.log;
    writeFileAtomically(stem + ".log", marked.data(), marked.size());
  } catch (const std::exception &) {
  }
  return k;
}

std::vector<uint8_t>
compileCached(const std::string &source, const std::string &name,
              const std::string &arch,
              const std::vector<std::string> &extraOptions) {
  return compileCachedKernel(source, name, arch, extraOptions).cubin;
}

} // namespace gptc::rt
