//===- CudaBackendFakeTest.cpp - the CUDA backend on a fake driver --------===//
//
// The CUDA backend against FakeCuda.cpp, a host-memory libcuda.so.1 that
// also answers for cuBLASLt (named in GPTC_CUBLASLT). Checks what needs no real GPU: buffer
// addresses, chunked staging, the matmul mapping end to end, CUDA graph
// capture and replay, launch parameters, error messages, the profile and
// the kernel check against the CPU backend.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Kernels.h"
#include "gptc/Runtime/CudaBackend.h"
#include "gptc/Runtime/KernelCheck.h"

#include <cublasLt.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

using namespace gptc::rt;
using gptc::exec::HostTensor;

namespace {

template <typename F> F hook(const char *name) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

/// A backend on the fake driver, or nullptr (the test then skips). Loaded
/// first by its path, the fake is what the backend's dlopen("libcuda.so.1")
/// finds (the loader matches the soname), GPU or not.
std::unique_ptr<CudaBackend> fakeBackend() {
  static bool loaded = [] {
    setenv("GPTC_CUBLASLT", GPTC_FAKE_CUDA, 1);
#ifdef GPTC_FAKE_CUDNN
    setenv("GPTC_CUDNN_LIBRARY", GPTC_FAKE_CUDNN, 1);
#endif
    return dlopen(GPTC_FAKE_CUDA, RTLD_NOW | RTLD_GLOBAL) != nullptr;
  }();
  if (!loaded)
    return nullptr;
  try {
    auto b = createCudaBackend();
    if (b->name().rfind("Fake", 0) == 0)
      return b;
  } catch (const DeviceError &) {
  }
  return nullptr;
}

/// These tests see cuBLASLt's first choice for each GEMM unless they ask
/// for tuning (on by default): tuning runs every GEMM and each other way to
/// its epilogue many times at load and says so on stderr, which the
/// kernel-variant tests read line by line. (Before main: every backend the
/// tests make reads it.)
const bool untunedGemms = [] { return setenv("GPTC_GEMM_TUNE", "0", 1) == 0; }();

/// Sets an environment variable to a value (nullptr: unsets it) until the
/// end of scope, then puts back what was there.
struct ScopedEnv {
  std::string name, was;
  bool wasSet;
  ScopedEnv(const char *n, const char *value) : name(n) {
    const char *old = std::getenv(n);
    wasSet = old != nullptr;
    was = old ? old : "";
    if (value)
      setenv(n, value, 1);
    else
      unsetenv(n);
  }
  ~ScopedEnv() {
    if (wasSet)
      setenv(name.c_str(), was.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

/// fakeBackend() made with the environment switch `name` set to `value`
/// (nullptr: unset; the backend reads its switches once, when it is made).
std::unique_ptr<CudaBackend> fakeBackendWith(const char *name,
                                             const char *value = "1") {
  ScopedEnv env(name, value);
  return fakeBackend();
}

/// Loading `p` on `b` fails with the one line `says`.
void expectLoadRefused(CudaBackend &b, const Program &p, const std::string &says) {
  try {
    b.load(p);
    ADD_FAILURE() << "loaded; expected: " << says;
  } catch (const DeviceError &e) {
    EXPECT_EQ(std::string(e.what()), says);
  }
}

/// Writes `text` over every choice the cache keeps in `subdir` ("variants",
/// "gemms"), as another build's files would read; how many there were.
size_t overwriteKeptChoices(const char *subdir, const char *text) {
  const std::filesystem::path dir =
      std::filesystem::path(std::getenv("GPTC_CACHE_DIR")) / subdir;
  size_t files = 0;
  for (const auto &entry : std::filesystem::directory_iterator(dir)) {
    std::ofstream(entry.path()) << text;
    ++files;
  }
  return files;
}

/// A fresh GPTC_CACHE_DIR for one test, removed after it: the kernel
/// variant and GEMM choices one test's loads keep must not decide
/// another's.
struct FreshCacheDir {
  std::string path = [] {
    char name[] = "/tmp/gptc-fake-cache-XXXXXX";
    return std::string(mkdtemp(name) ? name : "/nonexistent/gptc-fake-cache");
  }();
  ScopedEnv env{"GPTC_CACHE_DIR", path.c_str()};
  ~FreshCacheDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

#define REQUIRE_FAKE(b)                                                        \
  FreshCacheDir freshCacheDir_##b;                                             \
  auto b = fakeBackend();                                                      \
  if (!b)                                                                      \
    GTEST_SKIP() << "the fake driver did not load";              \
  hook<void (*)(int)>("gptcFakeSetArgCount")(2);

Buffer buffer(const char *name, DType t, std::vector<int64_t> shape, Role role) {
  Buffer b;
  b.name = b.binding = name;
  b.dtype = t;
  b.shape = std::move(shape);
  b.role = role;
  return b;
}

Launch launch(const char *kernel, std::vector<int> in, std::vector<int> out,
              bool transposeB = false) {
  Launch l;
  l.kernel = kernel;
  l.inputs = std::move(in);
  l.outputs = std::move(out);
  l.loc = std::string("fake.cpp:") + std::to_string(l.outputs[0]);
  if (transposeB)
    l.ints["transpose_b"] = 1;
  return l;
}

/// Plans `p` with `f` as its one function and checks each launch on
/// `device` against the CPU backend: the mismatch count and the report.
std::pair<int, std::string> checkOneFunction(Program &p, Function f,
                                             Backend &device) {
  p.functions.push_back(std::move(f));
  planMemory(p);
  auto cpu = makeCpuBackend();
  std::ostringstream out;
  int failures = checkKernels(p, device, *cpu, out);
  return {failures, out.str()};
}

/// The function `build` makes, checked against the CPU backend: no
/// failures, and each of `ops` among the checked launches.
void expectMatchesCpu(Function (*build)(Program &), Backend &device,
                      std::initializer_list<const char *> ops) {
  Program p;
  Function f = build(p);
  auto [failures, out] = checkOneFunction(p, std::move(f), device);
  EXPECT_EQ(failures, 0) << out;
  for (const char *op : ops)
    EXPECT_NE(out.find(op), std::string::npos) << op << "\n" << out;
}

/// Checking `f` fails before it runs, with one line that contains `line`.
void expectCheckRefused(Program &p, Function f, Backend &device,
                        const std::string &line) {
  try {
    auto [failures, out] = checkOneFunction(p, std::move(f), device);
    ADD_FAILURE() << "expected \"" << line << "\", but it ran: " << out;
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find(line), std::string::npos) << e.what();
  }
}

enum : int { A, W, T, W2, Y, Q, K, S, G, BIG };

/// Matmuls of each kind (3-D x shared 2-D, transpose_b, batched 4-D bf16 in
/// and f32 out), then one generated kernel (withKernel), and a large
/// parameter for the staging path.
Program program(bool withKernel) {
  Program p;
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("a", DType::F32, {2, 3, 4}, Role::Param),
               buffer("w", DType::F32, {4, 5}, Role::Param),
               buffer("t", DType::F32, {2, 3, 5}, Role::Temp),
               buffer("w2", DType::F32, {6, 5}, Role::Param),
               buffer("y", DType::F32, {2, 3, 6}, Role::Output),
               buffer("q", DType::BF16, {2, 2, 3, 8}, Role::Param),
               buffer("k", DType::BF16, {2, 2, 5, 8}, Role::Param),
               buffer("s", DType::F32, {2, 2, 3, 5}, Role::Output),
               buffer("g", DType::F32, {2, 3, 6}, Role::Output),
               buffer("big", DType::F32, {10'000'000}, Role::Param)};
  Function f;
  f.name = "forward";
  f.launches = {launch("matmul", {A, W}, {T}), launch("matmul", {T, W2}, {Y}, true),
                launch("matmul", {Q, K}, {S}, true)};
  if (withKernel) {
    Launch gelu = launch("gelu", {Y}, {G});
    gelu.deviceKernel = 0;
    gelu.grid[0] = 1;
    gelu.block[0] = 64;
    f.launches.push_back(gelu);
    DeviceKernel k;
    k.name = "k_gelu";
    k.arch = "sm_90a";
    k.cubin = {'F', 'A', 'K', 'E', 'C', 'U', 'B', 'I', 'N'};
    p.kernels.push_back(k);
  }
  p.functions.push_back(f);
  planMemory(p);
  return p;
}

std::vector<float> random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng);
  return v;
}

std::vector<uint16_t> toBF16(const std::vector<float> &v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    out[i] = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  return out;
}

HostTensor tensor(std::vector<int64_t> shape, std::vector<float> v) {
  HostTensor t = HostTensor::floats(std::move(shape));
  t.f32 = std::move(v);
  return t;
}

HostTensor widen(std::vector<int64_t> shape, const std::vector<uint16_t> &v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = uint32_t(v[i]) << 16;
    std::memcpy(&f[i], &u, 4);
  }
  return tensor(std::move(shape), std::move(f));
}

void expectNear(const std::vector<float> &got, const std::vector<float> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << i;
}

TEST(CudaBackendFake, Describes) {
  REQUIRE_FAKE(b);
  EXPECT_EQ(b->arch(), "sm_90a");
  EXPECT_EQ(b->peakBf16Flops(), 989e12);
  EXPECT_EQ(b->deviceMemoryUsed(), int64_t(20) << 30);
  Program p = program(false);
  b->load(p);
  EXPECT_EQ(b->bytesAllocated(), p.arenaBytes + (33 << 20));
  EXPECT_TRUE(asCudaBackend(b.get()) == b.get());
}

TEST(CudaBackendFake, MatmulsGraphsAndLaunches) {
  REQUIRE_FAKE(b);
  Program p = program(true);
  const Function &f = p.functions[0];
  b->load(p);
  std::vector<float> a = random(24, 1), w = random(20, 2), w2 = random(30, 3);
  std::vector<uint16_t> q = toBF16(random(96, 4)), k = toBF16(random(160, 5));
  b->upload(A, a.data());
  b->upload(W, w.data());
  b->upload(W2, w2.data());
  b->upload(Q, q.data());
  b->upload(K, k.data());
  auto launches = hook<int (*)()>("gptcFakeLaunchCount");
  auto arg = hook<uint64_t (*)(int, int)>("gptcFakeLaunchArg");
  int before = launches();

  // Eager (checked), captured, replayed: each sees the a uploaded before it.
  for (int run = 0; run < 3; ++run) {
    a = random(24, 10 + run);
    b->upload(A, a.data());
    b->run(f, 0, f.launches.size());
    std::vector<float> t(30), y(36), s(60);
    b->download(T, t.data());
    b->download(Y, y.data());
    b->download(S, s.data());
    HostTensor tWant = gptc::exec::matmul(tensor({2, 3, 4}, a),
                                          tensor({4, 5}, w), false, false);
    expectNear(t, tWant.f32);
    expectNear(y, gptc::exec::matmul(tWant, tensor({6, 5}, w2), false, true).f32);
    expectNear(s, gptc::exec::matmul(widen({2, 2, 3, 8}, q),
                                     widen({2, 2, 5, 8}, k), false, true)
                      .f32);
    // The generated kernel got y's then g's address, once per run.
    ASSERT_EQ(launches(), before + run + 1);
    int last = launches() - 1;
    EXPECT_EQ(int64_t(arg(last, 1) - arg(last, 0)),
              p.buffers[G].offset - p.buffers[Y].offset);
  }
  b->synchronize();
}

/// On compute capability 9.0 (the fake's) gptc's kernels launch with
/// programmatic stream serialization (GPTC_PDL, on by default: each waits
/// for the one before inside, awaitPriorKernels), eagerly and captured;
/// GPTC_PDL=0 launches them plainly, and so does GPTC_PROFILE, whose
/// events time each kernel alone. The results are the same.
TEST(CudaBackendFake, KernelsLaunchProgrammaticallySerialized) {
  FreshCacheDir fresh;
  for (auto [name, value, expected] :
       {std::tuple<const char *, const char *, int>{"GPTC_PDL", "1", 1},
        {"GPTC_PDL", "0", 0},
        {"GPTC_PROFILE", "1", 0}}) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    auto b = fakeBackendWith(name, value);
    if (!b)
      GTEST_SKIP() << "the fake driver did not load";
    // (The fake's hooks exist once a backend loaded it.)
    auto serialized = hook<int (*)()>("gptcFakeSerializedLaunches");
    hook<void (*)(int)>("gptcFakeSetArgCount")(2);
    Program p = program(true);
    b->load(p);
    std::vector<float> a = random(24, 1), w = random(20, 2), w2 = random(30, 3);
    b->upload(A, a.data());
    b->upload(W, w.data());
    b->upload(W2, w2.data());
    serialized();
    // An eager run, then a captured one: one generated kernel each.
    for (int run = 0; run < 2; ++run) {
      b->run(p.functions[0], 0, p.functions[0].launches.size());
      b->synchronize();
      EXPECT_EQ(serialized(), expected) << "run " << run;
    }
    std::vector<float> y(36);
    b->download(Y, y.data());
    HostTensor t = gptc::exec::matmul(tensor({2, 3, 4}, a), tensor({4, 5}, w),
                                      false, false);
    expectNear(y, gptc::exec::matmul(t, tensor({6, 5}, w2), false, true).f32);
  }
}

/// Where the driver refuses a programmatic launch in a capture, the run it
/// was capturing runs eagerly with plain launches, one stderr line says
/// so, and the next run is captured with plain launches; every run's
/// results are right.
TEST(CudaBackendFake, RefusedProgrammaticCaptureFallsBackToPlainLaunches) {
  REQUIRE_FAKE(b);
  auto serialized = hook<int (*)()>("gptcFakeSerializedLaunches");
  auto refuse = hook<void (*)(bool)>("gptcFakeRefuseSerializedInCapture");
  Program p = program(true);
  b->load(p);
  std::vector<float> w = random(20, 2), w2 = random(30, 3);
  b->upload(W, w.data());
  b->upload(W2, w2.data());
  serialized();
  refuse(true);
  testing::internal::CaptureStderr();
  // Eager (programmatic), refused capture (plain, eager), captured plainly,
  // replayed.
  const int expected[] = {1, 0, 0, 0};
  for (int run = 0; run < 4; ++run) {
    std::vector<float> a = random(24, 30 + run);
    b->upload(A, a.data());
    b->run(p.functions[0], 0, p.functions[0].launches.size());
    b->synchronize();
    EXPECT_EQ(serialized(), expected[run]) << "run " << run;
    std::vector<float> y(36);
    b->download(Y, y.data());
    HostTensor t = gptc::exec::matmul(tensor({2, 3, 4}, a), tensor({4, 5}, w),
                                      false, false);
    expectNear(y, gptc::exec::matmul(t, tensor({6, 5}, w2), false, true).f32);
  }
  refuse(false);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("gptc: capturing forward with programmatic launches "
                     "failed (cannot launch "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("plain launches from now on (GPTC_PDL=0)"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("CUDA graph capture of"), std::string::npos) << err;
}

/// A weight gradient's GEMM beside the rest (planStreams): %0 x, %1 w
/// (parameters), %2 t2 = x·w, %3 g = t2ᵀ·x (a gradient, on the side stream:
/// t2's last read), %4 t3 = x·x, %5 t4 = t3·w, %6 y = t4·w (an output).
/// Planned with the side stream, t2 keeps its bytes until the join (the
/// end); `unplanned`: planned as if in order, so that t3 takes t2's bytes,
/// then given the side stream anyway. `rewritten`: t2 = t4·x is written
/// again after t4, and y = t2·w: the gradient joins before that launch.
Program sideStreamProgram(bool unplanned, bool rewritten = false) {
  Program p;
  p.meta["precision"] = "fp32";
  p.buffers = {buffer("x", DType::F32, {4, 4}, Role::Param),
               buffer("w", DType::F32, {4, 4}, Role::Param),
               buffer("t2", DType::F32, {4, 4}, Role::Temp),
               buffer("g", DType::F32, {4, 4}, Role::Grad),
               buffer("t3", DType::F32, {4, 4}, Role::Temp),
               buffer("t4", DType::F32, {4, 4}, Role::Temp),
               buffer("y", DType::F32, {4, 4}, Role::Output)};
  Function f;
  f.name = "grads";
  Launch weightGrad = launch("matmul", {2, 0}, {3});
  weightGrad.ints["transpose_a"] = 1;
  f.launches = {launch("matmul", {0, 1}, {2}), weightGrad,
                launch("matmul", {0, 0}, {4}), launch("matmul", {4, 1}, {5})};
  if (rewritten)
    f.launches.push_back(launch("matmul", {5, 0}, {2}));
  f.launches.push_back(launch("matmul", {rewritten ? 2 : 5, 1}, {6}));
  f.results = {3, 6};
  p.functions.push_back(f);
  if (unplanned) {
    planMemory(p);
    p.functions[0].launches[1].stream = 1;
    p.functions[0].launches[1].join = 5;
  } else {
    EXPECT_EQ(planStreams(p), 1);
    EXPECT_EQ(p.functions[0].launches[1].join, rewritten ? 4 : 5);
    planMemory(p);
  }
  return p;
}

/// The side stream's launches run late on the fake (it holds back the
/// least-priority stream's work until the compute stream waits for it), as
/// late as a GPU may run them: the weight gradient still reads t2 (whose
/// bytes the plan kept until the join), is joined before t2 is written
/// again, and before the results are read; eager runs, the captured run
/// and graph replays alike. The side stream's GEMMs have their own
/// cuBLASLt workspace.
TEST(CudaBackendFake, SideStreamLaunchesRunBesideTheRest) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto defer = hook<void (*)(int)>("gptcFakeDeferLowPriorityStreams");
  auto deferred = hook<int64_t (*)()>("gptcFakeDeferredWork");
  defer(1);
  for (auto [graphs, rewritten] :
       {std::pair<const char *, bool>{"1", false}, {"0", false}, {"1", true},
        {"0", true}}) {
    SCOPED_TRACE(std::string("GPTC_CUDA_GRAPH=") + graphs +
                 (rewritten ? ", t2 rewritten" : ""));
    auto b = fakeBackendWith("GPTC_CUDA_GRAPH", graphs);
    ASSERT_TRUE(b);
    Program p = sideStreamProgram(false, rewritten);
    b->load(p);
    EXPECT_EQ(b->bytesAllocated(), p.arenaBytes + 2 * (33 << 20));
    const Function &f = p.functions[0];
    std::vector<float> x = random(16, 1), w = random(16, 2);
    b->upload(1, w.data());
    const int64_t before = deferred();
    testing::internal::CaptureStderr();
    for (int run = 0; run < 4; ++run) {
      x = random(16, 20 + run);
      b->upload(0, x.data());
      b->run(f, 0, f.launches.size());
      std::vector<float> g(16), y(16);
      b->download(3, g.data());
      b->download(6, y.data());
      HostTensor xt = tensor({4, 4}, x), wt = tensor({4, 4}, w);
      HostTensor t2 = gptc::exec::matmul(xt, wt, false, false);
      expectNear(g, gptc::exec::matmul(t2, xt, true, false).f32);
      HostTensor t4 = gptc::exec::matmul(
          gptc::exec::matmul(xt, xt, false, false), wt, false, false);
      if (rewritten)
        t4 = gptc::exec::matmul(t4, xt, false, false); // t2 again
      expectNear(y, gptc::exec::matmul(t4, wt, false, false).f32);
    }
    b->synchronize();
    EXPECT_EQ(testing::internal::GetCapturedStderr().find("capture"),
              std::string::npos);
    // The first run is checked, in order; then each eager run defers the
    // gradient once, and with graphs the capture does.
    EXPECT_EQ(deferred() - before, graphs[0] == '1' ? 1 : 3);
  }
  defer(0);
}

