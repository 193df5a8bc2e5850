//===- CudaVariants.cpp - kernel variants timed at load -------------------===//
//
// A launch's variants (Launch::variants: --attention-forward=auto, the
// layernorm gradients' twins) are timed at load against its own kernel,
// each checked to agree with it first, and the fastest kept; GPTC_VARIANT
// pins or leaves some out. The results' comparison and the operands they
// are timed on serve GEMM tuning too (CudaGemms.cpp).
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
        return "result " + std::to_string(o) +
               " not finite where its own "
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
// the others. (Such a label no launch has leaves nothing out.)
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
/// dynamic shared bytes, cluster). "" when there is no cache directory.
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
    if (c.deviceKernel == kCudnnAttention) {
      // cuDNN's engines are chosen anew with each version.
      std::string version = "none";
      try {
        version = std::to_string(cudnn::cudnnVersion());
      } catch (const cudnn::CudnnError &) {
      }
      for (const std::string &f : {c.label, "cuDNN " + version})
        field(f);
      continue;
    }
    const DeviceKernel &k = prog.kernels[c.deviceKernel];
    char shape[112];
    std::snprintf(shape, sizeof shape, "(%u,%u,%u) (%u,%u,%u) %u", c.grid[0],
                  c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2],
                  c.sharedBytes);
    if (c.cluster > 1) // (older choices' keys stay as they were)
      std::snprintf(shape + std::strlen(shape),
                    sizeof shape - std::strlen(shape), " cluster %u",
                    c.cluster);
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

/// Runs of each candidate timed, after its warm-up.
constexpr int kTimedRuns = 5;

std::set<std::string>
CudaBackendImpl::variantLabels(std::set<std::string> &leftOut) {
  std::set<std::string> labels; // every candidate's, for the error
  for (const Function &f : prog->functions)
    for (const Launch &l : f.launches)
      if (!l.variants.empty()) {
        for (const LaunchVariant &c : launchCandidates(l))
          labels.insert(c.label);
        for (const LaunchVariant &c : cudnnCandidates(l))
          labels.insert(c.label);
      }
  for (std::string forced : forcedVariants) {
    // (A label to leave out that no launch has leaves nothing out: a
    // script may leave a variant out of every program it runs.)
    if (forced.size() > 1 && forced[0] == '-') {
      leftOut.insert(forced.substr(1));
      continue;
    }
    if (forced != kOwnKernels && forced != kTimeAgain &&
        !labels.count(forced)) {
      std::string known;
      for (const std::string &label : labels)
        known += (known.empty() ? "" : ", ") + label;
      throw DeviceError(
          "GPTC_VARIANT: no launch has a variant '" + forced +
          "' (this program's: " + (known.empty() ? "none" : known) + ")");
    }
  }
  return labels;
}

std::string CudaBackendImpl::variantLabel(const Function &f, size_t i,
                                          const LaunchVariant &c) const {
  const Launch &l = f.launches[i];
  return f.name + " launch " + std::to_string(i) + ": " + l.kernel + " (" +
         candidateName(c) + ", " + c.label + ") at " +
         (l.loc.empty() ? "?" : l.loc);
}

std::vector<std::pair<int, std::vector<uint8_t>>>
CudaBackendImpl::clobberedInputs(const Launch &l) {
  std::vector<std::pair<int, std::vector<uint8_t>>> saved;
  for (int in : l.inputs) {
    const CUdeviceptr a = address(in), aEnd = a + buffer(in).bytes();
    bool written = false;
    for (int out : l.outputs)
      written |= a < address(out) + buffer(out).bytes() && address(out) < aEnd;
    if (written) {
      saved.emplace_back(in, std::vector<uint8_t>(size_t(aEnd - a)));
      download(in, saved.back().second.data());
    }
  }
  return saved;
}

