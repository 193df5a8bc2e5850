//===- CudaBackendTest.cpp - the CUDA backend without a GPU ---------------===//
//
// What can be checked on a machine without a GPU: makeCudaBackend() fails
// with one line, the runtime links neither MLIR/LLVM nor any CUDA library,
// and the kernel check (CPU against CPU) passes a correct backend and
// catches a wrong one.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Kernels.h"
#include "gptc/Runtime/CudaBackend.h"
#include "gptc/Runtime/KernelCheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace gptc::rt;

namespace {

/// The shared objects mapped into this process.
std::string mappedFiles() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream ss;
  ss << maps.rdbuf();
  return ss.str();
}

TEST(CudaBackend, LinksNoMlirLlvmOrCuda) {
  // Before any backend exists: nothing CUDA may be loaded at start-up, or a
  // machine without the driver would fail in the loader.
  std::string maps = mappedFiles();
  ASSERT_FALSE(maps.empty());
  for (const char *lib : {"libMLIR", "libLLVM", "libcuda.so", "libcudart",
                          "libcublas", "libnvrtc"})
    EXPECT_EQ(maps.find(lib), std::string::npos) << lib << " is linked";
}

TEST(CudaBackend, NoDeviceIsOneLineDeviceError) {
  std::string first;
  try {
    auto backend = makeCudaBackend();
    GTEST_SKIP() << "a CUDA device is present: " << backend->name();
  } catch (const DeviceError &e) {
    first = e.what();
  }
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(first.find('\n'), std::string::npos) << first;
  EXPECT_NE(first.find("CUDA"), std::string::npos) << first;
  // The driver is probed once; a second try says the same.
  try {
    createCudaBackend();
    FAIL() << "a second try found a device";
  } catch (const DeviceError &e) {
    EXPECT_EQ(first, e.what());
  }
}

TEST(CudaBackend, PeakRates) {
  EXPECT_EQ(knownPeakBf16Flops("NVIDIA H100 80GB HBM3", 9, 0), 989e12);
  EXPECT_EQ(knownPeakBf16Flops("NVIDIA H200", 9, 0), 989e12);
  EXPECT_EQ(knownPeakBf16Flops("NVIDIA H100 PCIe", 9, 0), 756e12);
  EXPECT_EQ(knownPeakBf16Flops("NVIDIA A100-SXM4-80GB", 8, 0), 312e12);
  EXPECT_EQ(knownPeakBf16Flops("NVIDIA GeForce RTX 4090", 8, 9), 0);
}

TEST(CudaBackend, CpuBackendIsNotCuda) {
  auto cpu = makeCpuBackend();
  EXPECT_EQ(asCudaBackend(cpu.get()), nullptr);
}

//===----------------------------------------------------------------------===//
// gpt.matmul on column-major cuBLASLt
//===----------------------------------------------------------------------===//

/// What cuBLASLt computes for a mapping: D = op(L)·op(R), all column-major
/// (element (r, c) of a matrix with leading dimension ld is at r + c*ld).
std::vector<float> emulateLt(const GemmMapping &g, const std::vector<float> &a,
                             const std::vector<float> &b, int64_t outSize) {
  EXPECT_EQ(g.transLeft ? g.leftCols : g.leftRows, g.m);
  EXPECT_EQ(g.transLeft ? g.leftRows : g.leftCols, g.k);
  EXPECT_EQ(g.transRight ? g.rightCols : g.rightRows, g.k);
  EXPECT_EQ(g.transRight ? g.rightRows : g.rightCols, g.n);
  EXPECT_GE(g.leftLd, g.leftRows);
  EXPECT_GE(g.rightLd, g.rightRows);
  EXPECT_GE(g.outLd, g.m);
  std::vector<float> out(size_t(outSize), NAN);
  for (int64_t l = 0; l < g.loops; ++l)
    for (int64_t i = 0; i < g.batch; ++i) {
      const float *L = b.data() + i * g.leftStride; // gpt's b
      const float *R = a.data() + l * g.rightLoopStride + i * g.rightStride;
      float *D = out.data() + l * g.outLoopStride + i * g.outStride;
      for (int64_t c = 0; c < g.n; ++c)
        for (int64_t r = 0; r < g.m; ++r) {
          double sum = 0;
          for (int64_t p = 0; p < g.k; ++p) {
            float left = g.transLeft ? L[p + r * g.leftLd] : L[r + p * g.leftLd];
            float right =
                g.transRight ? R[c + p * g.rightLd] : R[p + c * g.rightLd];
            sum += double(left) * right;
          }
          D[r + c * g.outLd] = float(sum);
        }
    }
  return out;
}