/// A program whose stream plan does not keep a side launch's bytes (t3 was
/// placed over t2, which the weight gradient beside it reads) is refused at
/// load, in one line naming both launches.
TEST(CudaBackendFake, ABrokenStreamPlanIsRefused) {
  REQUIRE_FAKE(b);
  Program p = sideStreamProgram(true);
  ASSERT_EQ(p.buffers[4].offset, p.buffers[2].offset);
  expectLoadRefused(*b, p,
                    "grads launch 1 (matmul at fake.cpp:3) runs on the side "
                    "stream beside launch 2 (matmul), which shares its bytes: "
                    "the program's stream plan is broken (compile it again)");
  Program q = sideStreamProgram(false);
  q.functions[0].launches[2].stream = 1; // a generated kernel's place
  q.functions[0].launches[2].kernel = "gelu";
  q.functions[0].launches[2].join = 4;
  REQUIRE_FAKE(other);
  expectLoadRefused(*other, q,
                    "grads launch 2 (gelu at fake.cpp:4): only a GEMM or "
                    "sort_ids may run on the side stream (stream 1), joined "
                    "at a later launch or the end");
}

// A kernel launched with more than 48 KiB of dynamic shared memory (the
// atomic attention backward's 56,320 bytes) is opted in to it once, at
// load; more than the device allows is an error naming the kernel.
TEST(CudaBackendFake, DynamicSharedMemoryAbove48KiB) {
  REQUIRE_FAKE(b);
  Program p = program(true);
  p.functions[0].launches.back().sharedBytes = 56320;
  b->load(p);
  EXPECT_EQ(hook<int (*)(const char *)>("gptcFakeDynamicSharedOptIn")("k_gelu"),
            56320);
  auto launches = hook<int (*)()>("gptcFakeLaunchCount");
  int before = launches();
  b->run(p.functions[0], 0, p.functions[0].launches.size());
  b->synchronize();
  ASSERT_EQ(launches(), before + 1);
  EXPECT_EQ(hook<unsigned (*)(int)>("gptcFakeLaunchShared")(before), 56320u);

  p.functions[0].launches.back().sharedBytes = 232449;
  REQUIRE_FAKE(other);
  expectLoadRefused(*other, p,
                    "kernel k_gelu asks for 232449 bytes of shared memory; "
                    "Fake NVIDIA H100 80GB HBM3 allows 232448");
}

// The 48 KiB count static and dynamic shared memory together: GPT-2's
// layernorm gradients launch with exactly 48 KiB dynamic and have 16
// bytes static, and on an H100 every launch failed (CUDA_ERROR_INVALID_VALUE)
// until they were opted in. So does the fake; and past the device's most,
// the static bytes count too.
TEST(CudaBackendFake, StaticSharedMemoryCountsTowards48KiB) {
  {
    REQUIRE_FAKE(b);
    auto staticShared =
        hook<void (*)(const char *, int)>("gptcFakeStaticShared");
    Program p = program(true);
    p.functions[0].launches.back().sharedBytes = 48 * 1024;
    staticShared("k_gelu", 16);
    b->load(p);
    EXPECT_EQ(hook<int (*)(const char *)>("gptcFakeDynamicSharedOptIn")(
                  "k_gelu"),
              48 * 1024);
    b->run(p.functions[0], 0, p.functions[0].launches.size());
    b->synchronize();
  }
  {
    REQUIRE_FAKE(b);
    Program p = program(true);
    p.functions[0].launches.back().sharedBytes = 232448;
    expectLoadRefused(*b, p,
                      "kernel k_gelu asks for 232464 bytes of shared memory; "
                      "Fake NVIDIA H100 80GB HBM3 allows 232448");
    hook<void (*)(const char *, int)>("gptcFakeStaticShared")(nullptr, 0);
  }
}

// A launch with variants (--attention-*=auto): at load each candidate runs
// once and five times timed; launches with the same candidates share one
// timing; the fastest then runs with its own grid and shared memory; one
// stderr line says what was timed and chosen; the GEMMs' results are as
// without variants (the arena is zeroed again after the timing).
/// program(true) with k_gelu's launch labelled split, given two variants
/// (atomic: 1024 shared bytes, wgmma: 65536) and launched twice.
Program programWithVariants() {
  Program p = program(true);
  for (const char *name : {"k_gelu_atomic", "k_gelu_wgmma"}) {
    DeviceKernel k = p.kernels[0];
    k.name = name;
    p.kernels.push_back(k);
  }
  Launch &gelu = p.functions[0].launches.back();
  gelu.variant = "split";
  LaunchVariant atomic, wgmma;
  atomic.label = "atomic";
  atomic.deviceKernel = 1;
  atomic.grid[0] = 2;
  atomic.block[0] = 64;
  atomic.sharedBytes = 1024;
  wgmma.label = "wgmma";
  wgmma.deviceKernel = 2;
  wgmma.grid[0] = 3;
  wgmma.block[0] = 128;
  wgmma.sharedBytes = 65536;
  gelu.variants = {atomic, wgmma};
  p.functions[0].launches.push_back(gelu); // a second, the same candidates
  p.functions[0].launches.back().loc = "fake.cpp:again";
  return p;
}

TEST(CudaBackendFake, KernelVariantsAreTimedAndTheFastestRuns) {
  REQUIRE_FAKE(b);
  Program p = programWithVariants();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  kernelMs("k_gelu", 0.5f);
  kernelMs("k_gelu_atomic", 0.2f);
  kernelMs("k_gelu_wgmma", 0.35f);
  auto launches = hook<int (*)()>("gptcFakeLaunchCount");
  int before = launches();
  testing::internal::CaptureStderr();
  b->load(p);
  std::string err = testing::internal::GetCapturedStderr();
  kernelMs(nullptr, 0);
  EXPECT_EQ(err, "gptc: kernel variants timed at load for 2 launches: split "
                 "0.100 ms, atomic 0.040 ms, wgmma 0.070 ms; atomic "
                 "(k_gelu_atomic) runs\n");
  // Each candidate: a warm-up and five timed runs, for both launches once.
  EXPECT_EQ(launches() - before, 18);
  EXPECT_EQ(dynamicSharedBytes(p)[2], 65536u);
  EXPECT_EQ(hook<int (*)(const char *)>("gptcFakeDynamicSharedOptIn")(
                "k_gelu_wgmma"),
            65536);

  std::vector<float> a = random(24, 1), w = random(20, 2), w2 = random(30, 3);
  b->upload(A, a.data());
  b->upload(W, w.data());
  b->upload(W2, w2.data());
  before = launches();
  const Function &f = p.functions[0];
  b->run(f, 0, f.launches.size());
  b->synchronize();
  ASSERT_EQ(launches(), before + 2);
  auto name = hook<const char *(*)(int)>("gptcFakeLaunchName");
  auto shared = hook<unsigned (*)(int)>("gptcFakeLaunchShared");
  for (int i = before; i < before + 2; ++i) {
    EXPECT_EQ(std::string(name(i)), "k_gelu_atomic");
    EXPECT_EQ(shared(i), 1024u);
  }
  std::vector<float> t(30);
  b->download(T, t.data());
  expectNear(t, gptc::exec::matmul(tensor({2, 3, 4}, a), tensor({4, 5}, w),
                                   false, false)
                    .f32);
}

// A variant launched in clusters (the loss gradient's cluster forms:
// LaunchVariant::cluster) is timed and run in clusters of its size along
// x; where the device runs no cluster of that size
// (cuOccupancyMaxActiveClusters), the line says so and it is no candidate.
TEST(CudaBackendFake, ClusterVariantsRunInClustersWhereTheyFit) {
  REQUIRE_FAKE(plain); // (loads the fake, for its hooks)
  plain.reset();
  Program p = programWithVariants();
  for (Launch &l : p.functions[0].launches)
    if (!l.variants.empty())
      l.variants[0].cluster = 2; // atomic: 2 blocks, one cluster
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto clusterLaunches =
      hook<int (*)(unsigned *, unsigned *)>("gptcFakeClusterLaunches");
  auto activeClusters = hook<void (*)(int)>("gptcFakeActiveClusters");
  auto load = [&](CudaBackend &b) {
    kernelMs("k_gelu", 0.5f);
    kernelMs("k_gelu_atomic", 0.2f);
    kernelMs("k_gelu_wgmma", 0.35f);
    testing::internal::CaptureStderr();
    b.load(p);
    kernelMs(nullptr, 0);
    return testing::internal::GetCapturedStderr();
  };
  unsigned grid = 0, cluster = 0;
  {
    REQUIRE_FAKE(b);
    clusterLaunches(&grid, &cluster);
    EXPECT_EQ(load(*b), "gptc: kernel variants timed at load for 2 launches: "
                        "split 0.100 ms, atomic 0.040 ms, wgmma 0.070 ms; "
                        "atomic (k_gelu_atomic) runs\n");
    EXPECT_EQ(clusterLaunches(&grid, &cluster), 6); // a warm-up, five timed
    const Function &f = p.functions[0];
    b->run(f, 0, f.launches.size());
    b->synchronize();
    EXPECT_EQ(clusterLaunches(&grid, &cluster), 2);
    EXPECT_EQ(grid, 2u);
    EXPECT_EQ(cluster, 2u);
  }
  {
    REQUIRE_FAKE(b);
    activeClusters(0);
    const std::string err = load(*b);
    activeClusters(60);
    EXPECT_EQ(err, "gptc: kernel variants timed at load for 2 launches: "
                   "split 0.100 ms, atomic (not used: no cluster of 2 blocks "
                   "fits), wgmma 0.070 ms; wgmma (k_gelu_wgmma) runs\n");
    EXPECT_EQ(clusterLaunches(&grid, &cluster), 0);
  }
}

// An attention launch with variants has cuDNN's fused attention as one
// more candidate (GPTC_CUDNN, on by default); where cuDNN cannot take the
// launch (here: float32 operands), the line says why and the others are
// timed as ever. GPTC_CUDNN=0 offers none; GPTC_VARIANT=cudnn on such a
// launch is one error saying why; any other GPTC_CUDNN is one error too.
TEST(CudaBackendFake, CudnnIsACandidateOfAttentionLaunches) {
  Program p = programWithVariants();
  for (Launch &l : p.functions[0].launches)
    if (l.deviceKernel == 0)
      l.kernel = "flash_attention";
  auto timings = [&](std::unique_ptr<CudaBackend> b) {
    // (The fake is loaded with the first backend.)
    auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
    kernelMs("k_gelu", 0.5f);
    kernelMs("k_gelu_atomic", 0.2f);
    kernelMs("k_gelu_wgmma", 0.35f);
    testing::internal::CaptureStderr();
    b->load(p);
    kernelMs(nullptr, 0);
    return testing::internal::GetCapturedStderr();
  };
  {
    REQUIRE_FAKE(b);
    EXPECT_EQ(timings(std::move(b)),
              "gptc: kernel variants timed at load for 2 launches: split "
              "0.100 ms, atomic 0.040 ms, wgmma 0.070 ms, cudnn (not used: "
              "cuDNN's fused attention is bf16 here, not f32); atomic "
              "(k_gelu_atomic) runs\n");
  }
  {
    FreshCacheDir fresh;
    auto b = fakeBackendWith("GPTC_CUDNN", "0");
    ASSERT_TRUE(b);
    EXPECT_EQ(timings(std::move(b)),
              "gptc: kernel variants timed at load for 2 launches: split "
              "0.100 ms, atomic 0.040 ms, wgmma 0.070 ms; atomic "
              "(k_gelu_atomic) runs\n");
  }
  {
    FreshCacheDir fresh;
    auto b = fakeBackendWith("GPTC_VARIANT", "cudnn");
    ASSERT_TRUE(b);
    expectLoadRefused(
        *b, p,
        "GPTC_VARIANT=cudnn: forward launch 3: flash_attention "
        "(cuDNN, cudnn) at fake.cpp:8: cuDNN's fused attention is "
        "bf16 here, not f32");
  }
  ScopedEnv sometimes("GPTC_CUDNN", "sometimes");
  try {
    createCudaBackend();
    ADD_FAILURE() << "GPTC_CUDNN=sometimes was taken";
  } catch (const DeviceError &e) {
    EXPECT_NE(std::string(e.what()).find("GPTC_CUDNN"), std::string::npos)
        << e.what();
  }
}

#ifdef GPTC_FAKE_CUDNN
/// A hook of the fake cuDNN (FakeCudnn.cpp), loaded by the backend.
template <typename F> F cudnnHook(const char *name) {
  void *lib = dlopen(GPTC_FAKE_CUDNN, RTLD_NOW | RTLD_NOLOAD);
  return lib ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

/// gpt.flash_attention_qkv and its gradient at B=2, T=16, two heads of 8,
/// causal, in one function, each launch with a variant (so that cuDNN is
/// a candidate); the buffers in this order. With `rowDot`, the gradient's
/// delta is a temp that a gpt.attention_row_dot launch between them
/// writes, as gpt-autodiff has it.
enum : int { QKV, OUT, LSE, DOUT, DELTA, DQKV };
Program attentionProgram(bool rowDot = false) {
  Program p;
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("qkv", DType::BF16, {2, 16, 48}, Role::Param),
               buffer("out", DType::BF16, {2, 16, 16}, Role::Output),
               buffer("lse", DType::F32, {2, 2, 16}, Role::Output),
               buffer("dout", DType::BF16, {2, 16, 16}, Role::Param),
               buffer("delta", DType::F32, {2, 2, 16},
                      rowDot ? Role::Temp : Role::Param),
               buffer("dqkv", DType::BF16, {2, 16, 48}, Role::Output)};
  Launch fwd = launch("flash_attention_qkv", {QKV}, {OUT, LSE});
  Launch bwd =
      launch("flash_attention_qkv_grad", {QKV, OUT, LSE, DOUT, DELTA}, {DQKV});
  Launch dot = launch("attention_row_dot", {OUT, DOUT}, {DELTA});
  dot.ints["num_heads"] = 2;
  for (Launch *l : {&fwd, &bwd}) {
    l->ints["num_heads"] = 2;
    l->ints["causal"] = 1;
    l->floats["scale"] = 1 / std::sqrt(8.0);
    l->deviceKernel = int(p.kernels.size());
    l->variant = "own";
    LaunchVariant other;
    other.label = "other";
    other.deviceKernel = l->deviceKernel;
    l->variants = {other};
    DeviceKernel k;
    k.name = "k_" + l->kernel;
    k.arch = "sm_90a";
    k.cubin = {'F', 'A', 'K', 'E', 'C', 'U', 'B', 'I', 'N'};
    p.kernels.push_back(k);
  }
  Function f;
  f.name = "forward";
  f.launches = {fwd, bwd};
  if (rowDot) {
    dot.deviceKernel = int(p.kernels.size());
    DeviceKernel k = p.kernels.back();
    k.name = "k_attention_row_dot";
    p.kernels.push_back(k);
    f.launches.insert(f.launches.begin() + 1, dot);
  }
  p.functions.push_back(f);
  planMemory(p);
  return p;
}

std::vector<float> downloaded(CudaBackend &b, const Program &p, int id) {
  const Buffer &buf = p.buffers[size_t(id)];
  std::vector<uint8_t> bytes(size_t(buf.bytes()));
  b.download(id, bytes.data());
  std::vector<float> v(size_t(buf.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = float(
        elementValue(&bytes[i * size_t(dtypeBytes(buf.dtype))], buf.dtype));
  return v;
}

void expectWithin(const std::vector<float> &got, const std::vector<float> &want,
                  double tolerance, const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tolerance) && bad++ == 0)
      first = i;
  EXPECT_EQ(bad, 0u) << what << ", the first at " << first << ": " << got[first]
                     << " against " << want[first];
}

