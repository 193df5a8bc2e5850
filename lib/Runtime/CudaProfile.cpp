//===- CudaProfile.cpp - the profile (GPTC_PROFILE=1) ---------------------===//
//
// Each launch timed by events around it (graphs off), summed by kernel,
// and printed against its floor: its bytes at the DRAM peak or its FLOPs
// at the dense bf16 peak, whichever is longer; with a per-kind summary
// that bench/gpu/torch_gpt2.py sets beside PyTorch's.
//
//===----------------------------------------------------------------------===//

#include "CudaBackendImpl.h"

#ifdef GPTC_HAVE_CUDA_HEADERS

#include "gptc/Formats/AtomicFile.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Support/Sha256.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gptc::rt::detail {

//===----------------------------------------------------------------------===//
// Profile
//===----------------------------------------------------------------------===//

int CudaBackendImpl::profileSlot(const std::string &kernel, const Launch &l) {
  auto [it, added] =
      profileSlots.try_emplace(kernel, int(profileEntries.size()));
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
/// the same way): cuBLASLt's GEMMs and gptc's own; the attention kernels
/// (forward, backward, the row dot); the optimizer (AdamW and the gradient
/// norm); and the rest: elementwise groups, layernorm, the loss, embeddings,
/// the bias gradients' sums (c_attn's attention_bias_grad among them, as
/// PyTorch's are GEMM epilogues or reductions), and the passes that stand
/// in for GEMM epilogues.
static const char *kernelKind(const std::string &kernel) {
  if (kernel.rfind("cuBLASLt", 0) == 0 || kernel.rfind("gptc GEMM", 0) == 0)
    return "GEMM";
  if (kernel.rfind("attention_bias_grad", 0) == 0)
    return "other";
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
                "total ms", "calls", "mean us", "share", "floor us", "of floor",
                "kernel (op at first location)");
  os << line;
  for (size_t i = 0; i < order.size() && i < top; ++i) {
    const ProfileEntry &e = *order[i];
    std::snprintf(
        line, sizeof(line), "%10.3f %8lld %10.2f %5.1f%% %s  %s (%s at %s)\n",
        e.ms, (long long)e.calls, 1000.0 * e.ms / double(e.calls),
        total > 0 ? 100.0 * e.ms / total : 0.0,
        floorColumns(e.floorMs, e.ms, e.calls).c_str(), e.kernel.c_str(),
        e.op.c_str(), e.loc.empty() ? "?" : e.loc.c_str());
    os << line;
  }
  std::snprintf(line, sizeof(line),
                "%10.3f %8lld %10s %5.1f%% %s  all %zu kernels\n", total,
                (long long)calls, "", 100.0,
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

} // namespace gptc::rt::detail

#endif // GPTC_HAVE_CUDA_HEADERS
