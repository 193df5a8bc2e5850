//===- Backend.h - where a Program's launches run ---------------*- C++ -*-===//
//
// The runtime drives a Program through this interface: the CUDA backend runs
// each launch as a kernel (or a cuBLASLt GEMM) in one device arena; the CPU
// backend runs each launch's CPU counterpart (the executor's kernels) in one
// host arena laid out by the same plan, which is how CI checks the schedule,
// the memory plan and buffer reuse without a GPU.
//
// Host data crosses in the buffer's own dtype: float32 as float, bf16/f16 as
// their 16-bit patterns, i32 as int32.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_RUNTIME_BACKEND_H
#define GPTC_RUNTIME_BACKEND_H

#include "gptc/Runtime/Program.h"

#include <memory>
#include <stdexcept>
#include <string>

namespace gptc::rt {

/// No device, no driver, a failed launch: the message is one line.
struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Backend {
public:
  virtual ~Backend() = default;
  /// "cpu", or the GPU's name.
  virtual std::string name() const = 0;
  /// Allocates the arena (p.arenaBytes) and uploads the constants. `p` must
  /// outlive the backend.
  virtual void load(const Program &p) = 0;
  virtual void upload(int buffer, const void *host) = 0;
  virtual void download(int buffer, void *host) = 0;
  /// Queues a copy of `buffer` as the launches so far leave it; `host`
  /// holds it once synchronize() or download() returns, and must stay valid
  /// until then. It spares a micro-batch's loss a wait for the device (the
  /// CUDA backend); a backend whose launches are done when run() returns
  /// copies at once.
  virtual void downloadLater(int buffer, void *host) { download(buffer, host); }
  /// Runs launches [begin, end) of `f` in order.
  virtual void run(const Function &f, size_t begin, size_t end) = 0;
  /// Waits for everything launched so far.
  virtual void synchronize() = 0;
};

/// The executor's kernels over a host arena (lib/Runtime/CpuBackend.cpp).
std::unique_ptr<Backend> makeCpuBackend();

/// The first CUDA device (lib/Runtime/CudaBackend.cpp). Throws DeviceError
/// with one line when there is no driver or no device.
std::unique_ptr<Backend> makeCudaBackend();

} // namespace gptc::rt

#endif // GPTC_RUNTIME_BACKEND_H