// Where cuDNN runs an attention launch (here the fake cuDNN: the graph the
// backend builds, run on the host), it reads the launch's operands where
// the backend binds them (q, k and v in place in the packed rows, dq, dk
// and dv likewise, gptc's workspace after cuDNN's) and writes the
// executor's attention: forward and backward, dq straight and by float32
// sums, run eagerly, captured into a CUDA graph and replayed.
TEST(CudaBackendFake, CudnnRunsTheLaunchesOnTheirOperands) {
  for (const char *policy : {"1", "all"}) {
    SCOPED_TRACE(std::string("GPTC_CUDNN=") + policy);
    FreshCacheDir fresh;
    ScopedEnv cudnn("GPTC_CUDNN", policy);
    auto b = fakeBackendWith("GPTC_VARIANT", std::string(policy) == "all"
                                                 ? "cudnn-dq-sums,cudnn"
                                                 : "cudnn");
    if (!b)
      GTEST_SKIP() << "the fake driver did not load";
    Program p = attentionProgram();
    testing::internal::CaptureStderr();
    b->load(p);
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_EQ(said, std::string(policy) == "all"
                        ? "gptc: GPTC_VARIANT: cudnn (cuDNN) runs for 1 "
                          "launch\ngptc: GPTC_VARIANT: cudnn-dq-sums (cuDNN) "
                          "runs for 1 launch\n"
                        : "gptc: GPTC_VARIANT: cudnn (cuDNN) runs for 1 "
                          "launch\ngptc: GPTC_VARIANT: cudnn (cuDNN) runs "
                          "for 1 launch\n");
    auto runs = cudnnHook<int (*)()>("gptcFakeCudnnRuns");
    auto runError = cudnnHook<const char *(*)()>("gptcFakeCudnnRunError");
    ASSERT_TRUE(runs && runError);
    const int before = runs();

    const HostTensor qkv = tensor({2, 16, 48}, random(2 * 16 * 48, 7)),
                     dout = tensor({2, 16, 16}, random(2 * 16 * 16, 8));
    b->upload(QKV, encodeFloats(qkv.f32, DType::BF16).data());
    b->upload(DOUT, encodeFloats(dout.f32, DType::BF16).data());
    const Function &f = p.functions[0];
    for (int run = 0; run < 3; ++run) { // eager, captured, replayed
      SCOPED_TRACE("run " + std::to_string(run));
      for (int id : {OUT, DQKV})
        b->upload(id,
                  std::vector<uint8_t>(size_t(p.buffers[id].bytes())).data());
      b->run(f, 0, f.launches.size());
      b->synchronize();
      // The executor from the same bf16 operands.
      HostTensor q = tensor({2, 16, 48}, downloaded(*b, p, QKV));
      const std::vector<HostTensor> want =
          gptc::exec::flashAttentionQKV(q, 2, float(1 / std::sqrt(8.0)), true);
      expectWithin(downloaded(*b, p, OUT), want[0].f32, 2e-2, "out");
      expectWithin(downloaded(*b, p, LSE), want[1].f32, 1e-4, "lse");
      const HostTensor wantDqkv = gptc::exec::flashAttentionQKVGrad(
          q, tensor({2, 16, 16}, downloaded(*b, p, OUT)),
          tensor({2, 2, 16}, downloaded(*b, p, LSE)),
          tensor({2, 16, 16}, downloaded(*b, p, DOUT)), 2,
          float(1 / std::sqrt(8.0)), true)[0];
      expectWithin(downloaded(*b, p, DQKV), wantDqkv.f32, 0.05, "dqkv");
    }
    EXPECT_EQ(runs() - before, 6); // two launches, three runs
    EXPECT_STREQ(runError(), "");
  }
}

// Where cuDNN runs the attention backward, the row dot launch before it is
// skipped in a range that holds the backward (cuDNN sums dout·out itself;
// the load says so), and runs where it runs alone, as --check-kernels
// runs each launch. The gradient is the executor's either way.
TEST(CudaBackendFake, TheRowDotCudnnIgnoresIsSkipped) {
  FreshCacheDir fresh;
  auto b = fakeBackendWith("GPTC_VARIANT", "cudnn");
  if (!b)
    GTEST_SKIP() << "the fake driver did not load";
  hook<void (*)(int)>("gptcFakeSetArgCount")(2);
  Program p = attentionProgram(true);
  testing::internal::CaptureStderr();
  b->load(p);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("gptc: 1 attention_row_dot launch skipped: only "
                      "cuDNN's launches read their results, and cuDNN "
                      "computes them itself\n"),
            std::string::npos)
      << said;
  const HostTensor qkv = tensor({2, 16, 48}, random(2 * 16 * 48, 9)),
                   dout = tensor({2, 16, 16}, random(2 * 16 * 16, 10));
  b->upload(QKV, encodeFloats(qkv.f32, DType::BF16).data());
  b->upload(DOUT, encodeFloats(dout.f32, DType::BF16).data());
  auto launches = hook<int (*)()>("gptcFakeLaunchCount");
  const Function &f = p.functions[0];
  int before = launches();
  b->run(f, 0, f.launches.size());
  b->synchronize();
  EXPECT_EQ(launches() - before, 0); // cuDNN twice, the row dot skipped
  HostTensor q = tensor({2, 16, 48}, downloaded(*b, p, QKV));
  const HostTensor want = gptc::exec::flashAttentionQKVGrad(
      q, tensor({2, 16, 16}, downloaded(*b, p, OUT)),
      tensor({2, 2, 16}, downloaded(*b, p, LSE)),
      tensor({2, 16, 16}, downloaded(*b, p, DOUT)), 2,
      float(1 / std::sqrt(8.0)), true)[0];
  expectWithin(downloaded(*b, p, DQKV), want.f32, 0.05, "dqkv");
  before = launches();
  b->run(f, 1, 2);
  b->synchronize();
  ASSERT_EQ(launches() - before, 1);
  EXPECT_STREQ(hook<const char *(*)(int)>("gptcFakeLaunchName")(before),
               "k_attention_row_dot");
}

// Timed at load, cuDNN's runs are compared with the launch's own kernel
// like any candidate's: here the own kernels (the fake's, which compute
// nothing) leave other values than cuDNN's attention, so cuDNN is not
// used, and the lines say why.
TEST(CudaBackendFake, CudnnThatDisagreesIsNotUsed) {
  REQUIRE_FAKE(b);
  hook<void (*)(int)>("gptcFakeSetArgCount")(3);
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  kernelMs("k_flash_attention_qkv", 0.5f);
  kernelMs("k_flash_attention_qkv_grad", 0.5f);
  Program p = attentionProgram();
  testing::internal::CaptureStderr();
  b->load(p);
  const std::string said = testing::internal::GetCapturedStderr();
  kernelMs(nullptr, 0);
  for (const char *kernel :
       {"k_flash_attention_qkv)", "k_flash_attention_qkv_grad)"})
    EXPECT_NE(said.find(std::string("; own (") + kernel + " runs"),
              std::string::npos)
        << said;
  size_t dropped = 0;
  for (size_t at = 0; (at = said.find(" ms, cudnn 0.100 ms (result 0 off by",
                                      at)) != std::string::npos;
       ++at)
    ++dropped;
  EXPECT_EQ(dropped, 2u) << said;
}
#endif

// gptc's own attention kernels as the fake runs them below: the executor's
// on attentionProgram's bf16 operands, the backward reading the row dot
// from delta (in4), as gptc's kernels do.
HostTensor onDevice(uint64_t at, std::vector<int64_t> shape, DType t) {
  HostTensor h = HostTensor::floats(std::move(shape));
  const auto *bytes = reinterpret_cast<const uint8_t *>(at);
  for (size_t i = 0; i < h.f32.size(); ++i)
    h.f32[i] = float(elementValue(bytes + i * size_t(dtypeBytes(t)), t));
  return h;
}
void toDevice(uint64_t at, const HostTensor &h, DType t) {
  const std::vector<uint8_t> bytes = encodeFloats(h.f32, t);
  std::memcpy(reinterpret_cast<void *>(at), bytes.data(), bytes.size());
}
void ownAttentionForward(const uint64_t *args) {
  const std::vector<HostTensor> r =
      gptc::exec::flashAttentionQKV(onDevice(args[0], {2, 16, 48}, DType::BF16),
                                    2, float(1 / std::sqrt(8.0)), true);
  toDevice(args[1], r[0], DType::BF16);
  toDevice(args[2], r[1], DType::F32);
}
void ownAttentionBackward(const uint64_t *args) {
  const HostTensor delta = onDevice(args[4], {2, 2, 16}, DType::F32);
  const HostTensor dqkv = gptc::exec::flashAttentionQKVGrad(
      onDevice(args[0], {2, 16, 48}, DType::BF16),
      onDevice(args[1], {2, 16, 16}, DType::BF16),
      onDevice(args[2], {2, 2, 16}, DType::F32),
      onDevice(args[3], {2, 16, 16}, DType::BF16), 2, float(1 / std::sqrt(8.0)),
      true, {}, &delta)[0];
  toDevice(args[5], dqkv, DType::BF16);
}

// The timing at load gives the backward's trial operands a delta that is
// the CPU backend's row dot of the trial out and dout (agreeRowDot), which
// cuDNN's graph computes for itself: so cuDNN, faster, agrees with a
// launch's own kernel that reads delta, and runs. (With a random delta, as
// the other trial operands are, the two could never agree.)
TEST(CudaBackendFake, CudnnAgreesOnTheTrialRowDot) {
  FreshCacheDir fresh;
  ScopedEnv cudnn("GPTC_CUDNN", "1");
  auto b = fakeBackendWith("GPTC_VARIANT", "time");
  if (!b)
    GTEST_SKIP() << "the fake driver did not load";
  auto onHost = hook<void (*)(const char *, int, void (*)(const uint64_t *))>(
      "gptcFakeKernelRunsOnHost");
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  onHost("k_flash_attention_qkv", 3, ownAttentionForward);
  onHost("k_flash_attention_qkv_grad", 6, ownAttentionBackward);
  kernelMs("k_flash_attention_qkv", 1.0f); // (timed as 0.2 ms a run)
  kernelMs("k_flash_attention_qkv_grad", 1.0f);
  kernelMs("cudnn", 0.5f);
  Program p = attentionProgram();
  testing::internal::CaptureStderr();
  b->load(p);
  const std::string said = testing::internal::GetCapturedStderr();
  kernelMs(nullptr, 0);
  onHost(nullptr, 0, nullptr);
  EXPECT_EQ(said.find("off by"), std::string::npos) << said;
  size_t runs = 0;
  for (size_t at = 0;
       (at = said.find("; cudnn (cuDNN) runs\n", at)) != std::string::npos;
       ++at)
    ++runs;
  EXPECT_EQ(runs, 2u) << said; // the forward and the backward
}

// A variant whose results are not its launch's own kernel's on the same
// operands (within 2% of the largest, finite where those are) is not used,
// however fast, and the line says why.
TEST(CudaBackendFake, AVariantThatComputesSomethingElseIsNotUsed) {
  REQUIRE_FAKE(b);
  Program p = programWithVariants();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto scribbles = hook<void (*)(const char *)>("gptcFakeKernelScribbles");
  kernelMs("k_gelu", 0.5f);
  kernelMs("k_gelu_atomic", 0.35f);
  kernelMs("k_gelu_wgmma", 0.2f);
  scribbles("k_gelu_wgmma"); // NaN into g, which the own kernel leaves finite
  testing::internal::CaptureStderr();
  b->load(p);
  std::string err = testing::internal::GetCapturedStderr();
  kernelMs(nullptr, 0);
  scribbles(nullptr);
  EXPECT_EQ(err, "gptc: kernel variants timed at load for 2 launches: split "
                 "0.100 ms, atomic 0.070 ms, wgmma 0.040 ms (result 0 not "
                 "finite where its own kernel's is: not used); atomic "
                 "(k_gelu_atomic) runs\n");
}

// The choice among a set of candidates is kept in the kernel cache: the
// next load of the program on the same kind of GPU runs it untimed, and
// says so with the times it was chosen by, however the kernels would time
// now; GPTC_VARIANT=time times them again and keeps the new choice; a kept
// file that names no candidate is timed over.
TEST(CudaBackendFake, AVariantChoiceIsKeptForTheNextRun) {
  REQUIRE_FAKE(b);
  Program p = programWithVariants();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto launches = hook<int (*)()>("gptcFakeLaunchCount");
  const std::string timedAtomic =
      "gptc: kernel variants timed at load for 2 launches: split 0.100 ms, "
      "atomic 0.040 ms, wgmma 0.070 ms; atomic (k_gelu_atomic) runs\n";
  const std::string timedWgmma =
      "gptc: kernel variants timed at load for 2 launches: split 0.100 ms, "
      "atomic 0.080 ms, wgmma 0.020 ms; wgmma (k_gelu_wgmma) runs\n";
  const std::string kept =
      "gptc: kernel variants timed at load of an earlier run (kept in the "
      "cache; GPTC_VARIANT=time times them again) for 2 launches: ";
  auto load = [&](const char *variant) {
    if (variant)
      setenv("GPTC_VARIANT", variant, 1);
    auto fresh = fakeBackend();
    unsetenv("GPTC_VARIANT");
    testing::internal::CaptureStderr();
    fresh->load(p);
    return testing::internal::GetCapturedStderr();
  };
  kernelMs("k_gelu", 0.5f);
  kernelMs("k_gelu_atomic", 0.2f);
  kernelMs("k_gelu_wgmma", 0.35f);
  EXPECT_EQ(load(nullptr), timedAtomic);
  // wgmma is the fastest now, but the kept choice runs, untimed.
  kernelMs("k_gelu_atomic", 0.4f);
  kernelMs("k_gelu_wgmma", 0.1f);
  int before = launches();
  EXPECT_EQ(load(nullptr), kept + "split 0.100 ms, atomic 0.040 ms, wgmma "
                                  "0.070 ms; atomic (k_gelu_atomic) runs\n");
  EXPECT_EQ(launches(), before);
  EXPECT_EQ(load("time"), timedWgmma);
  EXPECT_EQ(load(nullptr), kept + "split 0.100 ms, atomic 0.080 ms, wgmma "
                                  "0.020 ms; wgmma (k_gelu_wgmma) runs\n");
  // A label no candidate has (another build's file): timed again.
  EXPECT_EQ(overwriteKeptChoices("variants", "mma3\nsplit 1.000 ms\n"), 1u);
  EXPECT_EQ(load(nullptr), timedWgmma);
  // Another GPU (or another build of the kernels) is another set: timed.
  p.kernels[2].source += "\n// changed";
  EXPECT_EQ(load(nullptr), timedWgmma);
  kernelMs(nullptr, 0);
}

// A launch that writes over its input (the cross entropy's gradient over
// the logits): each candidate's results are those of one run from the
// same operands, the input put back before each, so a variant that
// computes what the own kernel does is used, and one that does not is not.
TEST(CudaBackendFake, AnInPlaceLaunchsCandidatesStartFromTheSameOperands) {
  REQUIRE_FAKE(b); // (loads the fake driver, which has the hooks)
  Program p = programWithVariants();
  // g written over y: the same bytes.
  p.buffers[G].offset = p.buffers[Y].offset;
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto increments = hook<void (*)(const char *)>("gptcFakeKernelIncrements");
  for (const char *name : {"k_gelu", "k_gelu_atomic", "k_gelu_wgmma"})
    increments(name); // g = y + 1: in place, y + 1 after one run, + 6 after six
  kernelMs("k_gelu", 0.5f);
  kernelMs("k_gelu_atomic", 0.35f);
  kernelMs("k_gelu_wgmma", 0.2f);
  {
    testing::internal::CaptureStderr();
    b->load(p);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "gptc: kernel variants timed at load for 2 launches: split "
              "0.100 ms, atomic 0.070 ms, wgmma 0.040 ms; wgmma "
              "(k_gelu_wgmma) runs\n");
  }
  // One that adds 1 to something else differs, in place or not.
  increments(nullptr);
  increments("k_gelu");
  increments("k_gelu_atomic");
  {
    REQUIRE_FAKE(other);
    testing::internal::CaptureStderr();
    other->load(p);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("wgmma 0.040 ms (result 0 "), std::string::npos) << err;
    EXPECT_NE(err.find("not used); atomic (k_gelu_atomic) runs\n"),
              std::string::npos)
        << err;
  }
  increments(nullptr);
  kernelMs(nullptr, 0);
}

// The candidates are timed and compared on varied operands, not on one
// repeated value: a variant that reads the wrong element (as a register
// mix-up in ptxas once made the wgmma forward multiply by the wrong
// fragments) computes the same as its own kernel on operands that are all
// alike, and must not be used.
TEST(CudaBackendFake, AVariantReadingTheWrongElementIsNotUsed) {
  REQUIRE_FAKE(b);
  Program p = programWithVariants();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto increments = hook<void (*)(const char *)>("gptcFakeKernelIncrements");
  auto incrementsTheNext =
      hook<void (*)(const char *)>("gptcFakeKernelIncrementsTheNext");
  increments("k_gelu");         // g[0] = y[0] + 1
  increments("k_gelu_atomic");  // the same
  incrementsTheNext("k_gelu_wgmma"); // g[0] = y[1] + 1, and the fastest
  kernelMs("k_gelu", 0.5f);
  kernelMs("k_gelu_atomic", 0.35f);
  kernelMs("k_gelu_wgmma", 0.2f);
  testing::internal::CaptureStderr();
  b->load(p);
  std::string err = testing::internal::GetCapturedStderr();
  increments(nullptr);
  incrementsTheNext(nullptr);
  kernelMs(nullptr, 0);
  EXPECT_NE(err.find("wgmma 0.040 ms (result 0 "), std::string::npos) << err;
  EXPECT_NE(err.find("not used); atomic (k_gelu_atomic) runs\n"),
            std::string::npos)
      << err;
}

