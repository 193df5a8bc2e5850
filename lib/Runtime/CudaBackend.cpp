//===- CudaBackend.cpp - run a Program on a CUDA GPU ----------------------===//
//
// One device arena laid out by planMemory, one compute stream (the greatest
// priority) and one copy stream on device 0's primary context (the one
// cuBLASLt's own runtime uses), and for a program whose planStreams moved
// launches (--overlap-weight-grads) a side stream of the least priority.
// Generated kernels come from the Program's cubins when they match the
// device, else from NVRTC; gpt.matmul goes to cuBLASLt. The driver and
// cuBLASLt come through dlopen (CudaApi.h), so the training program links
// neither and a machine without a GPU gets one DeviceError line instead of
// a loader error. Without the CUDA headers at build time the factory only
// throws.
//
// Ordering: uploads go through pinned staging memory on the copy stream,
// which first waits for the compute stream (a buffer being overwritten may
// still be read by earlier launches) and is then waited on by it. The first
// run of each launch range is checked launch by launch, the second is
// captured into a CUDA graph and later ones replay it (hyperparameters and
// inputs are device buffers, so a replay sees the values uploaded since).
// A side-stream launch forks from the compute stream where it stands and is
// joined back at its Launch::join, or at the end of the range at the
// latest, so every run() leaves all its work on the compute stream's order.
//
//===----------------------------------------------------------------------===//

#include "gptc/Runtime/CudaBackend.h"
#include "gptc/Formats/AtomicFile.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Support/Sha256.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>

#if __has_include(<cuda.h>) && __has_include(<cublasLt.h>)
#define GPTC_HAVE_CUDA_HEADERS 1
#include "CudaApi.h"
#endif

namespace gptc::rt {

double knownPeakBf16Flops(const std::string &deviceName, int ccMajor,
                          int ccMinor) {
  auto has = [&](const char *s) {
    return deviceName.find(s) != std::string::npos;
  };
  // Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets.
  if (ccMajor == 9 && ccMinor == 0) {
    if (has("H100") && has("PCIe"))
      return 756e12;
    if (has("H100") && has("NVL"))
      return 835e12;
    if (has("H100") || has("H200") || has("GH200") || has("H800"))
      return 989e12;
  }
  if (ccMajor == 8 && ccMinor == 0 && (has("A100") || has("A800")))
    return 312e12;
  if (ccMajor == 10 && ccMinor == 0 && has("B200"))
    return 2250e12;
  return 0;
}

GemmMapping mapMatmul(const Buffer &a, const Buffer &b, const Buffer &out,
                      bool ta, bool tb, const std::string &where) {
  size_t ra = a.shape.size(), rb = b.shape.size();
  if (ra < 2 || (rb != 2 && rb != ra))
    throw DeviceError(where + ": matmul operand ranks " + std::to_string(ra) +
                      " and " + std::to_string(rb));
  int64_t M = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  int64_t K = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  int64_t kb = tb ? b.shape[rb - 1] : b.shape[rb - 2];
  int64_t N = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < ra; ++i)
    batch *= a.shape[i];
  if (kb != K || out.numel() != batch * M * N ||
      (rb == ra && b.numel() != batch * K * N))
    throw DeviceError(where + ": matmul shapes do not agree");

  GemmMapping g;
  if (batch > 1 && rb == 2) {
    if (!ta) {
      M *= batch; // a's batch rows stack into one [batch*M, K] matrix
    } else {
      g.loops = batch;
      g.rightLoopStride = M * K;
      g.outLoopStride = M * N;
    }
  } else if (batch > 1) {
    g.batch = batch;
    g.leftStride = K * N;
    g.rightStride = M * K;
    g.outStride = M * N;
  }
  g.transLeft = tb;
  g.transRight = ta;
  g.m = N;
  g.n = M;
  g.k = K;
  // Column-major views of the row-major buffers: stored [r, c] is rows = c,
  // cols = r, ld = c.
  g.leftRows = tb ? K : N;
  g.leftCols = tb ? N : K;
  g.leftLd = g.leftRows;
  g.rightRows = ta ? M : K;
  g.rightCols = ta ? K : M;
  g.rightLd = g.rightRows;
  g.outLd = N;
  return g;
}

namespace {
// The live CUDA backends, so asCudaBackend works without RTTI.
std::mutex registryMutex;
std::set<const Backend *> registry;
} // namespace

CudaBackend *asCudaBackend(Backend *b) {
  std::lock_guard<std::mutex> lock(registryMutex);
  return registry.count(b) ? static_cast<CudaBackend *>(b) : nullptr;
}

#ifndef GPTC_HAVE_CUDA_HEADERS

std::unique_ptr<CudaBackend> createCudaBackend() {
  throw DeviceError("this gptc was built without the CUDA headers (cuda.h, "
                    "cublasLt.h); rebuild with the CUDA toolkit or use "
                    "--device=cpu");
}

#else

namespace {

using namespace cudaapi;

//===----------------------------------------------------------------------===//
// The backend
//===----------------------------------------------------------------------===//

constexpr size_t kWorkspaceBytes = 32u << 20; // cuBLASLt's, per GEMM
/// partialsScratch: GPT-2's c_fc bias gradient at B·T = 16,384 rows takes
/// 3 MiB of partials (256 chunks of 3,072 float32).
constexpr size_t kPartialsBytes = 8u << 20;
/// GEMM tuning (GPTC_GEMM_TUNE): how many of the heuristic's algorithms
/// to time. Of 8, the fastest was another than the heuristic's first for
/// 10 of GPT-2's 16 shapes on an H100 (docs/benchmarks.md, twenty-fourth
/// session): its order is a weak guide, so 32 are timed, once (the choice
/// is kept; a second stderr line says where in the heuristic's lists the
/// kept ones lie, so a run shows whether the list's tail pays).
constexpr int kTuneCandidates = 32;
constexpr size_t kStagingBytes = 64u << 20;   // pinned host ring
constexpr size_t kChunkBytes = kStagingBytes / 4;
/// Pinned host memory for downloadLater's copies (a loss is 4 bytes); when
/// it is full, the next one synchronizes first.
constexpr size_t kMailboxBytes = 64u << 10;
/// What ends the label of a kernel variant's launch timed at load.
const std::string kTimedAtLoad = ", timed at load";

/// The value of environment switch `name`, one of `values` (the first when
/// unset or empty); any other value is a DeviceError naming the switch and
/// what it takes, so that a misspelt switch is not quietly ignored.
std::string envSwitch(const char *name,
                      std::initializer_list<const char *> values) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return *values.begin();
  std::string expected;
  for (const char *value : values) {
    if (std::strcmp(v, value) == 0)
      return v;
    expected += (expected.empty() ? "" : " or ") + std::string(value);
  }
  throw DeviceError(std::string(name) + "=" + v + ": expected " + expected);
}
/// A switch that is off (0, the default) or on (1).
bool envOn(const char *name) { return envSwitch(name, {"0", "1"}) == "1"; }

/// GPTC_GEMM_CHUNK_BYTES=N[,N...]: the bytes of D a loop of a row-chunked
/// GEMM way may write (tuning times two such ways a size); 0: none. Unset
/// or empty: 6, 12 and 24 MiB, an eighth, a quarter and half of an H100's
/// L2 (more loops leave more of a loop's GEMM's last wave to the passes
/// beside it).
std::vector<int64_t> envChunkBytes() {
  const char *v = std::getenv("GPTC_GEMM_CHUNK_BYTES");
  if (!v || !*v)
    return {int64_t(6) << 20, int64_t(12) << 20, int64_t(24) << 20};
  std::vector<int64_t> sizes;
  for (std::string_view rest = v; !rest.empty();) {
    size_t comma = rest.find(',');
    std::string word(rest.substr(0, comma));
    char *end = nullptr;
    long long n = std::strtoll(word.c_str(), &end, 10);
    if (word.empty() || *end || n < 0)
      throw DeviceError(std::string("GPTC_GEMM_CHUNK_BYTES=") + v +
                        ": expected byte counts separated by commas (0: no "
                        "row-chunked GEMMs)");
    if (n > 0)
      sizes.push_back(n);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  }
  return sizes;
}

cudaDataType_t cudaType(DType t) {
  switch (t) {
  case DType::F32:
    return CUDA_R_32F;
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  case DType::I32:
    break;
  }
  throw DeviceError("cuBLASLt matmul on i32 buffers");
}

/// The largest power of two dividing `x`, at most 256 (cuBLASLt's alignment
/// preferences).
uint32_t alignmentOf(uint64_t x) {
  return x == 0 ? 256u : uint32_t(std::min<uint64_t>(x & (~x + 1), 256));
}

/// How many rows each partial sum of a bias gradient's column sums takes
/// (gemmFallbackColumnPartials, blocks of 256 columns): the fewest rows,
/// from 64 up by doubling, that make at most kColumnPartialBlocks blocks
/// (one wave on an H100 or H200 at 4 blocks an SM), so that each block
/// keeps rows in flight through several rounds and the second pass has
/// few partials to add (GPT-2's 16,384 rows: 128 for 768 columns, 512 for
/// 2,304 and 3,072). At 64 rows for all, 4 in flight, c_fc's weight
/// gradient as a plain GEMM and the two passes took 0.166 ms a run against
/// cuBLASLt's BGRADA's 0.137 (H200, a6be447), the GEMM alone about 0.1.
/// More where the partials would not fit the cuBLASLt workspace or a
/// grid's y.
int64_t partialRows(int64_t rows, int64_t cols) {
  constexpr int64_t kColumnPartialBlocks = 512;
  const int64_t columnBlocks = (cols + 255) / 256;
  int64_t perChunk = 64;
  while ((perChunk < rows &&
          columnBlocks * ((rows + perChunk - 1) / perChunk) >
              kColumnPartialBlocks) ||
         ((rows + perChunk - 1) / perChunk) * cols * 4 >
             int64_t(kWorkspaceBytes) ||
         (rows + perChunk - 1) / perChunk > 65535)
    perChunk *= 2;
  return perChunk;
}

/// The rows a loop of a row-chunked GEMM takes: the most, a multiple of
/// `multiple`, that divide `rows` into two or more loops and whose
/// `rowBytes` each come to at most `bytes`; 0 if none does.
int64_t rowChunk(int64_t rows, int64_t rowBytes, int64_t bytes,
                 int64_t multiple) {
  const int64_t most =
      std::min(bytes / std::max<int64_t>(rowBytes, 1), rows / 2);
  for (int64_t r = most / multiple * multiple; r >= multiple; r -= multiple)
    if (rows % r == 0)
      return r;
  return 0;
}

/// A gpt.matmul ready for cuBLASLt (the mapping: GemmMapping), with its
/// algorithm chosen once at load.
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t left = nullptr, right = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  CUdeviceptr leftPtr = 0, rightPtr = 0, outPtr = 0; // gpt's b, a, result
  /// 1: the GEMM adds its product to the result's old value (the launch's
  /// `accumulate`); 0: it writes the product.
  float beta = 0.0f;
  /// cuBLASLt's workspace for it, also the kernels after it's scratch: the
  /// side stream's GEMMs have their own.
  CUdeviceptr workspace = 0;
  int loops = 1; // GemmMapping::loops, with these byte strides
  uint64_t leftStride = 0, rightStride = 0, outStride = 0;
  std::string shape; // "MxNxK bf16" for the profile
  /// Tuning (GPTC_GEMM_TUNE): the heuristic's candidates, its first
  /// choice first, and what GEMMs with the same tuning result share
  /// (kernel, shape and epilogue).
  std::vector<cublasLtMatmulAlgo_t> candidates;
  std::string tuneKey;
  /// How the epilogue runs: cuBLASLt's name for it ("DGELU_BGRAD"), with
  /// "+ gptc" where kernels run after the GEMM ("DEFAULT + gptc").
  std::string way;
  /// rt::GemmFallback kernels after the GEMM, for the part of its epilogue
  /// cuBLASLt had no algorithm for: 1-D blocks of 256 threads, arguments
  /// of 8 bytes each (pointers and i64 sizes).
  struct Followup {
    CUfunction fn = nullptr;
    uint32_t grid[2] = {1, 1};
    std::vector<uint64_t> args;
    /// Row chunks (loops of one GEMM's rows): added to args at each loop,
    /// the kernel launched right after that loop's GEMM, while its rows
    /// are still in L2. Empty: launched once, after the last loop.
    std::vector<uint64_t> loopStride;
  };
  std::vector<Followup> after;
  /// Rows a loop when the plan runs one GEMM's rows in chunks (0: not).
  int64_t chunkRows = 0;
  /// A row-chunked plan whose loops' kernels run on the loop stream, each
  /// beside the next loop's GEMM, joined back after the last.
  bool passesBeside = false;
};

/// Keeps `text` in the cache file `path` (atomically) for later runs; a
/// cache that cannot be written is no error, only slower.
void keepInCache(const std::string &path, const std::string &text) {
  if (path.empty())
    return;
  try {
    std::error_code ignored; // writeFileAtomically fails for us
    std::filesystem::create_directories(path.substr(0, path.rfind('/')),
                                        ignored);
    writeFileAtomically(path, text.data(), text.size());
  } catch (const std::exception &) {
  }
}

/// What tuning chose for a GEMM: which of its ways to the epilogue (0: its
/// own plan) with which of that way's candidates, and the ms a GEMM (with
/// the kernels after it) of the heuristic's first choice and of this one.
struct GemmChoice {
  size_t way = 0, index = 0;
  double first = 0, best = 0;
};

/// Where a GEMM's tuning choice is kept between runs:
/// kernelCacheDir()/gemms/KEY, KEY the SHA-256 of the device (name and
/// arch), the cuBLASLt version and each way's tuning key, epilogue and
/// candidates (so another heuristic's list is timed afresh). "" when there
/// is no cache directory.
std::string gemmChoiceFile(const std::string &deviceName,
                           const std::string &deviceArch, size_t ltVersion,
                           const std::vector<GemmPlan *> &ways) {
  const std::string dir = kernelCacheDir();
  if (dir.empty())
    return {};
  Sha256 h; // fields separated by NUL, as variantChoiceFile's
  auto field = [&](const std::string &s) { h.update(s.c_str(), s.size() + 1); };
  field("gptc gemm choice 1");
  field(deviceName);
  field(deviceArch);
  field(std::to_string(ltVersion));
  for (const GemmPlan *w : ways) {
    field(w->tuneKey);
    field(w->way);
    field(std::to_string(w->candidates.size()));
    for (const cublasLtMatmulAlgo_t &a : w->candidates)
      h.update(&a, sizeof a);
  }
  return dir + "/gemms/" + h.hexDigest();
}

/// The kept choice ("WAY INDEX FIRST BEST"); false when there is none, or
/// it names no candidate of `ways`.
bool readGemmChoice(const std::string &path, const std::vector<GemmPlan *> &ways,
                    GemmChoice &c) {
  std::ifstream in(path);
  GemmChoice read;
  if (path.empty() || !in ||
      !(in >> read.way >> read.index >> read.first >> read.best) ||
      read.way >= ways.size() || read.index >= ways[read.way]->candidates.size())
    return false;
  c = read;
  return true;
}

