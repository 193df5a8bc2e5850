// bench/gpu/nvrtc_loader.h — NVRTC for the GPU tools (attention_bench,
// wgmma_probe), opened with dlopen as gptc's runtime opens it, so that the
// tools link only libcuda and run with whatever NVRTC the GPU machine has.
#pragma once

#include <dlfcn.h>
#include <nvrtc.h>

#include <string>
#include <vector>

namespace bench {

/// Compiles `source` (`name` in NVRTC's messages) with `options`: true with
/// the cubin and NVRTC's log (ptxas -v's lines, where asked for); false with
/// why in `log` (no libnvrtc, a symbol it lacks, or NVRTC's log).
inline bool nvrtcCubin(const std::string &source, const std::string &name,
                       const std::vector<std::string> &options,
                       std::string &cubin, std::string &log) {
  void *lib = nullptr;
  for (const char *candidate : {"libnvrtc.so.13", "libnvrtc.so",
                                "/usr/local/cuda/lib64/libnvrtc.so.13"})
    if ((lib = dlopen(candidate, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!lib) {
    log = "no libnvrtc for " + name;
    return false;
  }
  std::string missing;
  auto sym = [&](const char *s) {
    void *f = dlsym(lib, s);
    if (!f && missing.empty())
      missing = s;
    return f;
  };
  auto create = reinterpret_cast<decltype(&nvrtcCreateProgram)>(
      sym("nvrtcCreateProgram"));
  auto compile = reinterpret_cast<decltype(&nvrtcCompileProgram)>(
      sym("nvrtcCompileProgram"));
  auto logSize = reinterpret_cast<decltype(&nvrtcGetProgramLogSize)>(
      sym("nvrtcGetProgramLogSize"));
  auto getLog = reinterpret_cast<decltype(&nvrtcGetProgramLog)>(
      sym("nvrtcGetProgramLog"));
  auto cubinSize = reinterpret_cast<decltype(&nvrtcGetCUBINSize)>(
      sym("nvrtcGetCUBINSize"));
  auto getCubin =
      reinterpret_cast<decltype(&nvrtcGetCUBIN)>(sym("nvrtcGetCUBIN"));
  if (!missing.empty()) {
    log = "libnvrtc has no " + missing;
    return false;
  }
  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  nvrtcProgram prog;
  if (create(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr) !=
      NVRTC_SUCCESS) {
    log = "nvrtcCreateProgram failed for " + name;
    return false;
  }
  nvrtcResult r = compile(prog, int(argv.size()), argv.data());
  size_t n = 0;
  logSize(prog, &n);
  log.assign(n, '\0');
  getLog(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    log = "NVRTC failed on " + name + ":\n" + log;
    return false;
  }
  cubinSize(prog, &n);
  cubin.assign(n, '\0');
  getCubin(prog, cubin.data());
  return true;
}

} // namespace bench