// GPTC_VARIANT=L: the candidate labelled L runs wherever a launch has one,
// untimed (the first label listed that a launch has); a label no launch has
// is one error line that lists the program's.
TEST(CudaBackendFake, GptcVariantPicksOneUntimed) {
  REQUIRE_FAKE(plain);
  plain.reset();
  Program p = programWithVariants();
  auto launches = hook<int (*)()>("gptcFakeLaunchCount");
  auto name = hook<const char *(*)(int)>("gptcFakeLaunchName");
  auto shared = hook<unsigned (*)(int)>("gptcFakeLaunchShared");
  for (const char *value : {"wgmma", "wgmma,atomic"}) {
    SCOPED_TRACE(value);
    auto b = fakeBackendWith("GPTC_VARIANT", value);
    ASSERT_TRUE(b);
    int before = launches();
    testing::internal::CaptureStderr();
    b->load(p);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "gptc: GPTC_VARIANT: wgmma (k_gelu_wgmma) runs for 2 launches\n");
    EXPECT_EQ(launches(), before) << "nothing timed";
    const Function &f = p.functions[0];
    b->run(f, 0, f.launches.size());
    b->synchronize();
    ASSERT_EQ(launches(), before + 2);
    EXPECT_EQ(std::string(name(before + 1)), "k_gelu_wgmma");
    EXPECT_EQ(shared(before + 1), 65536u);
  }
  auto b = fakeBackendWith("GPTC_VARIANT", "split");
  ASSERT_TRUE(b);
  testing::internal::CaptureStderr();
  b->load(p);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "gptc: GPTC_VARIANT: split (k_gelu) runs for 2 launches\n");
  // own: every launch's own kernel, whatever its label; on a program
  // without variants, nothing to say.
  for (const char *value : {"own", "own,wgmma"}) { // (the first listed wins)
    auto own = fakeBackendWith("GPTC_VARIANT", value);
    ASSERT_TRUE(own);
    testing::internal::CaptureStderr();
    own->load(p);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              "gptc: GPTC_VARIANT: split (k_gelu) runs for 2 launches\n")
        << value;
  }
  {
    auto own = fakeBackendWith("GPTC_VARIANT", "own");
    ASSERT_TRUE(own);
    testing::internal::CaptureStderr();
    own->load(program(true));
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  }
  // Nor does a program compiled without auto have any.
  auto none = fakeBackendWith("GPTC_VARIANT", "split");
  ASSERT_TRUE(none);
  Program noVariants = program(true);
  try {
    none->load(noVariants);
    ADD_FAILURE() << "GPTC_VARIANT=split was taken without variants";
  } catch (const DeviceError &e) {
    EXPECT_EQ(std::string(e.what()),
              "GPTC_VARIANT: no launch has a variant 'split' (this program's: "
              "none)");
  }
  // (A program whose forward is not auto has no mma variant either.)
  auto wrong = fakeBackendWith("GPTC_VARIANT", "split,mma");
  ASSERT_TRUE(wrong);
  expectLoadRefused(*wrong, p,
                    "GPTC_VARIANT: no launch has a variant 'mma' (this "
                    "program's: atomic, split, wgmma)");
}