void saveGemmChoice(const std::string &path, const GemmChoice &c) {
  char text[96];
  std::snprintf(text, sizeof text, "%zu %zu %.6f %.6f\n", c.way, c.index,
                c.first, c.best);
  keepInCache(path, text);
}

/// How much of a fused GEMM's epilogue cuBLASLt runs; rt::GemmFallback
/// kernels do the rest after it.
enum class EpilogueLevel {
  Full,            ///< all of it (and a plain matmul)
  WithoutBiasGrad, ///< DGELU_BGRAD as DGELU, the bias gradient after
  WithoutGelu,     ///< GELU(_AUX)_BIAS as BIAS into the pre-activation,
                   ///< GELU after
  None,            ///< DEFAULT, the whole epilogue after
};

struct Prepared {
  CUfunction fn = nullptr;
  LaunchVariant kernel; // which kernel fn is and how it is launched
  std::vector<CUdeviceptr> args;
  std::vector<void *> argPtrs; // cuLaunchKernel's kernelParams, into args
  int gemm = -1;               // into gemms
  int profileSlot = -1;
  double floorMs = 0; // the profile's floor of this launch (launchCost)
  std::string label; // "forward launch 12: layernorm (k12) at loc"
};

class CudaBackendImpl final : public CudaBackend {
public:
  CudaBackendImpl() : cu(driver()) {
    try {
      start();
    } catch (...) {
      release();
      throw;
    }
    std::lock_guard<std::mutex> lock(registryMutex);
    registry.insert(this);
  }

  ~CudaBackendImpl() override {
    {
      std::lock_guard<std::mutex> lock(registryMutex);
      registry.erase(this);
    }
    release();
  }

  void start() {
    check(cu.cuDeviceGet(&dev, 0), "cuDeviceGet");
    char name[256] = {};
    check(cu.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
    deviceName = name;
    ccMajor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    ccMinor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    maxSharedOptin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    // DRAM peak for the profile's floors: two transfers a clock (DDR)
    // over the bus (H100 SXM: 2.619 GHz, 5120 bits, 3.35 TB/s).
    peakBytesPerSecond =
        2.0 * 1e3 * double(attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)) *
        double(attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)) / 8.0;
    // The "a" targets (wgmma, setmaxnreg) exist from Hopper on; a cubin for
    // them runs on exactly this compute capability.
    deviceArch = "sm_" + std::to_string(ccMajor) + std::to_string(ccMinor) +
                 (ccMajor >= 9 ? "a" : "");
    check(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    // The compute stream at the greatest priority: where the side stream
    // (Launch::stream 1) has blocks waiting too, the block scheduler starts
    // the critical path's first.
    int greatestPriority = 0;
    check(cu.cuCtxGetStreamPriorityRange(&leastPriority, &greatestPriority),
          "cuCtxGetStreamPriorityRange");
    check(cu.cuStreamCreateWithPriority(&compute, CU_STREAM_NON_BLOCKING,
                                        greatestPriority),
          "cuStreamCreateWithPriority");
    check(cu.cuStreamCreate(&copy, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    computeMark = newEvent(false);
    copyMark = newEvent(false);
    void *host = nullptr;
    check(cu.cuMemHostAlloc(&host, kStagingBytes, 0), "cuMemHostAlloc");
    staging = static_cast<uint8_t *>(host);
    check(cu.cuMemHostAlloc(&host, kMailboxBytes, 0), "cuMemHostAlloc");
    mailbox = static_cast<uint8_t *>(host);
    profile = envOn("GPTC_PROFILE");
    syncEach = envOn("GPTC_CUDA_SYNC");
    useGraphs = envSwitch("GPTC_CUDA_GRAPH", {"1", "0"}) == "1" && !profile &&
                !syncEach;
    forceGemmFallback = envOn("GPTC_GEMM_FALLBACK");
    dgeluInCublasLt =
        envSwitch("GPTC_GEMM_DGELU", {"gptc", "cublaslt"}) == "cublaslt";
    const std::string tune = envSwitch("GPTC_GEMM_TUNE", {"1", "0", "time"});
    tuneGemms = tune != "0";
    retimeGemms = tune == "time";
    chunkBytes = envChunkBytes();
    // GPTC_VARIANT=label[,label...]: the variants to run untimed; -label:
    // one to leave out of the timing.
    if (const char *v = std::getenv("GPTC_VARIANT"))
      for (std::string_view rest = v; !rest.empty();) {
        size_t comma = rest.find(',');
        std::string label(rest.substr(0, comma));
        if (label.empty())
          throw DeviceError(std::string("GPTC_VARIANT=") + v +
                            ": expected labels separated by commas (or own, "
                            "time, or -label)");
        forcedVariants.push_back(label);
        rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
      }
  }

  /// Frees whatever exists; ignores errors (it runs after failures too).
  void release() noexcept {
    if (!ctx)
      return;
    cu.cuCtxSetCurrent(ctx);
    // GPTC_PROFILE=1 always shows its table, even where the caller did not
    // ask for it: every kernel (GPT-2's step has about 40), so that tools
    // reading it (bench/gpu/torch_gemms.py) see every GEMM shape.
    if (profile && !reported)
      try {
        std::fputs(profileReport(1000).c_str(), stderr);
      } catch (const DeviceError &) {
      }
    for (CUstream s : {compute, side, copy, loopStream})
      if (s)
        cu.cuStreamSynchronize(s);
    for (auto &[key, g] : graphs)
      if (g.exec)
        cu.cuGraphExecDestroy(g.exec);
    for (TimedLaunch &t : pendingTimes) {
      cu.cuEventDestroy(t.start);
      cu.cuEventDestroy(t.end);
    }
    for (InFlight &f : inflight)
      cu.cuEventDestroy(f.done);
    for (CUevent e : eventPool)
      cu.cuEventDestroy(e);
    for (CUevent e : timingPool)
      cu.cuEventDestroy(e);
    for (CUevent e : {computeMark, copyMark, forkMark, joinMark, loopFork,
                      loopJoin})
      if (e)
        cu.cuEventDestroy(e);
    for (CUmodule m : modules)
      if (m)
        cu.cuModuleUnload(m);
    if (ltHandle) {
      const Lt &lt = cublasLt(); // loaded, since there is a handle
      // A GEMM's other ways share its layouts, and tuning may have swapped
      // a row-chunked way's in: each layout once.
      std::set<cublasLtMatrixLayout_t> layouts(chunkLayouts.begin(),
                                               chunkLayouts.end());
      for (GemmPlan &g : gemms) {
        layouts.insert({g.left, g.right, g.out});
        if (g.desc)
          lt.cublasLtMatmulDescDestroy(g.desc);
      }
      for (auto &[index, others] : alternatives)
        for (GemmPlan &g : others) {
          layouts.insert({g.left, g.right, g.out});
          if (g.desc)
            lt.cublasLtMatmulDescDestroy(g.desc);
        }
      for (cublasLtMatrixLayout_t l : layouts)
        if (l)
          lt.cublasLtMatrixLayoutDestroy(l);
      if (ltHandle)
        lt.cublasLtDestroy(ltHandle);
    }
    if (arena)
      cu.cuMemFree(arena);
    for (CUdeviceptr w : {workspace, sideWorkspace, partialsScratch})
      if (w)
        cu.cuMemFree(w);
    for (uint8_t *pinned : {staging, mailbox})
      if (pinned)
        cu.cuMemFreeHost(pinned);
    for (CUstream s : {compute, side, copy, loopStream})
      if (s)
        cu.cuStreamDestroy(s);
    cu.cuDevicePrimaryCtxRelease(dev);
    ctx = nullptr;
  }

  std::string name() const override { return deviceName; }
  std::string arch() const override { return deviceArch; }
  double peakBf16Flops() const override {
    return knownPeakBf16Flops(deviceName, ccMajor, ccMinor);
  }
  int64_t deviceMemoryUsed() const override {
    size_t freeBytes = 0, total = 0;
    cu.cuCtxSetCurrent(ctx);
    if (cu.cuMemGetInfo(&freeBytes, &total) != CUDA_SUCCESS)
      return -1;
    return int64_t(total - freeBytes);
  }
  int64_t bytesAllocated() const override {
    return arenaBytes + (workspace ? int64_t(kWorkspaceBytes) : 0) +
           (sideWorkspace ? int64_t(kWorkspaceBytes) : 0) +
           (partialsScratch ? int64_t(kPartialsBytes) : 0);
  }
  bool profiling() const override { return profile; }

  void load(const Program &program) override;
  void upload(int buffer, const void *host) override;
  void download(int buffer, void *host) override;
  void downloadLater(int buffer, void *host) override;
  void run(const Function &f, size_t begin, size_t end) override;
  void synchronize() override;
  void resetProfile() override;
  std::string profileReport(size_t top) override;

private:
  struct InFlight {
    size_t begin, end; // staging bytes a pending copy still reads
    CUevent done;
  };
  struct TimedLaunch {
    int slot;
    CUevent start, end;
    double floorMs;
  };
  /// The least time a launch of this cost takes on this device: its bytes
  /// at the DRAM peak or its FLOPs at the dense bf16 peak, whichever is
  /// longer; 0 where a peak is unknown.
  double floorMs(const LaunchCost &c) const {
    double flopsPeak = peakBf16Flops();
    if (peakBytesPerSecond <= 0 || flopsPeak <= 0)
      return 0;
    return 1e3 * std::max(double(c.bytes) / peakBytesPerSecond,
                          c.flops / flopsPeak);
  }
  struct ProfileEntry {
    std::string kernel, op, loc;
    int64_t calls = 0;
    double ms = 0;
    /// Σ over the timed calls of max(bytes / DRAM peak, FLOPs / bf16 peak).
    double floorMs = 0;
  };
  struct GraphState {
    int calls = 0;
    bool failed = false; // capture did not work: always run eagerly
    CUgraphExec exec = nullptr;
    std::string label; // for errors: "update (a CUDA graph of launches ...)"
  };

  void check(CUresult r, const char *what) const {
    if (r != CUDA_SUCCESS)
      throw DeviceError(std::string("CUDA error in ") + what + ": " +
                        cuError(cu, r));
  }
  /// A stream synchronisation: an error here may come from any launch
  /// queued before it, so it names the last one.
  void checkSync(CUresult r) const {
    if (r == CUDA_SUCCESS)
      return;
    std::string where = lastLaunch ? "at or before " + *lastLaunch
                                   : std::string("before any launch");
    // A kernel variant timed at load is waited for before the next one
    // runs, so the error is that variant's: the way round it is not to
    // time it.
    const size_t n = kTimedAtLoad.size();
    const bool timing =
        lastLaunch && lastLaunch->size() >= n &&
        lastLaunch->compare(lastLaunch->size() - n, n, kTimedAtLoad) == 0;
    const std::string leaveOut = timing && !timedVariant.empty()
                                     ? "; GPTC_VARIANT=time,-" + timedVariant +
                                           " times the others without it"
                                     : std::string();
    throw DeviceError(
        "CUDA error " + cuError(cu, r) + " " + where +
        (timing ? leaveOut + "; GPTC_VARIANT=own runs each launch's own kernel "
                             "without timing the others"
         : syncEach ? ""
                    : "; rerun with GPTC_CUDA_SYNC=1 to name the failing "
                      "launch"));
  }
  int attribute(CUdevice_attribute a) const {
    int v = 0;
    check(cu.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  }
  void bind() const { check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent"); }
  CUevent newEvent(bool timing) {
    CUevent e = nullptr;
    check(cu.cuEventCreate(&e, timing ? CU_EVENT_DEFAULT
                                      : CU_EVENT_DISABLE_TIMING),
          "cuEventCreate");
    return e;
  }
  CUevent pooledEvent(std::vector<CUevent> &pool, bool timing) {
    if (pool.empty())
      return newEvent(timing);
    CUevent e = pool.back();
    pool.pop_back();
    return e;
  }

  const Buffer &buffer(int id) const {
    if (!prog)
      throw DeviceError("CUDA backend: load() a program first");
    if (id < 0 || size_t(id) >= prog->buffers.size())
      throw DeviceError("CUDA backend: no buffer #" + std::to_string(id));
    return prog->buffers[id];
  }
  /// The buffer's address: a view without an offset of its own uses its
  /// base's.
  CUdeviceptr address(int id) const {
    const Buffer &b = buffer(id);
    const Buffer *base = &b;
    int64_t offset = b.offset;
    for (int hops = 0; offset < 0 && base->viewOf >= 0 && hops < 64; ++hops) {
      base = &prog->buffers[base->viewOf];
      offset = base->offset;
    }
    if (offset < 0)
      throw DeviceError("buffer '" + b.name + "' has no arena offset (run "
                        "planMemory before loading)");
    if (offset + b.bytes() > arenaBytes)
      throw DeviceError("buffer '" + b.name + "' ends past the arena");
    return arena + CUdeviceptr(offset);
  }

  uint8_t *reserveStaging(size_t bytes);
  void releaseStaging(size_t begin, size_t end);
  void loadKernels();
  void prepare(const Function &f);
  int planGemm(const Launch &l, const std::string &label);
  /// The epilogue of a matmul_epilogue (BIAS, GELU_BIAS, GELU_AUX_BIAS),
  /// matmul_gelu_grad (DGELU, DGELU_BGRAD) or matmul_bias_grad (BGRADA),
  /// as far as `level` asks cuBLASLt for it; its name ("DGELU_BGRAD").
  std::string setEpilogue(const Launch &l, const GemmMapping &map,
                          GemmPlan &g, const std::string &label,
                          EpilogueLevel level);
  /// Row-chunked ways to l's epilogue at each of `levels` (each gptc's
  /// pass over what the GEMM wrote): for each GPTC_GEMM_CHUNK_BYTES size,
  /// the GEMM in loops of rows (copies of `layouts`, a loop's own matrix
  /// layouts), each loop's kernels after its GEMM or beside the next
  /// one's; appended to `others`. describeAt gives a plan its descriptor
  /// and algorithms at a level (planGemm's), false if cuBLASLt has none.
  void planRowLoops(const Launch &l, const GemmMapping &map,
                    const GemmPlan &layouts,
                    const std::vector<EpilogueLevel> &levels,
                    const uint32_t (&align)[3], const std::string &label,
                    const std::function<bool(GemmPlan &, EpilogueLevel)>
                        &describeAt,
                    std::vector<GemmPlan> &others);
  /// The kernels after a GEMM planned at `level` < Full.
  void planFollowups(const Launch &l, const GemmMapping &map, GemmPlan &g,
                     const std::string &label, EpilogueLevel level);
  /// Whether the program carries (and this backend loaded) kernel `name`.
  bool hasKernel(const std::string &name) const;
  CUfunction fallbackKernel(GemmFallback kind, DType t,
                            const std::string &label);
  const std::vector<Prepared> &prepared(const Function &f) const;
  /// Issues one launch on `stream` (the compute stream unless it is the
  /// side stream's).
  void enqueue(const Launch &l, const Prepared &pl, bool timed,
               CUstream stream = nullptr);
  /// Launches [begin, end) of f in order: a side-stream launch forks from
  /// the compute stream (where `overlap`; else it runs there too) and is
  /// joined back at its Launch::join or at `end`. `checked`: synchronise
  /// after each launch, naming the one that failed.
  void enqueueRange(const Function &f, size_t begin, size_t end, bool timed,
                    bool checked, bool overlap);
  int profileSlot(const std::string &kernel, const Launch &l);
  void collectTimes();

  const Driver &cu;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUstream compute = nullptr, copy = nullptr;
  CUevent computeMark = nullptr, copyMark = nullptr;
  std::string deviceName, deviceArch;
  int ccMajor = 0, ccMinor = 0, maxSharedOptin = 0;
  double peakBytesPerSecond = 0;
  bool profile = false, syncEach = false, useGraphs = true;
  bool forceGemmFallback = false; // GPTC_GEMM_FALLBACK=1
  bool dgeluInCublasLt = false;   // GPTC_GEMM_DGELU=cublaslt
  bool tuneGemms = true;          // GPTC_GEMM_TUNE=1 (or time), the default
  bool retimeGemms = false;       // GPTC_GEMM_TUNE=time
  std::vector<int64_t> chunkBytes; // GPTC_GEMM_CHUNK_BYTES
  /// The bias gradients' partial sums for row-chunked GEMM ways (whose
  /// next loop's GEMM may use the cuBLASLt workspace), made when the first
  /// such way is planned; kPartialsBytes.
  CUdeviceptr partialsScratch = 0;
  /// The matrix layouts of row-chunked ways (one loop's rows), those of
  /// ways not kept too; destroyed with the handle.
  std::vector<cublasLtMatrixLayout_t> chunkLayouts;
  /// Where a row-chunked way's loop kernels run beside the next loop's
  /// GEMM (GemmPlan::passesBeside), at the compute stream's priority, and
  /// the events that fork each loop there and join the last back; made
  /// when the first such way is planned.
  CUstream loopStream = nullptr;
  CUevent loopFork = nullptr, loopJoin = nullptr;
  void tune();
  std::vector<std::string> forcedVariants; // GPTC_VARIANT, in order
  void timeVariants();
  /// Each output of `l`, as the last run left it.
  std::vector<std::vector<uint8_t>> launchResults(const Launch &l);
  /// Why a variant's results (each output's bytes) are not the launch's
  /// own kernel's, or "" if they agree.
  std::string resultsDiffer(const Launch &l,
                            const std::vector<std::vector<uint8_t>> &own,
                            const std::vector<std::vector<uint8_t>> &other);
  /// The mean ms of `runs` calls of `launch` on the compute stream, timed
  /// between `start` and `stop` (the caller warms up first).
  double msPerRun(CUevent start, CUevent stop, int runs,
                  const std::function<void()> &launch);
  /// One run of `g` with `algo` on `stream` (null: the compute stream):
  /// each of its loops' GEMMs, each followed by the kernels that take that
  /// loop's rows, then the kernels planned after them all. A cuBLASLt
  /// failure is returned (nothing after it runs); a kernel's, thrown.
  cublasStatus_t runGemm(const GemmPlan &g, const cublasLtMatmulAlgo_t &algo,
                         const std::string &label, CUstream stream = nullptr);
  /// Followup `f` for loop `loop` (its args moved by loopStride) on
  /// `stream`.
  void launchFollowup(const GemmPlan::Followup &f, int loop,
                      const std::string &label, CUstream stream);
  void zeroArenaAndUploadConstants();
  std::set<std::string> fallbackNotes; // one stderr line per kind and shape
  bool reported = false; // profileReport() was called

  const Program *prog = nullptr;
  CUdeviceptr arena = 0, workspace = 0;
  /// The side stream (Launch::stream 1: gptc compile
  /// --overlap-weight-grads), at the least priority; its GEMMs' own cuBLASLt
  /// workspace; the events of its forks and joins. Made at load when a
  /// launch asks for it.
  CUstream side = nullptr;
  CUdeviceptr sideWorkspace = 0;
  CUevent forkMark = nullptr, joinMark = nullptr;
  int leastPriority = 0;
  /// Checks at load that nothing runs beside a side-stream launch that
  /// writes what it reads or touches what it writes, by arena bytes (so
  /// that a program file whose plan broke is one error, not a race), and
  /// that only GEMMs run there; makes the side stream.
  void prepareSideStream();
  int64_t arenaBytes = 0;
  std::vector<CUmodule> modules;
  std::vector<CUfunction> entries; // per Program::kernels
  std::map<const Function *, std::vector<Prepared>> launches;
  cublasLtHandle_t ltHandle = nullptr;
  std::vector<GemmPlan> gemms;
  /// A GEMM's other ways to its epilogue (by index into gemms), which
  /// tune() times against its own plan; their layouts are the GEMM's own.
  std::map<int, std::vector<GemmPlan>> alternatives;
  const std::string *lastLaunch = nullptr; // the label of the last enqueued
  /// While timeVariants times a variant (not a launch's own kernel): its
  /// label, for the error that names the way round it.
  std::string timedVariant;

  uint8_t *staging = nullptr;
  size_t stagingHead = 0;
  /// downloadLater's copies: each lands in the mailbox on the compute
  /// stream, and goes on to its host memory when the host next waits.
  struct Letter {
    size_t at, bytes;
    void *host;
  };
  uint8_t *mailbox = nullptr;
  size_t mailboxHead = 0;
  std::vector<Letter> letters;
  /// Hands the letters on; every copy into the mailbox is done.
  void deliverLetters();
  std::vector<InFlight> inflight;
  std::vector<CUevent> eventPool, timingPool;

  std::map<std::tuple<const Function *, size_t, size_t>, GraphState> graphs;

  std::vector<TimedLaunch> pendingTimes;
  std::vector<ProfileEntry> profileEntries;
  std::map<std::string, int> profileSlots;
  /// Timed runs of each function from its first launch: the profile's
  /// steps are update's (it runs once a step; forward also runs for eval).
  std::map<std::string, int64_t> timedRuns;
};

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

void CudaBackendImpl::load(const Program &program) {
  bind();
  if (prog)
    throw DeviceError("CUDA backend: load() called twice");
  prog = &program;
  arenaBytes = program.arenaBytes;
  check(cu.cuMemAlloc(&arena, size_t(std::max<int64_t>(arenaBytes, 256))),
        "cuMemAlloc (the arena)");
  zeroArenaAndUploadConstants();
  loadKernels();
  prepareSideStream();
  for (const Function &f : program.functions)
    prepare(f);
  bool variants = false;
  for (const Function &f : program.functions)
    for (const Launch &l : f.launches)
      variants |= !l.variants.empty();
  if (variants || !forcedVariants.empty()) {
    timeVariants(); // (a GPTC_VARIANT label no launch has: an error)
    zeroArenaAndUploadConstants(); // the variants wrote their outputs
  }
  if (tuneGemms && !gemms.empty()) {
    tune();
    zeroArenaAndUploadConstants(); // tuning wrote GEMM outputs
  }
  if (profile && tuneGemms)
    for (const Function &f : program.functions)
      for (size_t i = 0; i < f.launches.size(); ++i)
        if (Prepared &pl = launches[&f][i]; pl.gemm >= 0)
          pl.profileSlot =
              profileSlot("cuBLASLt " + gemms[pl.gemm].shape, f.launches[i]);
}

void CudaBackendImpl::prepareSideStream() {
  bool any = false;
  for (const Function &f : prog->functions)
    for (size_t i = 0; i < f.launches.size(); ++i) {
      const Launch &side = f.launches[i];
      if (side.stream == 0)
        continue;
      any = true;
      const std::string where = f.name + " launch " + std::to_string(i) +
                                " (" + side.kernel + " at " +
                                (side.loc.empty() ? "?" : side.loc) + ")";
      if (side.stream != 1 || !isGemm(side.kernel) || side.join <= int(i) ||
          side.join > int(f.launches.size()))
        throw DeviceError(where + ": only a GEMM may run on the side stream "
                          "(stream 1), joined at a later launch or the end");
      // The bytes it reads and writes, against every launch before its join.
      auto ranges = [&](const std::vector<int> &ids) {
        std::vector<std::pair<CUdeviceptr, CUdeviceptr>> r;
        for (int id : ids)
          r.push_back({address(id), address(id) + buffer(id).bytes()});
        return r;
      };
      auto meet = [](const auto &a, const auto &b) {
        for (auto [begin, end] : a)
          for (auto [otherBegin, otherEnd] : b)
            if (begin < otherEnd && otherBegin < end)
              return true;
        return false;
      };
      const auto reads = ranges(side.inputs), writes = ranges(side.outputs);
      for (int k = int(i) + 1; k < side.join; ++k) {
        const Launch &l = f.launches[k];
        if (l.stream == 1)
          continue; // the side stream runs its launches in order
        const auto lReads = ranges(l.inputs), lWrites = ranges(l.outputs);
        if (meet(lWrites, reads) || meet(lWrites, writes) ||
            meet(lReads, writes))
          throw DeviceError(where + " runs on the side stream beside launch " +
                            std::to_string(k) + " (" + l.kernel +
                            "), which shares its bytes: the program's stream "
                            "plan is broken (compile it again)");
      }
    }
  if (!any || side)
    return;
  check(cu.cuStreamCreateWithPriority(&side, CU_STREAM_NON_BLOCKING,
                                      leastPriority),
        "cuStreamCreateWithPriority");
  check(cu.cuMemAlloc(&sideWorkspace, kWorkspaceBytes),
        "cuMemAlloc (the side stream's cuBLASLt workspace)");
  forkMark = newEvent(false);
  joinMark = newEvent(false);
}

void CudaBackendImpl::zeroArenaAndUploadConstants() {
  // Zeros, as the CPU backend's arena starts, so a padded region nothing
  // writes reads the same on both.
  check(cu.cuMemsetD8Async(arena, 0, size_t(std::max<int64_t>(arenaBytes, 256)),
                           compute),
        "cuMemsetD8Async");
  for (size_t i = 0; i < prog->buffers.size(); ++i) {
    const Buffer &b = prog->buffers[i];
    if (b.role != Role::Constant || b.viewOf >= 0)
      continue;
    if (int64_t(b.init.size()) != b.bytes())
      throw DeviceError("constant '" + b.name + "' has " +
                        std::to_string(b.init.size()) + " bytes of data for " +
                        std::to_string(b.bytes()));
    upload(int(i), b.init.data());
  }
}

void CudaBackendImpl::loadKernels() {
  const std::vector<DeviceKernel> &kernels = prog->kernels;
  std::string plainArch = "sm_" + std::to_string(ccMajor) + std::to_string(ccMinor);
  // Kernels without a cubin for this device are compiled by NVRTC, in
  // parallel (the disk cache makes the second start fast).
  // Each distinct source once: the cache's temporary file is named by the
  // process, so two threads must not write one entry.
  std::vector<std::vector<uint8_t>> compiled(kernels.size());
  std::vector<size_t> todo;
  std::map<std::string_view, size_t> firstWithSource;
  std::vector<std::pair<size_t, size_t>> copies; // (kernel, same as kernel)
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (!kernels[i].cubin.empty() &&
        (kernels[i].arch == deviceArch || kernels[i].arch == plainArch))
      continue;
    auto [it, added] = firstWithSource.try_emplace(kernels[i].source, i);
    if (added)
      todo.push_back(i);
    else
      copies.push_back({i, it->second});
  }
  if (!todo.empty()) {
    std::vector<std::exception_ptr> errors(todo.size());
    size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1,
                                        16);
    threads = std::min(threads, todo.size());
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (size_t j = t; j < todo.size(); j += threads) {
          const DeviceKernel &k = kernels[todo[j]];
          try {
            compiled[todo[j]] = compileCached(k.source, k.name, deviceArch);
          } catch (...) {
            errors[j] = std::current_exception();
          }
        }
      });
    for (std::thread &t : pool)
      t.join();
    for (std::exception_ptr &e : errors)
      if (e)
        std::rethrow_exception(e);
    for (auto [kernel, same] : copies)
      compiled[kernel] = compiled[same];
  }

