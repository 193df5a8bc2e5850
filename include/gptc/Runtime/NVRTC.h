//===- NVRTC.h - compile generated CUDA C++ to cubin ------------*- C++ -*-===//
//
// The one place gptc calls NVRTC: `gptc compile` uses it to compile (and
// report on) the generated kernels for a named --gpu-arch without a GPU, and
// the runtime uses it when a Program carries no cubin for the device's arch.
// libnvrtc is loaded with dlopen on first use, so a machine without it gets
// one DeviceError line, not a loader error. No MLIR or LLVM here.
//
// Kernels are self-contained CUDA C++ (no #include): the options below never
// point NVRTC at a toolkit include directory.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_RUNTIME_NVRTC_H
#define GPTC_RUNTIME_NVRTC_H

#include <cstdint>
#include <string>
#include <vector>

namespace gptc::rt {

/// One compiled translation unit and what ptxas said about its kernels.
/// The resource numbers are the maximum over the kernels in the source (a
/// generated source holds one kernel); -1 where the log did not say.
struct CompiledKernel {
  std::vector<uint8_t> cubin;
  std::string log; ///< NVRTC's log, ptxas -v lines included
  int registers = -1;
  int sharedBytes = -1; ///< static shared memory ("smem")
  int localBytes = -1;  ///< stack frame
  int spillStores = -1, spillLoads = -1;
};

/// The architectures gptc compiles for: "sm_80", "sm_86", "sm_89", "sm_90",
/// "sm_90a", "sm_100a", ... ; isSupportedArch checks the spelling only
/// ("sm_" then digits and an optional "a"), NVRTC decides the rest.
bool isSupportedArch(const std::string &arch);

/// Why gptc cannot compile for `arch`, in one line, or "" if it can: a
/// malformed spelling, or an architecture the loaded NVRTC does not list
/// (nvrtcGetSupportedArchs; "" where there is no NVRTC to ask). So that
/// `gptc compile --gpu-arch=sm_99` says so before it lowers the model.
std::string nvrtcArchProblem(const std::string &arch);

/// The fixed NVRTC options for `arch`: C++17, the architecture, -default-device,
/// fast math off (the CPU reference uses exact expf/tanhf), ptxas -v for
/// the resource report. Throws DeviceError for a malformed arch.
std::vector<std::string> nvrtcOptions(const std::string &arch);

/// "13.0". Throws DeviceError ("NVRTC not found: ...") without libnvrtc.
std::string nvrtcVersion();

/// Compiles `source` (its name `name` appears in diagnostics) to a cubin for
/// `arch` with nvrtcOptions(arch) followed by `extraOptions`. Throws
/// DeviceError with one line (the first error of the log) when it fails.
CompiledKernel compileCuda(const std::string &source, const std::string &name,
                           const std::string &arch,
                           const std::vector<std::string> &extraOptions = {});

/// Parses ptxas -v output ("Used 40 registers, used 1 barriers, 8192 bytes
/// smem", "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads")
/// into `k`'s resource fields.
void parsePtxasInfo(const std::string &log, CompiledKernel &k);

/// The disk cache directory: $GPTC_CACHE_DIR, else $XDG_CACHE_HOME/gptc,
/// else $HOME/.cache/gptc ("" when none is set: no caching).
std::string kernelCacheDir();

/// compileCuda's cubin through a disk cache keyed by the SHA-256 of the
/// source, the options, the NVRTC version and the arch; entries are written
/// atomically, so concurrent processes can share the directory. An
/// unwritable cache is skipped silently.
std::vector<uint8_t>
compileCached(const std::string &source, const std::string &name,
              const std::string &arch,
              const std::vector<std::string> &extraOptions = {});

/// compileCached keeping the log as well (KEY.cubin and KEY.log), so a
/// cached compile still reports its resource usage.
CompiledKernel
compileCachedKernel(const std::string &source, const std::string &name,
                    const std::string &arch,
                    const std::vector<std::string> &extraOptions = {});

} // namespace gptc::rt

#endif // GPTC_RUNTIME_NVRTC_H