// GPTC_VARIANT=-L: the variants labelled L are left out of the timing at
// load (a kernel that fails or hangs on some GPU need not end the others'
// timing); a launch's own kernel, every timing's reference, stays even if
// labelled L; an L no launch has is the same error as for GPTC_VARIANT=L.
TEST(CudaBackendFake, GptcVariantLeavesOneOutOfTheTiming) {
  REQUIRE_FAKE(plain);
  plain.reset();
  Program p = programWithVariants();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  kernelMs("k_gelu", 0.5f);
  kernelMs("k_gelu_atomic", 0.2f);
  kernelMs("k_gelu_wgmma", 0.35f);
  auto load = [&](const char *variant) {
    auto b = fakeBackendWith("GPTC_VARIANT", variant);
    EXPECT_TRUE(b);
    testing::internal::CaptureStderr();
    b->load(p);
    return testing::internal::GetCapturedStderr();
  };
  EXPECT_EQ(load("-atomic"),
            "gptc: kernel variants timed at load for 2 launches: split 0.100 "
            "ms, wgmma 0.070 ms; wgmma (k_gelu_wgmma) runs\n");
  EXPECT_EQ(load("-atomic,-wgmma"),
            "gptc: kernel variants timed at load for 2 launches: split 0.100 "
            "ms; split (k_gelu) runs\n");
  EXPECT_EQ(load("-split,time"),
            "gptc: kernel variants timed at load for 2 launches: split 0.100 "
            "ms, atomic 0.040 ms, wgmma 0.070 ms; atomic (k_gelu_atomic) "
            "runs\n");
  // With a label to run, that one runs untimed.
  EXPECT_EQ(load("-atomic,wgmma"),
            "gptc: GPTC_VARIANT: wgmma (k_gelu_wgmma) runs for 2 launches\n");
  // A label to leave out that no launch has leaves nothing out (a script
  // may leave a variant out of every program it runs, some without it).
  EXPECT_EQ(load("-mma,time"),
            "gptc: kernel variants timed at load for 2 launches: split 0.100 "
            "ms, atomic 0.040 ms, wgmma 0.070 ms; atomic (k_gelu_atomic) "
            "runs\n");
  kernelMs(nullptr, 0);
  // A label to run that no launch has is an error.
  auto wrong = fakeBackendWith("GPTC_VARIANT", "mma");
  ASSERT_TRUE(wrong);
  expectLoadRefused(*wrong, p,
                    "GPTC_VARIANT: no launch has a variant 'mma' (this "
                    "program's: atomic, split, wgmma)");
  // Nor does a program without variants refuse one to leave out.
  Program noVariants = program(true);
  auto none = fakeBackendWith("GPTC_VARIANT", "-cluster4,time");
  ASSERT_TRUE(none);
  testing::internal::CaptureStderr();
  none->load(noVariants);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(CudaBackendFake, LargeUploadsGoThroughStagingInChunks) {
  REQUIRE_FAKE(b);
  Program p = program(false);
  b->load(p);
  std::vector<float> big = random(10'000'000, 7), back(10'000'000);
  b->upload(BIG, big.data());
  b->download(BIG, back.data());
  EXPECT_EQ(big, back);
  for (int i = 0; i < 5; ++i) { // the ring wraps around
    b->upload(BIG, big.data());
    b->upload(A, random(24, 3).data());
  }
  b->download(BIG, back.data());
  EXPECT_EQ(big, back);
}

/// downloadLater copies a buffer as it stands when asked (the value an
/// upload gives it later is not what arrives), delivers to the host when the
/// host next waits (synchronize or download), in order, and goes on past a
/// full mailbox (it waits first) and past one larger than the mailbox (an
/// ordinary download).
TEST(CudaBackendFake, LaterDownloadsKeepTheValueOfTheirTime) {
  REQUIRE_FAKE(b);
  Program p = program(false);
  b->load(p);
  const int kCopies = 3000; // 96 KB of A's 96 bytes, over 64 KiB
  std::vector<std::vector<float>> sent(kCopies), got(kCopies);
  for (int i = 0; i < kCopies; ++i) {
    sent[i] = random(24, uint64_t(100 + i));
    got[i].assign(24, -1.0f);
    b->upload(A, sent[i].data());
    b->downloadLater(A, got[i].data());
  }
  b->upload(A, random(24, 1).data()); // after the last copy: not seen
  b->synchronize();
  for (int i = 0; i < kCopies; ++i)
    ASSERT_EQ(got[i], sent[i]) << "copy " << i;

  std::vector<float> later(24, -1.0f), now(24);
  b->upload(A, sent[0].data());
  b->downloadLater(A, later.data());
  b->download(A, now.data()); // delivers the queued one too
  EXPECT_EQ(later, sent[0]);
  EXPECT_EQ(now, sent[0]);

  std::vector<float> big = random(10'000'000, 9), back(10'000'000, -1.0f);
  b->upload(BIG, big.data());
  b->downloadLater(BIG, back.data());
  b->synchronize();
  EXPECT_EQ(back, big);
}

TEST(CudaBackendFake, ErrorsNameTheLaunch) {
  {
    // A fault while a variant is timed at load names it, and says how not
    // to time it (or any).
    REQUIRE_FAKE(b);
    Program p = programWithVariants();
    hook<void (*)(int)>("gptcFakeFailSync")(1); // the second candidate's
    try {
      b->load(p);
      FAIL() << "no error";
    } catch (const DeviceError &e) {
      EXPECT_NE(std::string(e.what()).find(
                    "CUDA_ERROR_ILLEGAL_ADDRESS (a fake error) at or before "
                    "forward launch 3: gelu "
                    "(k_gelu_atomic, atomic) at fake.cpp:8, timed at load; "
                    "GPTC_VARIANT=time,-atomic times the others without it; "
                    "GPTC_VARIANT=own runs each launch's own kernel without "
                    "timing the others"),
                std::string::npos)
          << e.what();
    }
  }
  {
    REQUIRE_FAKE(b);
    Program p = program(true);
    b->load(p);
    hook<void (*)(int)>("gptcFakeFailSync")(1); // after launch 1
    try {
      b->run(p.functions[0], 0, 4);
      FAIL() << "no error";
    } catch (const DeviceError &e) {
      std::string m = e.what();
      EXPECT_NE(m.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << m;
      EXPECT_NE(m.find("forward launch 1: matmul (cuBLASLt) at fake.cpp:4"),
                std::string::npos)
          << m;
      EXPECT_EQ(m.find('\n'), std::string::npos);
    }
  }
  {
    REQUIRE_FAKE(b);
    Program p = program(true);
    b->load(p);
    hook<void (*)(int)>("gptcFakeFailLaunch")(0);
    try {
      b->run(p.functions[0], 0, 4);
      FAIL() << "no error";
    } catch (const DeviceError &e) {
      EXPECT_NE(std::string(e.what()).find(
                    "cannot launch forward launch 3: gelu (k_gelu) at fake.cpp:8"),
                std::string::npos)
          << e.what();
    }
  }
  {
    // A fault found later names the last work queued: here a graph.
    REQUIRE_FAKE(b);
    Program p = program(true);
    b->load(p);
    for (int i = 0; i < 3; ++i)
      b->run(p.functions[0], 0, 4);
    hook<void (*)(int)>("gptcFakeFailSync")(0);
    try {
      b->synchronize();
      FAIL() << "no error";
    } catch (const DeviceError &e) {
      EXPECT_NE(std::string(e.what()).find(
                    "at or before forward (a CUDA graph of launches 0 to 3); "
                    "rerun with GPTC_CUDA_SYNC=1"),
                std::string::npos)
          << e.what();
    }
  }
  {
    REQUIRE_FAKE(b);
    Program p = program(false);
    p.functions[0].launches.push_back(launch("softmax", {Y}, {G}));
    b->load(p);
    try {
      b->run(p.functions[0], 3, 4);
      FAIL() << "no error";
    } catch (const DeviceError &e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA kernel for gpt.softmax at "
                                           "fake.cpp:8"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(CudaBackendFake, Profile) {
  auto b = fakeBackendWith("GPTC_PROFILE");
  if (!b)
    GTEST_SKIP() << "the fake driver did not load";
  hook<void (*)(int)>("gptcFakeSetArgCount")(2);
  Program p = program(true);
  b->load(p);
  EXPECT_TRUE(b->profiling());
  for (int i = 0; i < 3; ++i)
    b->run(p.functions[0], 0, 4);
  std::string report = b->profileReport();
  // The first run is not timed, the other two take 0.5 ms a launch.
  EXPECT_NE(report.find("1.000        2     500.00"), std::string::npos) << report;
  EXPECT_NE(report.find("k_gelu (gelu at fake.cpp:8)"), std::string::npos)
      << report;
  EXPECT_NE(report.find("cuBLASLt 3x5x8x4 bf16 tB"), std::string::npos) << report;
  EXPECT_NE(report.find("all 4 kernels"), std::string::npos) << report;
  // Each launch against its floor (launchCost at the device's peaks): the
  // gelu moves 2 · 36 floats, 288 bytes, 0.09 ns at 3352 GB/s.
  EXPECT_NE(report.find("floor us"), std::string::npos) << report;
  EXPECT_NE(report.find("floors: 3352 GB/s DRAM (device attributes), 989 "
                        "TFLOP/s dense bf16 (Fake NVIDIA H100 80GB HBM3)"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("      0.00     0.0%  k_gelu"), std::string::npos)
      << report;
  // Time by kind (three GEMM shapes, one generated kernel), over two runs.
  EXPECT_NE(report.find(" 75.0% kind: GEMM\n"), std::string::npos) << report;
  EXPECT_NE(report.find("  0.0% kind: attention\n"), std::string::npos) << report;
  EXPECT_NE(report.find(" 25.0% kind: other\n"), std::string::npos) << report;
  EXPECT_NE(report.find("timed runs: forward 2\n"), std::string::npos) << report;
  b->resetProfile();
  EXPECT_EQ(b->profileReport().find("k_gelu"), std::string::npos);
  EXPECT_NE(b->profileReport().find("timed runs: none"), std::string::npos);
}

/// Gradient accumulation as the lowering makes it: grads_accumulate's
/// launches write the micro-batch's gradients into temps (here one
/// multi_tensor_elementwise launch of six arguments, as the add has, stands
/// for them: the fake driver takes one argument count), and its last launch
/// adds them to the Grad buffers in place. Eager, then captured into a CUDA
/// graph, then replayed, each launch getting the grads' and temps' device
/// addresses.
TEST(CudaBackendFake, AccumulationFunctionRunsAndReplays) {
  REQUIRE_FAKE(b);
  enum : int { G0, G1, T0, T1 };
  Program p;
  p.meta["precision"] = "fp32";
  p.buffers = {buffer("w0", DType::F32, {4, 3}, Role::Grad),
               buffer("w1", DType::F32, {5}, Role::Grad),
               buffer("w0.acc", DType::F32, {4, 3}, Role::Temp),
               buffer("w1.acc", DType::F32, {5}, Role::Temp)};
  auto multi = [](std::vector<int> in, std::vector<int> out, int kernel) {
    Launch l = launch("multi_tensor_elementwise", std::move(in),
                      std::move(out));
    l.ints["num_tensors"] = 2;
    l.deviceKernel = kernel;
    l.grid[0] = 2;
    l.block[0] = 256;
    return l;
  };
  Function accumulate;
  accumulate.name = "grads_accumulate";
  accumulate.launches = {multi({G0, G1, T0, T1}, {T0, T1}, 0),
                         multi({G0, G1, T0, T1}, {G0, G1}, 1)};
  p.functions = {accumulate};
  for (const char *name : {"k_grads", "k_accumulate"}) {
    DeviceKernel k;
    k.name = name;
    k.arch = "sm_90a";
    k.cubin = {'F', 'A', 'K', 'E', 'C', 'U', 'B', 'I', 'N'};
    p.kernels.push_back(k);
  }
  planMemory(p);
  b->load(p);
  auto launches = hook<int (*)()>("gptcFakeLaunchCount");
  auto name = hook<const char *(*)(int)>("gptcFakeLaunchName");
  auto arg = hook<uint64_t (*)(int, int)>("gptcFakeLaunchArg");
  auto setArgs = hook<void (*)(int)>("gptcFakeSetArgCount");
  auto offset = [&](int id) { return int64_t(p.buffers[id].offset); };
  for (int run = 0; run < 3; ++run) {
    setArgs(6);
    int before = launches();
    b->run(p.functions[0], 0, 2);
    b->synchronize();
    ASSERT_EQ(launches(), before + 2) << "run " << run;
    EXPECT_STREQ(name(before), "k_grads");
    EXPECT_STREQ(name(before + 1), "k_accumulate");
    // g0, g1, t0, t1, then the outputs: k_grads' t0, t1, k_accumulate's
    // g0, g1 (in place: the same bytes).
    const int grads[] = {G0, G1, T0, T1, T0, T1};
    const int add[] = {G0, G1, T0, T1, G0, G1};
    for (int a = 1; a < 6; ++a) {
      EXPECT_EQ(int64_t(arg(before, a) - arg(before, 0)),
                offset(grads[a]) - offset(G0));
      EXPECT_EQ(int64_t(arg(before + 1, a) - arg(before + 1, 0)),
                offset(add[a]) - offset(G0));
    }
  }
  setArgs(2);
}

TEST(CudaBackendFake, KernelCheckAgainstCpu) {
  REQUIRE_FAKE(b);
  Program p = program(false);
  auto cpu = makeCpuBackend();
  std::ostringstream out;
  EXPECT_EQ(checkKernels(p, *b, *cpu, out), 0) << out.str();
  EXPECT_NE(out.str().find("Fake NVIDIA H100 80GB HBM3 against cpu"),
            std::string::npos)
      << out.str();
}

/// A function of matmul_epilogue launches for the tests below.
Function forwardEpilogues(Program &p) {
  enum : int { EX, EW1, EBIAS, EW2, EH, EPRE, EY2, EBIASL, EHL, EPREL };
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("x", DType::BF16, {2, 3, 8}, Role::Param),
               buffer("w1", DType::BF16, {8, 16}, Role::Param),
               buffer("bias", DType::F32, {16}, Role::Param),
               buffer("w2", DType::BF16, {16, 8}, Role::Param),
               buffer("h", DType::F32, {2, 3, 16}, Role::Output),
               buffer("pre", DType::F32, {2, 3, 16}, Role::Output),
               buffer("y2", DType::F32, {2, 3, 16}, Role::Output),
               buffer("bias_l", DType::BF16, {16}, Role::Param),
               buffer("h_l", DType::BF16, {2, 3, 16}, Role::Output),
               buffer("pre_l", DType::BF16, {2, 3, 16}, Role::Output)};
  Function f;
  f.name = "forward";
  Launch gelu = launch("matmul_epilogue", {EX, EW1, EBIAS}, {EH, EPRE});
  gelu.ints["gelu"] = 1;
  // All bf16: D, aux and bias of one type, as cuBLASLt keeps them.
  Launch narrow = launch("matmul_epilogue", {EX, EW1, EBIASL}, {EHL, EPREL});
  narrow.ints["gelu"] = 1;
  f.launches = {gelu,
                launch("matmul_epilogue", {EX, EW2, EBIAS}, {EY2}, true),
                narrow};
  return f;
}

/// gpt.matmul_epilogue through cuBLASLt's epilogues: GELU_AUX_BIAS (bf16
/// operands; float32 result, pre-activation and bias, or all bf16) and
/// BIAS (transpose_b). The
/// fake applies the epilogue only as the descriptor says (EPILOGUE,
/// BIAS_POINTER, EPILOGUE_AUX_POINTER/LD), so a descriptor the backend did
/// not set up fails the check against the CPU backend.
TEST(CudaBackendFake, MatmulEpiloguesAgainstCpu) {
  REQUIRE_FAKE(b);
  expectMatchesCpu(forwardEpilogues, *b, {"matmul_epilogue"});
}

/// A bias of another type than D is not cuBLASLt's (outside FP8): planning
/// the launch says so, naming it, rather than leaving it to cuBLASLt.
TEST(CudaBackendFake, BiasOfAnotherTypeThanD) {
  REQUIRE_FAKE(b);
  enum : int { EX, EW, EBIAS, EY };
  Program p;
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("x", DType::BF16, {2, 3, 8}, Role::Param),
               buffer("w", DType::BF16, {8, 16}, Role::Param),
               buffer("bias", DType::F32, {16}, Role::Param),
               buffer("y", DType::BF16, {2, 3, 16}, Role::Output)};
  Function f;
  f.name = "forward";
  f.launches = {launch("matmul_epilogue", {EX, EW, EBIAS}, {EY})};
  expectCheckRefused(p, f, *b,
                     "matmul_epilogue (cuBLASLt) at fake.cpp:3: the bias "
                     "(gradient) is f32, D is bf16");
}

/// A function of matmul_gelu_grad and matmul_bias_grad launches.
Function backwardEpilogues(Program &p) {
  enum : int { DY, W, PRE, DP, DB, DP2, X, G, DW, DB2, PREL, DPL, DBL };
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("dy", DType::BF16, {2, 3, 8}, Role::Param),
               buffer("w", DType::BF16, {16, 8}, Role::Param),
               buffer("pre", DType::F32, {2, 3, 16}, Role::Param),
               buffer("dp", DType::F32, {2, 3, 16}, Role::Output),
               buffer("db", DType::F32, {16}, Role::Output),
               buffer("dp2", DType::F32, {2, 3, 16}, Role::Output),
               // 200 rows: the fallback's column sums take 4 chunks.
               buffer("x", DType::BF16, {200, 8}, Role::Param),
               buffer("g", DType::BF16, {200, 16}, Role::Param),
               buffer("dw", DType::F32, {8, 16}, Role::Output),
               buffer("db2", DType::F32, {16}, Role::Output),
               buffer("pre_l", DType::BF16, {2, 3, 16}, Role::Param),
               buffer("dp_l", DType::BF16, {2, 3, 16}, Role::Output),
               buffer("db_l", DType::BF16, {16}, Role::Output)};
  Function f;
  f.name = "grads";
  Launch weightGrad = launch("matmul_bias_grad", {X, G}, {DW, DB2});
  weightGrad.ints["transpose_a"] = 1;
  f.launches = {launch("matmul_gelu_grad", {DY, W, PRE}, {DP, DB}, true),
                launch("matmul_gelu_grad", {DY, W, PRE}, {DP2}, true),
                launch("matmul_gelu_grad", {DY, W, PREL}, {DPL, DBL}, true),
                weightGrad};
  return f;
}

/// The backward's epilogues: gpt.matmul_gelu_grad as DGELU_BGRAD and DGELU
/// (the pre-activation is the aux input, the bias gradient D's row sums)
/// and gpt.matmul_bias_grad as BGRADA (the bias gradient sums gpt's b, which
/// is cuBLASLt's A). The fake reduces only what the descriptor points at,
/// so a wrong epilogue, operand or pointer fails the check.
TEST(CudaBackendFake, BackwardEpiloguesAgainstCpu) {
  REQUIRE_FAKE(b);
  expectMatchesCpu(backwardEpilogues, *b,
                   {"matmul_gelu_grad", "matmul_bias_grad"});
}

/// grads_accumulate's weight gradients: a matmul and a matmul_bias_grad
/// with `accumulate`, each adding its product to its float32 gradient in
/// place (beta = 1; the check fills the Grad buffers with the same random
/// sums on both sides, so a GEMM that wrote the product alone fails), the
/// bias gradient written, not added.
Function accumulatingGemms(Program &p) {
  enum : int { X, DY, GW, GW2, DB };
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("x", DType::BF16, {200, 8}, Role::Param),
               buffer("dy", DType::BF16, {200, 16}, Role::Param),
               buffer("w", DType::F32, {8, 16}, Role::Grad),
               buffer("w2", DType::F32, {8, 16}, Role::Grad),
               buffer("b2", DType::F32, {16}, Role::Output)};
  Function f;
  f.name = "grads_accumulate";
  Launch plain = launch("matmul", {X, DY, GW}, {GW});
  Launch biased = launch("matmul_bias_grad", {X, DY, GW2}, {GW2, DB});
  for (Launch *l : {&plain, &biased}) {
    l->ints["transpose_a"] = 1;
    l->ints["accumulate"] = 1;
  }
  f.launches = {plain, biased};
  return f;
}

TEST(CudaBackendFake, AccumulatingGemmsAgainstCpu) {
  REQUIRE_FAKE(b);
  expectMatchesCpu(accumulatingGemms, *b, {"matmul", "matmul_bias_grad"});
}

/// A matmul whose result holds fewer rows than its product (what the
/// forty-sixth session's tied table gradient wrote, wte's 50257 of 50304
/// rows, until the forty-seventh timed that GEMM 1.7 times slower) is
/// refused at load, in one line: no lowering makes one.
TEST(CudaBackendFake, GemmOfFewerRowsThanItsProductIsRefused) {
  REQUIRE_FAKE(b);
  enum : int { X, DL, GW };
  Program p;
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("x", DType::BF16, {200, 16}, Role::Param),
               buffer("dlogits", DType::BF16, {200, 64}, Role::Param),
               buffer("wte", DType::F32, {50, 16}, Role::Grad)};
  Function f;
  f.name = "grads";
  Launch l = launch("matmul", {DL, X}, {GW});
  l.ints["transpose_a"] = 1;
  f.launches = {l};
  expectCheckRefused(p, std::move(f), *b, "matmul shapes do not agree");
}

/// An accumulating GEMM must add to its own result: anything else is
/// refused at load, in one line.
TEST(CudaBackendFake, AccumulatingGemmOfAnotherBufferIsRefused) {
  REQUIRE_FAKE(b);
  Program p;
  Function f = accumulatingGemms(p);
  f.launches[0].inputs.back() = 3; // w2's gradient, not its own
  expectCheckRefused(p, f, *b,
                     "an accumulating matmul takes its own result as its "
                     "last operand");
  Program q;
  Function g = accumulatingGemms(q);
  g.launches[0].inputs.pop_back();
  expectCheckRefused(q, g, *fakeBackend(),
                     "a matmul takes 2 operands and gives 1 result, and its "
                     "result's old value");
}

/// Every rt::GemmFallback kernel for f32 and bf16, as the emitter adds them
/// (the fake loads any cubin and runs these by name).
/// p carries the GemmFallback kernels `kinds` of type t (the fake's
/// stand-ins for an sm_90a program's).
void addFakeGemmKernels(Program &p, std::initializer_list<GemmFallback> kinds,
                        DType t = DType::BF16) {
  for (GemmFallback kind : kinds) {
    DeviceKernel k;
    k.name = gemmFallbackKernel(kind, t);
    k.arch = "sm_90a";
    k.cubin = {'F', 'A', 'K', 'E'};
    p.kernels.push_back(k);
  }
}

void addFallbackKernels(Program &p) {
  for (DType t : {DType::F32, DType::BF16})
    addFakeGemmKernels(p,
                       {GemmFallback::Bias, GemmFallback::GeluGrad,
                        GemmFallback::Gelu, GemmFallback::ColumnPartials,
                        GemmFallback::ColumnSums},
                       t);
}

/// The names of the kernels the fake launched from launch `from` on.
std::vector<std::string> launchedSince(int from) {
  std::vector<std::string> names;
  int n = hook<int (*)()>("gptcFakeLaunchCount")();
  for (int i = from; i < n; ++i)
    names.push_back(hook<const char *(*)(int)>("gptcFakeLaunchName")(i));
  return names;
}

/// The epilogue of each GEMM the fake ran from the `from`th on.
std::vector<int> gemmEpiloguesSince(int from) {
  std::vector<int> epilogues;
  for (int i = from; i < hook<int (*)()>("gptcFakeGemmCount")(); ++i)
    epilogues.push_back(hook<int (*)(int)>("gptcFakeGemmEpilogue")(i));
  return epilogues;
}

bool contains(const std::vector<std::string> &names, const std::string &name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// Checks `f` of `p`, with every fallback kernel added, on `device`
/// against the CPU backend (no failures expected); the kernels it launched.
std::vector<std::string> checkWithFallbacks(Program &p, Function f,
                                            Backend &device) {
  int from = hook<int (*)()>("gptcFakeLaunchCount")();
  addFallbackKernels(p);
  auto [failures, out] = checkOneFunction(p, std::move(f), device);
  EXPECT_EQ(failures, 0) << out;
  return launchedSince(from);
}

/// The fake's cuBLASLt refuses the given epilogues until the end of scope.
struct Refusing {
  explicit Refusing(std::initializer_list<cublasLtEpilogue_t> epilogues) {
    for (cublasLtEpilogue_t e : epilogues)
      hook<void (*)(int)>("gptcFakeRefuseEpilogue")(int(e));
  }
  ~Refusing() { hook<void (*)(int)>("gptcFakeRefuseEpilogue")(-1); }
};

/// A cuBLASLt without the fused epilogues: every fused GEMM runs as a plain
/// GEMM and the rt::GemmFallback kernels after it, and still matches the
/// CPU backend (the fake runs those kernels from their arguments, so a
/// wrong pointer, size or order fails the check).
TEST(CudaBackendFake, RefusedEpiloguesRunAsFallbackKernels) {
  REQUIRE_FAKE(b);
  Refusing refusing({CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS,
                     CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                     CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA});
  Program forward;
  auto names = checkWithFallbacks(forward, forwardEpilogues(forward), *b);
  EXPECT_TRUE(contains(names, "gemm_fallback_bias_f32"));
  EXPECT_TRUE(contains(names, "gemm_fallback_bias_bf16"));

  b.reset(); // one program per backend
  b = fakeBackend();
  ASSERT_TRUE(b);
  Program backward;
  names = checkWithFallbacks(backward, backwardEpilogues(backward), *b);
  // GELU's derivative alone where there is no bias gradient (dp2), else in
  // the column sums' pass.
  for (const char *kernel :
       {"gemm_fallback_gelu_grad_f32", "gemm_fallback_column_partials_f32",
        "gemm_fallback_column_partials_bf16", "gemm_fallback_column_sums_f32",
        "gemm_fallback_column_sums_bf16"})
    EXPECT_TRUE(contains(names, kernel)) << kernel;
  EXPECT_FALSE(contains(names, "gemm_fallback_gelu_grad_bf16"));
}

/// A bias gradient's column sums at GPT-2's 16,384 rows (BGRADA refused):
/// chunks of 128 rows for 768 columns, 512 for 2,304 (partialRows: the
/// fewest blocks of 256 columns, at most 512), each chunk's partials summed
/// into the CPU backend's bias gradient.
TEST(CudaBackendFake, ColumnSumChunksFillTheDeviceOnce) {
  REQUIRE_FAKE(b);
  Refusing refusing({CUBLASLT_EPILOGUE_BGRADA});
  for (int64_t cols : {768, 2304}) {
    SCOPED_TRACE(std::to_string(cols) + " columns");
    b.reset(); // one program per backend
    b = fakeBackend();
    ASSERT_TRUE(b);
    Program p;
    p.meta["precision"] = "bf16";
    p.buffers = {buffer("x", DType::BF16, {16384, 8}, Role::Param),
                 buffer("g", DType::BF16, {16384, cols}, Role::Param),
                 buffer("dw", DType::F32, {8, cols}, Role::Output),
                 buffer("db", DType::F32, {cols}, Role::Output)};
    Function f;
    f.name = "grads";
    Launch weightGrad = launch("matmul_bias_grad", {0, 1}, {2, 3});
    weightGrad.ints["transpose_a"] = 1;
    f.launches = {weightGrad};
    const int from = hook<int (*)()>("gptcFakeLaunchCount")();
    std::vector<std::string> names = checkWithFallbacks(p, f, *b);
    auto at = std::find(names.begin(), names.end(),
                        "gemm_fallback_column_partials_bf16");
    ASSERT_NE(at, names.end());
    const int i = from + int(at - names.begin());
    auto arg = hook<uint64_t (*)(int, int)>("gptcFakeLaunchArg");
    EXPECT_EQ(arg(i, 3), 16384u); // rows
    EXPECT_EQ(arg(i, 5), cols == 768 ? 128u : 512u); // rows a chunk
  }
}

/// Only the GELU epilogues refused: those GEMMs keep cuBLASLt's BIAS, which
/// writes the pre-activation (into the result where none is kept), and
/// gptc's GELU pass runs after it; the results match the CPU backend. The
/// GEMM without GELU is untouched.
TEST(CudaBackendFake, RefusedGeluRunsAsBiasAndGptcGelu) {
  REQUIRE_FAKE(b);
  Refusing refusing(
      {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS});
  Program p;
  const int from = hook<int (*)()>("gptcFakeGemmCount")();
  auto names = checkWithFallbacks(p, forwardEpilogues(p), *b);
  EXPECT_TRUE(contains(names, "gemm_fallback_gelu_f32"));
  EXPECT_TRUE(contains(names, "gemm_fallback_gelu_bf16"));
  EXPECT_FALSE(contains(names, "gemm_fallback_bias_f32"));
  EXPECT_FALSE(contains(names, "gemm_fallback_bias_bf16"));
  for (int epilogue : gemmEpiloguesSince(from))
    EXPECT_EQ(epilogue, int(CUBLASLT_EPILOGUE_BIAS));

  // GELU without its pre-activation kept: in place over the result.
  b.reset();
  b = fakeBackend();
  ASSERT_TRUE(b);
  Program q;
  Function f = forwardEpilogues(q);
  f.launches[0].outputs.resize(1);
  names = checkWithFallbacks(q, std::move(f), *b);
  EXPECT_TRUE(contains(names, "gemm_fallback_gelu_f32"));
}

/// By default GELU's derivative with a bias gradient runs as a plain GEMM
/// and one column-sums pass that applies the derivative too, even where
/// cuBLASLt has DGELU_BGRAD; without a bias gradient, cuBLASLt's DGELU. No
/// stderr line: nothing was refused.
TEST(CudaBackendFake, DgeluWithBiasGradientRunsAsGptcKernels) {
  REQUIRE_FAKE(b);
  Program p;
  testing::internal::CaptureStderr();
  auto names = checkWithFallbacks(p, backwardEpilogues(p), *b);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(names, "gemm_fallback_column_partials_f32"));
  EXPECT_TRUE(contains(names, "gemm_fallback_column_partials_bf16"));
  EXPECT_FALSE(contains(names, "gemm_fallback_gelu_grad_f32"));
  EXPECT_EQ(err.find("refused"), std::string::npos) << err;
}

/// GPTC_GEMM_DGELU=cublaslt: cuBLASLt's epilogues do it all (the fake's
/// cuBLASLt has every one), so no kernel runs after the GEMMs.
TEST(CudaBackendFake, DgeluInCublasLtOnRequest) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto b = fakeBackendWith("GPTC_GEMM_DGELU", "cublaslt");
  ASSERT_TRUE(b);
  Program p;
  auto names = checkWithFallbacks(p, backwardEpilogues(p), *b);
  for (const std::string &name : names)
    EXPECT_EQ(name.rfind("gemm_fallback_", 0), std::string::npos) << name;
}

/// An environment switch with a value it does not take (a typo) is one
/// error naming the switch and its values, not quietly the default; empty
/// is unset.
TEST(CudaBackendFake, SwitchValuesAreChecked) {
  REQUIRE_FAKE(plain);
  plain.reset();
  for (auto [name, value, says] :
       {std::tuple<const char *, const char *, const char *>{
            "GPTC_GEMM_DGELU", "cublas",
            "GPTC_GEMM_DGELU=cublas: expected gptc or cublaslt"},
        {"GPTC_GEMM_TUNE", "yes",
         "GPTC_GEMM_TUNE=yes: expected 1 or 0 or time"},
        {"GPTC_CUDA_GRAPH", "off", "GPTC_CUDA_GRAPH=off: expected 1 or 0"},
        {"GPTC_PDL", "yes", "GPTC_PDL=yes: expected 1 or 0"},
        {"GPTC_GEMM_OWN", "only",
         "GPTC_GEMM_OWN=only: expected 1 or 0 or narrow or wide or paired or "
         "unpaired"},
        {"GPTC_VARIANT", "split,,atomic",
         "GPTC_VARIANT=split,,atomic: expected labels separated by commas "
         "(or own, time, or -label)"},
        {"GPTC_GEMM_CHUNK_BYTES", "12MiB",
         "GPTC_GEMM_CHUNK_BYTES=12MiB: expected byte counts separated by "
         "commas (0: no row-chunked GEMMs)"}}) {
    try {
      ScopedEnv env(name, value);
      createCudaBackend();
      ADD_FAILURE() << name << "=" << value << " was taken";
    } catch (const DeviceError &e) {
      EXPECT_EQ(std::string(e.what()), says);
    }
    EXPECT_TRUE(fakeBackendWith(name, "")) << name << " empty";
  }
}