  modules.assign(kernels.size(), nullptr);
  entries.assign(kernels.size(), nullptr);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const DeviceKernel &k = kernels[i];
    const std::vector<uint8_t> &image =
        compiled[i].empty() ? k.cubin : compiled[i];
    if (CUresult r = cu.cuModuleLoadData(&modules[i], image.data());
        r != CUDA_SUCCESS)
      throw DeviceError("cannot load kernel " + k.name + " on " + deviceArch +
                        ": " + cuError(cu, r));
    if (CUresult r = cu.cuModuleGetFunction(&entries[i], modules[i],
                                            k.name.c_str());
        r != CUDA_SUCCESS)
      throw DeviceError("kernel " + k.name + " is not in its module: " +
                        cuError(cu, r));
  }

  // Shared memory above 48 KiB a block, static and dynamic together,
  // needs an opt-in per function for its dynamic part: GPT-2's layernorm
  // gradients take 48 KiB dynamic and 16 bytes static, and their launches
  // failed (CUDA_ERROR_INVALID_VALUE) while only the dynamic bytes counted.
  std::vector<uint32_t> maxShared = dynamicSharedBytes(*prog);
  maxShared.resize(kernels.size(), 0);
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (maxShared[i] == 0)
      continue;
    int staticBytes = 0;
    check(cu.cuFuncGetAttribute(&staticBytes,
                                CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                entries[i]),
          "cuFuncGetAttribute");
    const uint64_t total = uint64_t(staticBytes) + maxShared[i];
    if (total <= 48u * 1024)
      continue;
    if (total > uint64_t(maxSharedOptin))
      throw DeviceError("kernel " + kernels[i].name + " asks for " +
                        std::to_string(total) +
                        " bytes of shared memory; " + deviceName +
                        " allows " + std::to_string(maxSharedOptin));
    check(cu.cuFuncSetAttribute(entries[i],
                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                int(maxShared[i])),
          "cuFuncSetAttribute");
  }
}

void CudaBackendImpl::prepare(const Function &f) {
  std::vector<Prepared> &out = launches[&f];
  out.resize(f.launches.size());
  for (size_t i = 0; i < f.launches.size(); ++i) {
    const Launch &l = f.launches[i];
    Prepared &pl = out[i];
    std::string kernelName =
        l.deviceKernel >= 0 && size_t(l.deviceKernel) < prog->kernels.size()
            ? prog->kernels[l.deviceKernel].name
            : "cuBLASLt";
    pl.label = f.name + " launch " + std::to_string(i) + ": " + l.kernel +
               " (" + kernelName + ") at " + (l.loc.empty() ? "?" : l.loc);
    if (l.deviceKernel >= 0) {
      if (size_t(l.deviceKernel) >= entries.size())
        throw DeviceError(pl.label + " names kernel #" +
                          std::to_string(l.deviceKernel) + " of " +
                          std::to_string(entries.size()));
      pl.fn = entries[l.deviceKernel];
      pl.kernel = ownVariant(l);
      for (const LaunchVariant &v : l.variants)
        if (v.deviceKernel < 0 || size_t(v.deviceKernel) >= entries.size())
          throw DeviceError(pl.label + ": variant " + v.label +
                            " names kernel #" +
                            std::to_string(v.deviceKernel) + " of " +
                            std::to_string(entries.size()));
      for (int id : l.inputs)
        pl.args.push_back(address(id));
      for (int id : l.outputs)
        pl.args.push_back(address(id));
      for (CUdeviceptr &a : pl.args)
        pl.argPtrs.push_back(&a);
      if (profile)
        pl.profileSlot = profileSlot(kernelName, l);
    } else if (isGemm(l.kernel)) {
      pl.gemm = planGemm(l, pl.label);
      // (Tuning may change the epilogue, and so the name: then after it.)
      if (profile && !tuneGemms)
        pl.profileSlot = profileSlot("cuBLASLt " + gemms[pl.gemm].shape, l);
    }
    if (profile)
      pl.floorMs = floorMs(launchCost(*prog, l));
    // Anything else has no CUDA implementation: run() says so by name, so a
    // kernel check can still test every launch that has one.
  }
}

