//===- CompileKernels.cpp - NVRTC for every kernel of a Program -----------===//
//
// Kernels compile on a small thread pool (NVRTC is thread-safe for distinct
// programs); the dump is written only after every kernel compiled, each
// file atomically.
//
//===----------------------------------------------------------------------===//

#include "gptc/Target/CUDA/CompileKernels.h"
#include "gptc/Formats/AtomicFile.h"
#include "gptc/Formats/Error.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

namespace gptc::cuda {

namespace {

void writeText(const std::string &path, const std::string &text) {
  writeFileAtomically(path, text.data(), text.size());
}

void dump(const rt::Program &p, const std::string &arch,
          const std::string &dir,
          const std::vector<rt::CompiledKernel> &compiled,
          const std::vector<KernelResources> &resources) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw FormatError(dir + ": cannot create the directory: " + ec.message());

  std::string options;
  for (const std::string &o : rt::nvrtcOptions(arch))
    options += o + "\n";
  writeText(dir + "/nvrtc-options.txt", options);

  nlohmann::ordered_json kernels = nlohmann::ordered_json::array();
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const rt::DeviceKernel &dk = p.kernels[k];
    writeText(dir + "/" + dk.name + ".cu", dk.source);
    writeText(dir + "/" + dk.name + ".log", compiled[k].log);
    const std::vector<uint8_t> &cubin = compiled[k].cubin;
    writeFileAtomically(dir + "/" + dk.name + ".cubin", cubin.data(),
                        cubin.size());
    // The launches it runs, as their own kernel or as a variant (labelled).
    nlohmann::ordered_json launches = nlohmann::ordered_json::array();
    for (const rt::Function &f : p.functions)
      for (size_t i = 0; i < f.launches.size(); ++i)
        for (const rt::LaunchVariant &v : rt::launchCandidates(f.launches[i])) {
          if (v.deviceKernel != int(k))
            continue;
          const rt::Launch &l = f.launches[i];
          nlohmann::ordered_json entry = {
              {"function", f.name},
              {"index", i},
              {"op", rt::launchOp(l)},
              {"loc", l.loc},
              {"grid", {v.grid[0], v.grid[1], v.grid[2]}},
              {"block", {v.block[0], v.block[1], v.block[2]}},
              {"dynamic_shared_bytes", v.sharedBytes}};
          if (v.cluster > 1) // (blocks a cluster along x)
            entry["cluster"] = v.cluster;
          if (!l.variants.empty()) {
            entry["variant"] = v.label;
            entry["own"] = v.deviceKernel == l.deviceKernel;
          }
          launches.push_back(std::move(entry));
        }
    const rt::CompiledKernel &c = compiled[k];
    kernels.push_back({{"name", dk.name},
                       {"source", dk.name + ".cu"},
                       {"log", dk.name + ".log"},
                       {"cubin", dk.name + ".cubin"},
                       {"registers", c.registers},
                       {"shared_bytes", c.sharedBytes},
                       {"stack_bytes", c.localBytes},
                       {"spill_stores", c.spillStores},
                       {"spill_loads", c.spillLoads},
                       {"cubin_bytes", c.cubin.size()},
                       {"threads", resources[k].threads},
                       {"blocks_per_sm", resources[k].blocksPerSM},
                       {"launches", std::move(launches)}});
  }
  nlohmann::ordered_json manifest = {{"arch", arch},
                                     {"nvrtc", rt::nvrtcVersion()},
                                     {"options", rt::nvrtcOptions(arch)},
                                     {"kernels", std::move(kernels)}};
  writeText(dir + "/manifest.json", manifest.dump(2) + "\n");
}