/// Only DGELU_BGRAD refused (with GPTC_GEMM_DGELU=cublaslt): the GEMM keeps
/// DGELU and only the bias gradient runs after it.
TEST(CudaBackendFake, RefusedBiasGradientKeepsDgelu) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto b = fakeBackendWith("GPTC_GEMM_DGELU", "cublaslt");
  ASSERT_TRUE(b);
  Refusing refusing({CUBLASLT_EPILOGUE_DGELU_BGRAD});
  Program p;
  auto names = checkWithFallbacks(p, backwardEpilogues(p), *b);
  EXPECT_TRUE(contains(names, "gemm_fallback_column_sums_f32"));
  EXPECT_FALSE(contains(names, "gemm_fallback_gelu_grad_f32"));
  EXPECT_FALSE(contains(names, "gemm_fallback_gelu_grad_bf16"));
}

/// GPTC_GEMM_FALLBACK=1 runs every fused GEMM through the fallback kernels,
/// on a cuBLASLt that has every epilogue (to check them on a GPU).
TEST(CudaBackendFake, ForcedFallbackAgainstCpu) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto b = fakeBackendWith("GPTC_GEMM_FALLBACK");
  ASSERT_TRUE(b);
  Program p;
  auto names = checkWithFallbacks(p, backwardEpilogues(p), *b);
  EXPECT_TRUE(contains(names, "gemm_fallback_gelu_grad_f32"));
  EXPECT_TRUE(contains(names, "gemm_fallback_column_partials_bf16"));
}

/// GPTC_GEMM_TUNE=1: at load every GEMM shape runs with each of the
/// heuristic's candidates (the fake offers three; its timer makes the third
/// the fastest), the fastest is kept, one stderr line gives the totals, and
/// the results still match the CPU backend. GPTC_GEMM_TUNE=0: the first
/// choice.
TEST(CudaBackendFake, GemmTuningKeepsTheFastestAlgorithm) {
  REQUIRE_FAKE(plain);
  auto lastAlgo = hook<int (*)()>("gptcFakeLastAlgo");
  expectMatchesCpu(forwardEpilogues, *plain, {"matmul_epilogue"});
  EXPECT_EQ(lastAlgo(), 0);
  plain.reset();
  auto b = fakeBackendWith("GPTC_GEMM_TUNE");
  ASSERT_TRUE(b);
  Program p;
  testing::internal::CaptureStderr();
  auto [failures, out] = checkOneFunction(p, forwardEpilogues(p), *b);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(failures, 0) << out;
  EXPECT_EQ(lastAlgo(), 2);
  // The fake times a whole interval (five runs) at 0.5 ms with the first
  // choice, 0.3 ms with the third: 0.1 and 0.06 ms a GEMM.
  EXPECT_NE(err.find("gptc: GPTC_GEMM_TUNE: up to 32 cuBLASLt algorithms "
                     "timed for each of "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(" changed (0 of the 0 with other ways to their "
                     "epilogue took another); all "),
            std::string::npos)
      << err;
  int gemms = 0;
  for (const Launch &l : p.functions[0].launches)
    gemms += isGemm(l.kernel);
  char totals[128];
  std::snprintf(totals, sizeof(totals),
                "once: %.3f ms with the heuristic's first choice, %.3f ms "
                "tuned",
                0.1 * gemms, 0.06 * gemms);
  EXPECT_NE(err.find(totals), std::string::npos) << err;
  // Every shape kept the third of the fake's three candidates.
  EXPECT_NE(err.find("gptc: GPTC_GEMM_TUNE: the kept algorithms' places in "
                     "the heuristic's lists: 3 ("),
            std::string::npos)
      << err;
}

/// The function `make` builds with every fallback kernel, loaded on a
/// backend made with GPTC_GEMM_TUNE=`tune` (nullptr: unset) and run once:
/// what load wrote to stderr, and each GEMM's epilogue in the run (and in
/// `launched`, if given, the fallback kernels it ran).
std::pair<std::string, std::vector<int>>
loadAndRun(Function (*make)(Program &), const char *tune,
           std::vector<std::string> *launched = nullptr) {
  Program p;
  Function f = make(p);
  addFallbackKernels(p);
  p.functions.push_back(std::move(f));
  planMemory(p);
  auto b = fakeBackendWith("GPTC_GEMM_TUNE", tune);
  if (!b)
    return {};
  testing::internal::CaptureStderr();
  b->load(p);
  std::string err = testing::internal::GetCapturedStderr();
  const int from = hook<int (*)()>("gptcFakeGemmCount")(),
            launchesFrom = hook<int (*)()>("gptcFakeLaunchCount")();
  b->run(p.functions[0], 0, p.functions[0].launches.size());
  b->synchronize();
  if (launched)
    *launched = launchedSince(launchesFrom);
  return {err, gemmEpiloguesSince(from)};
}

/// loadAndRun of backwardEpilogues. Its four GEMMs: the GELU gradient with
/// an f32 bias gradient, without one, with a bf16 one; the weight gradient.
std::pair<std::string, std::vector<int>> loadAndRunBackward(const char *tune) {
  return loadAndRun(backwardEpilogues, tune);
}

/// Tuning's stderr line says that `took` of the `of` GEMM shapes with other
/// ways to their epilogue took another.
void expectOtherWaysTook(const std::string &err, const std::string &took,
                         int of) {
  EXPECT_NE(err.find("(" + took + " of the " + std::to_string(of) +
                     " with other ways to their epilogue took another)"),
            std::string::npos)
      << err;
}

/// `make`'s function loaded again, taking the kept tuning choice untimed
/// (GPTC_GEMM_TUNE=1), and checked against the CPU backend.
void expectKeptChoiceMatchesCpu(Function (*make)(Program &)) {
  auto b = fakeBackendWith("GPTC_GEMM_TUNE", "1");
  ASSERT_TRUE(b);
  Program p;
  checkWithFallbacks(p, make(p), *b);
}

/// Tuning also times the other ways to a GELU derivative's or a bias
/// gradient's epilogue and keeps the fastest: for a GELU derivative with a
/// bias gradient, gptc's pass after a plain GEMM (the default way),
/// cuBLASLt's DGELU_BGRAD, or cuBLASLt's DGELU and gptc's column sums; for
/// a GELU derivative without one, cuBLASLt's DGELU (the default) or a
/// plain GEMM and gptc's pass; for a weight gradient, cuBLASLt's BGRADA
/// (the default) or a plain GEMM and gptc's column sums. All four shapes
/// have other ways (the GELU gradients with f32 and with bf16 bias
/// gradients are two). The fake makes one way faster or slower at a time;
/// each run after load takes the chosen ways, and the results match the
/// CPU backend whatever was chosen.
TEST(CudaBackendFake, GemmTuningPicksTheFasterEpilogue) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto epilogueMs = hook<void (*)(int, float)>("gptcFakeEpilogueMs");
  const int kDefault = CUBLASLT_EPILOGUE_DEFAULT,
            kDgelu = CUBLASLT_EPILOGUE_DGELU,
            kDgeluBgrad = CUBLASLT_EPILOGUE_DGELU_BGRAD,
            kBgradA = CUBLASLT_EPILOGUE_BGRADA;
  struct Case {
    const char *faster;
    std::vector<std::pair<int, float>> ms; // extra ms an epilogue takes
    const char *took;                      // "(N of the 4 ... took another)"
    std::vector<int> run;                  // each GEMM's epilogue in the run
  };
  for (const Case &c :
       {Case{"DGELU_BGRAD", {{kDgeluBgrad, -0.3f}, {kBgradA, 0.3f}}, "3",
             {kDgeluBgrad, kDgelu, kDgeluBgrad, kDefault}},
        Case{"the default ways", {{kDgeluBgrad, 0.3f}, {kBgradA, -0.3f}}, "0",
             {kDefault, kDgelu, kDefault, kBgradA}},
        Case{"DGELU", {{kDgelu, -0.3f}}, "2",
             {kDgelu, kDgelu, kDgelu, kBgradA}},
        Case{"gptc's GELU derivative", {{kDgelu, 0.3f}}, "1",
             {kDefault, kDefault, kDefault, kBgradA}}}) {
    SCOPED_TRACE(std::string(c.faster) + " faster");
    for (auto [epilogue, ms] : c.ms)
      epilogueMs(epilogue, ms);
    // (time: the earlier case's choice is in the cache.)
    auto [err, run] = loadAndRunBackward("time");
    epilogueMs(-1, 0.0f);
    expectOtherWaysTook(err, c.took, 4);
    EXPECT_EQ(run, c.run);
    expectKeptChoiceMatchesCpu(backwardEpilogues);
  }
}

/// Tuning's agreement check on accumulating GEMMs (grads_accumulate's,
/// beta = 1: the result is also an operand). Each way must start from the
/// same sums: where the check ran the second way on the sums the first had
/// already added to, every other way differed by one product and was never
/// used (on the H200, the forty-seventh session: "DEFAULT + gptc 0.138
/// (result 0 off by 64.6, of at most 65.2: not used)" against BGRADA's
/// 0.147). With BGRADA made slower, a plain GEMM and gptc's column sums
/// are kept, and the run matches the CPU backend.
TEST(CudaBackendFake, GemmTuningChecksAccumulatingWaysFromTheSameSums) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto epilogueMs = hook<void (*)(int, float)>("gptcFakeEpilogueMs");
  const int kDefault = CUBLASLT_EPILOGUE_DEFAULT,
            kBgradA = CUBLASLT_EPILOGUE_BGRADA;
  epilogueMs(kBgradA, 0.3f);
  auto [err, run] = loadAndRun(accumulatingGemms, "time");
  epilogueMs(-1, 0.0f);
  EXPECT_EQ(err.find("not used"), std::string::npos) << err;
  expectOtherWaysTook(err, "1", 1);
  EXPECT_EQ(run, (std::vector<int>{kDefault, kDefault}));
  expectKeptChoiceMatchesCpu(accumulatingGemms);
}

/// Tuning also times GELU's epilogue both ways: cuBLASLt's GELU_AUX_BIAS
/// (the default way), or its BIAS into the pre-activation and gptc's GELU
/// pass. forwardEpilogues has two GELU GEMMs (f32 and bf16 results) and a
/// plain BIAS one with no other way. The fake makes one way faster at a
/// time; the run after load takes the chosen ways, and the results match
/// the CPU backend whatever was chosen.
TEST(CudaBackendFake, GemmTuningPicksTheFasterGeluWay) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto epilogueMs = hook<void (*)(int, float)>("gptcFakeEpilogueMs");
  const int kBias = CUBLASLT_EPILOGUE_BIAS,
            kGeluAux = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  struct Case {
    float geluAuxMs;    // extra ms GELU_AUX_BIAS takes
    const char *took;   // "(N of the 2 ... took another)"
    std::vector<int> run; // each GEMM's epilogue in the run
    bool gptcGelu;        // gptc's GELU pass ran
  };
  for (const Case &c : {Case{-0.3f, "0", {kGeluAux, kBias, kGeluAux}, false},
                        Case{0.3f, "2", {kBias, kBias, kBias}, true}}) {
    SCOPED_TRACE(c.geluAuxMs);
    epilogueMs(kGeluAux, c.geluAuxMs);
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(forwardEpilogues, "time", &names);
    epilogueMs(-1, 0.0f);
    expectOtherWaysTook(err, c.took, 2);
    EXPECT_EQ(run, c.run);
    EXPECT_EQ(contains(names, "gemm_fallback_gelu_f32"), c.gptcGelu);
    EXPECT_EQ(contains(names, "gemm_fallback_gelu_bf16"), c.gptcGelu);
    expectKeptChoiceMatchesCpu(forwardEpilogues);
  }
}

/// c_fc's forward and backward at gptc's wgmma GEMMs' tile sizes, all
/// bf16: x [256, 64] by w [64, 256], GELU with its pre-activation kept;
/// dy [256, 64] by wt [256, 64] (transpose_b), GELU's derivative at that
/// pre-activation. With gptc's own GEMMs for them (an sm_90a program's,
/// in blocks of 128 x 128 and of 128 x 256) beside the fallback kernels.
Function ownGemmEpilogues(Program &p) {
  enum : int { X, W, B, H, PRE, DY, WT, DP };
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("x", DType::BF16, {2, 128, 64}, Role::Param),
               buffer("w", DType::BF16, {64, 256}, Role::Param),
               buffer("b", DType::BF16, {256}, Role::Param),
               buffer("h", DType::BF16, {2, 128, 256}, Role::Output),
               buffer("pre", DType::BF16, {2, 128, 256}, Role::Output),
               buffer("dy", DType::BF16, {256, 64}, Role::Param),
               buffer("wt", DType::BF16, {256, 64}, Role::Param),
               buffer("dp", DType::BF16, {256, 256}, Role::Output)};
  addFakeGemmKernels(
      p, {GemmFallback::WgmmaBiasGelu, GemmFallback::WgmmaGeluGrad,
          GemmFallback::WgmmaWideBiasGelu, GemmFallback::WgmmaWideGeluGrad});
  Function f;
  f.name = "forward";
  Launch gelu = launch("matmul_epilogue", {X, W, B}, {H, PRE});
  gelu.ints["gelu"] = 1;
  f.launches = {gelu, launch("matmul_gelu_grad", {DY, WT, PRE}, {DP}, true)};
  return f;
}

/// Zeros where the fake's reference of a wgmma GEMM wrote its result
/// (out, args[out], m·n bf16; m and n from `at` on): a GEMM that computes
/// something else.
template <int at, int out = 3> void zeroOwnGemmResult(const uint64_t *args) {
  std::memset(reinterpret_cast<void *>(args[out]), 0,
              size_t(args[at] * args[at + 1]) * 2);
}

namespace {
/// The own GEMMs' timings tuning sees (narrow and wide blocks, ms a run)
/// and which it keeps: the faster where it agrees with cuBLASLt, neither
/// where both are slower, neither where both write zeros (wrong).
struct OwnGemmCase {
  float narrowMs, wideMs;
  bool wrong;       // both write zeros
  const char *kept; // "128x128", "128x256" or "" (cuBLASLt)
};
const OwnGemmCase kOwnGemmCases[] = {{0.01f, 5.0f, false, "128x128"},
                                     {5.0f, 0.01f, false, "128x256"},
                                     {5.0f, 5.0f, false, ""},
                                     {0.01f, 0.01f, true, ""}};

/// Tuning's line for the GEMM `key` names in `err` keeps the case's shape
/// (its time, 0.002 ms a run), or neither; and says "not used" where both
/// write zeros, and only there.
void expectOwnGemmLine(const std::string &err, const std::string &key,
                       const OwnGemmCase &c) {
  const size_t line = err.find(key);
  ASSERT_NE(line, std::string::npos) << key << "\n" << err;
  const std::string timed = err.substr(line, err.find('\n', line) - line);
  for (const std::string shape : {"128x128", "128x256"})
    EXPECT_EQ(timed.find("gptc wgmma GEMM " + shape + " 0.002 (kept)") !=
                  std::string::npos,
              shape == c.kept)
        << timed;
  EXPECT_EQ(timed.find("not used") != std::string::npos, c.wrong) << timed;
}
} // namespace

/// gptc's own GEMMs (kernels/gemm_wgmma.cuh) in each block shape are more
/// ways to GELU's epilogue and to its derivative's that tuning times,
/// where the program has them and the shapes fit their tiles: the faster
/// shape, faster than cuBLASLt, runs in its place (no cuBLASLt GEMM in the
/// run; 219,120 bytes of dynamic shared memory a block, which the fake
/// refuses without the runtime's opt-in, and blocks of 384 threads, which
/// it checks), and the results match the CPU backend's; slower, or faster but
/// wrong, cuBLASLt keeps the launches. GPTC_GEMM_OWN=narrow, =wide and =0
/// decide without timing.
TEST(CudaBackendFake, GemmTuningTimesGptcsOwnGemms) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto onHost = hook<void (*)(const char *, int, void (*)(const uint64_t *))>(
      "gptcFakeKernelRunsOnHost");
  // Forward and backward, in 128 x 128 blocks then 128 x 256.
  const std::vector<std::string> own = {
      "gemm_wgmma_bias_gelu_bf16", "gemm_wgmma_gelu_grad_bf16",
      "gemm_wgmma_wide_bias_gelu_bf16", "gemm_wgmma_wide_gelu_grad_bf16"};
  auto time = [&](float narrow, float wide) {
    for (int i = 0; i < 4; ++i)
      kernelMs(own[size_t(i)].c_str(), i < 2 ? narrow : wide);
  };
  for (const OwnGemmCase &c : kOwnGemmCases) {
    SCOPED_TRACE(std::to_string(c.narrowMs) + " " + std::to_string(c.wideMs) +
                 (c.wrong ? " wrong" : ""));
    time(c.narrowMs, c.wideMs);
    if (c.wrong) {
      onHost(own[0].c_str(), 8, zeroOwnGemmResult<5>);
      onHost(own[1].c_str(), 7, zeroOwnGemmResult<4>);
      onHost(own[2].c_str(), 8, zeroOwnGemmResult<5>);
      onHost(own[3].c_str(), 7, zeroOwnGemmResult<4>);
    }
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownGemmEpilogues, "time", &names);
    kernelMs(nullptr, 0.0f);
    onHost(nullptr, 0, nullptr);
    const std::string kept = c.kept;
    expectOtherWaysTook(err, kept.empty() ? "0" : "2", 2);
    for (const char *key : {"matmul_epilogue 256x256x64 bf16, ms a run:",
                            "matmul_gelu_grad 256x256x64 bf16 tB, ms a run:"})
      expectOwnGemmLine(err, key, c);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(contains(names, own[size_t(i)]),
                kept == (i < 2 ? "128x128" : "128x256"))
          << own[size_t(i)];
    EXPECT_EQ(run.empty(), !kept.empty()) << "cuBLASLt GEMMs in the run";
    expectKeptChoiceMatchesCpu(ownGemmEpilogues);
  }
  // GPTC_GEMM_OWN=narrow or wide: that shape runs even where slower,
  // untimed against cuBLASLt (a check's way to it), and matches the CPU
  // backend; GPTC_GEMM_OWN=0: never, even where faster.
  for (const char *value : {"narrow", "wide", "0"}) {
    SCOPED_TRACE(value);
    const std::string v = value;
    time(v == "0" ? 0.01f : 5.0f, v == "0" ? 0.01f : 5.0f);
    ScopedEnv env("GPTC_GEMM_OWN", value);
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownGemmEpilogues, "time", &names);
    kernelMs(nullptr, 0.0f);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(contains(names, own[size_t(i)]),
                v == (i < 2 ? "narrow" : "wide"))
          << own[size_t(i)];
    EXPECT_EQ(run.empty(), v != "0") << "cuBLASLt GEMMs in the run";
    EXPECT_EQ(err.find("gptc wgmma GEMM"), std::string::npos) << err;
    expectKeptChoiceMatchesCpu(ownGemmEpilogues);
  }
}