int CudaBackendImpl::planGemm(const Launch &l, const std::string &label) {
  // The operands: a, b first; then the epilogue's.
  //   matmul            a, b              -> result
  //   matmul_epilogue   a, b, bias        -> result [, pre-activation]
  //   matmul_gelu_grad  a, b, pre         -> result [, bias gradient]
  //   matmul_bias_grad  a, b              -> result, bias gradient
  struct Arity {
    const char *kernel;
    size_t inputs, minOutputs, maxOutputs;
    const char *says;
  };
  static const Arity arities[] = {
      {"matmul", 2, 1, 1, "takes 2 operands and gives 1 result"},
      {"matmul_epilogue", 3, 1, 2,
       "takes a, b and a bias and gives 1 or 2 results"},
      {"matmul_gelu_grad", 3, 1, 2,
       "takes a, b and the pre-activation and gives 1 or 2 results"},
      {"matmul_bias_grad", 2, 2, 2,
       "takes a and b and gives the product and the bias gradient"}};
  // With `accumulate` (grads_accumulate's weight gradients) the result's
  // old value comes after the operands: the result's own buffer, which the
  // GEMM adds its product to (beta = 1).
  const bool accumulate = accumulates(l);
  if (accumulate &&
      (l.kernel != "matmul" && l.kernel != "matmul_bias_grad"))
    throw DeviceError(label + ": of the GEMMs only matmul and "
                              "matmul_bias_grad accumulate into their result");
  for (const Arity &ar : arities)
    if (l.kernel == ar.kernel &&
        (l.inputs.size() != ar.inputs + (accumulate ? 1 : 0) ||
         l.outputs.size() < ar.minOutputs ||
         l.outputs.size() > ar.maxOutputs))
      throw DeviceError(label + ": a " + l.kernel + " " + ar.says +
                        (accumulate ? ", and its result's old value" : ""));
  if (accumulate && l.inputs.back() != l.outputs[0])
    throw DeviceError(label + ": an accumulating " + l.kernel +
                      " takes its own result as its last operand");
  bool epilogue = l.kernel != "matmul";
  const Lt &lt = cublasLt();
  if (!ltHandle) {
    if (cublasStatus_t s = lt.cublasLtCreate(&ltHandle);
        s != CUBLAS_STATUS_SUCCESS)
      throw DeviceError(std::string("cublasLtCreate failed: ") +
                        lt.cublasLtGetStatusName(s));
    check(cu.cuMemAlloc(&workspace, kWorkspaceBytes),
          "cuMemAlloc (cuBLASLt workspace)");
  }
  const Buffer &a = buffer(l.inputs[0]), &b = buffer(l.inputs[1]),
               &d = buffer(l.outputs[0]);
  auto flag = [&](const char *name) {
    auto it = l.ints.find(name);
    return it != l.ints.end() && it->second != 0;
  };
  bool ta = flag("transpose_a"), tb = flag("transpose_b");
  GemmMapping map = mapMatmul(a, b, d, ta, tb, label);
  GemmPlan g;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.loops = int(map.loops);
  g.rightStride = uint64_t(map.rightLoopStride * dtypeBytes(a.dtype));
  g.outStride = uint64_t(map.outLoopStride * dtypeBytes(d.dtype));
  cudaDataType_t ab = cudaType(a.dtype), bb = cudaType(b.dtype),
                 db = cudaType(d.dtype);
  // 16-bit operands accumulate in fp32; fp32 uses the tensor cores' tf32
  // only when the program was compiled for it.
  cublasComputeType_t computeType = CUBLAS_COMPUTE_32F;
  auto precision = prog->meta.find("precision");
  if (a.dtype == DType::F32 && precision != prog->meta.end() &&
      precision->second == "tf32")
    computeType = CUBLAS_COMPUTE_32F_FAST_TF32;
  g.shape = std::to_string(map.n) + "x" + std::to_string(map.m) + "x" +
            std::to_string(map.k) +
            (map.batch > 1 ? "x" + std::to_string(map.batch) : std::string()) +
            (g.loops > 1 ? " (" + std::to_string(g.loops) + " GEMMs)" : "") +
            " " + dtypeName(a.dtype) + (ta ? " tA" : "") + (tb ? " tB" : "") +
            (accumulate ? " +C" : "");

  auto ltCheck = [&](cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS)
      throw DeviceError(label + ": " + what + " failed: " +
                        lt.cublasLtGetStatusName(s));
  };
  ltCheck(lt.cublasLtMatrixLayoutCreate(&g.left, bb, uint64_t(map.leftRows),
                                        uint64_t(map.leftCols), map.leftLd),
          "cublasLtMatrixLayoutCreate");
  ltCheck(lt.cublasLtMatrixLayoutCreate(&g.right, ab, uint64_t(map.rightRows),
                                        uint64_t(map.rightCols), map.rightLd),
          "cublasLtMatrixLayoutCreate");
  ltCheck(lt.cublasLtMatrixLayoutCreate(&g.out, db, uint64_t(map.m),
                                        uint64_t(map.n), map.outLd),
          "cublasLtMatrixLayoutCreate");
  if (map.batch > 1) {
    int32_t count = int32_t(map.batch);
    int64_t strides[3] = {map.leftStride, map.rightStride, map.outStride};
    cublasLtMatrixLayout_t layouts[3] = {g.left, g.right, g.out};
    for (int i = 0; i < 3; ++i) {
      ltCheck(lt.cublasLtMatrixLayoutSetAttribute(
                  layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                  sizeof(count)),
              "setting BATCH_COUNT");
      ltCheck(lt.cublasLtMatrixLayoutSetAttribute(
                  layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                  &strides[i], sizeof(strides[i])),
              "setting STRIDED_BATCH_OFFSET");
    }
  }
  g.leftPtr = address(l.inputs[1]);
  g.rightPtr = address(l.inputs[0]);
  g.outPtr = address(l.outputs[0]);
  g.workspace = l.stream == 1 && sideWorkspace ? sideWorkspace : workspace;

  cublasLtMatmulPreference_t pref = nullptr;
  ltCheck(lt.cublasLtMatmulPreferenceCreate(&pref),
          "cublasLtMatmulPreferenceCreate");
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      prefOwner(pref, lt.cublasLtMatmulPreferenceDestroy);
  uint64_t wsBytes = kWorkspaceBytes;
  uint32_t align[3] = {alignmentOf(g.leftPtr | g.leftStride),
                       alignmentOf(g.rightPtr | g.rightStride),
                       alignmentOf(g.outPtr | g.outStride)};
  cublasLtMatmulPreferenceAttributes_t alignAttr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  ltCheck(lt.cublasLtMatmulPreferenceSetAttribute(
              pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes,
              sizeof(wsBytes)),
          "setting MAX_WORKSPACE_BYTES");
  for (int i = 0; i < 4; ++i)
    ltCheck(lt.cublasLtMatmulPreferenceSetAttribute(
                pref, alignAttr[i], &align[std::min(i, 2)], sizeof(uint32_t)),
            "setting MIN_ALIGNMENT");

  // The fused epilogue first; where cuBLASLt has no algorithm for it, less
  // of it, the rest as rt::GemmFallback kernels. GPTC_GEMM_FALLBACK=1 goes
  // straight to the plain GEMM, to check those kernels on a device whose
  // cuBLASLt has them all. So does GELU's derivative with a bias gradient,
  // unless GPTC_GEMM_DGELU=cublaslt or the program lacks the kernels: on an
  // H100, GPT-2's 16384x3072x768 DGELU_BGRAD GEMM took 477 µs, the plain
  // GEMM 159 µs, and even the one-element-a-thread kernels that ran after
  // it then took 370 in all.
  // Whether the program carries the kernels of gptc's bias gradient: the
  // column sums of x (GELU's derivative: the result; else b) into the
  // second result.
  auto hasColumnSums = [&](int x) {
    return hasKernel(gemmFallbackKernel(GemmFallback::ColumnPartials,
                                        buffer(x).dtype)) &&
           hasKernel(gemmFallbackKernel(GemmFallback::ColumnSums,
                                        buffer(l.outputs[1]).dtype));
  };
  const bool dgelu = l.kernel == "matmul_gelu_grad";
  const int summed = dgelu ? l.outputs[0] : l.inputs[1];
  // A GELU epilogue may also run as cuBLASLt's BIAS and gptc's GELU pass.
  auto geluFlag = l.ints.find("gelu");
  const bool geluAfterBias =
      l.kernel == "matmul_epilogue" && geluFlag != l.ints.end() &&
      geluFlag->second != 0 &&
      hasKernel(gemmFallbackKernel(GemmFallback::Gelu,
                                   buffer(l.outputs[0]).dtype));
  const bool ownDgelu = dgelu && l.outputs.size() > 1 && !dgeluInCublasLt &&
                        hasColumnSums(summed);
  const bool plainFirst = forceGemmFallback || ownDgelu;
  std::vector<EpilogueLevel> levels;
  if (epilogue && !plainFirst)
    levels.push_back(EpilogueLevel::Full);
  if (dgelu && l.outputs.size() > 1 && !plainFirst)
    levels.push_back(EpilogueLevel::WithoutBiasGrad);
  if (geluAfterBias && !plainFirst)
    levels.push_back(EpilogueLevel::WithoutGelu);
  levels.push_back(epilogue ? EpilogueLevel::None : EpilogueLevel::Full);
  // The first of `levels` cuBLASLt has an algorithm for, in `p` (its
  // descriptor, algorithm, candidates and tuning key); false if none.
  // `refused` collects the others.
  std::string refused; // "DGELU_BGRAD: CUBLAS_STATUS_NOT_SUPPORTED; ..."
  auto describe = [&](GemmPlan &p, const std::vector<EpilogueLevel> &tries,
                      EpilogueLevel &kept) {
    for (EpilogueLevel level : tries) {
      if (p.desc)
        lt.cublasLtMatmulDescDestroy(p.desc);
      p.desc = nullptr;
      ltCheck(lt.cublasLtMatmulDescCreate(&p.desc, computeType, CUDA_R_32F),
              "cublasLtMatmulDescCreate");
      cublasOperation_t opLeft = map.transLeft ? CUBLAS_OP_T : CUBLAS_OP_N;
      cublasOperation_t opRight = map.transRight ? CUBLAS_OP_T : CUBLAS_OP_N;
      ltCheck(lt.cublasLtMatmulDescSetAttribute(p.desc,
                                                CUBLASLT_MATMUL_DESC_TRANSA,
                                                &opLeft, sizeof(opLeft)),
              "setting TRANSA");
      ltCheck(lt.cublasLtMatmulDescSetAttribute(p.desc,
                                                CUBLASLT_MATMUL_DESC_TRANSB,
                                                &opRight, sizeof(opRight)),
              "setting TRANSB");
      std::string name =
          epilogue ? setEpilogue(l, map, p, label, level) : "DEFAULT";
      cublasLtMatmulHeuristicResult_t results[kTuneCandidates]{};
      int found = 0;
      cublasStatus_t s = lt.cublasLtMatmulAlgoGetHeuristic(
          ltHandle, p.desc, p.left, p.right, p.out, p.out, pref,
          tuneGemms ? kTuneCandidates : 1, results, &found);
      if (s == CUBLAS_STATUS_SUCCESS && found > 0) {
        p.algo = results[0].algo;
        for (int i = 0; tuneGemms && i < found; ++i)
          if (results[i].state == CUBLAS_STATUS_SUCCESS)
            p.candidates.push_back(results[i].algo);
        p.tuneKey = l.kernel + " " + p.shape + " -> " +
                    dtypeName(d.dtype) + " " + name;
        p.way = name;
        kept = level;
        return true;
      }
      refused += (refused.empty() ? "" : "; ") + name + ": " +
                 (s == CUBLAS_STATUS_SUCCESS ? std::string("no algorithm")
                                             : lt.cublasLtGetStatusName(s));
    }
    return false;
  };
  // Tuning (on by default) also times the other ways to a GELU
  // derivative's or a bias gradient's epilogue, where the program has the
  // kernels of them: all of it in cuBLASLt; GELU's derivative in cuBLASLt
  // and gptc's column sums after it; or a plain GEMM and gptc's pass. And
  // to GELU's: cuBLASLt's GELU(_AUX)_BIAS, or its BIAS and gptc's GELU
  // pass. The fastest is kept.
  // GELU's derivative without a bias gradient (GPT-2's c_fc, whose weight
  // gradient sums it) may also run as a plain GEMM and gptc's pass.
  const bool dgeluAlone =
      dgelu && l.outputs.size() == 1 &&
      hasKernel(gemmFallbackKernel(GemmFallback::GeluGrad,
                                   buffer(l.outputs[0]).dtype));
  const bool gradWays = (l.outputs.size() > 1 &&
                         (dgelu || l.kernel == "matmul_bias_grad") &&
                         hasColumnSums(summed)) ||
                        dgeluAlone;
  const bool otherWays =
      tuneGemms && !forceGemmFallback && (gradWays || geluAfterBias);
  const GemmPlan layouts = g; // shared with g, destroyed with g's
  EpilogueLevel kept = EpilogueLevel::Full;
  if (!describe(g, levels, kept))
    throw DeviceError(label + ": cuBLASLt has no algorithm for " + g.shape +
                      " (" + refused + ")");
  std::vector<GemmPlan> others;
  std::vector<EpilogueLevel> planned = {kept}; // g's level and the others'
  if (otherWays) {
    std::string refusedBefore = refused;
    std::vector<EpilogueLevel> ways = {EpilogueLevel::Full};
    if (geluAfterBias) {
      ways.push_back(EpilogueLevel::WithoutGelu);
    } else {
      if (dgelu && l.outputs.size() > 1)
        ways.push_back(EpilogueLevel::WithoutBiasGrad);
      ways.push_back(EpilogueLevel::None);
    }
    for (EpilogueLevel want : ways) {
      if (want == kept)
        continue;
      GemmPlan other = layouts;
      EpilogueLevel level = want;
      if (!describe(other, {want}, level)) {
        if (other.desc)
          lt.cublasLtMatmulDescDestroy(other.desc);
        continue;
      }
      planned.push_back(level);
      if (level != EpilogueLevel::Full) {
        // (The profile tells the two gptc ways apart by their names.)
        planFollowups(l, map, other, label, level);
        other.shape += level == EpilogueLevel::WithoutBiasGrad
                           ? " DGELU + gptc bias gradient"
                       : level == EpilogueLevel::WithoutGelu
                           ? " BIAS + gptc GELU"
                           : " + gptc epilogue";
        other.way += " + gptc";
      }
      others.push_back(std::move(other));
    }
    refused = refusedBefore; // a refusal here is no news
  }
  // Row-chunked ways (planRowLoops), also timed, where gptc's pass reads
  // what the GEMM just wrote: BIAS's pre-activation for the GELU pass, the
  // plain GEMM's product for GELU's derivative. Only on the compute stream
  // (partialsScratch is one).
  if (otherWays && l.stream == 0 && map.loops == 1 && map.batch == 1 &&
      !map.transRight) {
    std::vector<EpilogueLevel> chunkable;
    for (EpilogueLevel level : planned)
      if (((geluAfterBias && level == EpilogueLevel::WithoutGelu) ||
           (dgelu && level == EpilogueLevel::None)) &&
          std::find(chunkable.begin(), chunkable.end(), level) ==
              chunkable.end())
        chunkable.push_back(level);
    const std::string refusedBefore = refused; // (no news here either)
    planRowLoops(
        l, map, layouts, chunkable, align, label,
        [&](GemmPlan &p, EpilogueLevel level) {
          EpilogueLevel described = level;
          return describe(p, {level}, described);
        },
        others);
    refused = refusedBefore;
  }
  if (kept != EpilogueLevel::Full) {
    planFollowups(l, map, g, label, kept);
    g.shape += ownDgelu ? " + gptc epilogue" : " + fallback epilogue";
    g.way += " + gptc";
    std::string note = l.kernel + " " + g.shape;
    if (!plainFirst && fallbackNotes.insert(note).second)
      std::fprintf(stderr,
                   "gptc: cuBLASLt refused the epilogue of %s (%s); it runs "
                   "as gemm_fallback kernels after the GEMM\n",
                   label.c_str(), refused.c_str());
  }
  gemms.push_back(std::move(g));
  if (!others.empty())
    alternatives.emplace(int(gemms.size() - 1), std::move(others));
  return int(gemms.size() - 1);
}

