//===- CudaBackendImpl.h - the CUDA backend's parts -----------*- C++ -*-===//
//
// CudaBackendImpl, the one implementation of CudaBackend, and what its
// files share. The backend is five files, one job each:
// - CudaBackend.cpp: the device, the arena, loading a program's kernels,
//   running launch ranges (checked, then as CUDA graphs), and the copies
//   between host and device;
// - CudaGemms.cpp: gpt.matmul as cuBLASLt plans, their epilogues (fused,
//   or gptc's GemmFallback kernels after a lesser one), the other ways to
//   an epilogue, and GEMM tuning at load;
// - CudaVariants.cpp: kernel variants (Launch::variants) timed at load, and
//   the comparison of results that tuning uses too;
// - CudaCudnn.cpp: cuDNN's fused attention as more candidates of the
//   attention launches timed at load (GPTC_CUDNN);
// - CudaProfile.cpp: GPTC_PROFILE's table of kernels against their floors.
// Without the CUDA headers at build time only the factory exists (it
// throws), so everything here is behind GPTC_HAVE_CUDA_HEADERS.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_LIB_RUNTIME_CUDABACKENDIMPL_H
#define GPTC_LIB_RUNTIME_CUDABACKENDIMPL_H

#include "gptc/Runtime/CudaBackend.h"

#if __has_include(<cuda.h>) && __has_include(<cublasLt.h>)
#define GPTC_HAVE_CUDA_HEADERS 1
#include "CudaApi.h"
#include "CudnnAttention.h"
#endif

