// bench/gpu/attention_bench.cpp — gptc's attention kernels alone, on a GPU.
//
// Loads the cubins `gptc compile --dump-kernels` wrote for GPT-2 (the very
// ones its training program runs: NVRTC's), times each forward variant on
// random bf16 q, k, v and checks its out and lse against the first one's,
// whose out and lse the backwards then take; times the row-dot pre-pass
// (delta = Σ dout·out a query row, checked against the host's sums); times
// each backward variant over the same inputs and checks its dq, dk and dv
// against the first backward's.
// prepare.sh builds it (host C++ on the driver API, no nvcc) and writes
// DIR/sizes.txt ("batch seq channels heads") and DIR/kernels.txt, a line a
// kernel: "role name file entry grid.x grid.y grid.z block.x
// dynamic_shared",
// "forward" lines, one "rowdot" line, then "backward" lines, each role's
// reference first. A backward takes (qkv, out, lse, dout, delta, dqkv). A file
// is a cubin, or CUDA C++ (.cu: a dumped kernel with a change, such as its
// launch bounds), which this compiles with the GPU machine's NVRTC and
// gptc's options (DIR/nvrtc-options.txt), as the training program would.
//
//   attention_bench DIR [launches]
//
// Each kernel runs in a child process of its own, which first runs, once
// and untimed, the references it takes its inputs from and is compared
// with: a kernel that faults (CUDA's errors are sticky, the context is
// lost) gets a FAILED line, and the kernels after it still run.
// Prints one line a kernel (µs a launch, the mean of `launches` after two
// untimed ones, and the TFLOP/s that makes: causal attention's products,
// 2·T²·D a head forward and 5·T²·D backward, as FlashAttention counts
// them; the row dot has none) and exits non-zero if a variant's results stray
// from its reference's by more than 2% of the reference's largest magnitude,
// part by part, or if anything fails. A "probe-" kernel (prepare.sh: a variant
// recompiled with a measurement hook of the attention headers) is timed alone.

#include "nvrtc_loader.h"

#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace {

/// A child's exit status when something fails (CUDA, a file, NVRTC), after
/// one line on stderr; 1 means results that stray.
constexpr int kExitError = 3;

void check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS)
    return;
  const char *name = "?";
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "attention_bench: %s: %s\n", what, name);
  std::exit(kExitError);
}

struct Kernel {
  std::string role, name, cubin, entry;
  unsigned gridX = 0, gridY = 0, gridZ = 0, block = 0, shared = 0;
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
};

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "attention_bench: cannot read %s\n", path.c_str());
    std::exit(kExitError);
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// The cubin NVRTC makes of `source` with gptc's options (libnvrtc opened
/// with dlopen, as gptc's runtime does).
std::string compileWithNvrtc(const std::string &source, const std::string &name,
                             const std::string &optionsFile) {
  std::vector<std::string> options;
  std::istringstream in(readFile(optionsFile));
  for (std::string o; std::getline(in, o);)
    if (!o.empty())
      options.push_back(o);
  std::string cubin, log;
  if (!bench::nvrtcCubin(source, name, options, cubin, log)) {
    std::fprintf(stderr, "attention_bench: %s\n", log.c_str());
    std::exit(kExitError);
  }
  // ptxas -v: the registers and spills of the variant, for the log.
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);)
    if (line.find("registers") != std::string::npos ||
        line.find("spill") != std::string::npos)
      std::printf("  %s: %s\n", name.c_str(), line.c_str());
  return cubin;
}

uint16_t toBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float fromBf16(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

/// Uniform in [-1, 1), bf16, from a fixed xorshift stream.
std::vector<uint16_t> randomBf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (uint16_t &x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = toBf16(float(s >> 40) / float(1 << 23) - 1.0f);
  }
  return v;
}

