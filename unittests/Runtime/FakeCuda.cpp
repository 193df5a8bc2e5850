//===- FakeCuda.cpp - a host-memory stand-in for libcuda and cuBLASLt -----===//
//
// Built as a libcuda.so.1 for CudaBackendFakeTests: the driver entry points
// the CUDA backend resolves, over host memory (a "device pointer" is a host
// address, copies are memcpy, streams run everything at once), and the
// cuBLASLt ones, whose matmul is a plain column-major GEMM. Generated
// kernels do not run; their launches are recorded for the test to inspect.
// Stream capture records the work and a graph launch replays it, so graph
// replays are tested too. This tests the backend's plumbing (addresses,
// staging, GEMM mapping, graphs, error paths) without a GPU, not CUDA.
//
//===----------------------------------------------------------------------===//

#include "CudaApi.h"
#include "gptc/Runtime/Program.h" // GemmFallback: header only

#include <cublasLt.h>
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Module {};
struct Function {
  std::string name;
};
struct Graph {
  std::vector<std::function<void()>> work;
};
/// A stream's work runs when it is submitted, unless the stream is
/// deferred (gptcFakeDeferLowPriorityStreams): then it waits in `pending`
/// until another stream waits for an event recorded on this one after it,
/// or the stream is synchronised. That is a legal schedule of a real GPU
/// (the stream simply ran late), and the latest one: a launch whose
/// operands another stream overwrote before the join reads what is there.
struct Stream {
  int priority = 0;
  bool deferred = false;
  int64_t submitted = 0, done = 0;
  std::vector<std::function<void()>> pending; ///< work [done, submitted)
};
/// Where an event was recorded: its stream's work up to `mark`.
struct Event {
  Stream *stream = nullptr;
  int64_t mark = 0;
};

bool capturing = false;
Graph captured;
int failSyncIn = -1;   // the n-th next stream synchronisation fails
int failLaunchIn = -1; // the n-th next kernel launch fails
int argCount = 0;      // pointers each kernel launch takes (the test says)
std::vector<int> refusedEpilogues; // the heuristic finds no algorithm
std::vector<std::string> launchNames;
std::vector<std::vector<uint64_t>> launchArgs;
int gemmsExecuted = 0;               // cublasLtMatmul work run so far
std::vector<int> launchGemmsBefore;  // gemmsExecuted as each kernel ran
// GPTC_FAKE_FAULT=name (for programs the test runs, which cannot call the
// hooks below): launching that kernel faults as a real one would, sticky,
// so every later synchronisation and copy fails.
bool faulted = false;
CUresult stickyFault() {
  return faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

std::vector<Stream *> streams; // every live one
bool deferLowPriority = false; // gptcFakeDeferLowPriorityStreams
bool deferNewStreams = false;  // gptcFakeDeferNewStreams
int64_t deferredWork = 0;      // how much work waited on a deferred stream

/// Runs `work` now, or records it while a stream is being captured.
void runOrCapture(std::function<void()> work) {
  if (capturing)
    captured.work.push_back(std::move(work));
  else
    work();
}

/// Runs (or captures) s's deferred work up to mark.
void flush(Stream *s, int64_t mark) {
  while (s && s->done < mark && !s->pending.empty()) {
    std::function<void()> work = std::move(s->pending.front());
    s->pending.erase(s->pending.begin());
    ++s->done;
    runOrCapture(std::move(work));
  }
}

/// Work on `stream` (null: none in particular): now, captured, or later
/// where the stream is deferred.
void submit(std::function<void()> work, CUstream stream = nullptr) {
  Stream *s = reinterpret_cast<Stream *>(stream);
  if (s && s->deferred) {
    s->pending.push_back(std::move(work));
    ++s->submitted;
    ++deferredWork;
    return;
  }
  if (s) {
    ++s->submitted;
    ++s->done;
  }
  runOrCapture(std::move(work));
}

} // namespace