void CudaBackendImpl::timeCandidates(
    const Function &f, size_t i, const Prepared &pl,
    const std::vector<LaunchVariant> &candidates, CUevent start, CUevent stop,
    std::vector<std::unique_ptr<Prepared>> &trials, VariantChoice &t) {
  const Launch &l = f.launches[i];
  double bestMs = -1;
  std::vector<std::vector<uint8_t>> own; // the own kernel's results
  for (int in : l.inputs)
    upload(in, trialOperands(buffer(in).dtype, buffer(in).numel(), uint64_t(in))
                   .data());
  agreeRowDot(l);
  const auto clobbered = clobberedInputs(l);
  // A candidate cuDNN cannot plan or run, and why, in the line.
  auto notUsed = [&](const LaunchVariant &c, const std::string &why) {
    t.times += (t.times.empty() ? "" : ", ") + c.label +
               " (not used: " + why.substr(0, 240) + ")";
  };
  for (const LaunchVariant &c : candidates) {
    int plan = -1;
    std::string why;
    if (c.deviceKernel == kCudnnAttention &&
        (plan = cudnnPlan(l, c.label, why)) < 0) {
      notUsed(c, why);
      continue;
    }
    // A cluster form the device cannot run (its blocks' shared memory or
    // threads too many for the SMs a cluster spans) is no candidate.
    if (c.deviceKernel >= 0 && !clusterFits(c)) {
      notUsed(c, "no cluster of " + std::to_string(c.cluster) + " blocks fits");
      continue;
    }
    Prepared &trial = *trials.emplace_back(new Prepared(pl));
    trial.fn = c.deviceKernel >= 0 ? entries[c.deviceKernel] : nullptr;
    trial.cudnn = plan;
    trial.kernel = c;
    trial.argPtrs.clear();
    for (CUdeviceptr &a : trial.args)
      trial.argPtrs.push_back(&a);
    trial.profileSlot = -1;
    trial.label = variantLabel(f, i, c) + kTimedAtLoad;
    for (const auto &[in, bytes] : clobbered)
      upload(in, bytes.data());
    timedVariant = &c == &candidates[0] ? "" : c.label;
    try {
      enqueue(l, trial, false); // warm-up, and the results compared
    } catch (const CudnnRunError &e) {
      notUsed(c, e.what());
      continue;
    }
    std::vector<std::vector<uint8_t>> mine = launchResults(l);
    const double each =
        msPerRun(start, stop, kTimedRuns, [&] { enqueue(l, trial, false); });
    char line[160];
    std::snprintf(line, sizeof line, "%s%s %.3f ms",
                  t.times.empty() ? "" : ", ", c.label.c_str(), each);
    t.times += line;
    // A variant is kept only if it computes what the launch's own kernel
    // does on the same operands: a kernel wrong on this GPU (untested here,
    // or miscompiled) must not win by being fast.
    if (own.empty()) {
      own = std::move(mine);
    } else if (std::string differs = resultsDiffer(l, own, mine);
               !differs.empty()) {
      std::snprintf(line, sizeof line, " (%s: not used)", differs.c_str());
      t.times += line;
      continue;
    }
    if (bestMs < 0 || each < bestMs) {
      bestMs = each;
      t.best = c;
    }
  }
}

void CudaBackendImpl::reportVariantChoice(const VariantChoice &t,
                                          const std::string &name) {
  if (t.times.empty()) {
    std::fprintf(stderr, "gptc: GPTC_VARIANT: %s (%s) runs for %d launch%s\n",
                 t.best.label.c_str(), name.c_str(), t.launches,
                 t.launches == 1 ? "" : "es");
    return;
  }
  std::fprintf(stderr,
               "gptc: kernel variants timed at load%s for %d launch%s: %s; "
               "%s (%s) runs\n",
               t.kept ? " of an earlier run (kept in the cache; "
                        "GPTC_VARIANT=time times them again)"
                      : "",
               t.launches, t.launches == 1 ? "" : "es", t.times.c_str(),
               t.best.label.c_str(), name.c_str());
}

