//===- CudaApi.cpp - the CUDA driver and cuBLASLt through dlopen ----------===//
//
// Loads libcuda.so.1 and libcublasLt once per process and resolves every
// entry point the backend calls; see CudaApi.h.
//
//===----------------------------------------------------------------------===//

#if __has_include(<cuda.h>) && __has_include(<cublasLt.h>)

#include "CudaApi.h"

#include "gptc/Runtime/Backend.h"

#include <algorithm>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <string_view>
#include <vector>

namespace gptc::rt::cudaapi {

namespace {

// cuda.h maps some names to versioned symbols (cuMemAlloc -> cuMemAlloc_v2),
// which cuGetProcAddress finds under the base name. It also maps
// cuGraphInstantiate to another function, cuGraphInstantiateWithFlags; under
// the base name cuGetProcAddress returns the legacy five-argument
// cuGraphInstantiate, and calling that with three arguments crashed the
// first graph capture on a GPU. So every name the backend resolves must be
// the function cuda.h declares, up to a "_vN" suffix.
constexpr bool isVersionOf(std::string_view base, std::string_view symbol) {
  if (symbol == base)
    return true;
  if (symbol.substr(0, base.size()) != base)
    return false;
  std::string_view suffix = symbol.substr(base.size());
  if (suffix.size() < 3 || suffix.substr(0, 2) != "_v")
    return false;
  return std::all_of(suffix.begin() + 2, suffix.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}
#define GPTC_STRINGIFY(x) #x
#define GPTC_EXPANDED_NAME(fn) GPTC_STRINGIFY(fn)
#define GPTC_CHECK_NAME(fn)                                                    \
  static_assert(isVersionOf(#fn, GPTC_EXPANDED_NAME(fn)),                      \
                "cuda.h maps " #fn " to another function: list that one");
GPTC_CU_FUNCTIONS(GPTC_CHECK_NAME)
#undef GPTC_CHECK_NAME
#undef GPTC_EXPANDED_NAME
#undef GPTC_STRINGIFY

std::string versionString(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

Driver loadDriver() {
  // Only the .so.1 the driver installs: a toolkit's stub libcuda.so on the
  // library path would load and then fail every call.
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    throw DeviceError("no CUDA driver: libcuda.so.1 cannot be loaded; run on "
                      "a machine with an NVIDIA GPU or use --device=cpu");
  using InitFn = CUresult (*)(unsigned);
  using VersionFn = CUresult (*)(int *);
  using ErrFn = CUresult (*)(CUresult, const char **);
  auto init = reinterpret_cast<InitFn>(dlsym(h, "cuInit"));
  auto driverVersion = reinterpret_cast<VersionFn>(dlsym(h, "cuDriverGetVersion"));
  auto errName = reinterpret_cast<ErrFn>(dlsym(h, "cuGetErrorName"));
  auto getProc = reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(
      dlsym(h, "cuGetProcAddress_v2"));
  if (!init || !driverVersion || !errName || !getProc)
    throw DeviceError("the CUDA driver in libcuda.so.1 is too old: gptc needs "
                      "CUDA 12.0 or newer; update the driver or use "
                      "--device=cpu");
  if (CUresult r = init(0); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_STUB_LIBRARY)
      throw DeviceError("no CUDA driver: the libcuda.so.1 found is the CUDA "
                        "toolkit's stub, not a driver; run on a machine with "
                        "an NVIDIA GPU or use --device=cpu");
    const char *name = nullptr;
    if (errName(r, &name) != CUDA_SUCCESS || !name)
      name = "an unknown error";
    throw DeviceError(std::string("no usable CUDA device: cuInit failed with ") +
                      name + "; use --device=cpu");
  }
  Driver d;
  driverVersion(&d.version);
  if (d.version < 12000)
    throw DeviceError("the CUDA driver supports CUDA " +
                      versionString(d.version) +
                      ", gptc needs 12.0 or newer; update the driver or use "
                      "--device=cpu");
  // Ask for the ABI of the headers we were built with, or the driver's own
  // if it is older; every entry point above has one signature across 12.x
  // and 13.x.
  int asked = std::min(d.version, CUDA_VERSION);
  auto resolve = [&](const char *name, void **fn) {
    CUdriverProcAddressQueryResult status;
    if (getProc(name, fn, asked, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
            CUDA_SUCCESS ||
        !*fn)
      throw DeviceError(std::string("the CUDA driver (") +
                        versionString(d.version) + ") has no " + name);
  };
#define GPTC_RESOLVE(fn) resolve(#fn, reinterpret_cast<void **>(&d.fn));
  GPTC_CU_FUNCTIONS(GPTC_RESOLVE)
#undef GPTC_RESOLVE
  int count = 0;
  if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
    throw DeviceError("no CUDA device: the driver sees none; use --device=cpu");
  return d;
}

Lt loadLt() {
  std::vector<std::string> candidates;
  if (const char *path = std::getenv("GPTC_CUBLASLT"); path && *path)
    candidates.push_back(path);
  candidates.insert(candidates.end(),
                    {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"});
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *dir = std::getenv(var); dir && *dir)
      candidates.push_back(std::string(dir) + "/lib64/libcublasLt.so.13");
  candidates.push_back("/usr/local/cuda/lib64/libcublasLt.so.13");
  void *h = nullptr;
  for (const std::string &c : candidates)
    if ((h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!h)
    throw DeviceError("cuBLASLt not found (libcublasLt.so.13): install the "
                      "CUDA toolkit's cuBLAS or set GPTC_CUBLASLT to the "
                      "library's path");
  Lt lt;
#define GPTC_RESOLVE(fn)                                                       \
  if (!(lt.fn = reinterpret_cast<decltype(lt.fn)>(dlsym(h, #fn))))             \
    throw DeviceError("the cuBLASLt library has no " #fn);
  GPTC_LT_FUNCTIONS(GPTC_RESOLVE)
#undef GPTC_RESOLVE
  return lt;
}

} // namespace

const Driver &driver() {
  static std::once_flag once;
  static Driver d;
  static std::string error;
  std::call_once(once, [] {
    try {
      d = loadDriver();
    } catch (const DeviceError &e) {
      error = e.what();
    }
  });
  if (!error.empty())
    throw DeviceError(error);
  return d;
}

std::string cuError(const Driver &cu, CUresult r) {
  const char *name = "CUDA_ERROR_UNKNOWN", *text = "";
  cu.cuGetErrorName(r, &name);
  cu.cuGetErrorString(r, &text);
  return std::string(name) + " (" + text + ")";
}

const Lt &cublasLt() {
  static std::once_flag once;
  static Lt lt;
  static std::string error;
  std::call_once(once, [] {
    try {
      lt = loadLt();
    } catch (const DeviceError &e) {
      error = e.what();
    }
  });
  if (!error.empty())
    throw DeviceError(error);
  return lt;
}

} // namespace gptc::rt::cudaapi

#endif // __has_include(<cuda.h>) && __has_include(<cublasLt.h>)