namespace {
/// The tensor maps the own GEMMs read a and b through, as each launch of
/// one passed them (its first two arguments), decoded by the fake.
struct SeenMap {
  uint64_t base, dims[2], rowBytes;
  uint32_t box[2];
  bool bf16Swizzled;
};
std::vector<std::pair<SeenMap, SeenMap>> seenMaps;
void seeMaps(const uint64_t *args) {
  auto decode = hook<bool (*)(uint64_t, uint64_t *, uint64_t *, uint64_t *,
                              uint32_t *, bool *)>("gptcFakeTensorMap");
  SeenMap m[2] = {};
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(decode(args[i], &m[i].base, m[i].dims, &m[i].rowBytes, m[i].box,
                       &m[i].bf16Swizzled))
        << "argument " << i << " is no tensor map";
  seenMaps.push_back({m[0], m[1]});
}
} // namespace

/// gptc's own GEMMs read a and b through tensor maps (Hopper's TMA) that
/// the runtime encodes at load, as rt::wgmmaOperandMaps says: 2-D bf16
/// with the 128-byte swizzle, rows `inner` · 2 bytes apart; a [m, k] in
/// boxes of 64 x 128; b [k, n] (GELU's forward) in 64 x 64, b [n, k]
/// (its derivative's) in 64 x the block's columns. Where the driver
/// refuses to encode a map, the own GEMMs are left out, with one stderr
/// line, and cuBLASLt's GEMMs run with the CPU backend's results.
TEST(CudaBackendFake, GptcsOwnGemmsReadTheirOperandsThroughTensorMaps) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto onHost = hook<void (*)(const char *, int, void (*)(const uint64_t *))>(
      "gptcFakeKernelRunsOnHost");
  struct Expected {
    const char *kernel, *own;
    uint64_t bDims[2];
    uint32_t bBox;
  };
  const Expected cases[] = {
      {"gemm_wgmma_bias_gelu_bf16", "narrow", {256, 64}, 64},
      {"gemm_wgmma_gelu_grad_bf16", "narrow", {64, 256}, 128},
      {"gemm_wgmma_wide_bias_gelu_bf16", "wide", {256, 64}, 64},
      {"gemm_wgmma_wide_gelu_grad_bf16", "wide", {64, 256}, 256}};
  for (const Expected &c : cases) {
    SCOPED_TRACE(c.kernel);
    ScopedEnv env("GPTC_GEMM_OWN", c.own);
    seenMaps.clear();
    onHost(c.kernel, 8, seeMaps);
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownGemmEpilogues, "time", &names);
    onHost(nullptr, 0, nullptr);
    ASSERT_TRUE(contains(names, c.kernel)) << err;
    ASSERT_FALSE(seenMaps.empty());
    for (const auto &[a, b] : seenMaps) { // (each launch, the same maps)
      // a: x or dy, [256, 64].
      EXPECT_EQ(a.dims[0], 64u);
      EXPECT_EQ(a.dims[1], 256u);
      EXPECT_EQ(a.rowBytes, 128u);
      EXPECT_EQ(a.box[0], 64u);
      EXPECT_EQ(a.box[1], 128u);
      EXPECT_EQ(b.dims[0], c.bDims[0]);
      EXPECT_EQ(b.dims[1], c.bDims[1]);
      EXPECT_EQ(b.rowBytes, 2 * c.bDims[0]);
      EXPECT_EQ(b.box[0], 64u);
      EXPECT_EQ(b.box[1], c.bBox);
      EXPECT_TRUE(a.bf16Swizzled && b.bf16Swizzled);
      EXPECT_NE(a.base, b.base);
      EXPECT_EQ((a.base | b.base) % 16, 0u);
    }
    expectKeptChoiceMatchesCpu(ownGemmEpilogues);
  }
  auto refuse = hook<void (*)(bool)>("gptcFakeRefuseTensorMaps");
  refuse(true);
  ScopedEnv env("GPTC_GEMM_OWN", "narrow");
  std::vector<std::string> names;
  auto [err, run] = loadAndRun(ownGemmEpilogues, "time", &names);
  const std::string line = "gptc: cuTensorMapEncodeTiled refused a 256x64 "
                           "bf16 operand (";
  const size_t at = err.find(line);
  EXPECT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find(line, at + 1), std::string::npos) << "said twice: " << err;
  EXPECT_NE(err.find("gptc's own GEMMs are left out where it does"),
            std::string::npos);
  for (const Expected &c : cases)
    EXPECT_FALSE(contains(names, c.kernel)) << c.kernel;
  EXPECT_FALSE(run.empty()) << "no cuBLASLt GEMM ran";
  expectKeptChoiceMatchesCpu(ownGemmEpilogues);
  refuse(false);
}

/// ownGemmEpilogues with gptc's own GEMMs in pairs of blocks beside the
/// others (m = 256: one 256 x 256 tile a GEMM).
Function ownGemmPairs(Program &p) {
  Function f = ownGemmEpilogues(p);
  addFakeGemmKernels(p, {GemmFallback::WgmmaPairedBiasGelu,
                         GemmFallback::WgmmaPairedGeluGrad});
  return f;
}

/// gptc's own GEMMs in pairs (clusters of two 128 x 256 blocks sharing b)
/// are one more way tuning times where the program has them: faster than
/// the rest, they are kept and run in clusters of two (cuLaunchKernelEx's
/// cluster dimension; the fake refuses a paired kernel launched otherwise),
/// two blocks a cluster, as many clusters as tiles of 256 x 256 up to what
/// the device runs at once (cuOccupancyMaxActiveClusters), with b's map in
/// boxes of half the tile's columns (b [n, k]: 128 rows), and match the
/// CPU backend. GPTC_GEMM_OWN=paired takes them untimed, =unpaired times
/// the others alone. Where the device runs no cluster of two, they are
/// left out and cuBLASLt's GEMMs run.
TEST(CudaBackendFake, GptcsOwnGemmsInPairsRunInClustersOfTwo) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto clusterLaunches =
      hook<int (*)(unsigned *, unsigned *)>("gptcFakeClusterLaunches");
  auto activeClusters = hook<void (*)(int)>("gptcFakeActiveClusters");
  auto onHost = hook<void (*)(const char *, int, void (*)(const uint64_t *))>(
      "gptcFakeKernelRunsOnHost");
  const std::vector<std::string> own = {
      "gemm_wgmma_bias_gelu_bf16",        "gemm_wgmma_gelu_grad_bf16",
      "gemm_wgmma_wide_bias_gelu_bf16",   "gemm_wgmma_wide_gelu_grad_bf16",
      "gemm_wgmma_paired_bias_gelu_bf16", "gemm_wgmma_paired_gelu_grad_bf16"};
  for (size_t i = 0; i < own.size(); ++i)
    kernelMs(own[i].c_str(), i < 4 ? 5.0f : 0.01f);
  unsigned grid = 0, cluster = 0;
  clusterLaunches(&grid, &cluster);
  {
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownGemmPairs, "time", &names);
    expectOtherWaysTook(err, "2", 2);
    for (const char *key : {"matmul_epilogue 256x256x64 bf16, ms a run:",
                            "matmul_gelu_grad 256x256x64 bf16 tB, ms a run:"}) {
      const size_t line = err.find(key);
      ASSERT_NE(line, std::string::npos) << key << "\n" << err;
      EXPECT_NE(err.substr(line, err.find('\n', line) - line)
                    .find("gptc wgmma GEMM 128x256 pairs 0.002 (kept)"),
                std::string::npos)
          << err;
    }
    for (size_t i = 0; i < own.size(); ++i)
      EXPECT_EQ(contains(names, own[i]), i >= 4) << own[i];
    EXPECT_TRUE(run.empty()) << "cuBLASLt GEMMs in the run";
    EXPECT_GE(clusterLaunches(&grid, &cluster), 2);
    EXPECT_EQ(grid, 2u);
    EXPECT_EQ(cluster, 2u);
    expectKeptChoiceMatchesCpu(ownGemmPairs);
  }
  kernelMs(nullptr, 0.0f);
  {
    ScopedEnv env("GPTC_GEMM_OWN", "paired");
    seenMaps.clear();
    onHost(own[5].c_str(), 7, seeMaps);
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownGemmPairs, "1", &names);
    onHost(nullptr, 0, nullptr);
    EXPECT_TRUE(contains(names, own[4]) && contains(names, own[5])) << err;
    EXPECT_TRUE(run.empty()) << "cuBLASLt GEMMs in the run";
    ASSERT_FALSE(seenMaps.empty());
    for (const auto &[a, b] : seenMaps) {
      EXPECT_EQ(a.box[1], 128u);
      EXPECT_EQ(b.dims[0], 64u);
      EXPECT_EQ(b.dims[1], 256u);
      EXPECT_EQ(b.box[1], 128u);
    }
    expectKeptChoiceMatchesCpu(ownGemmPairs);
  }
  // GPTC_GEMM_OWN=unpaired: the others timed, the pairs left out.
  for (size_t i = 0; i < own.size(); ++i)
    kernelMs(own[i].c_str(), i < 2 ? 0.01f : i < 4 ? 5.0f : 0.001f);
  {
    ScopedEnv env("GPTC_GEMM_OWN", "unpaired");
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownGemmPairs, "time", &names);
    for (size_t i = 0; i < own.size(); ++i)
      EXPECT_EQ(contains(names, own[i]), i < 2) << own[i];
    EXPECT_EQ(err.find("pairs"), std::string::npos) << err;
  }
  kernelMs(nullptr, 0.0f);
  activeClusters(0);
  clusterLaunches(&grid, &cluster); // (the checks' runs above)
  for (const char *value : {"paired", "1"}) {
    SCOPED_TRACE(value);
    ScopedEnv env("GPTC_GEMM_OWN", value);
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownGemmPairs, "time", &names);
    EXPECT_FALSE(contains(names, own[4]) || contains(names, own[5]));
    EXPECT_EQ(err.find("pairs"), std::string::npos) << err;
    EXPECT_EQ(clusterLaunches(&grid, &cluster), 0);
  }
  activeClusters(60);
}

/// A plain bf16 GEMM with a transposed b at gptc's wgmma tiles (dy [256,
/// 64] by wt [256, 64]: an input gradient's form), with gptc's own GEMMs
/// without an epilogue (GemmPlain) in both block shapes.
Function ownPlainGemm(Program &p) {
  enum : int { DY, WT, DX };
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("dy", DType::BF16, {2, 128, 64}, Role::Param),
               buffer("wt", DType::BF16, {256, 64}, Role::Param),
               buffer("dx", DType::BF16, {2, 128, 256}, Role::Output)};
  addFakeGemmKernels(p,
                     {GemmFallback::WgmmaPlain, GemmFallback::WgmmaWidePlain});
  Function f;
  f.name = "backward";
  f.launches = {launch("matmul", {DY, WT}, {DX}, true)};
  return f;
}

/// A projection with its bias alone (x [256, 64] by w [64, 256] + b: the
/// forward's form), with gptc's own GEMMs with the bias (GemmBias).
Function ownBiasGemm(Program &p) {
  enum : int { X, W, B, Y };
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("x", DType::BF16, {2, 128, 64}, Role::Param),
               buffer("w", DType::BF16, {64, 256}, Role::Param),
               buffer("b", DType::BF16, {256}, Role::Param),
               buffer("y", DType::BF16, {2, 128, 256}, Role::Output)};
  addFakeGemmKernels(p, {GemmFallback::WgmmaBias, GemmFallback::WgmmaWideBias});
  Function f;
  f.name = "forward";
  f.launches = {launch("matmul_epilogue", {X, W, B}, {Y})};
  return f;
}

/// gptc's own GEMMs are ways to a plain GEMM and to one with a bias alone
/// too, timed against cuBLASLt's algorithms (so that tuning's line says
/// what the blocks' products cost with a light epilogue): the faster
/// block shape runs where it beats cuBLASLt, with the CPU backend's
/// results; cuBLASLt keeps the launch where both are slower, or faster but
/// wrong. GPTC_GEMM_OWN=wide runs the wide blocks untimed.
TEST(CudaBackendFake, GemmTuningTimesGptcsOwnPlainAndBiasGemms) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto onHost = hook<void (*)(const char *, int, void (*)(const uint64_t *))>(
      "gptcFakeKernelRunsOnHost");
  struct Gemm {
    Function (*make)(Program &);
    const char *key; // tuning's line
    std::vector<std::string> own;
    int args;
    void (*zero)(const uint64_t *);
  };
  for (const Gemm &g :
       {Gemm{ownPlainGemm,
             "matmul 256x256x64 bf16 tB, ms a run:",
             {"gemm_wgmma_plain_bf16", "gemm_wgmma_wide_plain_bf16"},
             6,
             zeroOwnGemmResult<3, 2>},
        Gemm{ownBiasGemm,
             "matmul_epilogue 256x256x64 bf16, ms a run:",
             {"gemm_wgmma_bias_bf16", "gemm_wgmma_wide_bias_bf16"},
             7,
             zeroOwnGemmResult<4, 3>}}) {
    SCOPED_TRACE(g.key);
    for (const OwnGemmCase &c : kOwnGemmCases) {
      SCOPED_TRACE(std::to_string(c.narrowMs) + " " + std::to_string(c.wideMs) +
                   (c.wrong ? " wrong" : ""));
      kernelMs(g.own[0].c_str(), c.narrowMs);
      kernelMs(g.own[1].c_str(), c.wideMs);
      if (c.wrong)
        for (const std::string &name : g.own)
          onHost(name.c_str(), g.args, g.zero);
      std::vector<std::string> names;
      auto [err, run] = loadAndRun(g.make, "time", &names);
      kernelMs(nullptr, 0.0f);
      onHost(nullptr, 0, nullptr);
      const std::string kept = c.kept;
      expectOwnGemmLine(err, g.key, c);
      for (int i = 0; i < 2; ++i)
        EXPECT_EQ(contains(names, g.own[size_t(i)]),
                  kept == (i == 0 ? "128x128" : "128x256"))
            << g.own[size_t(i)];
      EXPECT_EQ(run.empty(), !kept.empty()) << "cuBLASLt GEMMs in the run";
      expectKeptChoiceMatchesCpu(g.make);
    }
    ScopedEnv env("GPTC_GEMM_OWN", "wide");
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(g.make, "time", &names);
    EXPECT_TRUE(contains(names, g.own[1]));
    EXPECT_TRUE(run.empty()) << "cuBLASLt GEMMs in the run";
    expectKeptChoiceMatchesCpu(g.make);
  }
}

/// A weight gradient at gptc's stream-K GEMMs' tile sizes: x [256, 256]
/// and dy [256, 256] bf16 (transpose_a) into w's float32 [256, 256], again
/// added to the sums in place (grads_accumulate's accumulate), and again
/// with its bias gradient (dy's column sums).
Function ownWeightGradients(Program &p) {
  enum : int { X, DY, GW, SUM, GW2, GB };
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("x", DType::BF16, {256, 256}, Role::Param),
               buffer("dy", DType::BF16, {256, 256}, Role::Param),
               buffer("gw", DType::F32, {256, 256}, Role::Output),
               buffer("sum", DType::F32, {256, 256}, Role::Grad),
               buffer("gw2", DType::F32, {256, 256}, Role::Output),
               buffer("gb", DType::F32, {256}, Role::Output)};
  addFakeGemmKernels(p, {GemmFallback::WgmmaWeightGrad,
                         GemmFallback::WgmmaWideWeightGrad,
                         GemmFallback::WgmmaPairedWeightGrad});
  Function f;
  f.name = "grads_accumulate";
  Launch plain = launch("matmul", {X, DY}, {GW}),
         adding = launch("matmul", {X, DY, SUM}, {SUM}),
         biased = launch("matmul_bias_grad", {X, DY}, {GW2, GB});
  for (Launch *l : {&plain, &adding, &biased})
    l->ints["transpose_a"] = 1;
  adding.ints["accumulate"] = 1;
  f.launches = {plain, adding, biased};
  return f;
}

/// Zeros the float32 result of the fake's weight-gradient GEMM (its
/// arguments: maps, old, out, partials, counters, m, n, k).
void zeroWeightGradResult(const uint64_t *args) {
  std::memset(reinterpret_cast<void *>(args[3]), 0,
              size_t(args[6] * args[7]) * 4);
}