void CudaBackendImpl::timeVariants() {
  std::set<std::string> leftOut; // GPTC_VARIANT's -label
  if (variantLabels(leftOut).empty())
    return;
  const bool timeAgain = std::find(forcedVariants.begin(), forcedVariants.end(),
                                   kTimeAgain) != forcedVariants.end();
  check(cu.cuMemsetD8Async(arena, 0x3f,
                           size_t(std::max<int64_t>(arenaBytes, 256)), compute),
        "cuMemsetD8Async");
  CUevent start = newEvent(true), stop = newEvent(true);
  auto key = [](const LaunchVariant &v) {
    char k[160];
    std::snprintf(k, sizeof k, "%d (%u,%u,%u) (%u,%u,%u) %u %u;",
                  v.deviceKernel, v.grid[0], v.grid[1], v.grid[2], v.block[0],
                  v.block[1], v.block[2], v.sharedBytes, v.cluster);
    return std::string(k);
  };
  // The candidate GPTC_VARIANT picks, or -1.
  auto forcedOf = [&](const std::vector<LaunchVariant> &candidates) {
    for (const std::string &forced : forcedVariants)
      for (size_t c = 0; c < candidates.size(); ++c)
        if (candidates[c].label == forced || (c == 0 && forced == kOwnKernels))
          return int(c);
    return -1;
  };
  std::map<std::string, VariantChoice> byCandidates;
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
      for (const LaunchVariant &c : cudnnCandidates(l))
        candidates.push_back(c);
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
      VariantChoice &t = it->second;
      const int forced = added ? forcedOf(candidates) : -1;
      const std::string choiceFile =
          added && forced < 0
              ? variantChoiceFile(deviceName, deviceArch, *prog, candidates)
              : std::string();
      size_t kept = 0;
      std::string why; // cuDNN's, where it cannot take the launch
      // A candidate this run can launch: cuDNN's needs its plan, a cluster
      // form room for a cluster.
      auto usable = [&](const LaunchVariant &c) {
        if (c.deviceKernel >= 0 && !clusterFits(c)) {
          why = "no cluster of " + std::to_string(c.cluster) + " blocks fits";
          return false;
        }
        return c.deviceKernel != kCudnnAttention ||
               cudnnPlan(l, c.label, why) >= 0;
      };
      if (forced >= 0) {
        order.push_back(k);
        t.best = candidates[forced];
        if (!usable(t.best))
          throw DeviceError("GPTC_VARIANT=" + t.best.label + ": " +
                            variantLabel(f, i, t.best) + ": " + why);
      } else if (added && !timeAgain &&
                 readVariantChoice(choiceFile, candidates, kept, t.times) &&
                 usable(candidates[kept])) {
        order.push_back(k);
        t.best = candidates[kept];
        t.kept = true;
      } else if (added) {
        order.push_back(k);
        timeCandidates(f, i, pl, candidates, start, stop, trials, t);
        saveVariantChoice(choiceFile, t.best.label, t.times);
      }
      ++t.launches;
      pl.fn = t.best.deviceKernel >= 0 ? entries[t.best.deviceKernel] : nullptr;
      pl.cudnn = t.best.deviceKernel == kCudnnAttention
                     ? cudnnPlan(l, t.best.label, why)
                     : -1;
      if (t.best.deviceKernel == kCudnnAttention && pl.cudnn < 0)
        throw DeviceError(variantLabel(f, i, t.best) + ": " + why);
      pl.kernel = t.best;
      pl.label = variantLabel(f, i, t.best);
      if (profile)
        // (cuDNN's by op: "cuDNN flash_attention_qkv_grad", of the
        // profile's attention kind, forward and backward apart.)
        pl.profileSlot =
            profileSlot(t.best.deviceKernel >= 0 ? candidateName(t.best)
                                                 : "cuDNN " + l.kernel,
                        l);
    }
  synchronize();
  lastLaunch = nullptr;
  timedVariant.clear();
  releaseUnusedCudnnPlans();
  cu.cuEventDestroy(start);
  cu.cuEventDestroy(stop);
  for (const std::string &k : order)
    reportVariantChoice(byCandidates[k], candidateName(byCandidates[k].best));
}

} // namespace gptc::rt::detail

#endif // GPTC_HAVE_CUDA_HEADERS