void CudaBackendImpl::planRowLoops(
    const Launch &l, const GemmMapping &map, const GemmPlan &layouts,
    const std::vector<EpilogueLevel> &levels, const uint32_t (&align)[3],
    const std::string &label,
    const std::function<bool(GemmPlan &, EpilogueLevel)> &describeAt,
    std::vector<GemmPlan> &others) {
  // GPT-2's c_fc output (16,384 rows of 3,072 bf16, 101 MB) is twice an
  // H100's L2: written whole, it is read back from DRAM by the pass. A
  // loop of 2,048 rows is 12.6 MB, read from L2; the other operand (c_fc's
  // or c_proj's weight, 4.7 MB) is read again a loop. The bias gradient's
  // partials sum the same chunks of rows in the same order as unchunked.
  const Lt &lt = cublasLt();
  auto ltCheck = [&](cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS)
      throw DeviceError(label + ": " + what + " failed: " +
                        lt.cublasLtGetStatusName(s));
  };
  const Buffer &a = buffer(l.inputs[0]), &d = buffer(l.outputs[0]);
  const bool biasGrad = l.kernel == "matmul_gelu_grad" && l.outputs.size() > 1;
  const int64_t rows = map.n, rowBytes = map.m * dtypeBytes(d.dtype);
  const int64_t multiple = biasGrad ? partialRows(rows, map.m) : 64;
  if (biasGrad && (rows + multiple - 1) / multiple * map.m * 4 >
                      int64_t(kPartialsBytes))
    return;
  std::set<int64_t> sizes; // (two byte counts may give the same loops)
  for (int64_t bytes : chunkBytes)
    if (int64_t r = rowChunk(rows, rowBytes, bytes, multiple); r > 0)
      sizes.insert(r);
  for (EpilogueLevel level : levels)
    for (int64_t r : sizes) {
      GemmPlan c = layouts;
      c.chunkRows = r;
      c.loops = int(rows / r);
      c.rightStride = uint64_t(r * map.k * dtypeBytes(a.dtype));
      c.outStride = uint64_t(r * rowBytes);
      if (alignmentOf(c.rightStride) < align[1] ||
          alignmentOf(c.outStride) < align[2])
        continue;
      ltCheck(lt.cublasLtMatrixLayoutCreate(&c.right, cudaType(a.dtype),
                                            uint64_t(map.rightRows),
                                            uint64_t(r), map.rightLd),
              "cublasLtMatrixLayoutCreate");
      chunkLayouts.push_back(c.right);
      ltCheck(lt.cublasLtMatrixLayoutCreate(&c.out, cudaType(d.dtype),
                                            uint64_t(map.m), uint64_t(r),
                                            map.outLd),
              "cublasLtMatrixLayoutCreate");
      chunkLayouts.push_back(c.out);
      // Each loop's kernels after its GEMM on the compute stream, or beside
      // the next loop's GEMM (memory-bound passes under a compute-bound
      // GEMM, and in its last wave's idle SMs).
      for (bool beside : {false, true}) {
        GemmPlan w = c; // (its own descriptor; the layouts shared)
        if (!describeAt(w, level)) {
          if (w.desc)
            lt.cublasLtMatmulDescDestroy(w.desc);
          continue;
        }
        if (biasGrad && !partialsScratch)
          check(cu.cuMemAlloc(&partialsScratch, kPartialsBytes),
                "cuMemAlloc (bias-gradient partials)");
        if (beside && !loopStream) {
          int greatest = 0, least = 0;
          check(cu.cuCtxGetStreamPriorityRange(&least, &greatest),
                "cuCtxGetStreamPriorityRange");
          check(cu.cuStreamCreateWithPriority(&loopStream,
                                              CU_STREAM_NON_BLOCKING, greatest),
                "cuStreamCreateWithPriority");
          loopFork = newEvent(false);
          loopJoin = newEvent(false);
        }
        w.passesBeside = beside;
        planFollowups(l, map, w, label, level);
        const std::string loops =
            ", " + std::to_string(w.loops) + " loops of " + std::to_string(r) +
            " rows" + (beside ? ", passes beside the next GEMM" : "");
        w.shape += (level == EpilogueLevel::WithoutGelu ? " BIAS + gptc GELU"
                                                        : " + gptc epilogue") +
                   loops;
        w.tuneKey += loops;
        w.way += " + gptc" + loops;
        others.push_back(std::move(w));
      }
    }
}

std::string CudaBackendImpl::setEpilogue(const Launch &l,
                                         const GemmMapping &map, GemmPlan &g,
                                         const std::string &label,
                                         EpilogueLevel level) {
  const Lt &lt = cublasLt();
  auto ltCheck = [&](cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS)
      throw DeviceError(label + ": " + what + " failed: " +
                        lt.cublasLtGetStatusName(s));
  };
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void *value,
                 size_t size, const char *what) {
    ltCheck(lt.cublasLtMatmulDescSetAttribute(g.desc, attr, value, size),
            what);
  };
  // One GEMM whose column-major rows are gpt's N: the bias (gradient) runs
  // along them and the aux matrix has D's layout. gpt-fuse-matmul-epilogue
  // only makes such (a 2-D right operand, no transposed batched left one).
  if (map.loops > 1 || map.batch > 1)
    throw DeviceError(label + ": a matmul epilogue over several GEMMs");
  auto it = l.ints.find("gelu");
  bool gelu = it != l.ints.end() && it->second != 0;
  // Which epilogue, and where its bias (or bias gradient) and aux matrix
  // are. gpt's b is cuBLASLt's A (the operands swap in the column-major
  // view), so the column sums of gpt's b are BGRADA's.
  cublasLtEpilogue_t epi;
  std::string name;
  int biasId = -1, auxId = -1;
  bool setAux = true;
  if (l.kernel == "matmul_epilogue") {
    bool aux = l.outputs.size() > 1;
    // Without GELU, D is the pre-activation (in the result where none is
    // kept): gptc's GELU pass reads it there.
    const bool withGelu = gelu && level != EpilogueLevel::WithoutGelu;
    epi = !withGelu ? CUBLASLT_EPILOGUE_BIAS
          : aux     ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                    : CUBLASLT_EPILOGUE_GELU_BIAS;
    name = !withGelu ? "BIAS" : aux ? "GELU_AUX_BIAS" : "GELU_BIAS";
    biasId = l.inputs[2];
    if (aux)
      auxId = l.outputs[1]; // checked below; cuBLASLt's only with GELU
    setAux = withGelu;
    g.outPtr = address(level == EpilogueLevel::WithoutGelu && aux
                           ? l.outputs[1]
                           : l.outputs[0]);
  } else if (l.kernel == "matmul_gelu_grad") {
    bool bgrad = l.outputs.size() > 1 && level == EpilogueLevel::Full;
    epi = bgrad ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    name = bgrad ? "DGELU_BGRAD" : "DGELU";
    auxId = l.inputs[2];
    if (bgrad)
      biasId = l.outputs[1];
  } else {
    epi = CUBLASLT_EPILOGUE_BGRADA;
    name = "BGRADA";
    biasId = l.outputs[1];
  }
  if (biasId >= 0) {
    const Buffer &bias = buffer(biasId);
    if (bias.numel() != map.m)
      throw DeviceError(label + ": the bias has " +
                        std::to_string(bias.numel()) + " elements, not N = " +
                        std::to_string(map.m));
    // cuBLASLt reads the bias and writes its gradient in D's type (the
    // op verifiers hold gptc to that).
    if (bias.dtype != buffer(l.outputs[0]).dtype)
      throw DeviceError(label + ": the bias (gradient) is " +
                        dtypeName(bias.dtype) + ", D is " +
                        dtypeName(buffer(l.outputs[0]).dtype));
  }
  if (auxId >= 0) {
    // The GELU input matrix (written by GELU_AUX_BIAS or as BIAS's D, read
    // by DGELU) has D's layout and type.
    const Buffer &aux = buffer(auxId), &d = buffer(l.outputs[0]);
    if (aux.numel() != d.numel() || aux.dtype != d.dtype)
      throw DeviceError(label + ": the pre-activation is " +
                        dtypeName(aux.dtype) + "[" +
                        std::to_string(aux.numel()) + "], the result " +
                        dtypeName(d.dtype) + "[" + std::to_string(d.numel()) +
                        "]");
  }
  if (level == EpilogueLevel::None)
    return "DEFAULT";
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi), "setting EPILOGUE");
  if (biasId >= 0) {
    void *biasPtr = reinterpret_cast<void *>(address(biasId));
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &biasPtr, sizeof(biasPtr),
        "setting BIAS_POINTER");
  }
  if (auxId >= 0 && setAux) {
    void *auxPtr = reinterpret_cast<void *>(address(auxId));
    int64_t auxLd = map.outLd;
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &auxPtr, sizeof(auxPtr),
        "setting EPILOGUE_AUX_POINTER");
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxLd, sizeof(auxLd),
        "setting EPILOGUE_AUX_LD");
  }
  return name;
}

bool CudaBackendImpl::hasKernel(const std::string &name) const {
  for (size_t i = 0; i < prog->kernels.size() && i < entries.size(); ++i)
    if (prog->kernels[i].name == name)
      return true;
  return false;
}

CUfunction CudaBackendImpl::fallbackKernel(GemmFallback kind, DType t,
                                           const std::string &label) {
  std::string name = gemmFallbackKernel(kind, t);
  for (size_t i = 0; i < prog->kernels.size() && i < entries.size(); ++i)
    if (prog->kernels[i].name == name)
      return entries[i];
  throw DeviceError(label + ": cuBLASLt has no algorithm for its epilogue, "
                    "and the program has no kernel " + name +
                    " to run it after the GEMM (compile it again with this "
                    "gptc)");
}

void CudaBackendImpl::planFollowups(const Launch &l, const GemmMapping &map,
                                    GemmPlan &g, const std::string &label,
                                    EpilogueLevel level) {
  const Buffer &d = buffer(l.outputs[0]);
  const int64_t cols = map.m, allRows = d.numel() / cols;
  // A row-chunked plan (g.chunkRows rows a loop): the kernels that take
  // rows run after each loop's GEMM on its rows, their pointers moved by
  // the loop's bytes of D (the pre-activation has D's type and layout).
  const int64_t rows = g.chunkRows > 0 ? g.chunkRows : allRows;
  const uint64_t step = g.chunkRows > 0 ? g.outStride : 0;
  auto ceilDiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto gridFor = [&](int64_t n) {
    return uint32_t(std::clamp<int64_t>(ceilDiv(n, 256), 1, 1 << 20));
  };
  auto add = [&](GemmFallback kind, DType t, uint32_t gx, uint32_t gy,
                 std::vector<uint64_t> args,
                 std::vector<uint64_t> loopStride = {}) {
    GemmPlan::Followup f;
    f.fn = fallbackKernel(kind, t, label);
    f.grid[0] = gx;
    f.grid[1] = gy;
    f.args = std::move(args);
    f.loopStride = std::move(loopStride);
    g.after.push_back(std::move(f));
  };
  // Column sums of x [allRows, cols] into `out`: partial sums per chunk of
  // rows (in the cuBLASLt workspace, free again once the GEMM ran; in
  // partialsScratch for a row-chunked plan, whose next GEMM uses the
  // workspace), then their sum in chunk order. With `pre` (an address, or
  // 0), x = gelu'(pre) * x in place first, in the same pass.
  auto columnSums = [&](int xId, int outId, uint64_t pre) {
    const Buffer &x = buffer(xId), &out = buffer(outId);
    // (x is D itself, or a bias gradient's b: its rows are not D's.)
    const int64_t xRows = x.numel() / cols,
                  rows = g.chunkRows > 0 ? g.chunkRows : xRows;
    const int64_t perChunk = partialRows(xRows, cols);
    const int64_t chunks = std::max<int64_t>(ceilDiv(xRows, perChunk), 1);
    const uint64_t partials =
        g.chunkRows > 0 ? partialsScratch : uint64_t(g.workspace);
    add(GemmFallback::ColumnPartials, x.dtype, uint32_t(ceilDiv(cols, 256)),
        uint32_t(ceilDiv(rows, perChunk)),
        {address(xId), pre, partials, uint64_t(rows), uint64_t(cols),
         uint64_t(perChunk)},
        g.chunkRows > 0
            ? std::vector<uint64_t>{step, pre ? step : 0,
                                    uint64_t(rows / perChunk * cols * 4), 0, 0,
                                    0}
            : std::vector<uint64_t>{});
    add(GemmFallback::ColumnSums, out.dtype, uint32_t(ceilDiv(cols, 32)), 1,
        {partials, address(outId), uint64_t(chunks), uint64_t(cols)});
  };
  const std::vector<uint64_t> twoPointers =
      g.chunkRows > 0 ? std::vector<uint64_t>{step, step, 0}
                      : std::vector<uint64_t>{};
  if (l.kernel == "matmul_epilogue" && level == EpilogueLevel::WithoutGelu) {
    // The GEMM wrote the pre-activation (setEpilogue: D's pointer); a
    // block takes 4 chunks of 8·256 elements, a thread 4 loads in flight.
    const uint64_t pre = g.outPtr, n = uint64_t(rows * cols);
    add(GemmFallback::Gelu, d.dtype,
        uint32_t(std::clamp<int64_t>(ceilDiv(rows * cols, 4 * 8 * 256), 1,
                                     1 << 20)),
        1, {address(l.outputs[0]), pre, n}, twoPointers);
  } else if (l.kernel == "matmul_epilogue") {
    auto it = l.ints.find("gelu");
    bool gelu = it != l.ints.end() && it->second != 0;
    uint64_t pre = l.outputs.size() > 1 ? address(l.outputs[1]) : 0;
    add(GemmFallback::Bias, d.dtype, gridFor(allRows * cols), 1,
        {address(l.outputs[0]), address(l.inputs[2]), pre, uint64_t(allRows),
         uint64_t(cols), uint64_t(gelu)});
  } else if (l.kernel == "matmul_gelu_grad") {
    // DEFAULT: GELU's derivative here too, with the bias gradient if any.
    uint64_t pre = level == EpilogueLevel::None ? address(l.inputs[2]) : 0;
    if (l.outputs.size() > 1)
      columnSums(l.outputs[0], l.outputs[1], pre);
    else if (pre) // a block takes 4 chunks of 8·256 elements, as Gelu's
      add(GemmFallback::GeluGrad, d.dtype,
          uint32_t(std::clamp<int64_t>(ceilDiv(rows * cols, 4 * 8 * 256), 1,
                                       1 << 20)),
          1, {address(l.outputs[0]), pre, uint64_t(rows * cols)},
          twoPointers);
  } else {
    columnSums(l.inputs[1], l.outputs[1], 0);
  }
}

