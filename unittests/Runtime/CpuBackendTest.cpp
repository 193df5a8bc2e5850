//===- CpuBackendTest.cpp - the CPU backend on hand-made programs ---------===//
//
// What CpuReplayTest cannot reach with real data: the bf16 and f16 stores
// on every kind of value (ties, subnormals, overflow, infinities, NaN, -0)
// against the executor's rounding, the NaN that marks a temporary read
// before it is written, and the memory-plan errors load() reports. No MLIR.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Precision.h"
#include "gptc/Formats/Safetensors.h"
#include "gptc/Runtime/Backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace gptc::rt;
using gptc::bf16ToFloat;
using gptc::halfToFloat;
namespace exec = gptc::exec;

namespace {

int addBuffer(Program &p, const std::string &name, DType dtype,
              std::vector<int64_t> shape, Role role, int64_t offset) {
  Buffer b;
  b.name = name;
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.role = role;
  b.binding = role == Role::Temp ? "" : name;
  b.offset = offset;
  p.buffers.push_back(std::move(b));
  return int(p.buffers.size()) - 1;
}

Launch launch(const char *kernel, std::vector<int> inputs,
              std::vector<int> outputs) {
  Launch l;
  l.kernel = kernel;
  l.inputs = std::move(inputs);
  l.outputs = std::move(outputs);
  return l;
}

/// Values that exercise every branch of rounding and encoding.
std::vector<float> awkwardValues() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {
      0.0f, -0.0f, 1.0f, -1.0f, 0.1f, -2.5e-3f, 1234.5678f,
      // bf16 ties (1 + 2^-8, 1 + 3 * 2^-8): to even, down then up
      1.00390625f, 1.01171875f,
      // f16's top: the largest half, the last value below inf, the first
      // that rounds to inf, and beyond
      65504.0f, 65519.0f, 65520.0f, -65536.0f,
      // f16's subnormals and underflow
      6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-10f,
      // bf16's overflow
      3.0e38f, 3.4028235e38f, inf, -inf, std::nanf("")};
  for (int i = -30; i < 30; ++i)
    v.push_back(std::ldexp(1.37f, i));
  return v;
}

/// A cast of the f32 input "x" into a buffer of `dtype`, run on the CPU
/// backend; returns the stored 16-bit patterns.
std::vector<uint16_t> castTo(DType dtype, const std::vector<float> &x) {
  Program p;
  int64_t n = int64_t(x.size());
  int in = addBuffer(p, "x", DType::F32, {n}, Role::Input, 0);
  int out = addBuffer(p, "y", dtype, {n}, Role::Output, 1024);
  p.arenaBytes = 2048;
  p.functions.push_back({"f", {launch("cast", {in}, {out})}, {in}, {out}});
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  cpu->load(p);
  cpu->upload(in, x.data());
  cpu->run(p.functions[0], 0, 1);
  std::vector<uint16_t> bits(x.size());
  cpu->download(out, bits.data());
  return bits;
}

void expectSameValue(float want, float got, float x) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << "x = " << x;
    return;
  }
  EXPECT_EQ(want, got) << "x = " << x;
  EXPECT_EQ(std::signbit(want), std::signbit(got)) << "x = " << x;
}

TEST(CpuBackend, StoresBf16AsTheExecutorRounds) {
  std::vector<float> x = awkwardValues();
  std::vector<uint16_t> bits = castTo(DType::BF16, x);
  for (size_t i = 0; i < x.size(); ++i)
    expectSameValue(exec::roundToBF16(x[i]), bf16ToFloat(bits[i]), x[i]);
}

TEST(CpuBackend, StoresF16AsTheExecutorRounds) {
  std::vector<float> x = awkwardValues();
  std::vector<uint16_t> bits = castTo(DType::F16, x);
  for (size_t i = 0; i < x.size(); ++i)
    expectSameValue(exec::roundToF16(x[i]), halfToFloat(bits[i]), x[i]);
}

TEST(CpuBackend, ATemporaryReadBeforeItIsWrittenIsNaN) {
  Program p;
  int temp = addBuffer(p, "t", DType::F32, {4}, Role::Temp, 0);
  int out = addBuffer(p, "y", DType::F32, {4}, Role::Output, 256);
  p.arenaBytes = 512;
  p.functions.push_back({"f", {launch("cast", {temp}, {out})}, {}, {out}});
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  cpu->load(p);
  cpu->run(p.functions[0], 0, 1);
  float y[4];
  cpu->download(out, y);
  for (float v : y)
    EXPECT_TRUE(std::isnan(v));
}

TEST(CpuBackend, RefusesPersistentBuffersThatOverlap) {
  Program p;
  addBuffer(p, "a.weight", DType::F32, {64}, Role::Param, 0);
  addBuffer(p, "b.weight", DType::F32, {64}, Role::Param, 128);
  p.arenaBytes = 512;
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  try {
    cpu->load(p);
    FAIL() << "no error";
  } catch (const DeviceError &e) {
    EXPECT_STREQ(e.what(), "cpu: the program's memory plan is wrong: "
                           "a.weight and b.weight overlap, and one lives for "
                           "the whole run");
  }
}

TEST(CpuBackend, RefusesAKernelThatWritesOverItsInput) {
  Program p;
  int a = addBuffer(p, "a", DType::F32, {4, 4}, Role::Input, 0);
  int t = addBuffer(p, "t", DType::F32, {4, 4}, Role::Temp, 256);
  int u = addBuffer(p, "u", DType::F32, {4, 4}, Role::Temp, 256);
  p.arenaBytes = 512;
  Launch mm = launch("matmul", {a, t}, {u});
  mm.loc = "m.cpp:1:2";
  p.functions.push_back({"f", {launch("cast", {a}, {t}), mm}, {a}, {}});
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  try {
    cpu->load(p);
    FAIL() << "no error";
  } catch (const DeviceError &e) {
    EXPECT_STREQ(e.what(), "cpu: the program's memory plan is wrong: f: "
                           "matmul at m.cpp:1:2 writes u over its input t");
  }
}

TEST(CpuBackend, NamesTheLaunchOfAKernelError) {
  Program p;
  int table = addBuffer(p, "wte", DType::F32, {4, 2}, Role::Param, 0);
  int ids = addBuffer(p, "tokens", DType::I32, {3}, Role::Input, 256);
  int out = addBuffer(p, "y", DType::F32, {3, 2}, Role::Output, 512);
  p.arenaBytes = 768;
  Launch l = launch("embedding", {table, ids}, {out});
  l.loc = "gpt2.cpp:79:30";
  p.functions.push_back({"forward", {l}, {table, ids}, {out}});
  std::unique_ptr<Backend> cpu = makeCpuBackend();
  cpu->load(p);
  int32_t bad[3] = {0, 9, 1};
  cpu->upload(ids, bad);
  try {
    cpu->run(p.functions[0], 0, 1);
    FAIL() << "no error";
  } catch (const DeviceError &e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "cpu: forward launch 0 (embedding at gpt2.cpp:79:30): ", 0),
              0u)
        << e.what();
  }
}

} // namespace
