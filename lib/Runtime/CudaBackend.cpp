//===- CudaBackend.cpp - run a Program on a CUDA GPU ----------------------===//
//
// One device arena laid out by planMemory, one compute stream (the greatest
// priority) and one copy stream on device 0's primary context (the one
// cuBLASLt's own runtime uses), and for a program whose planStreams moved
// launches (--overlap-weight-grads: weight gradients' GEMMs, the ids'
// sorts) a side stream of the least priority.
// Generated kernels come from the Program's cubins when they match the
// device, else from NVRTC; gpt.matmul goes to cuBLASLt. The driver and
// cuBLASLt come through dlopen (CudaApi.h), so the training program links
// neither and a machine without a GPU gets one DeviceError line instead of
// a loader error. Without the CUDA headers at build time the factory only
// throws. This file holds the device, loading and running; GEMMs, kernel
// variants and the profile have files of their own (CudaBackendImpl.h).
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

#include "CudaBackendImpl.h"

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

namespace detail {

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
bool envOn(const char *name) { return envSwitch(name, {"0", "1"}) == "1"; }

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

CudaBackendImpl::CudaBackendImpl() : cu(driver()) {
  try {
    start();
  } catch (...) {
    release();
    throw;
  }
  std::lock_guard<std::mutex> lock(registryMutex);
  registry.insert(this);
}

CudaBackendImpl::~CudaBackendImpl() {
  {
    std::lock_guard<std::mutex> lock(registryMutex);
    registry.erase(this);
  }
  release();
}

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
    skipWhatCudnnIgnores();
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
              profileSlot((gemms[pl.gemm].desc ? "cuBLASLt " : "gptc GEMM ") +
                              gemms[pl.gemm].shape,
                          f.launches[i]);
}

void CudaBackendImpl::prepareSideStream() {
  bool any = false;
  for (const Function &f : prog->functions)
    for (size_t i = 0; i < f.launches.size(); ++i) {
      const Launch &side = f.launches[i];
      if (side.stream == 0)
        continue;
      any = true;
      const std::string where =
          f.name + " launch " + std::to_string(i) + " (" + opAt(side) + ")";
      if (side.stream != 1 || !runsBeside(side.kernel) || side.join <= int(i) ||
          side.join > int(f.launches.size()))
        throw DeviceError(where +
                          ": only a GEMM or sort_ids may run on the "
                          "side stream (stream 1), joined at a later launch "
                          "or the end");
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

bool CudaBackendImpl::hasKernel(const std::string &name) const {
  for (size_t i = 0; i < prog->kernels.size() && i < entries.size(); ++i)
    if (prog->kernels[i].name == name)
      return true;
  return false;
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

CUresult CudaBackendImpl::launchKernel(CUfunction fn, const uint32_t (&grid)[3],
                                       const uint32_t (&block)[3],
                                       uint32_t sharedBytes, CUstream stream,
                                       void **params, uint32_t cluster) const {
  if (!pdl && cluster <= 1)
    return cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1],
                             block[2], sharedBytes, stream, params, nullptr);
  CUlaunchAttribute attrs[2] = {};
  unsigned numAttrs = 0;
  if (pdl) {
    attrs[numAttrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[numAttrs++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attrs[numAttrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[numAttrs].value.clusterDim.x = cluster;
    attrs[numAttrs].value.clusterDim.y = 1;
    attrs[numAttrs++].value.clusterDim.z = 1;
  }
  CUlaunchConfig config{};
  config.gridDimX = grid[0];
  config.gridDimY = grid[1];
  config.gridDimZ = grid[2];
  config.blockDimX = block[0];
  config.blockDimY = block[1];
  config.blockDimZ = block[2];
  config.sharedMemBytes = sharedBytes;
  config.hStream = stream;
  config.attrs = attrs;
  config.numAttrs = numAttrs;
  return cu.cuLaunchKernelEx(&config, fn, params, nullptr);
}

int CudaBackendImpl::activeClusters(CUfunction fn, uint32_t cluster,
                                    uint32_t threads,
                                    uint32_t sharedBytes) const {
  CUlaunchAttribute dims{};
  dims.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  dims.value.clusterDim.x = cluster;
  dims.value.clusterDim.y = dims.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = cluster;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = threads;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = sharedBytes;
  config.attrs = &dims;
  config.numAttrs = 1;
  int clusters = 0;
  if (cu.cuOccupancyMaxActiveClusters(&clusters, fn, &config) != CUDA_SUCCESS)
    return 0;
  return clusters;
}

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
    if (CUresult r =
            launchKernel(pl.fn, k.grid, k.block, k.sharedBytes, stream,
                         const_cast<void **>(pl.argPtrs.data()), k.cluster);
        r != CUDA_SUCCESS)
      throw DeviceError("cannot launch " + pl.label + ": " + cuError(cu, r));
  } else if (pl.gemm >= 0) {
    const Lt &lt = cublasLt();
    const GemmPlan &g = gemms[pl.gemm];
    if (cublasStatus_t s = runGemm(g, g.algo, pl.label, stream);
        s != CUBLAS_STATUS_SUCCESS)
      throw DeviceError("cuBLASLt failed in " + pl.label + ": " +
                        lt.cublasLtGetStatusName(s));
  } else if (pl.cudnn >= 0) {
    runCudnn(l, pl, stream);
  } else {
    throw DeviceError("no CUDA kernel for gpt." + opAt(l) + " (" + pl.label +
                      ")");
  }
  if (start) {
    CUevent end = pooledEvent(timingPool, true);
    check(cu.cuEventRecord(end, stream), "cuEventRecord");
    pendingTimes.push_back({pl.profileSlot, start, end, pl.floorMs});
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
      } catch (const DeviceError &e) {
        cu.cuStreamEndCapture(compute, &graph);
        if (graph)
          cu.cuGraphDestroy(graph);
        if (!pdl)
          throw;
        // A driver that refuses programmatic launches in a capture: plain
        // launches from now on; this run eager, the next one captured.
        pdl = false;
        std::fprintf(stderr,
                     "gptc: capturing %s with programmatic launches failed "
                     "(%s); plain launches from now on (GPTC_PDL=0)\n",
                     f.name.c_str(), e.what());
        enqueueRange(f, begin, end, false, true, false);
        g.calls = 1;
        return;
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
    // A result only cuDNN's launches in this range would read, and ignore.
    // (Run alone, as --check-kernels runs it, the launch runs.)
    if (pls[i].ignoredUpTo >= 0 && size_t(pls[i].ignoredUpTo) < end)
      continue;
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

} // namespace detail

std::unique_ptr<CudaBackend> createCudaBackend() {
  return std::make_unique<detail::CudaBackendImpl>();
}

#endif // GPTC_HAVE_CUDA_HEADERS

std::unique_ptr<Backend> makeCudaBackend() { return createCudaBackend(); }

} // namespace gptc::rt