const std::vector<Prepared> &
CudaBackendImpl::prepared(const Function &f) const {
  if (auto it = launches.find(&f); it != launches.end())
    return it->second;
  // A copy of one of the program's functions: match it by name.
  if (prog)
    if (const Function *same = prog->function(f.name);
        same && same->launches.size() == f.launches.size())
      return launches.at(same);
  throw DeviceError("CUDA backend: function '" + f.name +
                    "' is not in the loaded program");
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

void CudaBackendImpl::enqueue(const Launch &l, const Prepared &pl,
                              bool timed, CUstream stream) {
  lastLaunch = &pl.label;
  if (!stream)
    stream = compute;
  CUevent start = nullptr;
  if (timed && pl.profileSlot >= 0) {
    start = pooledEvent(timingPool, true);
    check(cu.cuEventRecord(start, stream), "cuEventRecord");
  }
  if (pl.fn) {
    const LaunchVariant &k = pl.kernel;
    if (CUresult r = cu.cuLaunchKernel(pl.fn, k.grid[0], k.grid[1], k.grid[2],
                                       k.block[0], k.block[1], k.block[2],
                                       k.sharedBytes, stream,
                                       const_cast<void **>(pl.argPtrs.data()),
                                       nullptr);
        r != CUDA_SUCCESS)
      throw DeviceError("cannot launch " + pl.label + ": " + cuError(cu, r));
  } else if (pl.gemm >= 0) {
    const Lt &lt = cublasLt();
    const GemmPlan &g = gemms[pl.gemm];
    if (cublasStatus_t s = runGemm(g, g.algo, pl.label, stream);
        s != CUBLAS_STATUS_SUCCESS)
      throw DeviceError("cuBLASLt failed in " + pl.label + ": " +
                        lt.cublasLtGetStatusName(s));
  } else {
    throw DeviceError("no CUDA kernel for gpt." + l.kernel + " at " +
                      (l.loc.empty() ? "?" : l.loc) + " (" + pl.label + ")");
  }
  if (start) {
    CUevent end = pooledEvent(timingPool, true);
    check(cu.cuEventRecord(end, stream), "cuEventRecord");
    pendingTimes.push_back({pl.profileSlot, start, end, pl.floorMs});
  }
}

cublasStatus_t CudaBackendImpl::runGemm(const GemmPlan &g,
                                        const cublasLtMatmulAlgo_t &algo,
                                        const std::string &label,
                                        CUstream stream) {
  const Lt &lt = cublasLt();
  const float alpha = 1.0f, beta = g.beta;
  if (!stream)
    stream = compute;
  // (planGemm makes such plans only for the compute stream's launches.)
  const CUstream loops = g.passesBeside ? loopStream : stream;
  for (int i = 0; i < g.loops; ++i) {
    auto at = [&](CUdeviceptr p, uint64_t stride) {
      return reinterpret_cast<void *>(p + stride * uint64_t(i));
    };
    void *out = at(g.outPtr, g.outStride);
    if (cublasStatus_t s = lt.cublasLtMatmul(
            ltHandle, g.desc, &alpha, at(g.leftPtr, g.leftStride), g.left,
            at(g.rightPtr, g.rightStride), g.right, &beta, out, g.out, out,
            g.out, &algo, reinterpret_cast<void *>(g.workspace),
            kWorkspaceBytes, stream);
        s != CUBLAS_STATUS_SUCCESS) {
      if (loops != stream && i > 0) { // (a capture must end joined)
        check(cu.cuEventRecord(loopJoin, loops), "cuEventRecord");
        check(cu.cuStreamWaitEvent(stream, loopJoin, 0), "cuStreamWaitEvent");
      }
      return s;
    }
    if (loops != stream) { // this loop's kernels wait for its GEMM
      check(cu.cuEventRecord(loopFork, stream), "cuEventRecord");
      check(cu.cuStreamWaitEvent(loops, loopFork, 0), "cuStreamWaitEvent");
    }
    for (const GemmPlan::Followup &f : g.after)
      if (!f.loopStride.empty())
        launchFollowup(f, i, label, loops);
  }
  if (loops != stream) { // the launch ends when the last loop's kernels do
    check(cu.cuEventRecord(loopJoin, loops), "cuEventRecord");
    check(cu.cuStreamWaitEvent(stream, loopJoin, 0), "cuStreamWaitEvent");
  }
  for (const GemmPlan::Followup &f : g.after)
    if (f.loopStride.empty())
      launchFollowup(f, 0, label, stream);
  return CUBLAS_STATUS_SUCCESS;
}

void CudaBackendImpl::launchFollowup(const GemmPlan::Followup &f, int loop,
                                     const std::string &label,
                                     CUstream stream) {
  uint64_t values[8];
  void *params[8];
  for (size_t i = 0; i < f.args.size() && i < 8; ++i) {
    const uint64_t stride = i < f.loopStride.size() ? f.loopStride[i] : 0;
    values[i] = f.args[i] + stride * uint64_t(loop);
    params[i] = &values[i];
  }
  if (CUresult r = cu.cuLaunchKernel(f.fn, f.grid[0], f.grid[1], 1, 256, 1, 1,
                                     0, stream, params, nullptr);
      r != CUDA_SUCCESS)
    throw DeviceError("cannot launch the epilogue fallback of " + label +
                      ": " + cuError(cu, r));
}

std::vector<std::vector<uint8_t>>
CudaBackendImpl::launchResults(const Launch &l) {
  std::vector<std::vector<uint8_t>> out;
  for (int id : l.outputs) {
    out.emplace_back(size_t(buffer(id).bytes()));
    download(id, out.back().data());
  }
  return out;
}

// Within 2% of the largest magnitude of the own kernel's output (bf16
// results, and float32 sums in another order), and finite where it is.
std::string
CudaBackendImpl::resultsDiffer(const Launch &l,
                               const std::vector<std::vector<uint8_t>> &own,
                               const std::vector<std::vector<uint8_t>> &other) {
  for (size_t o = 0; o < l.outputs.size(); ++o) {
    const DType t = buffer(l.outputs[o]).dtype;
    const size_t width = size_t(dtypeBytes(t));
    auto value = [&](const std::vector<uint8_t> &bytes, size_t i) {
      return elementValue(bytes.data() + i * width, t);
    };
    const size_t n = own[o].size() / width;
    double largest = 0, worst = 0;
    for (size_t i = 0; i < n; ++i)
      if (double a = std::fabs(value(own[o], i)); std::isfinite(a))
        largest = std::max(largest, a);
    for (size_t i = 0; i < n; ++i) {
      const double a = value(own[o], i), b = value(other[o], i);
      if (std::isfinite(a) && !std::isfinite(b))
        return "result " + std::to_string(o) + " not finite where its own "
               "kernel's is";
      if (std::isfinite(a))
        worst = std::max(worst, std::fabs(a - b));
    }
    if (worst > 0.02 * largest) {
      char says[96];
      std::snprintf(says, sizeof says,
                    "result %zu off by %.3g, of at most %.3g", o, worst,
                    largest);
      return says;
    }
  }
  return "";
}

double CudaBackendImpl::msPerRun(CUevent start, CUevent stop, int runs,
                                 const std::function<void()> &launch) {
  check(cu.cuEventRecord(start, compute), "cuEventRecord");
  for (int r = 0; r < runs; ++r)
    launch();
  check(cu.cuEventRecord(stop, compute), "cuEventRecord");
  check(cu.cuEventSynchronize(stop), "cuEventSynchronize");
  float ms = 0;
  check(cu.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
  return double(ms) / runs;
}

/// The bytes of a buffer of `n` elements of `t` that candidates are timed
/// and compared on: finite values of magnitude in [2^-7, 1) and either
/// sign, bits drawn from a generator seeded by `seed` (the same every run);
/// integers (token ids) 0, an index every table has.
std::vector<uint8_t> trialOperands(DType t, int64_t n, uint64_t seed) {
  std::vector<uint8_t> bytes(size_t(n * dtypeBytes(t)), 0);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&] { // xorshift64*
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return uint32_t((x * 0x2545f4914f6cdd1dull) >> 32);
  };
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = next(), sign = r >> 31, exponent = r >> 28 & 7;
    if (t == DType::F32) {
      // Exponent 120..126 (of bias 127): [2^-7, 1).
      uint32_t bits = sign << 31 | (120 + exponent % 7) << 23 | (r & 0x7fffff);
      std::memcpy(&bytes[size_t(i) * 4], &bits, 4);
    } else if (t == DType::BF16 || t == DType::F16) {
      const uint16_t bits =
          t == DType::BF16
              ? uint16_t(sign << 15 | (120 + exponent % 7) << 7 | (r & 0x7f))
              : uint16_t(sign << 15 | (8 + exponent % 7) << 10 | (r & 0x3ff));
      std::memcpy(&bytes[size_t(i) * 2], &bits, 2);
    }
  }
  return bytes;
}

// GEMM tuning (GPTC_GEMM_TUNE, on by default), at load: every GEMM of the
// program with each of the heuristic's candidates, and each other way to
// its epilogue with each of its own, timed on the device; the fastest is
// kept (GEMMs of one kernel, shape and epilogue share the result). The
// arena then holds nothing but constants, and the GEMMs write only temps,
// gradients and outputs, so running them is harmless; their inputs are set
// to 0x3f bytes (0.75 as bf16 and as float32: finite, non-zero) and the
// arena is zeroed again afterwards. Timing picks the algorithm, so two
// timings may pick differently, and their bits differ: the choice is kept
// in the kernel cache (gemmChoiceFile), and later runs on the same kind of
// GPU with the same cuBLASLt take it untimed, with the same bits run to
// run and across a resume. GPTC_GEMM_TUNE=time times again;
// GPTC_GEMM_TUNE=0 takes the heuristic's first choice and the default way.
void CudaBackendImpl::tune() {
  CUevent start = nullptr, stop = nullptr;
  auto readyToTime = [&] { // the 0x3f operands, once something is timed
    if (start)
      return;
    check(cu.cuMemsetD8Async(arena, 0x3f,
                             size_t(std::max<int64_t>(arenaBytes, 256)),
                             compute),
          "cuMemsetD8Async");
    start = newEvent(true);
    stop = newEvent(true);
  };
  constexpr int kRuns = 5;
  // The fastest of p's candidates (with the kernels after its GEMM) into
  // `index`, its ms and the first candidate's into `best` and `first`;
  // false if none ran.
  auto fastest = [&](const GemmPlan &p, size_t &index, double &first,
                     double &best) {
    best = -1;
    for (size_t c = 0; c < p.candidates.size(); ++c) {
      if (runGemm(p, p.candidates[c], p.tuneKey) != CUBLAS_STATUS_SUCCESS)
        continue; // (warm-up) this candidate cannot run here after all
      const double each = msPerRun(start, stop, kRuns, [&] {
        runGemm(p, p.candidates[c], p.tuneKey);
      });
      if (c == 0)
        first = each;
      if (best < 0 || each < best) {
        best = each;
        index = c;
      }
    }
    return best >= 0;
  };
  struct Tuned {
    GemmChoice choice; // way 0 (the GEMM's own plan), candidate 0: unchanged
    int gemms = 0;
    bool kept = false; // an earlier run's choice, not timed now
    bool otherWays = false;
    std::string timedWays; // "DEFAULT + gptc 0.271 (kept), ..." if timed
  };
  std::map<std::string, Tuned> byKey;
  const size_t ltVersion = cublasLt().cublasLtGetVersion();
  std::map<int, const Launch *> launchOf; // a launch each GEMM plan runs
  for (const Function &f : prog->functions)
    for (size_t i = 0; i < f.launches.size(); ++i)
      if (int gemm = launches[&f][i].gemm; gemm >= 0)
        launchOf.emplace(gemm, &f.launches[i]);
  for (size_t i = 0; i < gemms.size(); ++i) {
    GemmPlan &g = gemms[i];
    // The ways to this GEMM's epilogue: its own plan first.
    std::vector<GemmPlan *> ways = {&g};
    if (auto alt = alternatives.find(int(i)); alt != alternatives.end())
      for (GemmPlan &other : alt->second)
        ways.push_back(&other);
    // (An algorithm is only good for the epilogue it was found for.)
    std::string key;
    for (const GemmPlan *w : ways)
      key += (key.empty() ? "" : " or ") + w->tuneKey;
    auto [it, added] = byKey.try_emplace(key);
    Tuned &t = it->second;
    ++t.gemms;
    if (added) {
      t.otherWays = ways.size() > 1;
      const std::string file =
          gemmChoiceFile(deviceName, deviceArch, ltVersion, ways);
      if (!retimeGemms && readGemmChoice(file, ways, t.choice)) {
        t.kept = true;
      } else {
        readyToTime();
        GemmChoice c;
        double best = -1;
        std::vector<double> wayMs(ways.size(), -1);
        std::vector<size_t> wayIndex(ways.size(), 0);
        for (size_t w = 0; w < ways.size(); ++w) {
          size_t index = 0;
          double first = 0, each = 0;
          if (!fastest(*ways[w], index, first, each))
            continue;
          wayMs[w] = each;
          wayIndex[w] = index;
          if (w == 0)
            c.first = first;
          if (best < 0 || each < best) {
            best = each;
            c.way = w;
            c.index = index;
          }
        }
        // Another way is kept only if it computes what the GEMM's own plan
        // does, on varied operands (trialOperands; the timing's constant
        // ones would hide a way that reads the wrong rows): a way wrong on
        // this GPU must not win by being fast. Else the next fastest.
        std::vector<std::string> notUsed(ways.size());
        auto it = launchOf.find(int(i));
        if (best >= 0 && c.way != 0 && wayMs[0] >= 0 &&
            it != launchOf.end()) {
          const Launch &l = *it->second;
          for (int in : l.inputs)
            upload(in, trialOperands(buffer(in).dtype, buffer(in).numel(),
                                     uint64_t(in))
                           .data());
          auto runWay = [&](size_t w) {
            if (runGemm(*ways[w], ways[w]->candidates[wayIndex[w]],
                        ways[w]->tuneKey) != CUBLAS_STATUS_SUCCESS)
              return std::vector<std::vector<uint8_t>>();
            return launchResults(l);
          };
          const auto own = runWay(0);
          std::vector<size_t> byTime;
          for (size_t w = 0; w < ways.size(); ++w)
            if (wayMs[w] >= 0)
              byTime.push_back(w);
          std::stable_sort(byTime.begin(), byTime.end(),
                           [&](size_t x, size_t y) {
                             return wayMs[x] < wayMs[y];
                           });
          for (size_t w : byTime) {
            std::string differs = "it did not run";
            if (w != 0 && !own.empty())
              if (const auto mine = runWay(w); !mine.empty())
                differs = resultsDiffer(l, own, mine);
            if (w == 0 || differs.empty()) {
              c.way = w;
              c.index = wayIndex[w];
              best = wayMs[w];
              break;
            }
            notUsed[w] = differs;
          }
        }
        if (best >= 0) { // (else nothing ran: the heuristic's first)
          c.best = best;
          if (c.first == 0)
            c.first = best; // (the own plan's first candidate did not run)
          t.choice = c;
          saveGemmChoice(file, c);
          if (t.otherWays) {
            const std::string &own = ways[0]->tuneKey;
            t.timedWays = own.substr(0, own.find(" -> ")) + ", ms a run:";
            for (size_t w = 0; w < ways.size(); ++w)
              if (wayMs[w] >= 0) {
                char ms[32];
                std::snprintf(ms, sizeof ms, " %.3f", wayMs[w]);
                t.timedWays += std::string(w ? "," : "") + " " +
                               ways[w]->way + ms +
                               (w == c.way ? " (kept)" : "") +
                               (notUsed[w].empty()
                                    ? ""
                                    : " (" + notUsed[w] + ": not used)");
              }
          }
        }
      }
    }
    const GemmChoice &c = t.choice;
    if (GemmPlan &chosen = *ways[c.way]; c.index < chosen.candidates.size())
      chosen.algo = chosen.candidates[c.index];
    if (c.way > 0)
      std::swap(g, *ways[c.way]);
  }
  synchronize();
  if (start) {
    cu.cuEventDestroy(start);
    cu.cuEventDestroy(stop);
  }
  double first = 0, best = 0;
  int changed = 0, otherWay = 0, otherWays = 0, kept = 0;
  for (const auto &[key, t] : byKey) {
    first += t.choice.first * t.gemms;
    best += t.choice.best * t.gemms;
    changed += t.choice.way > 0 || t.choice.index > 0;
    otherWay += t.choice.way > 0;
    otherWays += t.otherWays;
    kept += t.kept;
  }
  char earlier[160] = "";
  if (kept > 0)
    std::snprintf(earlier, sizeof earlier,
                  " (%d of them by an earlier run, kept in the cache; "
                  "GPTC_GEMM_TUNE=time times them again)",
                  kept);
  std::fprintf(stderr,
               "gptc: GPTC_GEMM_TUNE: up to %d cuBLASLt algorithms timed for "
               "each of %zu GEMM shapes%s, %d changed (%d of the %d with "
               "other ways to their epilogue took another); all %zu GEMM "
               "launches once: %.3f ms with the heuristic's first choice, "
               "%.3f ms tuned\n",
               kTuneCandidates, byKey.size(), earlier, changed, otherWay,
               otherWays, gemms.size(), first, best);
  // Where in the heuristic's list each shape's kept algorithm lies.
  std::map<size_t, int> places;
  for (const auto &[key, t] : byKey)
    ++places[t.choice.index];
  std::string listed;
  for (const auto &[place, shapes] : places)
    listed += (listed.empty() ? "" : ", ") + std::to_string(place + 1) +
              (shapes > 1 ? " (" + std::to_string(shapes) + " shapes)" : "");
  std::fprintf(stderr,
               "gptc: GPTC_GEMM_TUNE: the kept algorithms' places in the "
               "heuristic's lists: %s\n",
               listed.c_str());
  // Each GEMM whose ways to its epilogue were timed now: every way's best.
  for (const auto &[key, t] : byKey)
    if (!t.timedWays.empty())
      std::fprintf(stderr, "gptc: GPTC_GEMM_TUNE: %s\n", t.timedWays.c_str());
}