TEST(CudaBackend, MatmulMapsOntoColumnMajorGemm) {
  const int64_t M = 5, K = 3, N = 4;
  struct Case {
    std::vector<int64_t> batchA, batchB; // batchB empty: a shared 2-D b
  };
  for (const Case &c : {Case{{}, {}}, Case{{2}, {}}, Case{{2, 3}, {}},
                        Case{{2}, {2}}, Case{{2, 3}, {2, 3}}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        gptc::exec::HostTensor a, b;
        std::vector<int64_t> sa = c.batchA, sb = c.batchB, so = c.batchA;
        sa.insert(sa.end(), {ta ? K : M, ta ? M : K});
        sb.insert(sb.end(), {tb ? N : K, tb ? K : N});
        so.insert(so.end(), {M, N});
        a = gptc::exec::HostTensor::floats(sa);
        b = gptc::exec::HostTensor::floats(sb);
        for (size_t i = 0; i < a.f32.size(); ++i)
          a.f32[i] = float((i * 7) % 11) - 5.0f;
        for (size_t i = 0; i < b.f32.size(); ++i)
          b.f32[i] = float((i * 5) % 13) - 6.0f;
        Buffer ba, bb, bo;
        ba.shape = sa;
        bb.shape = sb;
        bo.shape = so;
        GemmMapping g = mapMatmul(ba, bb, bo, ta, tb, "test");
        gptc::exec::HostTensor want = gptc::exec::matmul(a, b, ta, tb);
        std::vector<float> got = emulateLt(g, a.f32, b.f32, bo.numel());
        EXPECT_EQ(got, want.f32) << "batch " << c.batchA.size() << "/"
                                 << c.batchB.size() << " ta " << ta << " tb "
                                 << tb;
      }
  Buffer a, b, out;
  a.shape = {2, 5, 3};
  b.shape = {4, 4};
  out.shape = {2, 5, 4};
  EXPECT_THROW(mapMatmul(a, b, out, false, false, "x"), DeviceError);
}

// A result of another size than the product is refused: batched, with
// more rows, or with fewer (a tied table's V rows of the padded Vp, which
// no lowering writes since the forty-seventh session).
TEST(CudaBackend, MatmulResultOfOtherRowsIsRefused) {
  Buffer a, b, out;
  a.shape = {2, 7, 3};
  b.shape = {3, 4};
  out.shape = {2, 5, 4};
  EXPECT_THROW(mapMatmul(a, b, out, false, false, "x"), DeviceError);
  a.shape = {7, 3};
  out.shape = {8, 4};
  EXPECT_THROW(mapMatmul(a, b, out, false, false, "x"), DeviceError);
  out.shape = {5, 4};
  for (bool ta : {false, true}) {
    a.shape = ta ? std::vector<int64_t>{3, 7} : std::vector<int64_t>{7, 3};
    EXPECT_THROW(mapMatmul(a, b, out, ta, false, "x"), DeviceError) << ta;
  }
  out.shape = {7, 4};
  EXPECT_EQ(mapMatmul(a, b, out, true, false, "x").n, 7);
}

//===----------------------------------------------------------------------===//
// The kernel check, CPU against CPU
//===----------------------------------------------------------------------===//

Buffer buffer(const char *name, DType t, std::vector<int64_t> shape, Role role,
              const char *binding = "") {
  Buffer b;
  b.name = name;
  b.dtype = t;
  b.shape = std::move(shape);
  b.role = role;
  b.binding = binding;
  return b;
}

/// y = gelu(a · w) with a batched a and a shared w, then a bf16 copy of y.
Program tinyProgram() {
  Program p;
  p.meta["precision"] = "fp32";
  p.buffers.push_back(buffer("a", DType::F32, {2, 3, 4}, Role::Param, "a"));
  p.buffers.push_back(buffer("w", DType::F32, {4, 5}, Role::Param, "w"));
  p.buffers.push_back(buffer("t", DType::F32, {2, 3, 5}, Role::Temp));
  p.buffers.push_back(buffer("y", DType::F32, {2, 3, 5}, Role::Output, "y"));
  p.buffers.push_back(buffer("yb", DType::BF16, {2, 3, 5}, Role::Output, "yb"));
  Function f;
  f.name = "forward";
  Launch mm;
  mm.kernel = "matmul";
  mm.inputs = {0, 1};
  mm.outputs = {2};
  mm.loc = "test.cpp:1:1";
  Launch gelu;
  gelu.kernel = "gelu";
  gelu.inputs = {2};
  gelu.outputs = {3};
  gelu.loc = "test.cpp:2:1";
  Launch cast;
  cast.kernel = "cast";
  cast.inputs = {3};
  cast.outputs = {4};
  cast.loc = "test.cpp:3:1";
  f.launches = {mm, gelu, cast};
  f.arguments = {0, 1};
  f.results = {3, 4};
  p.functions.push_back(f);
  planMemory(p);
  return p;
}

/// The CPU backend, with launch `bad`'s first output nudged after it runs.
class NudgingBackend : public Backend {
public:
  explicit NudgingBackend(size_t bad) : inner(makeCpuBackend()), bad(bad) {}
  std::string name() const override { return "nudged cpu"; }
  void load(const Program &p) override {
    prog = &p;
    inner->load(p);
  }
  void upload(int b, const void *host) override { inner->upload(b, host); }
  void download(int b, void *host) override { inner->download(b, host); }
  void run(const Function &f, size_t begin, size_t end) override {
    inner->run(f, begin, end);
    if (begin <= bad && bad < end) {
      int out = f.launches[bad].outputs[0];
      std::vector<float> v(size_t(prog->buffers[out].numel()));
      inner->download(out, v.data());
      v[3] *= 1.01f; // one element off by 1%: far over fp32's tolerance
      inner->upload(out, v.data());
    }
  }
  void synchronize() override {}

private:
  std::unique_ptr<Backend> inner;
  const Program *prog = nullptr;
  size_t bad;
};

TEST(KernelCheck, CpuAgainstCpuPasses) {
  Program p = tinyProgram();
  auto device = makeCpuBackend(), reference = makeCpuBackend();
  std::ostringstream out;
  EXPECT_EQ(checkKernels(p, *device, *reference, out), 0) << out.str();
  std::string log = out.str();
  EXPECT_NE(log.find("[forward 0] matmul at test.cpp:1:1"), std::string::npos)
      << log;
  EXPECT_NE(log.find("[forward 2] cast"), std::string::npos) << log;
  EXPECT_EQ(log.find("FAIL"), std::string::npos) << log;
  EXPECT_NE(log.find("3 launches, 0 failures"), std::string::npos) << log;
}

TEST(KernelCheck, CatchesAWrongOutput) {
  Program p = tinyProgram();
  NudgingBackend device(0);
  auto reference = makeCpuBackend();
  std::ostringstream out;
  // The nudged matmul fails; resynchronising keeps the next launches clean.
  EXPECT_EQ(checkKernels(p, device, *reference, out), 1) << out.str();
  std::string log = out.str();
  EXPECT_NE(log.find("[forward 0] matmul at test.cpp:1:1"), std::string::npos);
  EXPECT_NE(log.find("FAIL (output 0 f32[2,3,5], 1 of 30 elements over, "
                     "element 3: device"),
            std::string::npos)
      << log;
}

TEST(KernelCheck, DumpsTheFailingOutputs) {
  Program p = tinyProgram();
  NudgingBackend device(0);
  auto reference = makeCpuBackend();
  std::ostringstream out;
  KernelCheckOptions options;
  options.dumpDir = ::testing::TempDir() + "/gptc-check-dump";
  std::filesystem::remove_all(options.dumpDir);
  EXPECT_EQ(checkKernels(p, device, *reference, out, options), 1) << out.str();
  std::ifstream index(options.dumpDir + "/index.txt");
  std::string entry;
  std::getline(index, entry);
  EXPECT_EQ(entry, "forward-0-out0 f32[2,3,5]");
  EXPECT_FALSE(std::getline(index, entry)) << "only the failing launch";
  auto read = [&](const char *suffix) {
    std::ifstream f(options.dumpDir + "/forward-0-out0" + suffix,
                    std::ios::binary);
    std::vector<float> v(30);
    f.read(reinterpret_cast<char *>(v.data()), 30 * sizeof(float));
    EXPECT_TRUE(f) << suffix;
    return v;
  };
  std::vector<float> dev = read(".device"), ref = read(".reference");
  for (size_t i = 0; i < 30; ++i)
    EXPECT_EQ(dev[i], i == 3 ? ref[i] * 1.01f : ref[i]) << i;
  std::filesystem::remove_all(options.dumpDir);
}

TEST(KernelCheck, DumpIntoAFileIsOneError) {
  Program p = tinyProgram();
  auto device = makeCpuBackend(), reference = makeCpuBackend();
  std::string file = ::testing::TempDir() + "/gptc-check-dump-file";
  std::ofstream(file) << "x";
  std::ostringstream out;
  KernelCheckOptions options;
  options.dumpDir = file;
  try {
    checkKernels(p, *device, *reference, out, options);
    ADD_FAILURE() << "no error";
  } catch (const DeviceError &e) {
    EXPECT_NE(std::string(e.what()).find("check-kernels: cannot write into " +
                                         file),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(out.str().find("[forward"), std::string::npos) << "nothing ran";
  std::filesystem::remove(file);
}

TEST(KernelCheck, WithoutResyncErrorsPropagate) {
  Program p = tinyProgram();
  NudgingBackend device(0);
  auto reference = makeCpuBackend();
  std::ostringstream out;
  KernelCheckOptions options;
  options.resync = false;
  EXPECT_GE(checkKernels(p, device, *reference, out, options), 2) << out.str();
}

TEST(KernelCheck, Tolerances) {
  Program p;
  Launch mm;
  mm.kernel = "matmul";
  EXPECT_EQ(kernelCheckTolerance(p, mm, 0, DType::BF16), 0x1p-7);
  EXPECT_EQ(kernelCheckTolerance(p, mm, 0, DType::F32), 1e-4);
  EXPECT_EQ(kernelCheckTolerance(p, mm, 0, DType::I32), 0);
  // The tensor-core attention rounds P (and dS) to bf16.
  for (const char *kernel : {"flash_attention", "flash_attention_qkv",
                             "flash_attention_grad", "flash_attention_qkv_grad"}) {
    Launch attention;
    attention.kernel = kernel;
    EXPECT_EQ(kernelCheckTolerance(p, attention, 0, DType::BF16), 0x1p-4);
    EXPECT_EQ(kernelCheckTolerance(p, attention, 0, DType::F32), 1e-4);
  }
  // A GELU derivative's bias gradient (its second result) sums rows the
  // device may round first; its first result is an ordinary bf16 output.
  Launch dgelu;
  dgelu.kernel = "matmul_gelu_grad";
  EXPECT_EQ(kernelCheckTolerance(p, dgelu, 0, DType::BF16), 0x1p-7);
  EXPECT_EQ(kernelCheckTolerance(p, dgelu, 1, DType::BF16), 0x1p-6);
  EXPECT_EQ(kernelCheckTolerance(p, dgelu, 1, DType::F32), 1e-4);
  p.meta["precision"] = "tf32";
  EXPECT_EQ(kernelCheckTolerance(p, mm, 0, DType::F32), 0x1p-8);
}

} // namespace
