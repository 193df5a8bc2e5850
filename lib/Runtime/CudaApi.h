//===- CudaApi.h - the CUDA driver and cuBLASLt through dlopen --*- C++ -*-===//
//
// Private to lib/Runtime: the entry points the CUDA backend calls, resolved
// at run time from libcuda.so.1 (cuGetProcAddress) and libcublasLt (dlsym),
// so that nothing CUDA is linked and a machine without a GPU gets one
// DeviceError line. Include only where cuda.h and cublasLt.h exist.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_LIB_RUNTIME_CUDAAPI_H
#define GPTC_LIB_RUNTIME_CUDAAPI_H

#include <cublasLt.h>
#include <cuda.h>

#include <string>

namespace gptc::rt::cudaapi {

//===----------------------------------------------------------------------===//
// The driver API through dlopen
//===----------------------------------------------------------------------===//

// Every entry point we call. cuda.h maps some names to versioned symbols
// (cuMemAlloc -> cuMemAlloc_v2); the members take those names and types,
// while #fn stays the base name that cuGetProcAddress wants. A name that
// cuda.h maps to a different function (cuGraphInstantiate) is listed as that
// function; CudaApi.cpp checks this at compile time.
// clang-format off
#define GPTC_CU_FUNCTIONS(X)                                                   \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)                        \
  X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)                          \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuStreamCreate)            \
  X(cuStreamCreateWithPriority) X(cuCtxGetStreamPriorityRange)                 \
  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamWaitEvent)               \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery)          \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuMemAlloc) X(cuMemFree)       \
  X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoDAsync)                      \
  X(cuMemcpyDtoHAsync) X(cuMemsetD8Async) X(cuMemGetInfo)                      \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                 \
  X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel)               \
  X(cuLaunchKernelEx) X(cuGetErrorName)                                        \
  X(cuGetErrorString) X(cuStreamBeginCapture) X(cuStreamEndCapture)            \
  X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphDestroy)            \
  X(cuGraphExecDestroy) X(cuTensorMapEncodeTiled)                              \
  X(cuOccupancyMaxActiveClusters)
// clang-format on

struct Driver {
#define GPTC_DECLARE(fn) decltype(&::fn) fn = nullptr;
  GPTC_CU_FUNCTIONS(GPTC_DECLARE)
#undef GPTC_DECLARE
  int version = 0; // the driver's CUDA version, 13000 for 13.0
};

/// The driver, loaded and initialised once per process; throws DeviceError
/// (the same line every time) without a driver or a device.
const Driver &driver();

/// "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)".
std::string cuError(const Driver &cu, CUresult r);

//===----------------------------------------------------------------------===//
// cuBLASLt through dlopen
//===----------------------------------------------------------------------===//

#define GPTC_LT_FUNCTIONS(X)                                                   \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion)                   \
  X(cublasLtGetStatusName) X(cublasLtMatmulDescCreate)                         \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)               \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                 \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)        \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)   \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

struct Lt {
#define GPTC_DECLARE(fn) decltype(&::fn) fn = nullptr;
  GPTC_LT_FUNCTIONS(GPTC_DECLARE)
#undef GPTC_DECLARE
};

/// cuBLASLt, loaded once per process: $GPTC_CUBLASLT, libcublasLt.so.13,
/// .so.12, .so, then the toolkit's; throws DeviceError if none loads.
const Lt &cublasLt();

} // namespace gptc::rt::cudaapi

#endif // GPTC_LIB_RUNTIME_CUDAAPI_H