// At load, for a program with Launch::variants (--attention-forward=auto,
// --attention-backward=auto): each launch's own kernel and its variants,
// timed on the device, the fastest kept; or, where GPTC_VARIANT names one
// of a launch's candidates, that one, untimed (the first label listed that
// the launch has; "own": its own kernel). A label no launch has is an
// error. Launches with the
// same candidates (the same kernels, grids and shared bytes: every layer's
// attention) share one timing. As tune() does, the arena is set to 0x3f
// bytes first, and zeroed again after: the launches only write their
// results and their kernels' own scratch. The inputs of a launch whose
// candidates are timed are then set to varied values (trialOperands), so
// that a variant that reads the wrong element, which constant operands
// would hide, gives other results. Each candidate's results are those of
// its warm-up run, from the same operands (inputs a launch writes over are
// put back before each candidate). One
// stderr line a set of candidates shows each one's time and the choice.
// The choice is kept in the kernel cache (variantChoiceFile), and the next
// run on the same kind of GPU takes it untimed, unless GPTC_VARIANT has
// "time". GPTC_VARIANT's "-label" leaves the variants so labelled out of
// the candidates (not a launch's own kernel, every timing's reference):
// a variant that fails or hangs on some GPU need not end the timing of
// the others.
/// GPTC_VARIANT's word for every launch's own kernel, whatever its label.
constexpr const char *kOwnKernels = "own";
/// GPTC_VARIANT's word for timing again what an earlier run chose.
constexpr const char *kTimeAgain = "time";

namespace {

/// Where the choice among a set of candidates is kept between runs, so that
/// the next run of the program on this kind of GPU runs the same kernels
/// (the same bits, run to run and across a resume) without timing them:
/// kernelCacheDir()/variants/KEY, KEY the SHA-256 of the device (name and
/// arch) and the candidates (label, kernel name and source, grid, block,
/// dynamic shared bytes). "" when there is no cache directory.
std::string variantChoiceFile(const std::string &deviceName,
                              const std::string &deviceArch,
                              const Program &prog,
                              const std::vector<LaunchVariant> &candidates) {
  const std::string dir = kernelCacheDir();
  if (dir.empty())
    return {};
  // Fields are separated by NUL so no two different sets hash alike.
  Sha256 h;
  auto field = [&](const std::string &s) { h.update(s.c_str(), s.size() + 1); };
  field("gptc kernel variants 1");
  field(deviceName);
  field(deviceArch);
  for (const LaunchVariant &c : candidates) {
    const DeviceKernel &k = prog.kernels[c.deviceKernel];
    char shape[96];
    std::snprintf(shape, sizeof shape, "(%u,%u,%u) (%u,%u,%u) %u", c.grid[0],
                  c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2],
                  c.sharedBytes);
    for (const std::string *f : {&c.label, &k.name, &k.source})
      field(*f);
    field(shape);
  }
  return dir + "/variants/" + h.hexDigest();
}

/// The kept choice: its label (the file's first line) and the times it was
/// chosen by (the second); false when there is none, or it names no
/// candidate (a file not written by saveVariantChoice).
bool readVariantChoice(const std::string &path,
                       const std::vector<LaunchVariant> &candidates,
                       size_t &chosen, std::string &times) {
  std::ifstream in(path);
  std::string label, line;
  if (path.empty() || !in || !std::getline(in, label) ||
      !std::getline(in, line))
    return false;
  for (chosen = 0; chosen < candidates.size(); ++chosen)
    if (candidates[chosen].label == label) {
      times = line;
      return true;
    }
  return false;
}

/// Keeps a choice for the next run.
void saveVariantChoice(const std::string &path, const std::string &label,
                       const std::string &times) {
  keepInCache(path, label + "\n" + times + "\n");
}

} // namespace

void CudaBackendImpl::timeVariants() {
  std::set<std::string> labels; // every candidate's, for the error
  for (const Function &f : prog->functions)
    for (const Launch &l : f.launches)
      if (!l.variants.empty())
        for (const LaunchVariant &c : launchCandidates(l))
          labels.insert(c.label);
  const bool timeAgain = std::find(forcedVariants.begin(), forcedVariants.end(),
                                   kTimeAgain) != forcedVariants.end();
  std::set<std::string> leftOut; // GPTC_VARIANT's -label
  for (std::string forced : forcedVariants) {
    if (forced.size() > 1 && forced[0] == '-') {
      forced.erase(0, 1);
      leftOut.insert(forced);
    }
    if (forced != kOwnKernels && forced != kTimeAgain && !labels.count(forced)) {
      std::string known;
      for (const std::string &label : labels)
        known += (known.empty() ? "" : ", ") + label;
      throw DeviceError("GPTC_VARIANT: no launch has a variant '" + forced +
                        "' (this program's: " +
                        (known.empty() ? "none" : known) + ")");
    }
  }
  if (labels.empty())
    return;
  check(cu.cuMemsetD8Async(arena, 0x3f,
                           size_t(std::max<int64_t>(arenaBytes, 256)), compute),
        "cuMemsetD8Async");
  CUevent start = newEvent(true), stop = newEvent(true);
  constexpr int kRuns = 5;
  auto key = [](const LaunchVariant &v) {
    char k[160];
    std::snprintf(k, sizeof k, "%d (%u,%u,%u) (%u,%u,%u) %u;", v.deviceKernel,
                  v.grid[0], v.grid[1], v.grid[2], v.block[0], v.block[1],
                  v.block[2], v.sharedBytes);
    return std::string(k);
  };
  struct Timed {
    LaunchVariant best;
    int launches = 0;
    std::string times; // "split 1.089 ms, atomic 0.812 ms"; "": forced
    bool kept = false; // an earlier run's choice, not timed now
  };
  // "grads launch 7: flash_attention_qkv_grad (its kernel, atomic) at loc"
  auto labelOf = [&](const Function &f, size_t i, const LaunchVariant &c) {
    const Launch &l = f.launches[i];
    return f.name + " launch " + std::to_string(i) + ": " + l.kernel + " (" +
           prog->kernels[c.deviceKernel].name + ", " + c.label + ") at " +
           (l.loc.empty() ? "?" : l.loc);
  };
  // The candidate GPTC_VARIANT picks, or -1.
  auto forcedOf = [&](const std::vector<LaunchVariant> &candidates) {
    for (const std::string &forced : forcedVariants)
      for (size_t c = 0; c < candidates.size(); ++c)
        if (candidates[c].label == forced ||
            (c == 0 && forced == kOwnKernels))
          return int(c);
    return -1;
  };
  // The inputs a launch writes over (in place: the cross entropy's
  // gradient over the logits), as they were before its first run: each
  // candidate starts from them, so that it sees what the own kernel saw.
  auto clobberedInputs = [&](const Launch &l) {
    std::vector<std::pair<int, std::vector<uint8_t>>> saved;
    for (int in : l.inputs) {
      const CUdeviceptr a = address(in), aEnd = a + buffer(in).bytes();
      bool written = false;
      for (int out : l.outputs)
        written |= a < address(out) + buffer(out).bytes() &&
                   address(out) < aEnd;
      if (written) {
        saved.emplace_back(in, std::vector<uint8_t>(size_t(aEnd - a)));
        download(in, saved.back().second.data());
      }
    }
    return saved;
  };
  std::map<std::string, Timed> byCandidates;
  std::vector<std::string> order; // as first met, for the lines
  // Each trial lives until the device is done: an error names its label.
  std::vector<std::unique_ptr<Prepared>> trials;
  for (const Function &f : prog->functions)
    for (size_t i = 0; i < f.launches.size(); ++i) {
      const Launch &l = f.launches[i];
      if (l.variants.empty())
        continue;
      Prepared &pl = launches[&f][i];
      std::vector<LaunchVariant> candidates = launchCandidates(l);
      // (GPTC_VARIANT's -label: not the own kernel, the first)
      candidates.erase(std::remove_if(candidates.begin() + 1, candidates.end(),
                                      [&](const LaunchVariant &c) {
                                        return leftOut.count(c.label) > 0;
                                      }),
                       candidates.end());
      std::string k;
      for (const LaunchVariant &c : candidates)
        k += key(c);
      auto [it, added] = byCandidates.try_emplace(k);
      Timed &t = it->second;
      const int forced = added ? forcedOf(candidates) : -1;
      const std::string choiceFile =
          added && forced < 0
              ? variantChoiceFile(deviceName, deviceArch, *prog, candidates)
              : std::string();
      size_t kept = 0;
      if (forced >= 0) {
        order.push_back(k);
        t.best = candidates[forced];
      } else if (added && !timeAgain &&
                 readVariantChoice(choiceFile, candidates, kept, t.times)) {
        order.push_back(k);
        t.best = candidates[kept];
        t.kept = true;
      } else if (added) {
        order.push_back(k);
        double bestMs = -1;
        std::vector<std::vector<uint8_t>> own; // the own kernel's results
        for (int in : l.inputs)
          upload(in, trialOperands(buffer(in).dtype, buffer(in).numel(),
                                   uint64_t(in))
                         .data());
        const auto clobbered = clobberedInputs(l);
        for (const LaunchVariant &c : candidates) {
          Prepared &trial = *trials.emplace_back(new Prepared(pl));
          trial.fn = entries[c.deviceKernel];
          trial.kernel = c;
          trial.argPtrs.clear();
          for (CUdeviceptr &a : trial.args)
            trial.argPtrs.push_back(&a);
          trial.profileSlot = -1;
          trial.label = labelOf(f, i, c) + kTimedAtLoad;
          for (const auto &[in, bytes] : clobbered)
            upload(in, bytes.data());
          timedVariant = &c == &candidates[0] ? "" : c.label;
          enqueue(l, trial, false); // warm-up, and the results compared
          std::vector<std::vector<uint8_t>> mine = launchResults(l);
          const double each = msPerRun(start, stop, kRuns,
                                       [&] { enqueue(l, trial, false); });
          char line[160];
          std::snprintf(line, sizeof line, "%s%s %.3f ms",
                        t.times.empty() ? "" : ", ", c.label.c_str(), each);
          t.times += line;
          // A variant is kept only if it computes what the launch's own
          // kernel does on the same operands: a kernel wrong on this GPU
          // (untested here, or miscompiled) must not win by being fast.
          if (own.empty()) {
            own = std::move(mine);
          } else if (std::string differs = resultsDiffer(l, own, mine);
                     !differs.empty()) {
            std::snprintf(line, sizeof line, " (%s: not used)",
                          differs.c_str());
            t.times += line;
            continue;
          }
          if (bestMs < 0 || each < bestMs) {
            bestMs = each;
            t.best = c;
          }
        }
        saveVariantChoice(choiceFile, t.best.label, t.times);
      }
      ++t.launches;
      pl.fn = entries[t.best.deviceKernel];
      pl.kernel = t.best;
      pl.label = labelOf(f, i, t.best);
      if (profile)
        pl.profileSlot =
            profileSlot(prog->kernels[t.best.deviceKernel].name, l);
    }
  synchronize();
  lastLaunch = nullptr;
  timedVariant.clear();
  cu.cuEventDestroy(start);
  cu.cuEventDestroy(stop);
  for (const std::string &k : order) {
    const Timed &t = byCandidates[k];
    if (t.times.empty()) {
      std::fprintf(stderr, "gptc: GPTC_VARIANT: %s (%s) runs for %d launch%s\n",
                   t.best.label.c_str(),
                   prog->kernels[t.best.deviceKernel].name.c_str(), t.launches,
                   t.launches == 1 ? "" : "es");
      continue;
    }
    std::fprintf(stderr,
                 "gptc: kernel variants timed at load%s for %d launch%s: %s; "
                 "%s (%s) runs\n",
                 t.kept ? " of an earlier run (kept in the cache; "
                          "GPTC_VARIANT=time times them again)"
                        : "",
                 t.launches, t.launches == 1 ? "" : "es", t.times.c_str(),
                 t.best.label.c_str(),
                 prog->kernels[t.best.deviceKernel].name.c_str());
  }
}