/// Compiles p.kernels[compiled.size()...] with NVRTC on a thread pool,
/// appending them to `compiled`.
void compileFrom(const rt::Program &p, const std::string &arch,
                 unsigned threads,
                 std::vector<rt::CompiledKernel> &compiled) {
  const size_t from = compiled.size(), n = p.kernels.size();
  compiled.resize(n);
  if (from == n)
    return;
  if (!threads)
    threads = std::max(1u, std::thread::hardware_concurrency());
  threads = unsigned(std::min<size_t>(threads, n - from));
  std::atomic<size_t> next{from};
  std::exception_ptr error;
  std::mutex errorMutex;
  auto worker = [&] {
    for (size_t k; (k = next++) < n;) {
      try {
        compiled[k] = rt::compileCachedKernel(p.kernels[k].source,
                                              p.kernels[k].name, arch);
      } catch (...) {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (!error)
          error = std::current_exception();
        next = n; // stop the others early
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread &t : pool)
    t.join();
  if (error)
    std::rethrow_exception(error);
}

} // namespace

int residentBlocks(const std::string &arch, int threads, int registers,
                   int sharedBytes) {
  struct Limits {
    const char *arch;
    int threads, blocks, sharedBytes; // an SM's
  };
  // The CUDA C++ Programming Guide's table of compute capabilities: 64K
  // registers an SM on each.
  static const Limits table[] = {{"sm_80", 2048, 32, 164 * 1024},
                                 {"sm_86", 1536, 16, 100 * 1024},
                                 {"sm_89", 1536, 24, 100 * 1024},
                                 {"sm_90", 2048, 32, 228 * 1024},
                                 {"sm_90a", 2048, 32, 228 * 1024}};
  const Limits *l = nullptr;
  for (const Limits &t : table)
    if (arch == t.arch)
      l = &t;
  if (!l || threads <= 0 || registers < 0 || sharedBytes < 0)
    return -1;
  const int warps = (threads + 31) / 32;
  int blocks = std::min(l->blocks, l->threads / (32 * warps));
  const int perWarp = (registers * 32 + 255) / 256 * 256;
  if (perWarp > 0)
    blocks = std::min(blocks, 65536 / perWarp / warps);
  const int shared = (sharedBytes + 127) / 128 * 128 + 1024;
  return std::min(blocks, l->sharedBytes / shared);
}

int registersForBlocks(const std::string &arch, int threads, int sharedBytes,
                       int blocks) {
  for (int registers = 255; registers > 0; --registers)
    if (residentBlocks(arch, threads, registers, sharedBytes) >= blocks)
      return registers;
  return -1;
}

std::vector<KernelResources> compileKernels(rt::Program &p,
                                            const std::string &arch,
                                            const CompileKernelsOptions &opts) {
  emitCUDA(p, arch, opts.emit); // checks the arch first
  std::vector<rt::CompiledKernel> compiled;
  compileFrom(p, arch, opts.threads, compiled);
  // A kernel that spilled under the registers its blocks an SM leave gets
  // its uncapped twin as a variant: the runtime times the two.
  if (opts.uncappedVariants) {
    std::vector<bool> spilled(compiled.size());
    for (size_t k = 0; k < compiled.size(); ++k)
      spilled[k] = compiled[k].spillStores > 0 || compiled[k].spillLoads > 0;
    if (addUncappedVariants(p, arch, spilled, opts.emit) > 0)
      compileFrom(p, arch, opts.threads, compiled);
  }
  // A layernorm kernel that the registers hold to fewer blocks an SM than
  // its shared memory and threads would allow gets a twin at one block
  // more (ncu on an H200: GPT-2's layernorm gradient at 2 blocks, 24%
  // occupancy, two thirds of its cycles waiting on loads).
  if (opts.denserVariants) {
    const std::vector<uint32_t> dynamicBytes = rt::dynamicSharedBytes(p);
    std::vector<int> blocks(compiled.size(), 0);
    for (const rt::Function &f : p.functions)
      for (const rt::Launch &l : f.launches) {
        const int k = l.deviceKernel;
        if (k < 0 || !isLayernormKernel(l.kernel))
          continue;
        const int threads = int(l.block[0] * l.block[1] * l.block[2]);
        const int shared =
            compiled[size_t(k)].sharedBytes + int(dynamicBytes[size_t(k)]);
        const int now = residentBlocks(arch, threads,
                                       compiled[size_t(k)].registers, shared);
        const int roomy = residentBlocks(arch, threads, 0, shared);
        if (now >= 1 && roomy > now)
          blocks[size_t(k)] = now + 1;
      }
    if (addDenserVariants(p, arch, blocks, opts.emit) > 0)
      compileFrom(p, arch, opts.threads, compiled);
  }
  const size_t n = p.kernels.size();

  std::vector<int> ownLaunches(n, 0), variantLaunches(n, 0), threads(n, 0);
  bool repeats = false;
  for (const rt::Function &f : p.functions)
    for (size_t i = 0; i < f.launches.size(); ++i) {
      const rt::Launch &l = f.launches[i];
      const int once = rt::repeatsGrads(f, i) ? 0 : 1; // counted in grads
      repeats |= once == 0;
      if (l.deviceKernel >= 0)
        ownLaunches[l.deviceKernel] += once;
      for (const rt::LaunchVariant &v : l.variants)
        variantLaunches[v.deviceKernel] += once;
      for (const rt::LaunchVariant &v : rt::launchCandidates(l))
        if (v.deviceKernel >= 0) // (not a GEMM)
          threads[v.deviceKernel] =
              std::max(threads[v.deviceKernel],
                       int(v.block[0] * v.block[1] * v.block[2]));
    }
  std::vector<KernelResources> resources(n);
  const std::vector<uint32_t> dynamicBytes = rt::dynamicSharedBytes(p);
  for (size_t k = 0; k < n; ++k) {
    p.kernels[k].cubin = compiled[k].cubin;
    p.kernels[k].arch = arch;
    KernelResources &r = resources[k];
    r.name = p.kernels[k].name;
    r.launches = ownLaunches[k];
    r.variantLaunches = variantLaunches[k];
    r.registers = compiled[k].registers;
    r.sharedBytes = compiled[k].sharedBytes + int(dynamicBytes[k]);
    r.localBytes = compiled[k].localBytes;
    r.spillStores = compiled[k].spillStores;
    r.spillLoads = compiled[k].spillLoads;
    r.cubinBytes = compiled[k].cubin.size();
    r.threads = threads[k];
    r.blocksPerSM =
        residentBlocks(arch, r.threads, r.registers, r.sharedBytes);
  }
  if (!opts.dumpDir.empty())
    dump(p, arch, opts.dumpDir, compiled, resources);
  if (opts.report)
    printKernelReport(resources, arch, *opts.report, repeats);
  return resources;
}

void printKernelReport(const std::vector<KernelResources> &resources,
                       const std::string &arch, std::ostream &os,
                       bool repeatsOnce) {
  size_t width = 6;
  for (const KernelResources &r : resources)
    width = std::max(width, r.name.size());
  int launches = 0;
  for (const KernelResources &r : resources)
    launches += r.launches;
  os << "kernel report for " << arch << " (NVRTC " << rt::nvrtcVersion()
     << "): " << resources.size() << " kernels, " << launches
     << " launches\n";
  char line[256];
  std::snprintf(line, sizeof line,
                "%-*s %8s %9s %12s %11s %12s %11s %7s %12s\n", int(width),
                "kernel", "launches", "registers", "shared bytes",
                "stack bytes", "spill stores", "spill loads", "threads",
                "blocks an SM");
  os << line;
  bool afterGemms = false, variants = false;
  for (const KernelResources &r : resources) {
    // The GEMM-epilogue fallbacks: the runtime decides how often, at load.
    bool fallback = rt::gemmFallbackArgCount(r.name) > 0;
    afterGemms |= fallback;
    std::string launches = fallback ? "-" : std::to_string(r.launches);
    if (r.launches == 0 && r.variantLaunches > 0) {
      launches = "(" + std::to_string(r.variantLaunches) + ")";
      variants = true;
    }
    const std::string threads = r.threads > 0 ? std::to_string(r.threads) : "-";
    const std::string blocks =
        r.blocksPerSM >= 0 ? std::to_string(r.blocksPerSM) : "-";
    std::snprintf(line, sizeof line,
                  "%-*s %8s %9d %12d %11d %12d %11d %7s %12s\n", int(width),
                  r.name.c_str(), launches.c_str(), r.registers, r.sharedBytes,
                  r.localBytes, r.spillStores, r.spillLoads, threads.c_str(),
                  blocks.c_str());
    os << line;
  }
  if (afterGemms)
    os << "launches -: run by the runtime after the GEMMs whose epilogue it "
          "computes (by default GELU's derivative with a bias gradient), or "
          "in place of an epilogue cuBLASLt refuses\n";
  if (variants)
    os << "launches (N): a variant of N launches, timed against their own "
          "kernel when the program loads; the fastest runs\n";
  if (repeatsOnce)
    os << "launches: grads_accumulate's repeats of grads' launches are "
          "counted once, in grads; its own (the in-place sums, the add) as "
          "they are\n";
  os << "blocks an SM: of the most threads a launch gives the kernel, as the "
        "registers, shared memory and threads allow on one SM of "
     << arch << " (- without a table for it)\n";
  // Where a kernel's occupancy is its registers' doing, how far one block
  // more is: the wgmma forward held 16 registers of q at 113, 4 blocks;
  // read from shared memory, 90 (wgmma-ss), 5.
  bool header = false;
  for (const KernelResources &r : resources) {
    if (r.blocksPerSM < 1 || (r.launches == 0 && r.variantLaunches == 0))
      continue;
    const int roomy = residentBlocks(arch, r.threads, 0, r.sharedBytes);
    if (roomy <= r.blocksPerSM)
      continue;
    if (!header)
      os << "register-bound: these kernels' registers hold them to fewer "
            "blocks an SM than their shared memory and threads allow\n";
    header = true;
    os << "  " << r.name << ": " << r.blocksPerSM
       << (r.blocksPerSM == 1 ? " block" : " blocks") << " an SM at "
       << r.registers << " registers, " << r.blocksPerSM + 1 << " at "
       << registersForBlocks(arch, r.threads, r.sharedBytes, r.blocksPerSM + 1)
       << " or fewer (shared memory and threads allow " << roomy << ")\n";
  }
}

} // namespace gptc::cuda