/// Mean µs a launch over `n`, after two untimed launches.
double timeLaunches(const Kernel &k, void **args, int n) {
  auto launch = [&] {
    check(cuLaunchKernel(k.fn, k.gridX, k.gridY, k.gridZ, k.block, 1, 1,
                         k.shared, nullptr, args, nullptr),
          ("launching " + k.name).c_str());
  };
  launch();
  launch();
  check(cuCtxSynchronize(), ("running " + k.name).c_str());
  CUevent start, end;
  check(cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(cuEventCreate(&end, CU_EVENT_DEFAULT), "cuEventCreate");
  check(cuEventRecord(start, nullptr), "cuEventRecord");
  for (int i = 0; i < n; ++i)
    launch();
  check(cuEventRecord(end, nullptr), "cuEventRecord");
  check(cuEventSynchronize(end), ("running " + k.name).c_str());
  float ms = 0;
  check(cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime");
  cuEventDestroy(start);
  cuEventDestroy(end);
  return 1000.0 * ms / n;
}

/// "max|diff|/max|ref|: NAME d/s ..." for each part of `got` against
/// `ref`: row r's part p is columns [p·width, (p+1)·width) of rows
/// `stride` apart; a part fails past 2% of the reference's largest
/// magnitude or with a non-finite value. ok: whether every part passed.
std::string compareParts(const std::vector<float> &got,
                         const std::vector<float> &ref, size_t rows,
                         size_t stride, size_t width,
                         const std::vector<const char *> &names, bool &ok) {
  std::ostringstream parts;
  ok = true;
  for (size_t part = 0; part < names.size(); ++part) {
    double diff = 0, scale = 0;
    bool finite = true;
    for (size_t row = 0; row < rows; ++row)
      for (size_t c = 0; c < width; ++c) {
        size_t e = row * stride + part * width + c;
        finite &= std::isfinite(got[e]);
        diff = std::max(diff, double(std::fabs(got[e] - ref[e])));
        scale = std::max(scale, double(std::fabs(ref[e])));
      }
    bool partOk = finite && diff <= 0.02 * scale;
    ok &= partOk;
    char text[96];
    std::snprintf(text, sizeof text, " %s %.2e/%.2e%s", names[part], diff,
                  scale, partOk ? "" : " FAIL");
    parts << text;
  }
  return "max|diff|/max|ref|:" + parts.str() + (ok ? "  PASS" : "");
}

/// The sizes and the kernel lines: kernels[0, forwards) are the forwards,
/// kernels[forwards] the row dot, the rest the backwards; each role's
/// reference first.
struct Bench {
  std::string dir;
  int launches = 20;
  long long B = 0, T = 0, C = 0, H = 0;
  std::vector<Kernel> kernels;
  size_t forwards = 0;
};

/// A kernel named "probe-...": a variant recompiled with one of
/// the attention headers' measurement hooks (prepare.sh), which computes
/// something else on purpose; it is timed, and its results are not checked.
bool isProbe(const Kernel &k) { return k.name.rfind("probe-", 0) == 0; }

/// `k`'s cubin loaded (a .cu compiled first) and its entry found.
void load(const Bench &b, Kernel &k) {
  std::string image = readFile(b.dir + "/" + k.cubin);
  if (k.cubin.size() > 3 && k.cubin.substr(k.cubin.size() - 3) == ".cu")
    image = compileWithNvrtc(image, k.cubin, b.dir + "/nvrtc-options.txt");
  check(cuModuleLoadData(&k.module, image.data()),
        ("loading " + k.cubin).c_str());
  check(cuModuleGetFunction(&k.fn, k.module, k.entry.c_str()),
        ("finding " + k.entry).c_str());
  if (k.shared > 48 * 1024)
    check(cuFuncSetAttribute(k.fn,
                             CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             int(k.shared)),
          "cuFuncSetAttribute");
}

/// One launch of `k`, waited for.
void runOnce(const Kernel &k, void **args) {
  check(cuLaunchKernel(k.fn, k.gridX, k.gridY, k.gridZ, k.block, 1, 1,
                       k.shared, nullptr, args, nullptr),
        ("launching " + k.name).c_str());
  check(cuCtxSynchronize(), ("running " + k.name).c_str());
}

/// Times kernels[subject] and checks its results against its role's
/// reference, after running once, untimed, what it takes its inputs from
/// (the reference forward, the row dot) and the reference it is compared
/// with. Prints the subject's line; returns 1 if its results stray. Runs in
/// a process of its own, so that a kernel that faults (a CUDA error is
/// sticky: the context is lost) takes only its own line with it.
int runSubject(Bench &b, size_t subject) {
  const long long B = b.B, T = b.T, C = b.C, H = b.H;
  const size_t rowdot = b.forwards, firstBackward = b.forwards + 1;
  check(cuInit(0), "cuInit");
  CUdevice dev;
  CUcontext ctx;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  std::vector<Kernel> &kernels = b.kernels;
  Kernel &k = kernels[subject];
  load(b, k);
  if (subject != 0)
    load(b, kernels[0]);
  if (subject > rowdot) {
    load(b, kernels[rowdot]);
    if (subject != firstBackward)
      load(b, kernels[firstBackward]);
  }

  // qkv [B, T, 3C] and dout [B, T, C] random; out [B, T, C] and lse
  // [B·H, T] from the reference forward, delta [B·H, T] from the row dot.
  const size_t nQkv = size_t(B * T * 3 * C), nOut = size_t(B * T * C),
               nRows = size_t(B * H * T);
  CUdeviceptr qkv, out, lse, dout, delta;
  check(cuMemAlloc(&qkv, 2 * nQkv), "cuMemAlloc");
  check(cuMemAlloc(&out, 2 * nOut), "cuMemAlloc");
  check(cuMemAlloc(&lse, 4 * nRows), "cuMemAlloc");
  check(cuMemAlloc(&dout, 2 * nOut), "cuMemAlloc");
  check(cuMemAlloc(&delta, 4 * nRows), "cuMemAlloc");
  std::vector<uint16_t> host = randomBf16(nQkv, 1);
  check(cuMemcpyHtoD(qkv, host.data(), 2 * nQkv), "cuMemcpyHtoD");
  const std::vector<uint16_t> doutBits = randomBf16(nOut, 2);
  check(cuMemcpyHtoD(dout, doutBits.data(), 2 * nOut), "cuMemcpyHtoD");
  // Causal products (half of the T x T scores), FlashAttention's count.
  const double headFlops =
      double(T) * double(T) * double(C / H) * double(B * H);
  auto tflops = [&](double factor, double us) {
    return factor * headFlops / (us * 1e-6) / 1e12;
  };
  // A forward's out (as floats) and lse, from the device.
  auto forwardResults = [&](CUdeviceptr o, CUdeviceptr l,
                            std::vector<float> &gotOut,
                            std::vector<float> &gotLse) {
    std::vector<uint16_t> bits(nOut);
    gotOut.resize(nOut);
    gotLse.resize(nRows);
    check(cuMemcpyDtoH(bits.data(), o, 2 * nOut), "cuMemcpyDtoH");
    check(cuMemcpyDtoH(gotLse.data(), l, 4 * nRows), "cuMemcpyDtoH");
    for (size_t e = 0; e < nOut; ++e)
      gotOut[e] = fromBf16(bits[e]);
  };
  std::vector<float> refOut, refLse;
  void *forwardArgs[] = {&qkv, &out, &lse};

  // A forward into its own out and lse, compared with the reference's.
  if (subject < rowdot) {
    CUdeviceptr o = out, l = lse;
    if (subject > 0) {
      runOnce(kernels[0], forwardArgs);
      forwardResults(out, lse, refOut, refLse);
      check(cuMemAlloc(&o, 2 * nOut), "cuMemAlloc");
      check(cuMemAlloc(&l, 4 * nRows), "cuMemAlloc");
    }
    void *args[] = {&qkv, &o, &l};
    double us = timeLaunches(k, args, b.launches);
    std::string verdict = "(the reference)";
    bool ok = true;
    if (isProbe(k)) {
      verdict = "(a probe: timed, its results not checked)";
    } else if (subject > 0) {
      std::vector<float> gotOut, gotLse;
      forwardResults(o, l, gotOut, gotLse);
      bool okOut, okLse;
      verdict = compareParts(gotOut, refOut, size_t(B * T), size_t(C),
                             size_t(C), {"out"}, okOut);
      verdict += ";" + compareParts(gotLse, refLse, 1, 0, gotLse.size(),
                                    {"lse"}, okLse);
      ok = okOut && okLse;
    }
    std::printf("%-8s %-8s %-28s %10.1f us %6.1f TFLOP/s  %s\n", "forward",
                k.name.c_str(), k.entry.c_str(), us, tflops(2, us),
                verdict.c_str());
    return ok ? 0 : 1;
  }

  runOnce(kernels[0], forwardArgs);
  void *rowdotArgs[] = {&out, &dout, &delta};
  // The row dot of the reference forward's out, against the host's sums
  // (head h of row b·T + t is element (b·H + h)·T + t).
  if (subject == rowdot) {
    forwardResults(out, lse, refOut, refLse);
    double us = timeLaunches(k, rowdotArgs, b.launches);
    const long long D = C / H;
    std::vector<float> got(nRows), want(nRows);
    check(cuMemcpyDtoH(got.data(), delta, 4 * nRows), "cuMemcpyDtoH");
    for (long long bi = 0; bi < B; ++bi)
      for (long long t = 0; t < T; ++t)
        for (long long h = 0; h < H; ++h) {
          double sum = 0;
          for (long long d = 0; d < D; ++d) {
            size_t e = size_t((bi * T + t) * C + h * D + d);
            sum += double(refOut[e]) * fromBf16(doutBits[e]);
          }
          want[size_t((bi * H + h) * T + t)] = float(sum);
        }
    bool ok;
    std::string verdict =
        compareParts(got, want, 1, 0, got.size(), {"delta"}, ok);
    std::printf("%-8s %-8s %-28s %10.1f us  %s\n", "rowdot", k.name.c_str(),
                k.entry.c_str(), us, verdict.c_str());
    return ok ? 0 : 1;
  }

  // A backward into its own dqkv, compared part by part (dq, dk, dv: the
  // three C-column thirds of each row) with the reference backward's.
  runOnce(kernels[rowdot], rowdotArgs);
  auto backwardResults = [&](CUdeviceptr dqkv) {
    check(cuMemcpyDtoH(host.data(), dqkv, 2 * nQkv), "cuMemcpyDtoH");
    std::vector<float> got(nQkv);
    for (size_t e = 0; e < nQkv; ++e)
      got[e] = fromBf16(host[e]);
    return got;
  };
  CUdeviceptr dqkv;
  check(cuMemAlloc(&dqkv, 2 * nQkv), "cuMemAlloc");
  void *args[] = {&qkv, &out, &lse, &dout, &delta, &dqkv};
  std::vector<float> reference;
  if (subject != firstBackward) {
    check(cuMemsetD8(dqkv, 0, 2 * nQkv), "cuMemsetD8");
    runOnce(kernels[firstBackward], args);
    reference = backwardResults(dqkv);
  }
  check(cuMemsetD8(dqkv, 0, 2 * nQkv), "cuMemsetD8");
  double us = timeLaunches(k, args, b.launches);
  std::string verdict = "(the reference)";
  bool ok = true;
  if (isProbe(k))
    verdict = "(a probe: timed, its results not checked)";
  else if (subject != firstBackward)
    verdict = compareParts(backwardResults(dqkv), reference, size_t(B * T),
                           size_t(3 * C), size_t(C), {"dq", "dk", "dv"}, ok);
  std::printf("%-8s %-8s %-28s %10.1f us %6.1f TFLOP/s  %s\n", "backward",
              k.name.c_str(), k.entry.c_str(), us, tflops(5, us),
              verdict.c_str());
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: attention_bench DIR [launches]\n");
    return 2;
  }
  Bench b;
  b.dir = argv[1];
  b.launches = argc > 2 ? std::max(1, std::atoi(argv[2])) : 20;
  std::istringstream(readFile(b.dir + "/sizes.txt")) >> b.B >> b.T >> b.C >>
      b.H;
  std::istringstream lines(readFile(b.dir + "/kernels.txt"));
  for (std::string line; std::getline(lines, line);) {
    Kernel k;
    if (std::istringstream(line) >> k.role >> k.name >> k.cubin >> k.entry >>
        k.gridX >> k.gridY >> k.gridZ >> k.block >> k.shared)
      b.kernels.push_back(k);
  }
  while (b.forwards < b.kernels.size() &&
         b.kernels[b.forwards].role == "forward")
    ++b.forwards;
  if (b.B <= 0 || b.T <= 0 || b.C <= 0 || b.H <= 0 || b.forwards == 0 ||
      b.forwards + 1 >= b.kernels.size() ||
      b.kernels[b.forwards].role != "rowdot") {
    std::fprintf(stderr, "attention_bench: bad sizes.txt or kernels.txt\n");
    return 1;
  }

  std::printf("attention_bench: B=%lld T=%lld C=%lld H=%lld, %d launches "
              "each\n",
              b.B, b.T, b.C, b.H, b.launches);
  // Each kernel in a child process; this one never touches CUDA, so the
  // children may be forked.
  int failures = 0;
  for (size_t subject = 0; subject < b.kernels.size(); ++subject) {
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("attention_bench: fork");
      return 1;
    }
    if (pid == 0) {
      int rc = runSubject(b, subject);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) {
      std::perror("attention_bench: waitpid");
      return 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) <= 1) {
      failures += WEXITSTATUS(status);
      continue;
    }
    // It printed no line: an error (kExitError, its message above) or a
    // signal.
    const Kernel &k = b.kernels[subject];
    char why[64];
    if (WIFEXITED(status))
      std::snprintf(why, sizeof why, "the error above");
    else
      std::snprintf(why, sizeof why, "signal %d", WTERMSIG(status));
    std::printf("%-8s %-8s %-28s FAILED (%s)\n", k.role.c_str(),
                k.name.c_str(), k.entry.c_str(), why);
    ++failures;
  }
  return failures ? 1 : 0;
}