// Test hooks (C linkage, found with dlsym).
extern "C" {
int gptcFakeLaunchCount() { return int(launchNames.size()); }
const char *gptcFakeLaunchName(int i) { return launchNames.at(i).c_str(); }
/// How many GEMMs had run (in stream order) when kernel launch i ran.
int gptcFakeGemmsBeforeLaunch(int i) { return launchGemmsBefore.at(i); }
uint64_t gptcFakeLaunchArg(int i, int arg) { return launchArgs.at(i).at(arg); }
void gptcFakeFailSync(int n) { failSyncIn = n; }
void gptcFakeFailLaunch(int n) { failLaunchIn = n; }
void gptcFakeSetArgCount(int n) { argCount = n; }
/// Host work on `stream`, in its order (captured where a CUDA graph is
/// being captured): how the fake cuDNN (FakeCudnn.cpp) runs a plan.
void gptcFakeSubmitHost(void (*fn)(void *), void *data, CUstream stream) {
  submit([fn, data] { fn(data); }, stream);
}
/// From now on (on != 0) streams created at the least priority run late:
/// Stream. How much work they held back so far: gptcFakeDeferredWork.
void gptcFakeDeferLowPriorityStreams(int on) { deferLowPriority = on != 0; }
/// From now on (on != 0) every stream created runs late: its work waits
/// until an event wait or a synchronisation reaches it, so work on two
/// streams runs in the order the backend's events give, and only that.
void gptcFakeDeferNewStreams(int on) { deferNewStreams = on != 0; }
int64_t gptcFakeDeferredWork() { return deferredWork; }
/// From now on the heuristic has no algorithm for `epilogue` (a
/// cublasLtEpilogue_t), as a cuBLASLt without it would; -1 forgets them all.
void gptcFakeRefuseEpilogue(int epilogue) {
  if (epilogue < 0)
    refusedEpilogues.clear();
  else
    refusedEpilogues.push_back(epilogue);
}
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

CUresult CUDAAPI cuInit(unsigned int) { return CUDA_SUCCESS; }
// NVRTC looks the driver up (cuInit, then this) in a process that has one
// loaded, and crashed in nvrtcCompileProgram without it: the fake has no
// export tables to give.
CUresult CUDAAPI cuGetExportTable(const void **table, const CUuuid *) {
  *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorName(CUresult r, const char **s) {
  *s = r == CUDA_ERROR_ILLEGAL_ADDRESS ? "CUDA_ERROR_ILLEGAL_ADDRESS"
       : r == CUDA_ERROR_LAUNCH_FAILED ? "CUDA_ERROR_LAUNCH_FAILED"
                                       : "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult, const char **s) {
  *s = "a fake error";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int *n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice *d, int) {
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice) {
  std::strncpy(name, "Fake NVIDIA H100 80GB HBM3", size_t(len));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice) {
  // An H100 SXM's: compute capability 9.0, 132 SMs, 2619 MHz HBM3 on a
  // 5120-bit bus (3.35 TB/s); 227 KiB of opt-in shared memory for the rest.
  *v = a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT       ? 132
       : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9
       : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
       : a == CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE        ? 2619000
       : a == CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH  ? 5120
                                                           : 232448;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice) {
  *c = reinterpret_cast<CUcontext>(0x1000);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
// Priorities as an H100's: 0 the least, -5 the greatest.
constexpr int kLeastPriority = 0, kGreatestPriority = -5;
CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *least, int *greatest) {
  *least = kLeastPriority;
  *greatest = kGreatestPriority;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *s, unsigned, int priority) {
  if (priority > kLeastPriority || priority < kGreatestPriority)
    return CUDA_ERROR_INVALID_VALUE;
  Stream *stream = new Stream;
  streams.push_back(stream);
  stream->priority = priority;
  stream->deferred =
      deferNewStreams || (deferLowPriority && priority == kLeastPriority);
  *s = reinterpret_cast<CUstream>(stream);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamCreate(CUstream *s, unsigned) {
  streams.push_back(new Stream);
  streams.back()->deferred = deferNewStreams;
  *s = reinterpret_cast<CUstream>(streams.back());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream s) {
  streams.erase(std::find(streams.begin(), streams.end(),
                          reinterpret_cast<Stream *>(s)));
  delete reinterpret_cast<Stream *>(s);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream s) {
  Stream *stream = reinterpret_cast<Stream *>(s);
  if (stream)
    flush(stream, stream->submitted);
  if (failSyncIn >= 0 && failSyncIn-- == 0)
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  return stickyFault();
}
// The synchronous calls bench/gpu/attention_bench makes (the backend makes
// only the asynchronous ones).
CUresult CUDAAPI cuCtxSynchronize() { return stickyFault(); }
// A wait runs the deferred work the event marks: the waiting stream's next
// work comes after it.
CUresult CUDAAPI cuStreamWaitEvent(CUstream, CUevent e, unsigned) {
  Event *ev = reinterpret_cast<Event *>(e);
  flush(ev->stream, ev->mark);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventCreate(CUevent *e, unsigned) {
  *e = reinterpret_cast<CUevent>(new Event);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent e) {
  delete reinterpret_cast<Event *>(e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) {
  Event *ev = reinterpret_cast<Event *>(e);
  ev->stream = reinterpret_cast<Stream *>(s);
  ev->mark = ev->stream ? ev->stream->submitted : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventQuery(CUevent) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventSynchronize(CUevent e) {
  Event *ev = reinterpret_cast<Event *>(e);
  flush(ev->stream, ev->mark);
  return stickyFault();
}
/// The algorithm (its index among the heuristic's results) of the last
/// cublasLtMatmul: GPTC_GEMM_TUNE's timing sees index i take 0.5 - 0.1·i
/// ms, so index 2 is the fastest of the three the heuristic offers. The
/// last GEMM's epilogue adds what gptcFakeEpilogueMs set for it (0 unless
/// set), so that a test can make either way to an epilogue the faster.
static int lastAlgo = 0, lastEpilogue = 0;
static std::vector<std::pair<int, float>> epilogueMs;
extern "C" int gptcFakeLastAlgo() { return lastAlgo; }
/// Every cublasLtMatmul's epilogue, in order: which way to an epilogue ran.
static std::vector<int> gemmEpilogues;
extern "C" int gptcFakeGemmCount() { return int(gemmEpilogues.size()); }
extern "C" int gptcFakeGemmEpilogue(int i) { return gemmEpilogues.at(i); }
extern "C" void gptcFakeEpilogueMs(int epilogue, float ms) {
  if (epilogue < 0)
    epilogueMs.clear();
  else
    epilogueMs.push_back({epilogue, ms});
}
/// gptcFakeGemmColumnsMs(n, ms): GEMMs of n columns (cuBLASLt's n: gpt's
/// rows) take ms more, so that a test can make a row-chunked way (its
/// GEMMs have fewer) the faster; n < 0 clears.
static int64_t lastGemmColumns = 0;
static std::map<int64_t, float> gemmColumnsMs;
extern "C" void gptcFakeGemmColumnsMs(long long n, float ms) {
  if (n < 0)
    gemmColumnsMs.clear();
  else
    gemmColumnsMs[n] = ms;
}
/// gptcFakeWrongColumns(n): GEMMs of n columns compute twice the product
/// (a way wrong on some GPU); n < 0: none.
static int64_t wrongColumns = -1;
extern "C" void gptcFakeWrongColumns(long long n) { wrongColumns = n; }
/// gptcFakeBesideMs(ms): timing sees ms more where a kernel ran on another
/// stream than the last GEMM's since it (a row-chunked way's passes beside
/// the next GEMM), so that a test can make that way the faster.
static const void *lastGemmStream = nullptr;
static bool besideSinceGemm = false;
static float besideMs = 0;
extern "C" void gptcFakeBesideMs(float ms) { besideMs = ms; }
/// The last launch when it was a generated kernel's ("" after a GEMM), or
/// the last since that gptcFakeKernelMs set a time for (a way of gptc's
/// own GEMM then its sums takes the GEMM's): timing sees it take what
/// gptcFakeKernelMs set for its name, if set.
static std::string lastKernel;
static std::map<std::string, float> kernelMs;
extern "C" void gptcFakeKernelMs(const char *name, float ms) {
  if (!name)
    kernelMs.clear();
  else
    kernelMs[name] = ms;
}
/// A library's own launch (the fake cuDNN's plans): timing then sees it
/// take what gptcFakeKernelMs set for `name`, as a generated kernel's.
extern "C" void gptcFakeLaunched(const char *name) { lastKernel = name; }
CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent, CUevent) {
  if (auto it = kernelMs.find(lastKernel); it != kernelMs.end()) {
    *ms = it->second;
    return CUDA_SUCCESS;
  }
  *ms = 0.5f - 0.1f * float(lastAlgo);
  for (auto [epilogue, extra] : epilogueMs)
    if (epilogue == lastEpilogue)
      *ms += extra;
  if (auto it = gemmColumnsMs.find(lastGemmColumns); it != gemmColumnsMs.end())
    *ms += it->second;
  if (besideSinceGemm)
    *ms += besideMs;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t n) {
  void *m = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!m)
    return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(m, 0xAB, n); // device memory starts as garbage
  *p = reinterpret_cast<CUdeviceptr>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
  std::free(reinterpret_cast<void *>(p));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostAlloc(void **p, size_t n, unsigned) {
  *p = std::malloc(n);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult CUDAAPI cuMemFreeHost(void *p) {
  std::free(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n,
                                   CUstream) {
  std::memcpy(reinterpret_cast<void *>(d), h, n);
  return CUDA_SUCCESS;
}
/// cuTensorMapEncodeTiled: checked as the driver checks a tiled map
/// (rank 1 to 5, a 16-byte aligned address, row strides multiples of 16
/// below 2^40, boxes of 1 to 256, a box row at most the swizzle's span),
/// then written in the fake's layout: what the host GEMMs (runGemmFallback)
/// read, and what gptcFakeTensorMap gives a test.
struct FakeTensorMap {
  uint64_t tag, base, dims[2], rowBytes;
  uint32_t box[2];
  int dataType, swizzle;
};
constexpr uint64_t kFakeTensorMapTag = 0x66616b65746d6170ull;
static_assert(sizeof(FakeTensorMap) <= sizeof(CUtensorMap));
/// A test's say that every encoding is refused (as a driver might refuse
/// an address or shape).
static bool refuseTensorMaps = false;
extern "C" void gptcFakeRefuseTensorMaps(bool refuse) {
  refuseTensorMaps = refuse;
}
CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *base,
    const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
    const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion,
    CUtensorMapFloatOOBfill) {
  const int elementBytes = type == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ? 2 : 4;
  const uint32_t span = swizzle == CU_TENSOR_MAP_SWIZZLE_128B  ? 128
                        : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64
                        : swizzle == CU_TENSOR_MAP_SWIZZLE_32B ? 32
                                                               : ~0u;
  if (refuseTensorMaps || !map || rank < 1 || rank > 5 ||
      reinterpret_cast<uintptr_t>(base) % 16 ||
      interleave != CU_TENSOR_MAP_INTERLEAVE_NONE ||
      box[0] * uint32_t(elementBytes) > span)
    return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank; ++i)
    if (dims[i] == 0 || box[i] == 0 || box[i] > 256 || elementStrides[i] != 1 ||
        (i > 0 && (strides[i - 1] % 16 || strides[i - 1] >= (1ull << 40))))
      return CUDA_ERROR_INVALID_VALUE;
  if (rank != 2) // (gptc asks for 2)
    return CUDA_ERROR_NOT_SUPPORTED;
  FakeTensorMap f{kFakeTensorMapTag,  reinterpret_cast<uint64_t>(base),
                  {dims[0], dims[1]}, strides[0],
                  {box[0], box[1]},   int(type),
                  int(swizzle)};
  std::memset(map, 0, sizeof *map);
  std::memcpy(map, &f, sizeof f);
  return CUDA_SUCCESS;
}
/// The map a kernel argument points at: its base address, dims (inner
/// first), row bytes, box, and whether it is bf16 with the 128-byte
/// swizzle; false if `at` holds no map.
extern "C" bool gptcFakeTensorMap(uint64_t at, uint64_t *base, uint64_t *dims,
                                  uint64_t *rowBytes, uint32_t *box,
                                  bool *bf16Swizzled) {
  FakeTensorMap f;
  std::memcpy(&f, reinterpret_cast<const void *>(at), sizeof f);
  if (f.tag != kFakeTensorMapTag)
    return false;
  *base = f.base;
  dims[0] = f.dims[0];
  dims[1] = f.dims[1];
  *rowBytes = f.rowBytes;
  box[0] = f.box[0];
  box[1] = f.box[1];
  *bf16Swizzled = f.dataType == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 &&
                  f.swizzle == CU_TENSOR_MAP_SWIZZLE_128B;
  return true;
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream) {
  std::memcpy(h, reinterpret_cast<void *>(d), n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n,
                                 CUstream) {
  std::memset(reinterpret_cast<void *>(d), v, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr d, const void *h, size_t n) {
  std::memcpy(reinterpret_cast<void *>(d), h, n);
  return stickyFault();
}
CUresult CUDAAPI cuMemcpyDtoH(void *h, CUdeviceptr d, size_t n) {
  std::memcpy(h, reinterpret_cast<void *>(d), n);
  return stickyFault();
}
CUresult CUDAAPI cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  std::memset(reinterpret_cast<void *>(d), v, n);
  return stickyFault();
}
CUresult CUDAAPI cuMemGetInfo(size_t *freeBytes, size_t *total) {
  *freeBytes = size_t(60) << 30;
  *total = size_t(80) << 30;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleLoadData(CUmodule *m, const void *image) {
  if (!image)
    return CUDA_ERROR_INVALID_IMAGE;
  *m = reinterpret_cast<CUmodule>(new Module);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule m) {
  delete reinterpret_cast<Module *>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule, const char *name) {
  *f = reinterpret_cast<CUfunction>(new Function{name}); // leaked: a test
  return CUDA_SUCCESS;
}
/// The dynamic shared memory each function opted in to, by name, and
/// what each launch asked for.
static std::vector<std::pair<std::string, int>> dynamicSharedOptIns;
static std::vector<unsigned> launchShared;
extern "C" int gptcFakeDynamicSharedOptIn(const char *name) {
  // The latest: each backend (each test) opts its functions in afresh.
  for (auto it = dynamicSharedOptIns.rbegin(); it != dynamicSharedOptIns.rend();
       ++it)
    if (it->first == name)
      return it->second;
  return 0;
}
extern "C" unsigned gptcFakeLaunchShared(int i) { return launchShared.at(i); }
/// Each function's static shared memory, by name (0 unless set): a launch
/// whose static and dynamic bytes together pass 48 KiB fails, as on a GPU,
/// unless the function opted in to its dynamic bytes.
static std::map<std::string, int> staticShared;
extern "C" void gptcFakeStaticShared(const char *name, int bytes) {
  if (!name)
    staticShared.clear();
  else
    staticShared[name] = bytes;
}
CUresult CUDAAPI cuFuncGetAttribute(int *v, CUfunction_attribute a,
                                    CUfunction f) {
  *v = 0;
  if (a == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
    if (auto it = staticShared.find(reinterpret_cast<Function *>(f)->name);
        it != staticShared.end())
      *v = it->second;
  return CUDA_SUCCESS;
}
/// Clusters: the fake's H100 runs 60 clusters of two blocks at once (its
/// 132 SMs in GPCs of 18 or fewer, some of them short of a partner; a
/// test may say another count, 0 for none: gptcFakeActiveClusters), half
/// as many of four, and none of more blocks; the config must ask for
/// clusters along x.
static int activeClustersOfTwo = 60;
extern "C" void gptcFakeActiveClusters(int n) { activeClustersOfTwo = n; }
CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *clusters, CUfunction,
                                              const CUlaunchConfig *config) {
  *clusters = 0;
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const CUlaunchAttributeValue &v = config->attrs[i].value;
      if (v.clusterDim.y != 1 || v.clusterDim.z != 1 ||
          config->gridDimX % v.clusterDim.x)
        return CUDA_ERROR_INVALID_VALUE;
      // (Clusters of 4: half as many, so none where none of 2 fits.)
      *clusters = v.clusterDim.x == 2   ? activeClustersOfTwo
                  : v.clusterDim.x == 4 ? activeClustersOfTwo / 2
                                        : 0;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}
/// The fake runs no kernel: any function fits 4 blocks of any size an SM.
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks,
                                                             CUfunction, int,
                                                             size_t) {
  *blocks = 4;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute a,
                                    int v) {
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    dynamicSharedOptIns.push_back({reinterpret_cast<Function *>(f)->name, v});
  return CUDA_SUCCESS;
}
void runGemmFallback(const std::string &name, const std::vector<uint64_t> &args);
/// A test hook's kernel list: `name` added, or every name dropped (null).
static void addOrClear(std::vector<std::string> &names, const char *name) {
  if (!name)
    names.clear();
  else
    names.push_back(name);
}
/// Kernels that, launched, add 1 to the float their first pointer points at
/// and write it where their last points: run in place (both the same
/// address), each run gives a new result, as an in-place kernel's does.
static std::vector<std::string> incrementers;
extern "C" void gptcFakeKernelIncrements(const char *name) {
  addOrClear(incrementers, name);
}
/// Kernels that, launched, add 1 to the float after the one their first
/// pointer points at and write it where their last points: a variant that
/// reads the wrong element, which operands of one repeated value hide.
static std::vector<std::string> nextReaders;
extern "C" void gptcFakeKernelIncrementsTheNext(const char *name) {
  addOrClear(nextReaders, name);
}
/// Kernels that, launched, write a float NaN where their last pointer
/// points (the fake runs no generated kernel otherwise): a variant that
/// computes something else than its launch's own kernel.
static std::vector<std::string> scribblers;
extern "C" void gptcFakeKernelScribbles(const char *name) {
  addOrClear(scribblers, name);
}

/// Kernels that, launched, run a host function on their `args` pointers
/// (the test's own computation of what the kernel computes), where the fake
/// runs no generated kernel otherwise.
using HostKernel = void (*)(const uint64_t *args);
static std::map<std::string, std::pair<int, HostKernel>> hostKernels;
extern "C" void gptcFakeKernelRunsOnHost(const char *name, int args,
                                         HostKernel fn) {
  if (!name)
    hostKernels.clear();
  else
    hostKernels[name] = {args, fn};
}

/// The cluster size (along x) of the launch cuLaunchKernelEx passes on.
static unsigned launchCluster = 1;
/// The grids and cluster sizes of the launches in clusters, as a test
/// reads them (gptcFakeClusterLaunches: how many since the last call, the
/// last one's grid and cluster).
static int clusterLaunches = 0;
static unsigned lastClusterGrid = 0, lastCluster = 0;
extern "C" int gptcFakeClusterLaunches(unsigned *grid, unsigned *cluster) {
  *grid = lastClusterGrid;
  *cluster = lastCluster;
  return std::exchange(clusterLaunches, 0);
}
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gridX, unsigned,
                                unsigned, unsigned threads, unsigned, unsigned,
                                unsigned shared, CUstream stream, void **params,
                                void **) {
  if (failLaunchIn >= 0 && failLaunchIn-- == 0)
    return CUDA_ERROR_LAUNCH_FAILED;
  // The backend passes device pointers only, the test says how many; the
  // GEMM-epilogue fallbacks also take sizes, and they run (below).
  std::string name = reinterpret_cast<Function *>(f)->name;
  besideSinceGemm |= static_cast<const void *>(stream) != lastGemmStream;
  if (const char *fault = std::getenv("GPTC_FAKE_FAULT"); fault && name == fault)
    faulted = true;
  if (auto it = staticShared.find(name);
      shared + (it == staticShared.end() ? 0 : it->second) > 48 * 1024 &&
      int(shared) > gptcFakeDynamicSharedOptIn(name.c_str()))
    return CUDA_ERROR_INVALID_VALUE;
  if (kernelMs.count(name) || !kernelMs.count(lastKernel))
    lastKernel = name;
  int fallbackArgs = gptc::rt::gemmFallbackArgCount(name);
  bool fallback = fallbackArgs > 0;
  // (A fallback's blocks are of its size: the kernel's launch bounds; the
  // paired GEMMs' in clusters of two, which the grid fills.)
  if (gridX % launchCluster ||
      (fallback && (threads != gptc::rt::gemmFallbackThreads(name) ||
                    launchCluster != gptc::rt::gemmFallbackCluster(name))))
    return CUDA_ERROR_INVALID_VALUE;
  if (launchCluster > 1) {
    ++clusterLaunches;
    lastClusterGrid = gridX;
    lastCluster = launchCluster;
  }
  auto host = hostKernels.find(name);
  HostKernel onHost = host == hostKernels.end() ? nullptr : host->second.second;
  std::vector<uint64_t> args;
  for (int i = 0; i < (fallback ? fallbackArgs
                       : onHost ? host->second.first
                                : argCount);
       ++i)
    args.push_back(*static_cast<uint64_t *>(params[i]));
  submit(
      [name, args, fallback, shared, onHost] {
        if (fallback)
          runGemmFallback(name, args);
        if (onHost)
          onHost(args.data());
        // An incrementer reads element 0, a next-reader element 1.
        auto listed = [&](const std::vector<std::string> &names) {
          return std::find(names.begin(), names.end(), name) != names.end();
        };
        if (!args.empty() && (listed(incrementers) || listed(nextReaders))) {
          float x;
          std::memcpy(&x,
                      reinterpret_cast<float *>(args.front()) +
                          (listed(incrementers) ? 0 : 1),
                      4);
          x += 1.0f;
          std::memcpy(reinterpret_cast<void *>(args.back()), &x, 4);
        }
        if (!args.empty() && listed(scribblers)) {
          float nan = std::nanf("");
          std::memcpy(reinterpret_cast<void *>(args.back()), &nan, 4);
        }
        launchNames.push_back(name);
        launchGemmsBefore.push_back(gemmsExecuted);
        launchArgs.push_back(args);
        launchShared.push_back(shared);
      },
      stream);
  return CUDA_SUCCESS;
}
/// cuLaunchKernelEx: the launch as cuLaunchKernel's, counted where it
/// asks for programmatic stream serialization (gptcFakeSerializedLaunches:
/// how many since the last call), in clusters along x where it asks for
/// them, refused with an attribute the backend has no use for, and in a
/// capture where the test says so (as a driver before CUDA 12.3 might:
/// gptcFakeRefuseSerializedInCapture).
static int serializedLaunches = 0;
static bool refuseSerializedInCapture = false;
extern "C" int gptcFakeSerializedLaunches() {
  return std::exchange(serializedLaunches, 0);
}
extern "C" void gptcFakeRefuseSerializedInCapture(bool refuse) {
  refuseSerializedInCapture = refuse;
}
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                  void **params, void **extra) {
  unsigned cluster = 1;
  bool serialized = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute &a = config->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      if (a.value.clusterDim.x < 1 || a.value.clusterDim.y != 1 ||
          a.value.clusterDim.z != 1)
        return CUDA_ERROR_INVALID_VALUE;
      cluster = a.value.clusterDim.x;
      continue;
    }
    if (a.id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION ||
        a.value.programmaticStreamSerializationAllowed != 1)
      return CUDA_ERROR_INVALID_VALUE;
    if (capturing && refuseSerializedInCapture)
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    serialized = true;
  }
  launchCluster = cluster;
  const CUresult r =
      cuLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ,
                     config->blockDimX, config->blockDimY, config->blockDimZ,
                     config->sharedMemBytes, config->hStream, params, extra);
  launchCluster = 1;
  if (r == CUDA_SUCCESS && serialized)
    ++serializedLaunches;
  return r;
}
CUresult CUDAAPI cuStreamBeginCapture(CUstream, CUstreamCaptureMode) {
  capturing = true;
  captured.work.clear();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamEndCapture(CUstream, CUgraph *g) {
  capturing = false;
  // As CUDA: another stream's work that the capturing stream never waited
  // for cannot end up in the graph.
  for (Stream *s : streams)
    if (!s->pending.empty()) {
      *g = nullptr;
      return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
  *g = reinterpret_cast<CUgraph>(new Graph(captured));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g,
                                             unsigned long long) {
  *e = reinterpret_cast<CUgraphExec>(new Graph(*reinterpret_cast<Graph *>(g)));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec e, CUstream) {
  for (auto &work : reinterpret_cast<Graph *>(e)->work)
    work();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
  delete reinterpret_cast<Graph *>(g);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec e) {
  delete reinterpret_cast<Graph *>(e);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int,
                                  cuuint64_t, CUdriverProcAddressQueryResult *s) {
  struct Entry {
    const char *name;
    void *fn;
  };
  // #fn is the base name the backend asks for, fn the versioned function.
#define FAKE_ENTRY(fn) {#fn, reinterpret_cast<void *>(&fn)},
  // Exactly the entry points the backend resolves (CudaApi.h).
  static const Entry table[] = {GPTC_CU_FUNCTIONS(FAKE_ENTRY)};
#undef FAKE_ENTRY
  for (const Entry &e : table)
    if (std::strcmp(e.name, symbol) == 0) {
      *pfn = e.fn;
      if (s)
        *s = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  *pfn = nullptr;
  if (s)
    *s = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

namespace {
struct Desc {
  cublasComputeType_t compute;
  int32_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N;
  // Epilogues: BIAS, GELU_BIAS, GELU_AUX_BIAS, DGELU, DGELU_BGRAD and
  // BGRADA, computed on the host.
  int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  int32_t biasType = -1; // -1: D's type
  void *aux = nullptr;
  int64_t auxLd = 0;
  int32_t auxType = -1; // -1: D's type
};
struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};

float load(const void *p, cudaDataType_t t, int64_t i) {
  if (t == CUDA_R_32F)
    return static_cast<const float *>(p)[i];
  uint32_t u = uint32_t(static_cast<const uint16_t *>(p)[i]) << 16; // bf16
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void store(void *p, cudaDataType_t t, int64_t i, float v) {
  if (t == CUDA_R_32F) {
    static_cast<float *>(p)[i] = v;
    return;
  }
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  static_cast<uint16_t *>(p)[i] = uint16_t(u >> 16);
}
} // namespace

namespace {
float gelu(float v) {
  return 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
}
double geluSlope(double x) {
  double t = std::tanh(0.7978845608 * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) +
         0.5 * x * (1 - t * t) * 0.7978845608 * (1 + 3 * 0.044715 * x * x);
}
} // namespace

/// The rt::GemmFallback kernels as Program.h defines them (gptc's wgmma
/// GEMM among them), on the host.
/// The GEMM-epilogue fallbacks are the only kernels the fake runs, so a
/// test can check their plumbing (which kernels, pointers and sizes)
/// against the CPU backend; the CUDA source itself runs on the host in
/// KernelsOnHostTest.
void runGemmFallback(const std::string &name, const std::vector<uint64_t> &a) {
  cudaDataType_t t = name.size() > 5 && name.substr(name.size() - 5) == "_bf16"
                         ? CUDA_R_16BF
                         : CUDA_R_32F;
  auto ptr = [&](int i) { return reinterpret_cast<void *>(a[size_t(i)]); };
  auto num = [&](int i) { return int64_t(a[size_t(i)]); };
  // gptc's own GEMMs take a and b as tensor maps: the operand at the
  // base of argument i's.
  auto mapBase = [&](int i) {
    uint64_t base, dims[2], rowBytes;
    uint32_t box[2];
    bool swizzled;
    if (!gptcFakeTensorMap(a[size_t(i)], &base, dims, &rowBytes, box,
                           &swizzled)) {
      std::fprintf(stderr, "fake CUDA: %s's operand %d is no tensor map\n",
                   name.c_str(), i);
      std::abort();
    }
    return base;
  };
  if (name.rfind("gemm_fallback_bias_", 0) == 0) {
    int64_t rows = num(3), cols = num(4);
    for (int64_t i = 0; i < rows * cols; ++i) {
      float v = load(ptr(0), t, i) + load(ptr(1), t, i % cols);
      if (ptr(2))
        store(ptr(2), t, i, v);
      store(ptr(0), t, i, num(5) ? gelu(v) : v);
    }
  } else if (name.rfind("gemm_fallback_gelu_grad_", 0) == 0) {
    for (int64_t i = 0; i < num(2); ++i)
      store(ptr(0), t, i,
            float(load(ptr(0), t, i) * geluSlope(load(ptr(1), t, i))));
  } else if (name.rfind("gemm_fallback_gelu_", 0) == 0) { // (after _grad_)
    for (int64_t i = 0; i < num(2); ++i)
      store(ptr(0), t, i, gelu(load(ptr(1), t, i)));
  } else if (name.rfind("gemm_fallback_column_partials_", 0) == 0) {
    // With pre: x = gelu'(pre) * x in place, summed before rounding.
    int64_t rows = num(3), cols = num(4), perChunk = num(5);
    float *partial = static_cast<float *>(ptr(2));
    for (int64_t k = 0; k * perChunk < rows; ++k)
      for (int64_t c = 0; c < cols; ++c) {
        double sum = 0;
        for (int64_t r = k * perChunk; r < std::min(rows, (k + 1) * perChunk); ++r) {
          float x = load(ptr(0), t, r * cols + c);
          if (ptr(1)) {
            x = float(x * geluSlope(load(ptr(1), t, r * cols + c)));
            store(ptr(0), t, r * cols + c, x);
          }
          sum += x;
        }
        partial[k * cols + c] = float(sum);
      }
  } else if (name.rfind("gemm_wgmma_weight_grad_", 0) == 0 ||
             name.rfind("gemm_wgmma_wide_weight_grad_", 0) == 0 ||
             name.rfind("gemm_wgmma_paired_weight_grad_", 0) == 0) {
    // gptc's stream-K weight gradient (either tile): out = aᵀ·b (+ old where
    // non-null), float32 [m, n]; a [k, m] and b [k, n] at their tensor maps'
    // bases; (old, out, partials, counters, m, n, k). The counters must be 0,
    // as the kernel leaves them.
    const uint64_t operands[2] = {mapBase(0), mapBase(1)};
    const int64_t m = num(6), n = num(7), k = num(8);
    const uint32_t *counters = static_cast<const uint32_t *>(ptr(5));
    for (int64_t i = 0; i < m / 128 * (n / 128) * 4; ++i)
      if (counters[i] != 0) {
        std::fprintf(stderr, "fake CUDA: %s's counter %lld is %u, not 0\n",
                     name.c_str(), (long long)i, counters[i]);
        std::abort();
      }
    const void *x = reinterpret_cast<const void *>(operands[0]),
               *dy = reinterpret_cast<const void *>(operands[1]);
    const float *old = static_cast<const float *>(ptr(2));
    float *out = static_cast<float *>(ptr(3));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0;
        for (int64_t e = 0; e < k; ++e)
          sum += load(x, t, e * m + i) * load(dy, t, e * n + j);
        out[i * n + j] = old ? old[i * n + j] + sum : sum;
      }
  } else if (name.rfind("gemm_wgmma_", 0) == 0) {
    // gptc's own GEMMs: pre = a·b + bias, out = gelu(pre), b [k, n]; or
    // out = gelu'(pre) · (a·bᵀ), b [n, k], and with "_bias_" out's column
    // sums over each 16 rows into float partials [m / 16, n]; or "_plain_"
    // out = a·bᵀ (a, b, out). a [m, k]; m, n, k last. a and b come as
    // their tensor maps: the operands are at the maps' bases.
    const uint64_t operands[2] = {mapBase(0), mapBase(1)};
    auto ptr = [&](int i) {
      return reinterpret_cast<void *>(i < 2 ? operands[i] : a[size_t(i)]);
    };
    const bool biasGelu = name.find("bias_gelu") != std::string::npos;
    const bool partials = name.find("gelu_grad_bias") != std::string::npos;
    const bool plain = name.find("_plain_") != std::string::npos;
    // "_bias_" alone: out = a·b + bias (a, b, bias, out), b [k, n].
    const bool bias =
        !biasGelu && !partials && name.find("_bias_") != std::string::npos;
    const int sizes = plain ? 3 : biasGelu || partials ? 5 : 4;
    int64_t m = num(sizes), n = num(sizes + 1), k = num(sizes + 2);
    float *partial = partials ? static_cast<float *>(ptr(4)) : nullptr;
    if (partial)
      std::fill(partial, partial + m / 16 * n, 0.0f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0;
        for (int64_t e = 0; e < k; ++e)
          sum += load(ptr(0), t, i * k + e) *
                 load(ptr(1), t, biasGelu || bias ? e * n + j : j * k + e);
        if (plain) {
          store(ptr(2), t, i * n + j, sum);
        } else if (bias) {
          store(ptr(3), t, i * n + j, sum + load(ptr(2), t, j));
        } else if (biasGelu) {
          const float v = sum + load(ptr(2), t, j);
          store(ptr(4), t, i * n + j, v);
          store(ptr(3), t, i * n + j, gelu(v));
        } else {
          const float d = float(sum * geluSlope(load(ptr(2), t, i * n + j)));
          store(ptr(3), t, i * n + j, d);
          if (partial)
            partial[i / 16 * n + j] += d;
        }
      }
  } else if (name.rfind("gemm_fallback_column_sums_", 0) == 0) {
    int64_t chunks = num(2), cols = num(3);
    const float *partial = static_cast<const float *>(ptr(0));
    for (int64_t c = 0; c < cols; ++c) {
      double sum = 0;
      for (int64_t k = 0; k < chunks; ++k)
        sum += partial[k * cols + c];
      store(ptr(1), t, c, float(sum));
    }
  }
}

size_t CUBLASWINAPI cublasLtGetVersion(void) { return 130000; }
const char *CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t) {
  return "CUBLAS_STATUS_FAKE";
}
cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *h) {
  *h = reinterpret_cast<cublasLtHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t h) {
  delete reinterpret_cast<int *>(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d,
                                                     cublasComputeType_t c,
                                                     cudaDataType_t) {
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc{c});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete reinterpret_cast<Desc *>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(
    cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v,
    size_t) {
  Desc *desc = reinterpret_cast<Desc *>(d);
  if (a == CUBLASLT_MATMUL_DESC_TRANSA)
    std::memcpy(&desc->transA, v, 4);
  if (a == CUBLASLT_MATMUL_DESC_TRANSB)
    std::memcpy(&desc->transB, v, 4);
  if (a == CUBLASLT_MATMUL_DESC_EPILOGUE)
    std::memcpy(&desc->epilogue, v, 4);
  if (a == CUBLASLT_MATMUL_DESC_BIAS_POINTER)
    std::memcpy(&desc->bias, v, sizeof(void *));
  if (a == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE)
    std::memcpy(&desc->biasType, v, 4);
  if (a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER)
    std::memcpy(&desc->aux, v, sizeof(void *));
  if (a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD)
    std::memcpy(&desc->auxLd, v, 8);
  if (a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE)
    std::memcpy(&desc->auxType, v, 4);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(
    cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
    int64_t ld) {
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{t, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete reinterpret_cast<Layout *>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(
    cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *v,
    size_t) {
  Layout *layout = reinterpret_cast<Layout *>(l);
  if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT)
    std::memcpy(&layout->batch, v, 4);
  if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET)
    std::memcpy(&layout->stride, v, 8);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI
cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI
cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete reinterpret_cast<int *>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
    const void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
    cublasLtMatmulPreference_t, int requested,
    cublasLtMatmulHeuristicResult_t *results, int *count) {
  int32_t epilogue = reinterpret_cast<Desc *>(d)->epilogue;
  if (std::find(refusedEpilogues.begin(), refusedEpilogues.end(), epilogue) !=
      refusedEpilogues.end()) {
    *count = 0;
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // Three candidates, told apart by the first word of their algo.
  *count = std::min(requested, 3);
  for (int i = 0; i < *count; ++i) {
    std::memset(&results[i], 0, sizeof(results[i]));
    results[i].algo.data[0] = uint64_t(i);
    results[i].state = CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
    cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb,
    const void *beta, const void *, cublasLtMatrixLayout_t, void *D,
    cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, void *,
    size_t, cudaStream_t stream) {
  lastAlgo = algo ? int(algo->data[0]) : 0;
  lastKernel.clear();
  lastGemmStream = stream;
  besideSinceGemm = false;
  Desc desc = *reinterpret_cast<Desc *>(d);
  lastEpilogue = desc.epilogue;
  gemmEpilogues.push_back(desc.epilogue);
  Layout a = *reinterpret_cast<Layout *>(la), b = *reinterpret_cast<Layout *>(lb),
         out = *reinterpret_cast<Layout *>(ld);
  float al = *static_cast<const float *>(alpha),
        be = *static_cast<const float *>(beta);
  if (int64_t(ld ? reinterpret_cast<Layout *>(ld)->cols : 0) == wrongColumns)
    al *= 2.0f;
  bool ta = desc.transA == CUBLAS_OP_T, tb = desc.transB == CUBLAS_OP_T;
  int64_t m = int64_t(out.rows), n = int64_t(out.cols),
          k = int64_t(ta ? a.rows : a.cols);
  lastGemmColumns = n;
  if (int64_t(ta ? a.cols : a.rows) != m || int64_t(tb ? b.rows : b.cols) != n ||
      int64_t(tb ? b.cols : b.rows) != k || a.batch != out.batch ||
      b.batch != out.batch)
    return CUBLAS_STATUS_INVALID_VALUE;
  // As cuBLASLt: the bias (gradient) runs along D's rows (gpt's N), the
  // GELU aux is a matrix of D's shape with its own ld, and both need their
  // pointers. DGELU multiplies by GELU's derivative at the aux; the bias
  // gradients sum D's rows (DGELU_BGRAD) or op(A)'s rows (BGRADA).
  int32_t e = desc.epilogue;
  bool biased = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
                e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  bool gelu = e == CUBLASLT_EPILOGUE_GELU_BIAS ||
              e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  bool auxOut = e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  bool dgelu = e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  bool gradD = e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  bool gradA = e == CUBLASLT_EPILOGUE_BGRADA;
  bool needsBias = biased || gradD || gradA, needsAux = auxOut || dgelu;
  if (!needsBias && !needsAux && e != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((needsBias && !desc.bias) ||
      (needsAux && (!desc.aux || desc.auxLd < m)) ||
      ((needsBias || needsAux) && out.batch != 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  cudaDataType_t biasType =
      desc.biasType < 0 ? out.type : cudaDataType_t(desc.biasType);
  cudaDataType_t auxType =
      desc.auxType < 0 ? out.type : cudaDataType_t(desc.auxType);
  // cublasLt.h: the bias, its gradient and the GELU aux are of D's type
  // outside FP8 and integer GEMMs, which gptc does not run.
  if ((needsBias && biasType != out.type) || (needsAux && auxType != out.type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  void *biasOut = const_cast<void *>(desc.bias);
  submit([=] {
    ++gemmsExecuted;
    std::vector<double> rowSum(size_t(m), 0.0);
    for (int32_t i = 0; i < out.batch; ++i)
      for (int64_t c = 0; c < n; ++c)
        for (int64_t r = 0; r < m; ++r) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p) {
            int64_t ia = i * a.stride + (ta ? p + r * a.ld : r + p * a.ld);
            int64_t ib = i * b.stride + (tb ? c + p * b.ld : p + c * b.ld);
            sum += double(load(A, a.type, ia)) * load(B, b.type, ib);
            if (gradA && c == 0)
              rowSum[size_t(r)] += load(A, a.type, ia);
          }
          int64_t id = i * out.stride + r + c * out.ld;
          float prev = be != 0 ? load(D, out.type, id) : 0.0f;
          float v = float(al * sum + be * prev);
          if (biased)
            v += load(desc.bias, biasType, r);
          if (auxOut)
            store(desc.aux, auxType, r + c * desc.auxLd, v);
          if (gelu)
            v = ::gelu(v);
          if (dgelu)
            v = float(v * geluSlope(load(desc.aux, auxType, r + c * desc.auxLd)));
          if (gradD)
            rowSum[size_t(r)] += v;
          store(D, out.type, id, v);
        }
    if (gradD || gradA)
      for (int64_t r = 0; r < m; ++r)
        store(biasOut, biasType, r, float(rowSum[size_t(r)]));
  }, reinterpret_cast<CUstream>(stream));
  return CUBLAS_STATUS_SUCCESS;
}