#ifdef GPTC_HAVE_CUDA_HEADERS

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace gptc::rt::detail {

using namespace cudaapi;

/// cuBLASLt's, per GEMM; also the stream-K weight gradients' partial
/// slots, two a block of one per SM: 132 SMs' 128 x 256 tiles of floats
/// fill 33 MiB.
constexpr size_t kWorkspaceBytes = 33u << 20;
/// partialsScratch: GPT-2's c_fc bias gradient at B·T = 16,384 rows takes
/// 3 MiB of partials (256 chunks of 3,072 float32).
constexpr size_t kPartialsBytes = 8u << 20;
/// gptc's own GEMMs' tensor maps (operandMap): device memory in blocks of
/// this many 128-byte maps (GPT-2's program asks for about 200).
constexpr size_t kTensorMapsPerBlock = 256;
/// GEMM tuning (GPTC_GEMM_TUNE): how many of the heuristic's algorithms
/// to time. Of 8, the fastest was another than the heuristic's first for
/// 10 of GPT-2's 16 shapes on an H100 (docs/benchmarks.md, twenty-fourth
/// session): its order is a weak guide, so 32 are timed, once (the choice
/// is kept; a second stderr line says where in the heuristic's lists the
/// kept ones lie, so a run shows whether the list's tail pays).
constexpr int kTuneCandidates = 32;
constexpr size_t kStagingBytes = 64u << 20; // pinned host ring
constexpr size_t kChunkBytes = kStagingBytes / 4;
/// Pinned host memory for downloadLater's copies (a loss is 4 bytes); when
/// it is full, the next one synchronizes first.
constexpr size_t kMailboxBytes = 64u << 10;
/// LaunchVariant::deviceKernel of the candidates the backend adds to an
/// attention launch: cuDNN's fused attention (CudaCudnn.cpp).
constexpr int kCudnnAttention = -2;
/// cuDNN refused a run (an API error, not a fault on the device): while
/// candidates are timed, that candidate is dropped and the rest go on.
struct CudnnRunError : DeviceError {
  using DeviceError::DeviceError;
};
/// What ends the label of a kernel variant's launch timed at load.
inline const std::string kTimedAtLoad = ", timed at load";

/// The value of environment switch `name`, one of `values` (the first when
/// unset or empty); any other value is a DeviceError naming the switch and
/// what it takes, so that a misspelt switch is not quietly ignored.
std::string envSwitch(const char *name,
                      std::initializer_list<const char *> values);
/// A switch that is off (0, the default) or on (1).
bool envOn(const char *name);

/// GPTC_GEMM_CHUNK_BYTES=N[,N...]: the bytes of D a loop of a row-chunked
/// GEMM way may write (tuning times two such ways a size); 0: none. Unset
/// or empty: 6, 12 and 24 MiB, an eighth, a quarter and half of an H100's
/// L2 (more loops leave more of a loop's GEMM's last wave to the passes
/// beside it).
std::vector<int64_t> envChunkBytes();

/// Keeps `text` in the cache file `path` (atomically) for later runs; a
/// cache that cannot be written is no error, only slower.
void keepInCache(const std::string &path, const std::string &text);
/// The bytes of a buffer of `n` elements of `t` that candidates are timed
/// and compared on: finite values of magnitude in [2^-7, 1) and either
/// sign, bits drawn from a generator seeded by `seed` (the same every run);
/// integers (token ids) 0, an index every table has.
std::vector<uint8_t> trialOperands(DType t, int64_t n, uint64_t seed);

/// A gpt.matmul ready for cuBLASLt (the mapping: GemmMapping), with its
/// algorithm chosen once at load.
struct GemmPlan {
  /// cuBLASLt's call; null in a plan of gptc's own GEMM (planOwnGemm),
  /// whose kernel is its one Followup.
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
  /// of 8 bytes each (pointers and i64 sizes). (Or, without desc, the
  /// GEMM itself.)
  struct Followup {
    CUfunction fn = nullptr;
    uint32_t grid[2] = {1, 1};
    std::vector<uint64_t> args;
    uint32_t sharedBytes = 0; ///< dynamic shared memory a block
    uint32_t threads = 256;   ///< a block's (gemmFallbackThreads)
    uint32_t cluster = 1; ///< blocks a cluster, along x (gemmFallbackCluster)
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
  int cudnn = -1;              // into cudnnPlans: cuDNN runs it, not fn
  /// A launch whose results only launches up to this index read, each
  /// of which runs cuDNN and ignores them (the row dot before cuDNN's
  /// attention backward): skipped where a range holds those readers
  /// (skipWhatCudnnIgnores). -1: never skipped.
  int ignoredUpTo = -1;
  int profileSlot = -1;
  double floorMs = 0; // the profile's floor of this launch (launchCost)
  std::string label;  // "forward launch 12: layernorm (k12) at loc"
};

class CudaBackendImpl final : public CudaBackend {
public:
  /// Starts on device 0 (start()); the registry knows it, for
  /// asCudaBackend.
  CudaBackendImpl();
  ~CudaBackendImpl() override;

  void start() {
    check(cu.cuDeviceGet(&dev, 0), "cuDeviceGet");
    char name[256] = {};
    check(cu.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
    deviceName = name;
    smCount = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    ccMajor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    ccMinor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    maxSharedOptin =
        attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
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
    // (Programmatic edges in a captured graph: CUDA 12.3 on.)
    pdl = envSwitch("GPTC_PDL", {"1", "0"}) == "1" && ccMajor >= 9 &&
          cu.version >= 12030 && !profile && !syncEach;
    forceGemmFallback = envOn("GPTC_GEMM_FALLBACK");
    dgeluInCublasLt =
        envSwitch("GPTC_GEMM_DGELU", {"gptc", "cublaslt"}) == "cublaslt";
    const std::string own =
        envSwitch("GPTC_GEMM_OWN",
                  {"1", "0", "narrow", "wide", "paired", "unpaired"});
    ownGemms = own == "0"          ? OwnGemms::Never
               : own == "narrow"   ? OwnGemms::Narrow
               : own == "wide"     ? OwnGemms::Wide
               : own == "paired"   ? OwnGemms::Paired
               : own == "unpaired" ? OwnGemms::Unpaired
                                   : OwnGemms::Timed;
    const std::string tune = envSwitch("GPTC_GEMM_TUNE", {"1", "0", "time"});
    tuneGemms = tune != "0";
    retimeGemms = tune == "time";
    chunkBytes = envChunkBytes();
    cudnnPolicy = envSwitch("GPTC_CUDNN", {"1", "0", "all"});
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
    for (CUevent e :
         {computeMark, copyMark, forkMark, joinMark, loopFork, loopJoin})
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
    for (CudnnPlan &p : cudnnPlans)
      if (p.workspace)
        cu.cuMemFree(p.workspace);
    cudnnPlans.clear(); // (their cuDNN handles, while the context lives)
    if (arena)
      cu.cuMemFree(arena);
    for (CUdeviceptr w : {workspace, sideWorkspace, partialsScratch,
                          weightGradCounters, sideWeightGradCounters})
      if (w)
        cu.cuMemFree(w);
    for (CUdeviceptr maps : tensorMapBlocks)
      cu.cuMemFree(maps);
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
    int64_t cudnnBytes = 0;
    for (const CudnnPlan &p : cudnnPlans)
      cudnnBytes += p.workspace ? p.bytes : 0;
    return arenaBytes + (workspace ? int64_t(kWorkspaceBytes) : 0) +
           (sideWorkspace ? int64_t(kWorkspaceBytes) : 0) +
           (partialsScratch ? int64_t(kPartialsBytes) : 0) +
           (weightGradCounters ? int64_t(kWeightGradCounters * 4) : 0) +
           (sideWeightGradCounters ? int64_t(kWeightGradCounters * 4) : 0) +
           cudnnBytes +
           int64_t(tensorMapBlocks.size() * kTensorMapsPerBlock *
                   sizeof(CUtensorMap));
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
    return 1e3 *
           std::max(double(c.bytes) / peakBytesPerSecond, c.flops / flopsPeak);
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
    check(cu.cuEventCreate(&e,
                           timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING),
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
      throw DeviceError("buffer '" + b.name +
                        "' has no arena offset (run "
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
  /// A GEMM plan's matrix layouts, pointers, shape (for lines and the
  /// profile), beta and workspace, from the launch and its mapping.
  GemmPlan gemmLayouts(const Launch &l, const GemmMapping &map, bool accumulate,
                       const std::string &label);
  /// The epilogue of a matmul_epilogue (BIAS, GELU_BIAS, GELU_AUX_BIAS),
  /// matmul_gelu_grad (DGELU, DGELU_BGRAD) or matmul_bias_grad (BGRADA),
  /// as far as `level` asks cuBLASLt for it; its name ("DGELU_BGRAD").
  std::string setEpilogue(const Launch &l, const GemmMapping &map, GemmPlan &g,
                          const std::string &label, EpilogueLevel level);
  /// Row-chunked ways to l's epilogue at each of `levels` (each gptc's
  /// pass over what the GEMM wrote): for each GPTC_GEMM_CHUNK_BYTES size,
  /// the GEMM in loops of rows (copies of `layouts`, a loop's own matrix
  /// layouts), each loop's kernels after its GEMM or beside the next
  /// one's; appended to `others`. describeAt gives a plan its descriptor
  /// and algorithms at a level (planGemm's), false if cuBLASLt has none.
  void
  planRowLoops(const Launch &l, const GemmMapping &map, const GemmPlan &layouts,
               const std::vector<EpilogueLevel> &levels,
               const uint32_t (&align)[3], const std::string &label,
               const std::function<bool(GemmPlan &, EpilogueLevel)> &describeAt,
               std::vector<GemmPlan> &others);
  /// gptc's own GEMMs for l (kernels/gemm_wgmma.cuh: GELU's GEMM with its
  /// bias, or GELU's derivative's, on sm_90a), in blocks of 128 x 128 and
  /// (where n allows) 128 x 256, and those in pairs (where m allows, and
  /// the device runs clusters of them), other ways for tuning to time: plans
  /// with no cuBLASLt call, each its one kernel in `after`. None where the
  /// program lacks the kernels or l is not what they take
  /// (rt::wgmmaGemmFit, and the operands' alignment); as GPTC_GEMM_OWN
  /// says.
  std::vector<GemmPlan> planOwnGemms(const Launch &l, const GemmMapping &map);
  /// gptc's wgmma GEMMs' block shapes: 128 x 128 tiles, 128 x 256, or
  /// those in pairs.
  enum class WgmmaBlocks { Narrow, Wide, Paired };
  /// planOwnGemms' weight gradients (WgmmaWeightGrad, stream-K) in block
  /// shape `blocks`.
  std::optional<GemmPlan> planWeightGradGemm(const Launch &l,
                                             const GemmMapping &map,
                                             const WgmmaGemmFit &fit,
                                             WgmmaBlocks blocks);
  /// A device copy of the tensor map of the bf16 operand at `base` as
  /// `operand` describes it (cuTensorMapEncodeTiled: 2-D, the 128-byte
  /// swizzle), for a wgmma GEMM to read a or b through; 0 where the driver
  /// refuses it (one stderr line, the first time).
  CUdeviceptr operandMap(CUdeviceptr base, const WgmmaOperandMap &operand);
  /// The kernels after a GEMM planned at `level` < Full.
  void planFollowups(const Launch &l, const GemmMapping &map, GemmPlan &g,
                     const std::string &label, EpilogueLevel level);
  /// Whether the program carries (and this backend loaded) kernel `name`.
  bool hasKernel(const std::string &name) const;
  CUfunction fallbackKernel(GemmFallback kind, DType t,
                            const std::string &label);
  const std::vector<Prepared> &prepared(const Function &f) const;
  /// One kernel launch: cuLaunchKernel, or where `pdl` cuLaunchKernelEx
  /// with programmatic stream serialization (the kernel starts launching
  /// under the one before it on `stream`, and awaitPriorKernels waits),
  /// and in clusters of `cluster` blocks along x where that is more than 1.
  CUresult launchKernel(CUfunction fn, const uint32_t (&grid)[3],
                        const uint32_t (&block)[3], uint32_t sharedBytes,
                        CUstream stream, void **params,
                        uint32_t cluster = 1) const;
  /// How many clusters of `cluster` blocks (of `threads` and `sharedBytes`)
  /// of kernel fn the device runs at once (cuOccupancyMaxActiveClusters);
  /// 0 where it runs none or cannot say.
  int activeClusters(CUfunction fn, uint32_t cluster, uint32_t threads,
                     uint32_t sharedBytes) const;
  /// Whether the device runs a cluster of candidate c's (a kernel of the
  /// program): always where c.cluster is 1.
  bool clusterFits(const LaunchVariant &c) const {
    return c.cluster <= 1 ||
           activeClusters(entries[size_t(c.deviceKernel)], c.cluster,
                          c.block[0], c.sharedBytes) > 0;
  }
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
  int smCount = 1; // streaming multiprocessors: the wide wgmma GEMM's grid
  double peakBytesPerSecond = 0;
  bool profile = false, syncEach = false, useGraphs = true;
  /// GPTC_PDL: gptc's kernels launched with programmatic stream
  /// serialization (launchKernel).
  bool pdl = false;
  bool forceGemmFallback = false;  // GPTC_GEMM_FALLBACK=1
  bool dgeluInCublasLt = false;    // GPTC_GEMM_DGELU=cublaslt
  /// GPTC_GEMM_OWN: gptc's own GEMMs timed among the ways (1), never
  /// (0), one block shape alone, untimed (narrow, wide, paired), or timed
  /// but for the pairs (unpaired: what the GPU job falls back to where the
  /// pairs fail their check).
  enum class OwnGemms { Timed, Never, Narrow, Wide, Paired, Unpaired };
  OwnGemms ownGemms = OwnGemms::Timed;
  bool tuneGemms = true;           // GPTC_GEMM_TUNE=1 (or time), the default
  bool retimeGemms = false;        // GPTC_GEMM_TUNE=time
  std::vector<int64_t> chunkBytes; // GPTC_GEMM_CHUNK_BYTES
  /// The bias gradients' partial sums for row-chunked GEMM ways (whose
  /// next loop's GEMM may use the cuBLASLt workspace), made when the first
  /// such way is planned; kPartialsBytes.
  CUdeviceptr partialsScratch = 0;
  /// The own GEMMs' tensor maps, kTensorMapsPerBlock a block; the last
  /// block holds tensorMapsInLast.
  std::vector<CUdeviceptr> tensorMapBlocks;
  size_t tensorMapsInLast = 0;
  bool saidMapRefused = false; // operandMap's stderr line, once
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
  /// For tune(): of a GEMM's ways to its epilogue (its own plan first, each
  /// with its fastest candidate wayIndex[w], timed at wayMs[w] ms, -1 if it
  /// did not run), the fastest whose results on l's trial operands are the
  /// own plan's; `notUsed` says why each faster one was not.
  size_t fastestWayThatAgrees(const Launch &l,
                              const std::vector<GemmPlan *> &ways,
                              const std::vector<double> &wayMs,
                              const std::vector<size_t> &wayIndex,
                              std::vector<std::string> &notUsed);
  std::vector<std::string> forcedVariants; // GPTC_VARIANT, in order
  void timeVariants();
  // timeVariants' parts (CudaVariants.cpp).
  /// The choice for one set of candidates, which every launch with the
  /// same candidates (every layer's attention) shares.
  struct VariantChoice {
    LaunchVariant best;
    int launches = 0;
    std::string times; ///< "split 1.089 ms, atomic 0.812 ms"; "": forced
    bool kept = false; ///< an earlier run's choice, not timed now
  };
  /// Every label of a candidate of some launch; throws the one error for a
  /// GPTC_VARIANT label that is none, and fills `leftOut` with its
  /// "-label"s.
  std::set<std::string> variantLabels(std::set<std::string> &leftOut);
  /// "grads launch 7: flash_attention_qkv_grad (its kernel, atomic) at loc"
  std::string variantLabel(const Function &f, size_t i,
                           const LaunchVariant &c) const;
  /// The inputs l writes over (in place: the cross entropy's gradient over
  /// the logits), as they are now: each candidate starts from them.
  std::vector<std::pair<int, std::vector<uint8_t>>>
  clobberedInputs(const Launch &l);
  /// Times each candidate of launch i of f (prepared as `pl`) on trial
  /// operands, keeping the fastest that agrees with the first (the own
  /// kernel) in `choice`; `trials` keeps each run's Prepared until the
  /// device is done.
  void timeCandidates(const Function &f, size_t i, const Prepared &pl,
                      const std::vector<LaunchVariant> &candidates,
                      CUevent start, CUevent stop,
                      std::vector<std::unique_ptr<Prepared>> &trials,
                      VariantChoice &choice);
  /// One stderr line a set of candidates: the times and the choice, or
  /// what GPTC_VARIANT picked.
  static void reportVariantChoice(const VariantChoice &choice,
                                  const std::string &name);
  /// A candidate's kernel name for lines and the profile: the program's
  /// kernel, or "cuDNN".
  std::string candidateName(const LaunchVariant &c) const {
    return c.deviceKernel >= 0 ? prog->kernels[size_t(c.deviceKernel)].name
                               : std::string("cuDNN");
  }

  /// GPTC_CUDNN: "1", "0" or "all" (CudaCudnn.cpp).
  std::string cudnnPolicy;
  /// cuDNN's attention plan for launches of one kind and shape, with its
  /// workspace (plans run one at a time, on the compute stream), or why
  /// cuDNN cannot take them (plan null).
  struct CudnnPlan {
    std::unique_ptr<cudnn::AttentionPlan> plan;
    CUdeviceptr workspace = 0;
    int64_t bytes = 0;
    std::string why;
  };
  std::vector<CudnnPlan> cudnnPlans;
  std::map<std::string, int> cudnnPlanIndex; // by kind, label and shape
  /// The cuDNN candidates GPTC_CUDNN adds to an attention launch with
  /// variants (none to others), labelled "cudnn" and "cudnn-dq-sums".
  std::vector<LaunchVariant> cudnnCandidates(const Launch &l);
  /// The plan of candidate `label` for l, made on first use; -1 with
  /// `why` set where cuDNN cannot take the launch.
  int cudnnPlan(const Launch &l, const std::string &label, std::string &why);
  /// For an attention backward timed on trial operands: its row dot input
  /// (delta) set to Σ dout·out of its trial out and dout, as the row dot
  /// launch before it would. cuDNN's backward computes those sums itself
  /// and gptc's read delta: on unrelated values they could not agree.
  void agreeRowDot(const Launch &l);
  /// Marks the launches whose results only cuDNN's launches read, and
  /// ignore (Prepared::ignoredUpTo), and says how many there are.
  void skipWhatCudnnIgnores();
  /// Frees the plans and workspaces no launch runs after the timing (the
  /// backward's can hold hundreds of MiB), so that only what runs counts
  /// in the memory the program takes.
  void releaseUnusedCudnnPlans();
  /// One run of pl's cuDNN plan on l's operands.
  void runCudnn(const Launch &l, const Prepared &pl, CUstream stream);
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
  bool reported = false;               // profileReport() was called

  const Program *prog = nullptr;
  CUdeviceptr arena = 0, workspace = 0;
  /// The side stream (Launch::stream 1: gptc compile
  /// --overlap-weight-grads), at the least priority; its GEMMs' own cuBLASLt
  /// workspace; the events of its forks and joins. Made at load when a
  /// launch asks for it.
  CUstream side = nullptr;
  CUdeviceptr sideWorkspace = 0;
  /// The weight-gradient GEMMs' counters (kWeightGradCounters each), the
  /// compute stream's and the side stream's, made at the first.
  CUdeviceptr weightGradCounters = 0, sideWeightGradCounters = 0;
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

} // namespace gptc::rt::detail

#endif // GPTC_HAVE_CUDA_HEADERS

#endif // GPTC_LIB_RUNTIME_CUDABACKENDIMPL_H