/// gptc's stream-K weight-gradient GEMMs (128 x 128 and 128 x 256 tiles,
/// and those in pairs) are more ways tuning times, for the plain and the
/// accumulating GEMM alike: the fastest kept where faster than cuBLASLt's
/// (no cuBLASLt GEMM in the run, the results the CPU backend's), none
/// where all are slower, nor one faster but writing zeros ("not used").
/// Launched on one block an SM at most (the fake's 1; a pair where the
/// fake runs a cluster of two), with their counters at 0 (the fake checks
/// them). GPTC_GEMM_OWN=narrow, =wide or =paired runs that shape untimed.
TEST(CudaBackendFake, GemmTuningTimesTheStreamKWeightGradient) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto onHost = hook<void (*)(const char *, int, void (*)(const uint64_t *))>(
      "gptcFakeKernelRunsOnHost");
  constexpr int kShapes = 3;
  const std::string own[kShapes] = {"gemm_wgmma_weight_grad_bf16",
                                    "gemm_wgmma_wide_weight_grad_bf16",
                                    "gemm_wgmma_paired_weight_grad_bf16"};
  const char *way[kShapes] = {
      "gptc wgmma GEMM 128x128 stream-K 0.002 (kept)",
      "gptc wgmma GEMM 128x256 stream-K 0.002 (kept)",
      "gptc wgmma GEMM 128x256 pairs stream-K 0.002 (kept)"};
  struct Case {
    int fast, wrong; // the shape faster than cuBLASLt (-1: none), and the
                     // one that writes zeros (-1: none)
  };
  for (const Case &c : {Case{0, -1}, Case{1, -1}, Case{2, -1}, Case{-1, -1},
                        Case{0, 0}, Case{1, 1}, Case{2, 2}}) {
    SCOPED_TRACE("fast " + std::to_string(c.fast) + ", wrong " +
                 std::to_string(c.wrong));
    for (int i = 0; i < kShapes; ++i)
      kernelMs(own[i].c_str(), i == c.fast ? 0.01f : 5.0f);
    if (c.wrong >= 0)
      onHost(own[c.wrong].c_str(), 9, zeroWeightGradResult);
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownWeightGradients, "time", &names);
    kernelMs(nullptr, 0.0f);
    onHost(nullptr, 0, nullptr);
    const int kept = c.wrong >= 0 ? -1 : c.fast;
    for (const char *key : {"matmul 256x256x256 bf16 tA, ms a run:",
                            "matmul 256x256x256 bf16 tA +C, ms a run:",
                            "matmul_bias_grad 256x256x256 bf16 tA"}) {
      const size_t line = err.find(key);
      ASSERT_NE(line, std::string::npos) << key << "\n" << err;
      const std::string timed = err.substr(line, err.find('\n', line) - line);
      for (int i = 0; i < kShapes; ++i)
        EXPECT_EQ(timed.find(way[i]) != std::string::npos, kept == i) << timed;
      EXPECT_EQ(timed.find("not used") != std::string::npos, c.wrong >= 0)
          << timed;
    }
    for (int i = 0; i < kShapes; ++i)
      EXPECT_EQ(contains(names, own[i]), kept == i) << own[i];
    EXPECT_EQ(run.empty(), kept >= 0) << "cuBLASLt GEMMs in the run";
    expectKeptChoiceMatchesCpu(ownWeightGradients);
  }
  const char *alone[kShapes] = {"narrow", "wide", "paired"};
  for (int i = 0; i < kShapes; ++i) {
    ScopedEnv env("GPTC_GEMM_OWN", alone[i]);
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownWeightGradients, "time", &names);
    for (int j = 0; j < kShapes; ++j)
      EXPECT_EQ(contains(names, own[j]), i == j) << alone[i] << " " << own[j];
    EXPECT_TRUE(run.empty()) << "cuBLASLt GEMMs in the run";
    expectKeptChoiceMatchesCpu(ownWeightGradients);
  }
}

/// GELU's derivative with its bias gradient (--bias-grads=gelu's c_fc) at
/// 256 x 256 x 64, bf16, with gptc's own GEMMs that sum the bias
/// gradient's partials on their way, in both block shapes.
Function ownGemmBiasGradient(Program &p) {
  enum : int { DY, WT, PRE, DP, DB };
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("dy", DType::BF16, {256, 64}, Role::Param),
               buffer("wt", DType::BF16, {256, 64}, Role::Param),
               buffer("pre", DType::BF16, {256, 256}, Role::Param),
               buffer("dp", DType::BF16, {256, 256}, Role::Output),
               buffer("db", DType::BF16, {256}, Role::Output)};
  addFakeGemmKernels(p, {GemmFallback::WgmmaGeluGradBias,
                         GemmFallback::WgmmaWideGeluGradBias});
  Function f;
  f.name = "backward";
  f.launches = {launch("matmul_gelu_grad", {DY, WT, PRE}, {DP, DB}, true)};
  return f;
}

/// Its own GEMMs are more ways tuning times: the faster shape, faster
/// than cuBLASLt, is kept, then it and ColumnSums (the partials' sum into
/// the bf16 bias gradient) run, no cuBLASLt GEMM, and the results match
/// the CPU backend's; not where slower, nor where faster but writing
/// zeros. GPTC_GEMM_OWN=narrow or wide runs that shape untimed.
TEST(CudaBackendFake, GemmTuningTimesGptcsOwnGemmWithBiasGradient) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto kernelMs = hook<void (*)(const char *, float)>("gptcFakeKernelMs");
  auto onHost = hook<void (*)(const char *, int, void (*)(const uint64_t *))>(
      "gptcFakeKernelRunsOnHost");
  const std::string own[2] = {"gemm_wgmma_gelu_grad_bias_bf16",
                              "gemm_wgmma_wide_gelu_grad_bias_bf16"},
                    sums = "gemm_fallback_column_sums_bf16";
  for (const OwnGemmCase &c : kOwnGemmCases) {
    SCOPED_TRACE(std::to_string(c.narrowMs) + " " + std::to_string(c.wideMs) +
                 (c.wrong ? " wrong" : ""));
    kernelMs(own[0].c_str(), c.narrowMs);
    kernelMs(own[1].c_str(), c.wideMs);
    if (c.wrong)
      for (const std::string &name : own)
        onHost(name.c_str(), 8, zeroOwnGemmResult<5>);
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownGemmBiasGradient, "time", &names);
    kernelMs(nullptr, 0.0f);
    onHost(nullptr, 0, nullptr);
    expectOwnGemmLine(err, "matmul_gelu_grad 256x256x64 bf16 tB, ms a run:", c);
    const std::string kept = c.kept;
    EXPECT_EQ(contains(names, own[0]), kept == "128x128");
    EXPECT_EQ(contains(names, own[1]), kept == "128x256");
    EXPECT_EQ(contains(names, sums), true) << "the bias gradient's sums";
    EXPECT_EQ(run.empty(), !kept.empty()) << "cuBLASLt GEMMs in the run";
    expectKeptChoiceMatchesCpu(ownGemmBiasGradient);
  }
  for (const char *value : {"narrow", "wide"}) {
    SCOPED_TRACE(value);
    ScopedEnv env("GPTC_GEMM_OWN", value);
    std::vector<std::string> names;
    auto [err, run] = loadAndRun(ownGemmBiasGradient, "time", &names);
    const bool wide = std::string(value) == "wide";
    EXPECT_EQ(contains(names, own[0]), !wide);
    EXPECT_EQ(contains(names, own[1]), wide);
    EXPECT_TRUE(run.empty()) << "cuBLASLt GEMMs in the run";
    expectKeptChoiceMatchesCpu(ownGemmBiasGradient);
  }
}

/// c_fc's forward and backward at 256 rows, all bf16: GELU with its
/// pre-activation kept, and GELU's derivative with the bias gradient
/// (transpose_b, as c_proj's weight is read there).
Function mlpEpilogues(Program &p) {
  enum : int { X, W1, B1, H, PRE, DY, W2, PRE2, DP, DB };
  p.meta["precision"] = "bf16";
  p.buffers = {buffer("x", DType::BF16, {256, 8}, Role::Param),
               buffer("w1", DType::BF16, {8, 16}, Role::Param),
               buffer("b1", DType::BF16, {16}, Role::Param),
               buffer("h", DType::BF16, {256, 16}, Role::Output),
               buffer("pre", DType::BF16, {256, 16}, Role::Output),
               buffer("dy", DType::BF16, {256, 8}, Role::Param),
               buffer("w2", DType::BF16, {16, 8}, Role::Param),
               buffer("pre2", DType::BF16, {256, 16}, Role::Param),
               buffer("dp", DType::BF16, {256, 16}, Role::Output),
               buffer("db", DType::BF16, {16}, Role::Output)};
  Function f;
  f.name = "mlp";
  Launch gelu = launch("matmul_epilogue", {X, W1, B1}, {H, PRE});
  gelu.ints["gelu"] = 1;
  f.launches = {gelu,
                launch("matmul_gelu_grad", {DY, W2, PRE2}, {DP, DB}, true)};
  return f;
}

/// How many of `names` are `name`.
long countOf(const std::vector<std::string> &names, const std::string &name) {
  return std::count(names.begin(), names.end(), name);
}

/// Tuning also times row-chunked ways to the epilogues that gptc's passes
/// finish: the GEMM in loops of rows, each loop's pass right after it
/// (GPTC_GEMM_CHUNK_BYTES: 2,048 bytes of D a loop, 64 of the 256 rows).
/// Where the fake makes GEMMs of all 256 rows slower, both launches take
/// them: BIAS and gptc's GELU, then a plain GEMM and gptc's column
/// partials, four loops each, then the partials' one sum; the results
/// match the CPU backend. Each size is also a way with each loop's pass
/// beside the next loop's GEMM, on the loop stream: where the fake makes
/// kernels off the GEMM's stream faster, that way is kept, and it too
/// gives the CPU backend's results. Where the loops' GEMMs are faster but
/// wrong, tuning sees their results differ and keeps a way that agrees.
/// Where the loops' GEMMs are slower, the
/// launches keep whole GEMMs. With GPTC_GEMM_CHUNK_BYTES=0 there are no
/// such ways: the GELU's two ways and the derivative's three remain.
TEST(CudaBackendFake, GemmTuningTimesRowChunkedWays) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto columnsMs = hook<void (*)(long long, float)>("gptcFakeGemmColumnsMs");
  const int kBias = CUBLASLT_EPILOGUE_BIAS,
            kDefault = CUBLASLT_EPILOGUE_DEFAULT,
            kGeluAux = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  ScopedEnv chunks("GPTC_GEMM_CHUNK_BYTES", "2048");
  // mlpEpilogues loaded with tuning timed afresh, the fake's GEMMs of
  // `slowColumns` columns 0.3 ms slower (256: whole, 64: a loop's), then
  // run: stderr, each GEMM's epilogue, the kernels launched.
  std::vector<std::string> names;
  auto timed = [&](long long slowColumns) {
    columnsMs(slowColumns, 0.3f);
    names.clear();
    auto result = loadAndRun(mlpEpilogues, "time", &names);
    columnsMs(-1, 0.0f);
    return result;
  };
  // Both launches ran in four loops: BIAS and gptc's GELU pass, then a
  // plain GEMM and gptc's column partials, then the partials' one sum.
  auto expectLoops = [&](const std::vector<int> &run) {
    EXPECT_EQ(run, (std::vector<int>{kBias, kBias, kBias, kBias, kDefault,
                                     kDefault, kDefault, kDefault}));
    EXPECT_EQ(countOf(names, "gemm_fallback_gelu_bf16"), 4);
    EXPECT_EQ(countOf(names, "gemm_fallback_column_partials_bf16"), 4);
    EXPECT_EQ(countOf(names, "gemm_fallback_column_sums_bf16"), 1);
  };
  {
    auto [err, run] = timed(256);
    expectOtherWaysTook(err, "2", 2);
    expectLoops(run);
    // One line a GEMM gives each way's time; the loops' way was kept.
    EXPECT_NE(err.find("gptc: GPTC_GEMM_TUNE: matmul_gelu_grad 256x16x8 bf16 "
                       "tB, ms a run: DEFAULT + gptc 0.120, DGELU_BGRAD "
                       "0.120, DGELU + gptc 0.120, DEFAULT + gptc, 4 loops of "
                       "64 rows 0.060 (kept), DEFAULT + gptc, 4 loops of 64 "
                       "rows, passes beside the next GEMM 0.060\n"),
              std::string::npos)
        << err;
    // Each loop's pass right after its GEMM: the passes ran after 1, 2, 3
    // and 4 GEMMs of the launch, the column sums after all 8.
    auto gemmsBefore = hook<int (*)(int)>("gptcFakeGemmsBeforeLaunch");
    const int count = hook<int (*)()>("gptcFakeLaunchCount")();
    ASSERT_EQ(names.size(), 9u);
    std::vector<int> after;
    for (int i = count - 9; i < count; ++i)
      after.push_back(gemmsBefore(i) - gemmsBefore(count - 9));
    EXPECT_EQ(after, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 7}));
    const int from = hook<int (*)()>("gptcFakeGemmCount")();
    expectKeptChoiceMatchesCpu(mlpEpilogues);
    EXPECT_EQ(gemmEpiloguesSince(from).size(), 8u);
  }
  {
    // The passes on the loop stream, each beside the next loop's GEMM:
    // the same GEMMs and kernels, and the CPU backend's results.
    auto besideMs = hook<void (*)(float)>("gptcFakeBesideMs");
    besideMs(-0.01f);
    auto [err, run] = timed(256);
    EXPECT_NE(err.find("DEFAULT + gptc, 4 loops of 64 rows, passes beside the "
                       "next GEMM 0.058 (kept)\n"),
              std::string::npos)
        << err;
    expectLoops(run);
    // Every stream late (its work runs only when an event wait or a
    // synchronisation reaches it): still the CPU backend's results, so
    // each pass waits for its loop's GEMM and the launch for every pass.
    auto deferNew = hook<void (*)(int)>("gptcFakeDeferNewStreams");
    deferNew(1); // (the loop stream is made at load)
    expectKeptChoiceMatchesCpu(mlpEpilogues);
    deferNew(0);
    besideMs(0.0f);
  }
  {
    // The loops' GEMMs faster but wrong (twice the product): their ways
    // are timed, found to differ from the GEMM's own plan on varied
    // operands and not used; the fastest way that agrees is kept, and the
    // results match the CPU backend.
    auto wrongColumns = hook<void (*)(long long)>("gptcFakeWrongColumns");
    wrongColumns(64);
    auto [err, run] = timed(256);
    EXPECT_EQ(run.size(), 2u) << err;
    EXPECT_NE(err.find("DEFAULT + gptc, 4 loops of 64 rows 0.060 (result 0 "
                       "off by"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("not used)"), std::string::npos) << err;
    expectOtherWaysTook(err, "0", 2);
    expectKeptChoiceMatchesCpu(mlpEpilogues);
    wrongColumns(-1);
  }
  {
    auto [err, run] = timed(64);
    EXPECT_EQ(run, (std::vector<int>{kGeluAux, kDefault})) << err;
  }
  {
    ScopedEnv none("GPTC_GEMM_CHUNK_BYTES", "0");
    auto [err, run] = timed(256);
    EXPECT_EQ(run.size(), 2u) << err;
  }
}

/// Tuning is on by default, and its choice is kept in the cache: the next
/// load on the same kind of GPU takes it untimed (no GEMM runs at load, and
/// its line says an earlier run timed them), even where timing would now
/// choose otherwise; GPTC_GEMM_TUNE=time times again and keeps the new
/// choice; a kept file that names no candidate (another build's) is timed
/// again; GPTC_GEMM_TUNE=0 takes the heuristic's first choice and the
/// default ways, untimed.
TEST(CudaBackendFake, GemmTuningIsTheDefaultAndItsChoiceIsKept) {
  REQUIRE_FAKE(plain);
  plain.reset();
  auto epilogueMs = hook<void (*)(int, float)>("gptcFakeEpilogueMs");
  auto gemmCount = hook<int (*)()>("gptcFakeGemmCount");
  const int kDefault = CUBLASLT_EPILOGUE_DEFAULT,
            kBgradA = CUBLASLT_EPILOGUE_BGRADA;
  const std::string timed = "gptc: GPTC_GEMM_TUNE: up to 32 cuBLASLt "
                            "algorithms timed for each of 4 GEMM shapes, ";
  const std::string kept =
      "gptc: GPTC_GEMM_TUNE: up to 32 cuBLASLt algorithms timed for each of 4 "
      "GEMM shapes (4 of them by an earlier run, kept in the cache; "
      "GPTC_GEMM_TUNE=time times them again), ";
  // The weight gradient's way tells the choices apart.
  auto weightGradWay = [&](const char *tune, const std::string &says) {
    const int before = gemmCount();
    auto [err, run] = loadAndRunBackward(tune);
    EXPECT_EQ(err.rfind(says, 0), 0u) << err;
    if (says == kept) {
      EXPECT_EQ(gemmCount() - before, 4) << "GEMMs ran at load";
    }
    return run.size() == 4 ? run[3] : -1;
  };
  epilogueMs(kBgradA, 0.3f);
  EXPECT_EQ(weightGradWay(nullptr, timed), kDefault);
  epilogueMs(-1, 0.0f);
  epilogueMs(kBgradA, -0.3f);
  EXPECT_EQ(weightGradWay(nullptr, kept), kDefault);
  EXPECT_EQ(weightGradWay("time", timed), kBgradA);
  EXPECT_EQ(weightGradWay(nullptr, kept), kBgradA);
  // A file naming a way or candidate the GEMM does not have: timed again.
  EXPECT_EQ(overwriteKeptChoices("gemms", "3 0 1.0 1.0\n"), 4u);
  EXPECT_EQ(weightGradWay(nullptr, timed), kBgradA);
  epilogueMs(-1, 0.0f);
  // Untuned: no line, the first choice, BGRADA as the default way.
  auto lastAlgo = hook<int (*)()>("gptcFakeLastAlgo");
  auto [err, run] = loadAndRunBackward("0");
  EXPECT_EQ(err.find("GPTC_GEMM_TUNE"), std::string::npos) << err;
  EXPECT_EQ(lastAlgo(), 0);
  ASSERT_EQ(run.size(), 4u);
  EXPECT_EQ(run[3], kBgradA);
}

/// A refused epilogue in a program without the fallback kernels (one
/// compiled by an older gptc): one line naming the launch and the kernel.
TEST(CudaBackendFake, RefusedEpilogueWithoutFallbackKernels) {
  REQUIRE_FAKE(b);
  Refusing refusing({CUBLASLT_EPILOGUE_BGRADA});
  Program p;
  expectCheckRefused(
      p, backwardEpilogues(p), *b,
      "grads launch 3: matmul_bias_grad (cuBLASLt) at fake.cpp:8: cuBLASLt "
      "has no algorithm for its epilogue, and the program has no kernel "
      "gemm_fallback_column_partials_bf16");
}

} // namespace