void CudaBackendImpl::run(const Function &f, size_t begin, size_t end) {
  bind();
  prepared(f); // throws for a function the loaded program lacks
  if (end > f.launches.size() || begin > end)
    throw DeviceError("CUDA backend: launches [" + std::to_string(begin) +
                      ", " + std::to_string(end) + ") of '" + f.name +
                      "' out of range");
  if (begin == end)
    return;
  GraphState &g = graphs[{&f, begin, end}];
  ++g.calls;
  if (useGraphs && !g.failed && g.exec) {
    lastLaunch = &g.label;
    check(cu.cuGraphLaunch(g.exec, compute), "cuGraphLaunch");
    return;
  }
  if (useGraphs && !g.failed && g.calls == 2) {
    // Capture the second run (the first ran checked, and loaded everything
    // lazily loaded), launch it now, replay it from then on.
    CUresult r = cu.cuStreamBeginCapture(compute,
                                         CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r == CUDA_SUCCESS) {
      CUgraph graph = nullptr;
      try {
        enqueueRange(f, begin, end, false, false, true);
      } catch (...) {
        cu.cuStreamEndCapture(compute, &graph);
        if (graph)
          cu.cuGraphDestroy(graph);
        throw;
      }
      r = cu.cuStreamEndCapture(compute, &graph);
      if (r == CUDA_SUCCESS)
        r = cu.cuGraphInstantiateWithFlags(&g.exec, graph, 0);
      if (graph)
        cu.cuGraphDestroy(graph);
      if (r == CUDA_SUCCESS) {
        g.label = f.name + " (a CUDA graph of launches " +
                  std::to_string(begin) + " to " + std::to_string(end - 1) +
                  ")";
        lastLaunch = &g.label;
        check(cu.cuGraphLaunch(g.exec, compute), "cuGraphLaunch");
        return;
      }
    }
    g.failed = true;
    g.exec = nullptr;
    std::fprintf(stderr,
                 "gptc: CUDA graph capture of %s failed (%s); running its "
                 "launches one by one\n",
                 f.name.c_str(), cuError(cu, r).c_str());
  }
  // The first run of a range synchronises after each launch, so a fault
  // names its launch; later eager runs only when GPTC_CUDA_SYNC=1.
  // The profile leaves the first run out: it loads modules lazily and
  // synchronises after every launch.
  bool checked = syncEach || g.calls == 1;
  bool timed = profile && g.calls > 1;
  if (timed && begin == 0)
    ++timedRuns[f.name];
  // A checked run names the launch that failed, and the profile times each
  // launch alone: both run the side stream's launches in order with the
  // rest.
  enqueueRange(f, begin, end, timed, checked, !checked && !timed);
}

void CudaBackendImpl::enqueueRange(const Function &f, size_t begin,
                                   size_t end, bool timed, bool checked,
                                   bool overlap) {
  const std::vector<Prepared> &pls = prepared(f);
  overlap = overlap && side;
  int joinAt = -1; // the main stream waits for the side stream there
  auto join = [&] {
    check(cu.cuEventRecord(joinMark, side), "cuEventRecord");
    check(cu.cuStreamWaitEvent(compute, joinMark, 0), "cuStreamWaitEvent");
    joinAt = -1;
  };
  for (size_t i = begin; i < end; ++i) {
    if (joinAt >= 0 && int(i) >= joinAt)
      join();
    const Launch &l = f.launches[i];
    if (overlap && l.stream == 1) {
      // Forked: it starts once every launch issued before it has.
      check(cu.cuEventRecord(forkMark, compute), "cuEventRecord");
      check(cu.cuStreamWaitEvent(side, forkMark, 0), "cuStreamWaitEvent");
      enqueue(l, pls[i], timed, side);
      joinAt = joinAt < 0 ? l.join : std::min(joinAt, l.join);
    } else {
      enqueue(l, pls[i], timed);
    }
    if (checked)
      if (CUresult r = cu.cuStreamSynchronize(compute); r != CUDA_SUCCESS)
        throw DeviceError("CUDA error " + cuError(cu, r) + " in " +
                          pls[i].label);
  }
  if (joinAt >= 0)
    join();
}

void CudaBackendImpl::synchronize() {
  bind();
  checkSync(cu.cuStreamSynchronize(copy));
  if (side)
    checkSync(cu.cuStreamSynchronize(side));
  checkSync(cu.cuStreamSynchronize(compute));
  collectTimes();
  deliverLetters();
}

//===----------------------------------------------------------------------===//
// Host <-> device
//===----------------------------------------------------------------------===//

uint8_t *CudaBackendImpl::reserveStaging(size_t bytes) {
  if (stagingHead + bytes > kStagingBytes)
    stagingHead = 0;
  size_t begin = stagingHead, end = begin + bytes;
  // Wait for pending copies that still read this part of the ring, and
  // recycle every finished one.
  for (size_t i = 0; i < inflight.size();) {
    InFlight &f = inflight[i];
    bool overlaps = f.begin < end && begin < f.end;
    CUresult r = overlaps ? cu.cuEventSynchronize(f.done)
                          : cu.cuEventQuery(f.done);
    if (r == CUDA_ERROR_NOT_READY) {
      ++i;
      continue;
    }
    checkSync(r);
    eventPool.push_back(f.done);
    inflight[i] = inflight.back();
    inflight.pop_back();
  }
  stagingHead = end;
  return staging + begin;
}

void CudaBackendImpl::releaseStaging(size_t begin, size_t end) {
  CUevent done = pooledEvent(eventPool, false);
  check(cu.cuEventRecord(done, copy), "cuEventRecord");
  inflight.push_back({begin, end, done});
}

void CudaBackendImpl::upload(int id, const void *host) {
  bind();
  const Buffer &b = buffer(id);
  CUdeviceptr dst = address(id);
  size_t bytes = size_t(b.bytes());
  // The copy must not overwrite what launches queued so far still read.
  check(cu.cuEventRecord(computeMark, compute), "cuEventRecord");
  check(cu.cuStreamWaitEvent(copy, computeMark, 0), "cuStreamWaitEvent");
  const uint8_t *src = static_cast<const uint8_t *>(host);
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min(bytes - done, kChunkBytes);
    uint8_t *stage = reserveStaging(n);
    std::memcpy(stage, src + done, n);
    check(cu.cuMemcpyHtoDAsync(dst + done, stage, n, copy), "cuMemcpyHtoDAsync");
    releaseStaging(size_t(stage - staging), size_t(stage - staging) + n);
    done += n;
  }
  // Later launches read the new values.
  check(cu.cuEventRecord(copyMark, copy), "cuEventRecord");
  check(cu.cuStreamWaitEvent(compute, copyMark, 0), "cuStreamWaitEvent");
}

void CudaBackendImpl::download(int id, void *host) {
  bind();
  const Buffer &b = buffer(id);
  CUdeviceptr src = address(id);
  size_t bytes = size_t(b.bytes());
  check(cu.cuEventRecord(computeMark, compute), "cuEventRecord");
  check(cu.cuStreamWaitEvent(copy, computeMark, 0), "cuStreamWaitEvent");
  uint8_t *dst = static_cast<uint8_t *>(host);
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min(bytes - done, kChunkBytes);
    uint8_t *stage = reserveStaging(n);
    check(cu.cuMemcpyDtoHAsync(stage, src + done, n, copy), "cuMemcpyDtoHAsync");
    // An error of any launch before this point surfaces here.
    checkSync(cu.cuStreamSynchronize(copy));
    std::memcpy(dst + done, stage, n);
    done += n;
  }
  collectTimes();
  // The copy stream waited for the compute stream, which queued them.
  deliverLetters();
}

void CudaBackendImpl::downloadLater(int id, void *host) {
  bind();
  size_t bytes = size_t(buffer(id).bytes());
  if (bytes > kMailboxBytes) {
    download(id, host);
    return;
  }
  size_t at = (mailboxHead + 15) / 16 * 16;
  if (at + bytes > kMailboxBytes) {
    synchronize(); // empties the mailbox
    at = 0;
  }
  // On the compute stream itself: after the launches so far, and before
  // any later one overwrites the buffer.
  check(cu.cuMemcpyDtoHAsync(mailbox + at, address(id), bytes, compute),
        "cuMemcpyDtoHAsync");
  letters.push_back({at, bytes, host});
  mailboxHead = at + bytes;
}

void CudaBackendImpl::deliverLetters() {
  for (const Letter &l : letters)
    std::memcpy(l.host, mailbox + l.at, l.bytes);
  letters.clear();
  mailboxHead = 0;
}

//===----------------------------------------------------------------------===//
// Profile
//===----------------------------------------------------------------------===//

int CudaBackendImpl::profileSlot(const std::string &kernel, const Launch &l) {
  auto [it, added] = profileSlots.try_emplace(kernel, int(profileEntries.size()));
  if (added)
    profileEntries.push_back({kernel, l.kernel, l.loc, 0, 0});
  return it->second;
}

void CudaBackendImpl::collectTimes() {
  // Called after a synchronisation: every recorded event has completed.
  for (TimedLaunch &t : pendingTimes) {
    float ms = 0;
    if (cu.cuEventElapsedTime(&ms, t.start, t.end) == CUDA_SUCCESS) {
      profileEntries[t.slot].ms += ms;
      profileEntries[t.slot].calls += 1;
      profileEntries[t.slot].floorMs += t.floorMs;
    }
    timingPool.push_back(t.start);
    timingPool.push_back(t.end);
  }
  pendingTimes.clear();
}

void CudaBackendImpl::resetProfile() {
  synchronize();
  timedRuns.clear();
  for (ProfileEntry &e : profileEntries) {
    e.calls = 0;
    e.ms = 0;
    e.floorMs = 0;
  }
}

/// A profiled kernel's kind, for setting the profile beside another
/// framework's (bench/gpu/torch_gpt2.py --profile sorts PyTorch's kernels
/// the same way): cuBLASLt's GEMMs; the attention kernels (forward,
/// backward, the row dot); the optimizer (AdamW and the gradient norm);
/// and the rest: elementwise groups, layernorm, the loss, embeddings, and
/// the passes that stand in for GEMM epilogues.
static const char *kernelKind(const std::string &kernel) {
  if (kernel.rfind("cuBLASLt", 0) == 0)
    return "GEMM";
  if (kernel.find("attention") != std::string::npos)
    return "attention";
  if (kernel.find("adamw") != std::string::npos ||
      kernel.find("multi_tensor") != std::string::npos)
    return "optimizer";
  return "other";
}

std::string CudaBackendImpl::profileReport(size_t top) {
  if (!profile)
    return "";
  reported = true;
  synchronize();
  std::vector<const ProfileEntry *> order;
  double total = 0, totalFloor = 0;
  int64_t calls = 0;
  for (const ProfileEntry &e : profileEntries)
    if (e.calls > 0) {
      order.push_back(&e);
      total += e.ms;
      totalFloor += e.floorMs;
      calls += e.calls;
    }
  std::sort(order.begin(), order.end(),
            [](const ProfileEntry *a, const ProfileEntry *b) {
              return a->ms > b->ms;
            });
  // "floor us": a call's floor (launchCost's bytes at the DRAM peak or its
  // FLOPs at the bf16 peak); "of floor": floor / time, 100% is the limit.
  auto floorColumns = [&](double floorMs, double ms, int64_t n) {
    char s[64];
    if (floorMs <= 0 || ms <= 0)
      std::snprintf(s, sizeof(s), "%10s %8s", "-", "-");
    else
      std::snprintf(s, sizeof(s), "%10.2f %7.1f%%",
                    n ? 1000.0 * floorMs / double(n) : 1000.0 * floorMs,
                    100.0 * floorMs / ms);
    return std::string(s);
  };
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof(line), "%10s %8s %10s %6s %10s %8s  %s\n",
                "total ms", "calls", "mean us", "share", "floor us",
                "of floor", "kernel (op at first location)");
  os << line;
  for (size_t i = 0; i < order.size() && i < top; ++i) {
    const ProfileEntry &e = *order[i];
    std::snprintf(line, sizeof(line),
                  "%10.3f %8lld %10.2f %5.1f%% %s  %s (%s at %s)\n", e.ms,
                  (long long)e.calls, 1000.0 * e.ms / double(e.calls),
                  total > 0 ? 100.0 * e.ms / total : 0.0,
                  floorColumns(e.floorMs, e.ms, e.calls).c_str(),
                  e.kernel.c_str(), e.op.c_str(),
                  e.loc.empty() ? "?" : e.loc.c_str());
    os << line;
  }
  std::snprintf(line, sizeof(line), "%10.3f %8lld %10s %5.1f%% %s  all %zu kernels\n",
                total, (long long)calls, "", 100.0,
                floorColumns(totalFloor, total, 0).c_str(), order.size());
  os << line;
  if (totalFloor > 0) {
    std::snprintf(line, sizeof(line),
                  "floors: %.0f GB/s DRAM (device attributes), %.0f TFLOP/s "
                  "dense bf16 (%s)\n",
                  peakBytesPerSecond / 1e9, peakBf16Flops() / 1e12,
                  deviceName.c_str());
    os << line;
  }
  // Time by kind, then how many runs the times are over.
  std::map<std::string, double> byKind;
  for (const ProfileEntry *e : order)
    byKind[kernelKind(e->kernel)] += e->ms;
  for (const char *kind : {"GEMM", "attention", "optimizer", "other"}) {
    std::snprintf(line, sizeof(line), "%10.3f %8s %10s %5.1f%% kind: %s\n",
                  byKind[kind], "", "",
                  total > 0 ? 100.0 * byKind[kind] / total : 0.0, kind);
    os << line;
  }
  std::string runs;
  for (const auto &[name, n] : timedRuns)
    runs += (runs.empty() ? "" : ", ") + name + " " + std::to_string(n);
  os << "timed runs: " << (runs.empty() ? "none" : runs) << "\n";
  return os.str();
}

} // namespace

std::unique_ptr<CudaBackend> createCudaBackend() {
  return std::make_unique<CudaBackendImpl>();
}

#endif // GPTC_HAVE_CUDA_HEADERS

std::unique_ptr<Backend> makeCudaBackend() { return createCudaBackend(); }

} // namespace gptc::rt
