//===- KernelsOnHostTest.cpp - generated kernels run on the CPU -----------===//
//
// Each kernel, compiled as host C++ by HostKernels (HostKernels.h: the CUDA
// built-ins and the inline PTX emulated, each block's threads run as
// coroutines), against the CPU executor's kernel on small hand-built
// programs: bit for bit for the glue (index arithmetic, broadcasting,
// vector paths, the multi-tensor block table), to float32 rounding for the
// reductions, to bf16 precision for the tensor-core attention. No GPU
// needed; timing and the real tensor cores are left to the runtime's
// kernel check on a GPU. ProgramKernelsTest runs a whole program's kernels
// this way.
//
//===----------------------------------------------------------------------===//

#include "HostKernels.h"
#include "TargetTestUtil.h"

#include "gptc/Executor/FusedLayerNorm.h"
#include "gptc/Executor/Kernels.h"
#include "gptc/Executor/Precision.h"
#include "gptc/Executor/ScalarProgram.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <cstdlib>
#include <cstring>
#include <random>

using namespace gptc;
using namespace gptc::test;
using rt::DType;
using Shape = std::vector<int64_t>;

namespace {

exec::HostTensor randomFloats(Shape shape, uint32_t seed) {
  exec::HostTensor t = exec::HostTensor::floats(std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float &x : t.f32)
    x = u(rng);
  return t;
}

exec::HostTensor randomIds(Shape shape, uint32_t seed) {
  exec::HostTensor t = exec::HostTensor::ids(std::move(shape));
  std::mt19937 rng(seed);
  for (int32_t &x : t.i32)
    x = int32_t(rng() % 1000) - 500;
  return t;
}

void expectSame(const exec::HostTensor &want, const std::vector<float> &got,
                const char *what) {
  ASSERT_EQ(want.f32.size(), got.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(want.f32[i], got[i]) << what << " element " << i;
}

/// The attention implementation a kernel's entry calls: "TensorCores" (the
/// forward or backward that takes wgmma on sm_90a), "SplitTensorCores" (the
/// split backward that does), "Mma" (mma.sync, the default forward and the
/// backward), "Atomic" (the backward summing dq with atomics), "Simple", or
/// "" for none. (The source holds the direction's attention headers; the
/// entry's call is the line that starts with two spaces.)
std::string attentionImpl(const std::string &source) {
  for (const char *impl :
       {"TensorCores", "SplitTensorCores", "StoredDsTensorCores",
        "Keys128TensorCores", "Mma", "Atomic", "Simple"})
    for (const char *dir : {"Forward", "Backward"})
      if (source.find(std::string("\n  attention") + dir + impl + "<") !=
          std::string::npos)
        return impl;
  return "";
}

/// The index of p's first kernel whose attention is `impl`; p.kernels.size()
/// if none.
size_t kernelWithImpl(const rt::Program &p, const std::string &impl) {
  size_t k = 0;
  while (k < p.kernels.size() && attentionImpl(p.kernels[k].source) != impl)
    ++k;
  return k;
}

/// The index of p's first kernel whose body calls the template `fn`;
/// p.kernels.size() if none.
size_t kernelCalling(const rt::Program &p, const std::string &fn) {
  size_t k = 0;
  while (k < p.kernels.size() &&
         p.kernels[k].source.find("\n  " + fn + "<") == std::string::npos)
    ++k;
  return k;
}

const char *targetName(HostTarget t) {
  return t == HostTarget::Sm90a ? "sm_90a" : "sm_80";
}

/// GELU(x + b) and x + b, the shape the fuser gives a bias and activation.
exec::ScalarProgram geluBias() {
  using exec::Opcode;
  ScalarBuilder b(2);
  auto [y, x] = emitGeluOfSum(b);
  int m = b.emit(Opcode::Max, y, b.emit(Opcode::Neg, x));
  return b.finish({m, x});
}

/// p - lr·(g + p·wd) and g·wd: two per-tensor arguments, two scalars.
exec::ScalarProgram updateLike() {
  using exec::Opcode;
  ScalarBuilder b(4);
  int step = b.emit(Opcode::Mul, 2,
                    b.emit(Opcode::Add, 1, b.emit(Opcode::Mul, 0, 3)));
  int p = b.emit(Opcode::Sub, 0, step);
  int g = b.emit(Opcode::Div, b.emit(Opcode::Mul, 1, 3),
                 b.emit(Opcode::Sqrt, 2));
  return b.finish({p, g});
}

} // namespace

TEST(GlueKernelsOnHost, MatchTheCpuExecutorExactly) {
  const DType f32 = DType::F32, i32 = DType::I32;
  Builder b;
  // 0: transpose [2,3,4,8] -> [2,4,3,8]
  int x4 = b.buf(f32, {2, 3, 4, 8}), xt = b.buf(f32, {2, 4, 3, 8});
  b.launch("transpose", {x4}, {xt}).lists["permutation"] = {0, 2, 1, 3};
  // 1: pad f32 [3,5] -> [4,8]; 2: pad i32 [2,5] -> [2,8] with -1
  int small = b.buf(f32, {3, 5}), padded = b.buf(f32, {4, 8});
  b.launch("pad", {small}, {padded}).ints["value"] = 0;
  int ids = b.buf(i32, {2, 5}), idsPadded = b.buf(i32, {2, 8});
  b.launch("pad", {ids}, {idsPadded}).ints["value"] = -1;
  // 2b: pad f32 [5, 12] -> bf16 [8, 12] (rows whole: four elements a
  // thread, as the vocabulary pad of wte) and f32 [2, 3, 8] -> [2, 4, 8].
  int rows = b.buf(f32, {5, 12}), rowsPadded = b.buf(DType::BF16, {8, 12});
  b.launch("pad", {rows}, {rowsPadded}).ints["value"] = 0;
  int mid = b.buf(f32, {2, 3, 8}), midPadded = b.buf(f32, {2, 4, 8});
  b.launch("pad", {mid}, {midPadded}).ints["value"] = 0;
  // 3: slice [4,8] -> [3,5]
  int sliced = b.buf(f32, {3, 5});
  b.launch("slice", {padded}, {sliced});
  // 4: split [2,3,12] axis 2 -> 5, 4, 3; 5: concat them back
  int whole = b.buf(f32, {2, 3, 12});
  std::vector<int> parts = {b.buf(f32, {2, 3, 5}), b.buf(f32, {2, 3, 4}),
                            b.buf(f32, {2, 3, 3})};
  b.launch("split", {whole}, parts).ints["axis"] = 2;
  int joined = b.buf(f32, {2, 3, 12});
  b.launch("concat", parts, {joined}).ints["axis"] = 2;
  // 6: iota
  int positions = b.buf(i32, {37});
  b.launch("iota", {}, {positions});
  // 7: cast f32 -> bf16 (vectorised: rows of 8)
  int castOut = b.buf(DType::BF16, {2, 3, 4, 8});
  b.launch("cast", {x4}, {castOut});
  // 8: fused, vectorised, a [8] bias; 9: fused, rows of 6, a [3,1] operand
  int act = b.buf(f32, {2, 3, 8}), bias = b.buf(f32, {8});
  int y0 = b.buf(f32, {2, 3, 8}), y1 = b.buf(f32, {2, 3, 8});
  b.launch("fused_elementwise", {act, bias}, {y0, y1}).body = geluBias();
  int act6 = b.buf(f32, {2, 3, 6}), col = b.buf(f32, {3, 1});
  int z0 = b.buf(f32, {2, 3, 6}), z1 = b.buf(f32, {2, 3, 6});
  b.launch("fused_elementwise", {act6, col}, {z0, z1}).body = geluBias();
  // 10: multi-tensor over tensors of 1500 and 37 elements, in place
  int p0 = b.buf(f32, {1500}), p1 = b.buf(f32, {37});
  int g0 = b.buf(f32, {1500}), g1 = b.buf(f32, {37});
  int lr = b.buf(f32, {}), wd = b.buf(f32, {});
  auto &mt = b.launch("multi_tensor_elementwise", {p0, p1, g0, g1, lr, wd},
                      {p0, p1, g0, g1});
  mt.ints["num_tensors"] = 2;
  mt.body = updateLike();

  rt::Program &p = b.p;
  HostKernels kernels(emitForHost(p));
  ASSERT_TRUE(kernels.ok()) << kernels.error;

  // Host data per buffer (floats, ids or bf16 bits).
  std::vector<exec::HostTensor> data(p.buffers.size());
  std::vector<std::vector<uint16_t>> half(p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const rt::Buffer &buf = p.buffers[i];
    if (buf.dtype == i32)
      data[i] = randomIds(buf.shape, uint32_t(i));
    else
      data[i] = randomFloats(buf.shape, uint32_t(i));
    if (buf.dtype == DType::BF16)
      half[i].assign(buf.numel(), 0);
  }
  data[lr].f32[0] = 0.01f;
  data[wd].f32[0] = 0.1f;
  auto ptr = [&](int id) -> void * {
    if (!half[id].empty())
      return half[id].data();
    return p.buffers[id].dtype == i32 ? static_cast<void *>(data[id].i32.data())
                                      : static_cast<void *>(data[id].f32.data());
  };
  auto run = [&](size_t i) {
    std::vector<void *> ptrs;
    for (int id : p.functions[0].launches[i].inputs)
      ptrs.push_back(ptr(id));
    for (int id : p.functions[0].launches[i].outputs)
      ptrs.push_back(ptr(id));
    kernels.run(i, ptrs);
  };
  const exec::HostTensor before0 = data[p0], before1 = data[p1];
  const exec::HostTensor grads0 = data[g0], grads1 = data[g1];
  for (size_t i = 0; i < p.functions[0].launches.size(); ++i)
    run(i);

  expectSame(exec::transpose(data[x4], {0, 2, 1, 3}), data[xt].f32, "transpose");
  expectSame(exec::pad(data[small], {4, 8}, 0), data[padded].f32, "pad");
  EXPECT_EQ(exec::pad(data[ids], {2, 8}, -1).i32, data[idsPadded].i32);
  for (int l : {3, 4})
    EXPECT_NE(p.kernels[p.functions[0].launches[l].deviceKernel].source.find(
                  "loadW<4>(in0 + "),
              std::string::npos);
  exec::HostTensor rowsWant = exec::pad(data[rows], {8, 12}, 0);
  for (size_t k = 0; k < rowsWant.f32.size(); ++k) {
    float want = exec::roundToBF16(rowsWant.f32[k]);
    uint32_t bits;
    std::memcpy(&bits, &want, 4);
    ASSERT_EQ(bits >> 16, half[rowsPadded][k]) << "padded element " << k;
  }
  expectSame(exec::pad(data[mid], {2, 4, 8}, 0), data[midPadded].f32,
             "pad of a middle dimension");
  expectSame(exec::slice(data[padded], {3, 5}), data[sliced].f32, "slice");
  std::vector<exec::HostTensor> pieces = exec::split(data[whole], 2, {5, 4, 3});
  for (size_t k = 0; k < 3; ++k)
    expectSame(pieces[k], data[parts[k]].f32, "split");
  expectSame(exec::concat({&data[parts[0]], &data[parts[1]], &data[parts[2]]}, 2),
             data[joined].f32, "concat");
  EXPECT_EQ(exec::iota(37).i32, data[positions].i32);
  for (size_t k = 0; k < half[castOut].size(); ++k) {
    float want = exec::roundToBF16(data[x4].f32[k]);
    uint32_t bits;
    std::memcpy(&bits, &want, 4);
    ASSERT_EQ(bits >> 16, half[castOut][k]) << "cast element " << k;
  }
  for (auto [in, aux, o0, o1] : {std::tuple{act, bias, y0, y1},
                                 std::tuple{act6, col, z0, z1}}) {
    exec::HostTensor w0 = exec::HostTensor::floats(p.buffers[o0].shape);
    exec::HostTensor w1 = exec::HostTensor::floats(p.buffers[o0].shape);
    exec::runScalarProgram(geluBias(), {{&data[in], &data[aux]}},
                           {{w0.data(), w1.data()}}, {p.buffers[o0].shape});
    expectSame(w0, data[o0].f32, "fused result 0");
    expectSame(w1, data[o1].f32, "fused result 1");
  }
  exec::HostTensor wp0 = exec::HostTensor::floats({1500}),
                   wp1 = exec::HostTensor::floats({37}),
                   wg0 = exec::HostTensor::floats({1500}),
                   wg1 = exec::HostTensor::floats({37});
  exec::runScalarProgram(updateLike(),
                         {{&before0, &grads0, &data[lr], &data[wd]},
                          {&before1, &grads1, &data[lr], &data[wd]}},
                         {{wp0.data(), wg0.data()}, {wp1.data(), wg1.data()}},
                         {{1500}, {37}});
  expectSame(wp0, data[p0].f32, "multi-tensor p0");
  expectSame(wp1, data[p1].f32, "multi-tensor p1");
  expectSame(wg0, data[g0].f32, "multi-tensor g0");
  expectSame(wg1, data[g1].f32, "multi-tensor g1");
}

namespace {

/// x · (1 − s·c): x per tensor, c a per-tensor constant, s a scalar
/// (AdamW's decoupled weight decay with wd per tensor).
exec::ScalarProgram decayLike() {
  using exec::Opcode;
  ScalarBuilder b(3);
  int sc = b.emit(Opcode::Mul, 2, 1);
  int y =
      b.emit(Opcode::Mul, 0, b.emit(Opcode::Sub, b.constant(1.0f), sc));
  return b.finish({y});
}

/// (x · s)², the global norm's term.
exec::ScalarProgram scaledSquare() {
  using exec::Opcode;
  exec::ScalarProgram s;
  s.numArgs = 2;
  s.code.push_back({Opcode::Mul, 2, 0, 1, 0});
  s.code.push_back({Opcode::Mul, 3, 2, 2, 0});
  s.numRegisters = 4;
  s.results = {3};
  return s;
}

} // namespace

// The multi-tensor kernels with per-tensor constants and the grid-wide
// reduction (block partials, the last block adding them in order) against
// the CPU executor: the elementwise kernel bit for bit, the sum to float32
// rounding (both add the float32 terms in double, in different orders).
// The second tensor's length: 37 takes the one-element-a-thread loop, 36
// (every length a multiple of 4) the 4-element vector accesses.
TEST(MultiTensorKernelsOnHost, MatchTheCpuExecutor) {
  for (int64_t n1 : {37, 36}) {
    SCOPED_TRACE("second tensor of " + std::to_string(n1));
    const DType f32 = DType::F32;
    Builder b;
    // 0: x · (1 − s·c) over 3000 and n1 elements, c = 0.1 and 0.
    int x0 = b.buf(f32, {3000}), x1 = b.buf(f32, {n1}), s = b.buf(f32, {});
    int y0 = b.buf(f32, {3000}), y1 = b.buf(f32, {n1});
    auto &decay = b.launch("multi_tensor_elementwise", {x0, x1, s}, {y0, y1});
    decay.ints["num_tensors"] = 2;
    decay.floatLists["per_tensor"] = {0.1f, 0.0f};
    decay.body = decayLike();
    // 1: Σ (x · s)² over 3000, n1 and 28148 elements: 3 + 1 + 28 chunks
    // of 1024, two blocks of 16 chunks: the first over the three tensors,
    // the second all the third's, its last chunk partial (with n1 = 36 it
    // loads its 16 chunks before adding any).
    int x2 = b.buf(f32, {4, 7037}), sum = b.buf(f32, {});
    auto &reduce = b.launch("multi_tensor_reduce", {x0, x1, x2, s}, {sum});
    reduce.ints["num_tensors"] = 3;
    reduce.body = scaledSquare();

    rt::Program &p = b.p;
    HostKernels kernels(emitForHost(p));
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    std::vector<exec::HostTensor> data(p.buffers.size());
    for (size_t i = 0; i < p.buffers.size(); ++i)
      data[i] = randomFloats(p.buffers[i].shape, uint32_t(100 + i));
    data[s].f32[0] = 0.75f;
    for (size_t i = 0; i < p.functions[0].launches.size(); ++i) {
      std::vector<void *> ptrs;
      for (int id : p.functions[0].launches[i].inputs)
        ptrs.push_back(data[id].f32.data());
      for (int id : p.functions[0].launches[i].outputs)
        ptrs.push_back(data[id].f32.data());
      kernels.run(i, ptrs);
    }

    exec::HostTensor c0 = exec::HostTensor::floats({}, 0.1f);
    exec::HostTensor c1 = exec::HostTensor::floats({}, 0.0f);
    exec::HostTensor w0 = exec::HostTensor::floats({3000});
    exec::HostTensor w1 = exec::HostTensor::floats({n1});
    exec::runScalarProgram(
        decayLike(), {{&data[x0], &c0, &data[s]}, {&data[x1], &c1, &data[s]}},
        {{w0.data()}, {w1.data()}}, {{3000}, {n1}});
    expectSame(w0, data[y0].f32, "per-tensor decay 0");
    expectSame(w1, data[y1].f32, "per-tensor decay 1");
    // wd = 0: the tensor comes back unchanged, bit for bit.
    expectSame(data[x1], data[y1].f32, "decay by 1 - s*0");

    double want = exec::sumScalarProgram(
        scaledSquare(),
        {{&data[x0], &data[s]}, {&data[x1], &data[s]}, {&data[x2], &data[s]}},
        {{3000}, {n1}, {4, 7037}});
    EXPECT_NEAR(data[sum].f32[0], want, 1e-6 * want);
    // The scratch counter was reset: a second launch gives the same bits.
    float first = data[sum].f32[0];
    std::vector<void *> again = {data[x0].f32.data(), data[x1].f32.data(),
                                 data[x2].f32.data(), data[s].f32.data(),
                                 data[sum].f32.data()};
    kernels.run(1, again);
    EXPECT_EQ(first, data[sum].f32[0]);
  }
}

namespace {

/// A multi-tensor launch whose body yields its argument: `from[t]` copied
/// to `to[t]`, each rounded to its type on store (gpt-fuse-elementwise's
/// parameter copies and gradient widening).
void addCopy(Builder &b, std::vector<int> from, std::vector<int> to) {
  int64_t n = int64_t(from.size());
  auto &copy =
      b.launch("multi_tensor_elementwise", std::move(from), std::move(to));
  copy.ints["num_tensors"] = n;
  copy.body.numArgs = copy.body.numRegisters = 1;
  copy.body.results = {0};
}

/// Two tensors (3000 and n1 elements) copied from `from` to `to`.
rt::Program twoTensorCopy(DType from, DType to, int64_t n1) {
  Builder b;
  int x0 = b.buf(from, {3000}), x1 = b.buf(from, {n1});
  int y0 = b.buf(to, {3000}), y1 = b.buf(to, {n1});
  addCopy(b, {x0, x1}, {y0, y1});
  return b.p;
}

} // namespace

// The parameters' bf16 copies: a body that yields its float32 argument,
// each result rounded to bf16 on store (nearest, ties to even), over
// tensors of 3000 and 37 elements in one launch.
TEST(MultiTensorKernelsOnHost, ParameterCopiesRoundOnStore) {
  for (int64_t n1 : {37, 36}) { // one element a thread; vector accesses
    SCOPED_TRACE("second tensor of " + std::to_string(n1));
    rt::Program p = twoTensorCopy(DType::F32, DType::BF16, n1);
    HostKernels kernels(emitForHost(p));
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    exec::HostTensor a = randomFloats({3000}, 7), c = randomFloats({n1}, 8);
    // A tie: 1 + 2^-8 lies halfway between two bf16 values; even wins.
    a.f32[0] = 1.0f + 1.0f / 256.0f;
    std::vector<uint16_t> out0(3000), out1(n1);
    kernels.run(0, {a.f32.data(), c.f32.data(), out0.data(), out1.data()});
    for (auto [in, out] : {std::pair{&a, &out0}, std::pair{&c, &out1}})
      for (size_t i = 0; i < out->size(); ++i) {
        float want = exec::roundToBF16(in->f32[i]);
        uint32_t bits;
        std::memcpy(&bits, &want, 4);
        ASSERT_EQ((*out)[i], uint16_t(bits >> 16)) << "element " << i;
      }
    EXPECT_EQ(out0[0], 0x3f80); // 1.0, the even neighbour
  }
}

// The gradients' widening casts merged into one multi-tensor launch
// (gpt-fuse-elementwise): bf16 loads widen, f32 stores keep every bit.
TEST(MultiTensorKernelsOnHost, GradientsWidenExactly) {
  for (int64_t n1 : {37, 36}) { // one element a thread; vector accesses
    SCOPED_TRACE("second tensor of " + std::to_string(n1));
    rt::Program p = twoTensorCopy(DType::BF16, DType::F32, n1);
    HostKernels kernels(emitForHost(p));
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    std::vector<uint16_t> in0(3000), in1(n1);
    std::mt19937 rng(9);
    for (uint16_t &v : in0)
      v = uint16_t(rng() & 0x7f7f); // finite bf16 bit patterns of both signs
    for (uint16_t &v : in1)
      v = uint16_t(rng() & 0xff7f);
    std::vector<float> out0(3000), out1(n1);
    kernels.run(0, {in0.data(), in1.data(), out0.data(), out1.data()});
    for (auto [in, out] : {std::pair{&in0, &out0}, std::pair{&in1, &out1}})
      for (size_t i = 0; i < out->size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &(*out)[i], 4);
        ASSERT_EQ(bits, uint32_t((*in)[i]) << 16) << "element " << i;
      }
  }
}

// Gradient accumulation's add as the lowering builds it (LowerToKernels.cpp,
// addAccumulatingGrads): the last launch of grads_accumulate adds the
// micro-batch's gradients (temps) to the Grad buffers in place, one float32
// addition an element, bit for bit.
TEST(MultiTensorKernelsOnHost, GradientAccumulation) {
  using exec::Opcode;
  const DType f32 = DType::F32;
  Builder b;
  int g0 = b.buf(f32, {3000}), g1 = b.buf(f32, {37});
  int t0 = b.buf(f32, {3000}), t1 = b.buf(f32, {37});
  auto &add =
      b.launch("multi_tensor_elementwise", {g0, g1, t0, t1}, {g0, g1});
  add.ints["num_tensors"] = 2;
  add.body.numArgs = 2;
  add.body.numRegisters = 3;
  add.body.code.push_back({Opcode::Add, 2, 0, 1, 0});
  add.body.results = {2};

  rt::Program &p = b.p;
  HostKernels kernels(emitForHost(p));
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  std::vector<exec::HostTensor> data(p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i)
    data[i] = randomFloats(p.buffers[i].shape, uint32_t(300 + i));
  auto ptr = [&](int id) -> void * { return data[id].f32.data(); };

  exec::HostTensor want0 = data[g0], want1 = data[g1];
  for (size_t i = 0; i < want0.f32.size(); ++i)
    want0.f32[i] += data[t0].f32[i];
  for (size_t i = 0; i < want1.f32.size(); ++i)
    want1.f32[i] += data[t1].f32[i];
  kernels.run(0, {ptr(g0), ptr(g1), ptr(t0), ptr(t1), ptr(g0), ptr(g1)});
  expectSame(want0, data[g0].f32, "accumulated gradient 0");
  expectSame(want1, data[g1].f32, "accumulated gradient 1");
}

namespace {

void expectNear(const exec::HostTensor &want, const std::vector<float> &got,
                float tolerance, const char *what) {
  ASSERT_EQ(want.f32.size(), got.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(want.f32[i], got[i],
                tolerance * std::max(1.0f, std::fabs(want.f32[i])))
        << what << " element " << i;
}

/// gpt.layernorm's out (ln) and gpt.layernorm_grad's dx, dgamma and dbeta
/// (buffer ids) in `data` against the CPU executor, epsilon 1e-5:
/// elementwise to 2e-5, the parameter gradients (sums over rows) to
/// sumTolerance.
void expectLayernormAndGrad(const std::vector<exec::HostTensor> &data, int x,
                            int gamma, int beta, int dy, int ln, int dx,
                            int dgamma, int dbeta, float sumTolerance) {
  const float tol = 2e-5f;
  expectNear(exec::layernorm(data[x], data[gamma], data[beta], 1e-5f),
             data[ln].f32, tol, "layernorm");
  std::vector<exec::HostTensor> lg =
      exec::layernormGrad(data[x], data[gamma], data[dy], 1e-5f);
  expectNear(lg[0], data[dx].f32, tol, "layernorm_grad dx");
  expectNear(lg[1], data[dgamma].f32, sumTolerance, "layernorm_grad dgamma");
  expectNear(lg[2], data[dbeta].f32, sumTolerance, "layernorm_grad dbeta");
}

/// gpt.flash_attention on q, k, v ([B, H, T, D] of one dtype) and its
/// float32 gradient with dout (and the row dot it reads), causal and not,
/// and their check against the CPU executor, whose backward computes the
/// row dot itself from out and dout.
struct AttentionBothWays {
  int q, k, v, dout;
  int o[2], lse[2], dq[2], dk[2], dv[2], delta[2]; ///< [0] causal
  float scale;

  AttentionBothWays(Builder &b, DType t, const Shape &qs, float scale)
      : scale(scale) {
    q = b.buf(t, qs), k = b.buf(t, qs), v = b.buf(t, qs), dout = b.buf(t, qs);
    const Shape rows(qs.begin(), qs.end() - 1);
    for (int c = 0; c < 2; ++c) {
      const bool causal = c == 0;
      o[c] = b.buf(t, qs), lse[c] = b.buf(DType::F32, rows);
      auto &fa = b.launch("flash_attention", {q, k, v}, {o[c], lse[c]});
      fa.ints["causal"] = causal;
      fa.floats["scale"] = scale;
      dq[c] = b.buf(DType::F32, qs), dk[c] = b.buf(DType::F32, qs),
      dv[c] = b.buf(DType::F32, qs);
      delta[c] = b.rowDot(o[c], dout, rows);
      auto &fag = b.launch("flash_attention_grad",
                           {q, k, v, o[c], lse[c], dout, delta[c]},
                           {dq[c], dk[c], dv[c]});
      fag.ints["causal"] = causal;
      fag.floats["scale"] = scale;
    }
  }

  /// Every buffer the launches write.
  std::vector<int> results() const {
    std::vector<int> ids;
    for (int c = 0; c < 2; ++c)
      ids.insert(ids.end(), {o[c], lse[c], dq[c], dk[c], dv[c], delta[c]});
    return ids;
  }

  void check(const std::vector<exec::HostTensor> &data, float outTol,
             float lseTol, float dotTol, float gradTol) const {
    for (int c = 0; c < 2; ++c) {
      const bool causal = c == 0;
      SCOPED_TRACE(causal ? "causal" : "not causal");
      std::vector<exec::HostTensor> fw =
          exec::flashAttention(data[q], data[k], data[v], scale, causal);
      expectNear(fw[0], data[o[c]].f32, outTol, "flash_attention out");
      expectNear(fw[1], data[lse[c]].f32, lseTol, "flash_attention lse");
      expectNear(exec::attentionRowDot(data[o[c]], data[dout]),
                 data[delta[c]].f32, dotTol, "attention_row_dot");
      std::vector<exec::HostTensor> bw =
          exec::flashAttentionGrad(data[q], data[k], data[v], data[o[c]],
                                   data[lse[c]], data[dout], scale, causal);
      expectNear(bw[0], data[dq[c]].f32, gradTol, "flash_attention_grad dq");
      expectNear(bw[1], data[dk[c]].f32, gradTol, "flash_attention_grad dk");
      expectNear(bw[2], data[dv[c]].f32, gradTol, "flash_attention_grad dv");
    }
  }
};

} // namespace

// The template kernels (barriers, warp shuffles, shared memory, the
// last-block reductions) in float32 against the CPU executor, which sums in
// double: agreement to float32 rounding.
TEST(TemplateKernelsOnHost, MatchTheCpuExecutor) {
  const DType f32 = DType::F32, i32 = DType::I32;
  Builder b;
  // Rows of 40: not a multiple of the warp; 10 rows: two blocks of the
  // backward, so its last-block reduction of dgamma/dbeta runs.
  int x = b.buf(f32, {2, 5, 40}), gamma = b.buf(f32, {40}),
      beta = b.buf(f32, {40}), dy = b.buf(f32, {2, 5, 40});
  int ln = b.buf(f32, {2, 5, 40});
  b.launch("layernorm", {x, gamma, beta}, {ln}).floats["epsilon"] = 1e-5;
  int dx = b.buf(f32, {2, 5, 40}), dgamma = b.buf(f32, {40}),
      dbeta = b.buf(f32, {40});
  b.launch("layernorm_grad", {x, gamma, dy}, {dx, dgamma, dbeta})
      .floats["epsilon"] = 1e-5;
  // The layernorm with a prologue: x + a [5, 40] operand broadcast over the
  // batch (GPT-2's embedding add), the sum written and normalised.
  int addend = b.buf(f32, {5, 40}), fln = b.buf(f32, {2, 5, 40}),
      fsum = b.buf(f32, {2, 5, 40});
  exec::ScalarProgram addBody;
  addBody.numArgs = 2;
  addBody.code.push_back({exec::Opcode::Add, 2, 0, 1, 0});
  addBody.numRegisters = 3;
  addBody.results = {2, 2};
  auto &fl = b.launch("fused_layernorm", {x, addend, gamma, beta}, {fln, fsum});
  fl.floats["epsilon"] = 1e-5;
  fl.body = addBody;
  // layernorm_grad with the residual gradient's add as its epilogue: dx
  // (argument 0) + a [5, 40] operand broadcast over the batch, and dx
  // itself as a second value; two blocks, so the last-block reduction runs.
  exec::ScalarProgram gradBody;
  gradBody.numArgs = 2;
  gradBody.code.push_back({exec::Opcode::Add, 2, 1, 0, 0});
  gradBody.numRegisters = 3;
  gradBody.results = {2, 0};
  int fdg = b.buf(f32, {40}), fdb = b.buf(f32, {40}),
      fres = b.buf(f32, {2, 5, 40}), fdx = b.buf(f32, {2, 5, 40});
  auto &flg = b.launch("fused_layernorm_grad", {x, gamma, dy, addend},
                       {fdg, fdb, fres, fdx});
  flg.floats["epsilon"] = 1e-5;
  flg.body = gradBody;
  // reduce_sum: to a bias, over a middle dimension, to a scalar in several
  // slices (the last-block path), over the innermost dimension, and many
  // results of few terms (a result a thread: the position embedding's
  // gradient over the batch).
  int big = b.buf(f32, {64, 100}), many = b.buf(f32, {3, 256, 257});
  std::vector<std::pair<int, Shape>> sums = {
      {x, {40}}, {x, {2, 1, 40}}, {big, {}}, {big, {64, 1}},
      {many, {256, 257}}};
  std::vector<int> sumOut;
  for (auto &[in, shape] : sums) {
    sumOut.push_back(b.buf(f32, shape));
    b.launch("reduce_sum", {in}, {sumOut.back()});
  }
  // Cross-entropy over a padded vocabulary of 50 (45 real), -1 ignored.
  int logits = b.buf(f32, {3, 7, 50}), targets = b.buf(i32, {3, 7});
  int dloss = b.buf(f32, {}), loss = b.buf(f32, {}), loss2 = b.buf(f32, {});
  int dlogits = b.buf(f32, {3, 7, 50});
  auto &ce = b.launch("cross_entropy", {logits, targets}, {loss});
  ce.ints = {{"num_classes", 45}, {"ignore_index", -1}};
  auto &ceg = b.launch("cross_entropy_with_grad", {logits, targets, dloss},
                       {loss2, dlogits});
  ceg.ints = {{"num_classes", 45}, {"ignore_index", -1}};
  // Again over a vocabulary of 64 (a multiple of 8: 16-byte chunks), one of
  // which straddles the 45 real classes.
  int logits8 = b.buf(f32, {3, 7, 64}), loss8 = b.buf(f32, {}),
      lossg8 = b.buf(f32, {}), dlogits8 = b.buf(f32, {3, 7, 64});
  b.launch("cross_entropy", {logits8, targets}, {loss8}).ints = ce.ints;
  b.launch("cross_entropy_with_grad", {logits8, targets, dloss},
           {lossg8, dlogits8})
      .ints = ce.ints;
  // Embedding rows and their scatter-add, with repeated ids.
  int table = b.buf(f32, {20, 12}), ids = b.buf(i32, {3, 5});
  int rows = b.buf(f32, {3, 5, 12}), dyRows = b.buf(f32, {3, 5, 12});
  int dtable = b.buf(f32, {20, 12});
  b.launch("embedding", {table, ids}, {rows});
  b.launch("embedding_grad", {dyRows, ids}, {dtable});
  // Attention (float32: the simple kernels), causal and not.
  AttentionBothWays attention(b, f32, {2, 2, 16, 8}, 0.35f);

  rt::Program &p = b.p;
  HostKernels kernels(emitForHost(p));
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  std::vector<exec::HostTensor> data(p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i)
    data[i] = p.buffers[i].dtype == i32
                  ? exec::HostTensor::ids(p.buffers[i].shape)
                  : randomFloats(p.buffers[i].shape, uint32_t(100 + i));
  data[targets].i32 = {3, 44, -1, 0, 7, 12, 12, -1, 30, 31, 1,
                       2,  5,  9, 44, 0, 17, 23, -1, 8,  40};
  data[ids].i32 = {3, 19, 3, 0, 7, 7, 7, 12, 3, 19, 1, 2, 0, 5, 3};
  data[dloss].f32 = {1.5f};
  for (size_t i = 0; i < p.functions[0].launches.size(); ++i) {
    std::vector<void *> ptrs;
    const rt::Launch &l = p.functions[0].launches[i];
    for (int id : l.inputs)
      ptrs.push_back(p.buffers[id].dtype == i32
                         ? static_cast<void *>(data[id].i32.data())
                         : static_cast<void *>(data[id].f32.data()));
    for (int id : l.outputs)
      ptrs.push_back(data[id].f32.data());
    kernels.run(i, ptrs);
  }

  const float tol = 2e-5f;
  expectLayernormAndGrad(data, x, gamma, beta, dy, ln, dx, dgamma, dbeta, tol);
  std::vector<exec::HostTensor> fw = exec::fusedLayernorm(
      addBody, {&data[x], &data[addend]}, data[gamma], data[beta], {2, 5, 40},
      1e-5f);
  expectNear(fw[0], data[fln].f32, tol, "fused_layernorm");
  expectSame(fw[1], data[fsum].f32, "fused_layernorm sum");
  std::vector<exec::HostTensor> lnb = exec::fusedLayernormGrad(
      gradBody, data[x], data[gamma], data[dy], {&data[addend]},
      {{2, 5, 40}, {2, 5, 40}}, 1e-5f);
  expectNear(lnb[0], data[fdg].f32, tol, "fused_layernorm_grad dgamma");
  expectNear(lnb[1], data[fdb].f32, tol, "fused_layernorm_grad dbeta");
  expectNear(lnb[2], data[fres].f32, tol, "fused_layernorm_grad dx + r");
  expectNear(lnb[3], data[fdx].f32, tol, "fused_layernorm_grad dx");
  for (size_t s = 0; s < sums.size(); ++s)
    expectNear(exec::reduceSum(data[sums[s].first], sums[s].second),
               data[sumOut[s]].f32, 1e-4f, "reduce_sum");
  exec::HostTensor wantLoss =
      exec::crossEntropy(data[logits], data[targets], 45, -1);
  expectNear(wantLoss, data[loss].f32, tol, "cross_entropy");
  expectNear(wantLoss, data[loss2].f32, tol, "cross_entropy_with_grad loss");
  expectNear(exec::crossEntropyGrad(data[logits], data[targets], data[dloss],
                                    45, -1),
             data[dlogits].f32, tol, "cross_entropy_with_grad dlogits");
  exec::HostTensor wantLoss8 =
      exec::crossEntropy(data[logits8], data[targets], 45, -1);
  expectNear(wantLoss8, data[loss8].f32, tol, "cross_entropy, V=64");
  expectNear(wantLoss8, data[lossg8].f32, tol,
             "cross_entropy_with_grad loss, V=64");
  expectNear(exec::crossEntropyGrad(data[logits8], data[targets],
                                    data[dloss], 45, -1),
             data[dlogits8].f32, tol, "cross_entropy_with_grad dlogits, V=64");
  expectSame(exec::embedding(data[table], data[ids]), data[rows].f32,
             "embedding");
  expectNear(exec::embeddingGrad(data[dyRows], data[ids], {20, 12}),
             data[dtable].f32, tol, "embedding_grad");
  attention.check(data, tol, tol, tol, 1e-4f);
}

namespace {
/// Random values for every buffer of `p` (seeded `seed` + its index; bf16
/// ones rounded to bf16 and handed to the kernels as bf16 bits; int32 ones
/// ids in [0, idLimit)), then every launch of its first function in order;
/// returns the buffers' values, the kernels' outputs included (bf16 ones
/// widened to float32 after each launch, for the launches that read them).
/// `reshape`, if given, may change a float buffer's random values (by
/// buffer id) before they are rounded to its type.
std::vector<exec::HostTensor> runOnRandomData(
    rt::Program &p, HostKernels &kernels, uint32_t seed, int32_t idLimit = 1,
    const std::function<void(int, std::vector<float> &)> &reshape = {}) {
  std::vector<exec::HostTensor> data(p.buffers.size());
  std::vector<std::vector<uint16_t>> bits(p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    if (p.buffers[i].dtype == DType::I32) {
      data[i] = exec::HostTensor::ids(p.buffers[i].shape);
      std::mt19937 rng(seed + uint32_t(i));
      for (int32_t &id : data[i].i32)
        id = int32_t(rng() % uint32_t(idLimit));
      continue;
    }
    data[i] = randomFloats(p.buffers[i].shape, uint32_t(seed + i));
    if (reshape)
      reshape(int(i), data[i].f32);
    if (p.buffers[i].dtype != DType::BF16)
      continue;
    for (float &x : data[i].f32) {
      x = exec::roundToBF16(x);
      uint32_t u;
      std::memcpy(&u, &x, 4);
      bits[i].push_back(uint16_t(u >> 16));
    }
  }
  for (size_t i = 0; i < p.functions[0].launches.size(); ++i) {
    std::vector<void *> ptrs;
    const rt::Launch &l = p.functions[0].launches[i];
    for (int id : l.inputs)
      ptrs.push_back(!bits[id].empty() ? static_cast<void *>(bits[id].data())
                     : data[id].i32.empty()
                         ? static_cast<void *>(data[id].f32.data())
                         : static_cast<void *>(data[id].i32.data()));
    for (int id : l.outputs)
      ptrs.push_back(!bits[id].empty() ? static_cast<void *>(bits[id].data())
                                       : data[id].f32.data());
    kernels.run(i, ptrs);
    for (int id : l.outputs)
      for (size_t e = 0; e < bits[id].size(); ++e) {
        uint32_t u = uint32_t(bits[id][e]) << 16;
        std::memcpy(&data[id].f32[e], &u, 4);
      }
  }
  return data;
}
} // namespace

// gpt.reduce_sum's corner (c_attn's q bias gradient: the first third of
// each packed dq|dk|dv row, read in place) in bf16 summed into float32,
// against the CPU executor's sum of the sliced corner: 16,384 rows of
// 3 x 24 (several slices of rows, the last block adding them), a corner
// that keeps the middle's first two of five, and a whole one (no corner).
TEST(TemplateKernelsOnHost, ReduceSumReadsACornerInPlace) {
  const DType f32 = DType::F32, bf = DType::BF16;
  Builder b;
  int dqkv = b.buf(bf, {16384, 3, 24}), dq = b.buf(f32, {24});
  b.launch("reduce_sum", {dqkv}, {dq}).lists["corner"] = {16384, 1, 24};
  int x = b.buf(f32, {6, 5, 40}), two = b.buf(f32, {2, 40});
  b.launch("reduce_sum", {x}, {two}).lists["corner"] = {6, 2, 40};
  int whole = b.buf(f32, {3, 24});
  b.launch("reduce_sum", {dqkv}, {whole});
  HostKernels kernels(emitForHost(b.p));
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  EXPECT_GT(b.p.functions[0].launches[0].grid[1], 1u) << "slices of rows";
  std::vector<exec::HostTensor> data = runOnRandomData(b.p, kernels, 3);
  expectNear(exec::reduceSum(exec::slice(data[dqkv], {16384, 1, 24}), {24}),
             data[dq].f32, 1e-3f, "q's third");
  expectNear(exec::reduceSum(exec::slice(data[x], {6, 2, 40}), {2, 40}),
             data[two].f32, 1e-5f, "two of five");
  expectNear(exec::reduceSum(data[dqkv], {3, 24}), data[whole].f32, 1e-3f,
             "the whole tensor");
  // A wrong stride (the corner's own, not the operand's) reads the k and v
  // thirds of other rows: the q sums would differ by O(1) of the largest.
  exec::HostTensor wrong = exec::reduceSum(
      exec::HostTensor{exec::ElementKind::F32, {16384, 24},
                       std::vector<float>(data[dqkv].f32.begin(),
                                          data[dqkv].f32.begin() + 16384 * 24),
                       {}},
      {24});
  double off = 0;
  for (size_t i = 0; i < 24; ++i)
    off = std::max(off, std::abs(double(wrong.f32[i]) - data[dq].f32[i]));
  EXPECT_GT(off, 1.0) << "the check would not see a wrong stride";
}

// The bf16 loss gradient keeps each row in shared memory between its
// passes (kStash: V·2 bytes of dynamic shared memory), and writes dlogits
// into a buffer of its own or over the logits (the lowering's in-place
// case): against the CPU executor on the same bf16-rounded logits, over a
// padded vocabulary: 64 columns, 45 classes (5 chunks of classes, one of 5
// classes and 3 padding columns, two of padding: one warp's chunks), and
// 1024 columns, 1000 classes (a chunk a thread of 128: the row's max and
// sum are the block's). Both forms: the online one (its own kernel) and the
// max-first one (the "maxfirst" variant emitCUDA adds): into a buffer of
// its own with dloss 1.5, and in place with dloss -0.75 (the max-first
// form's negated exponentials) and the rows whose target is 3 ignored.
TEST(TemplateKernelsOnHost, Bf16CrossEntropyGradientKeepsRowsInSharedMemory) {
  for (auto [V, classes] : {std::pair<int64_t, int32_t>{64, 45}, {1024, 1000}})
    for (bool maxFirst : {false, true})
      for (auto [inPlace, dlossValue] :
           {std::pair<bool, float>{false, 1.5f}, {true, -0.75f}}) {
        SCOPED_TRACE(std::to_string(V) + " columns, " +
                     (maxFirst ? "max-first" : "online") +
                     (inPlace ? ", in place" : ", own buffer") + ", dloss " +
                     std::to_string(dlossValue));
        const DType f32 = DType::F32, bf = DType::BF16;
        const bool ignore = dlossValue < 0;
        Builder b;
        int logits = b.buf(bf, {3, 7, V}), targets = b.buf(DType::I32, {3, 7});
        int dloss = b.buf(f32, {}), loss = b.buf(f32, {});
        int dlogits = inPlace ? logits : b.buf(bf, {3, 7, V});
        auto &l = b.launch("cross_entropy_with_grad", {logits, targets, dloss},
                           {loss, dlogits});
        l.ints = {{"num_classes", classes}};
        if (ignore)
          l.ints["ignore_index"] = 3;
        cuda::EmitOptions opts;
        opts.maxFirstCrossEntropy = maxFirst;
        rt::Program &p = emitForHost(b.p, HostTarget::Sm80, opts);
        EXPECT_NE(p.kernels[0].source.find(maxFirst ? ", true, true>(in0, in1"
                                                    : ", true>(in0, in1, in2"),
                  std::string::npos);
        // The online form's launch has the max-first one as a variant.
        const rt::Launch &launch = p.functions[0].launches[0];
        ASSERT_EQ(launch.variants.size(), maxFirst ? 0u : 1u);
        if (!maxFirst) {
          EXPECT_EQ(launch.variant, cuda::kOnlineLabel);
          EXPECT_EQ(launch.variants[0].label, cuda::kMaxFirstLabel);
          EXPECT_NE(
              p.kernels[size_t(launch.variants[0].deviceKernel)].source.find(
                  ", true, true>(in0, in1"),
              std::string::npos);
        }
        EXPECT_EQ(launch.sharedBytes, uint32_t(V * 2));
        HostKernels kernels(p);
        ASSERT_TRUE(kernels.ok()) << kernels.error;
        // The logits as runOnRandomData makes them (in place, the run
        // overwrites them), spread to [-8, 8].
        auto reshape = [&](int id, std::vector<float> &v) {
          if (id == dloss)
            v[0] = dlossValue;
          if (id == logits)
            for (float &x : v)
              x *= 8.0f;
        };
        std::vector<exec::HostTensor> out =
            runOnRandomData(p, kernels, 11, classes, reshape);
        exec::HostTensor x = randomFloats({3, 7, V}, 11 + uint32_t(logits));
        for (float &v : x.f32)
          v = exec::roundToBF16(v * 8.0f);
        const int32_t ignored = ignore ? 3 : -1;
        expectNear(exec::crossEntropy(x, out[targets], classes, ignored),
                   out[loss].f32, 1e-5f, "loss");
        exec::HostTensor want = exec::crossEntropyGrad(
            x, out[targets], out[dloss], classes, ignored);
        expectNear(want, out[dlogits].f32, 1e-3f, "dlogits");
      }
}

// embedding_grad's id scan (4 ids a thread, 512 a round, 3 rounds ahead)
// over a table of 100 rows: ceil(100 / 32) = 4 groups of 25 rows (group g
// owns rows g, g + 4, ...) by slices of 256 columns, so every round holds
// ids of several blocks and most hold many of each. A third of the ids are one
// frequent id (as GPT-2's newline is), so a round brings it more hits than the
// 16 whose loads go in flight together. Rows of 1000 columns (four slices, the
// last 232 wide, pairs loaded as one access) and of 301 (the last slice 45
// wide, its last thread's pair half past the row: one element at a time). Each
// table element is summed in float32 in position order, so the result is that
// sum's bits: the reference below, not the executor's double sum (which it
// is near). Positions: 1200 (16-byte id loads; rounds of 512, 512, 176),
// 1203 (one id at a time, the last round partial), and 1200 ids that start
// 4 bytes past a 16-byte boundary (a view: one at a time too); the last
// with the tied table's float32 addend.
TEST(TemplateKernelsOnHost, EmbeddingGradSumsInPositionOrder) {
  const DType f32 = DType::F32, i32 = DType::I32;
  struct Case {
    int64_t positions;
    int skew; ///< ids start this many int32 past a 16-byte boundary
    bool addend;
    int64_t C;
    int64_t V = 100;
  };
  // (The last: 5,000 rows in 157 groups, whose owners the scan finds by
  // ownsRow's multiply-high.)
  for (Case c : {Case{1200, 0, false, 1000}, Case{1203, 0, false, 1000},
                 Case{1200, 1, true, 1000}, Case{1203, 0, true, 301},
                 Case{1200, 0, true, 64, 5000}}) {
    const int64_t C = c.C, V = c.V;
    SCOPED_TRACE("positions " + std::to_string(c.positions) + ", skew " +
                 std::to_string(c.skew) + ", C " + std::to_string(C) +
                 ", V " + std::to_string(V));
    Builder b;
    int ids = b.buf(i32, {c.positions}), dy = b.buf(f32, {c.positions, C});
    int add = b.buf(f32, {V, C}), out = b.buf(f32, {V, C});
    std::vector<int> in = {dy, ids};
    if (c.addend)
      in.push_back(add);
    b.launch("embedding_grad", in, {out});
    HostKernels kernels(emitForHost(b.p));
    ASSERT_TRUE(kernels.ok()) << kernels.error;

    exec::HostTensor grad = randomFloats({c.positions, C}, 31);
    exec::HostTensor addend = randomFloats({V, C}, 32);
    exec::HostTensor idT = exec::HostTensor::ids({c.positions});
    std::mt19937 rng(33);
    for (int32_t &id : idT.i32)
      id = rng() % 3 == 0 ? 7 : int32_t(rng() % V);
    // 16-byte aligned storage, the ids at the skew.
    struct alignas(16) Ids4 {
      int32_t v[4];
    };
    std::vector<Ids4> storage(size_t(c.positions) / 4 + 2);
    int32_t *idPtr = reinterpret_cast<int32_t *>(storage.data()) + c.skew;
    std::copy(idT.i32.begin(), idT.i32.end(), idPtr);
    std::vector<float> got(V * C, -1.0f);
    std::vector<void *> ptrs = {grad.f32.data(), idPtr};
    if (c.addend)
      ptrs.push_back(addend.f32.data());
    ptrs.push_back(got.data());
    kernels.run(0, ptrs);

    std::vector<float> want(V * C, 0.0f);
    for (int64_t p = 0; p < c.positions; ++p)
      for (int64_t k = 0; k < C; ++k)
        want[idT.i32[p] * C + k] += grad.f32[p * C + k];
    for (int64_t i = 0; i < V * C; ++i) {
      float w = c.addend ? addend.f32[i] + want[i] : want[i];
      ASSERT_EQ(w, got[i]) << "element " << i;
    }
    exec::HostTensor near = exec::embeddingGrad(grad, idT, {V, C},
                                                c.addend ? &addend : nullptr);
    expectNear(near, got, 2e-5f, "embedding_grad");
  }
}

// The layernorm kernels in each row layout: C = 36 (chunks of 4, some lanes
// idle), 132 (two chunks a lane, the second partial) and 37 (single
// elements). 300 rows: 38 blocks of the backward, so the dgamma/dbeta sums
// go through three groups of blocks (16, 16, 6), each summed by its last
// block, then the groups' by the last group. dy is bf16, as in GPT-2; the
// prologue adds a bf16 operand broadcast over the batch and scales by one
// constant along the row ([3, 100, 1]); the epilogue adds the float32
// residual gradient and writes it as float32 and bf16, and sums it over
// the rows (an output projection's bias gradient: a third column sum).
// Both gradients also staged (EmitOptions::layernormStaged: each warp's
// next row of x and dy copied into shared memory under this row's work),
// where rows are in chunks of 4; at C = 37 the option leaves the kernels
// as they are. (At 300 rows a warp has one: the next test gives warps
// several.)
TEST(TemplateKernelsOnHost, LayernormKernelsInEveryRowLayout) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  for (bool staged : {false, true})
    for (int64_t C : {36, 132, 37}) {
      SCOPED_TRACE("C = " + std::to_string(C) + (staged ? ", staged" : ""));
      const Shape shape = {3, 100, C};
      Builder b;
      int x = b.buf(f32, shape), gamma = b.buf(f32, {C}),
          beta = b.buf(f32, {C}), dy = b.buf(bf16, shape);
      int ln = b.buf(f32, shape);
      b.launch("layernorm", {x, gamma, beta}, {ln}).floats["epsilon"] = 1e-5;
      int dx = b.buf(f32, shape), dgamma = b.buf(f32, {C}),
          dbeta = b.buf(f32, {C});
      b.launch("layernorm_grad", {x, gamma, dy}, {dx, dgamma, dbeta})
          .floats["epsilon"] = 1e-5;
      // (x + a) · s: a [100, C] bf16, s [3, 100, 1].
      int a = b.buf(bf16, {100, C}), sc = b.buf(f32, {3, 100, 1});
      int fln = b.buf(f32, shape), fsum = b.buf(bf16, shape);
      exec::ScalarProgram pro;
      pro.numArgs = 3;
      pro.code.push_back({exec::Opcode::Add, 3, 0, 1, 0});
      pro.code.push_back({exec::Opcode::Mul, 4, 3, 2, 0});
      pro.numRegisters = 5;
      pro.results = {4, 3};
      auto &fl =
          b.launch("fused_layernorm", {x, a, sc, gamma, beta}, {fln, fsum});
      fl.floats["epsilon"] = 1e-5;
      fl.body = pro;
      // dx + r, as float32, as bf16 and summed over the rows.
      int r = b.buf(f32, shape), fdg = b.buf(f32, {C}), fdb = b.buf(f32, {C}),
          fres = b.buf(f32, shape), fres16 = b.buf(bf16, shape),
          fbias = b.buf(f32, {C});
      exec::ScalarProgram epi;
      epi.numArgs = 2;
      epi.code.push_back({exec::Opcode::Add, 2, 1, 0, 0});
      epi.numRegisters = 3;
      epi.results = {2, 2, 2};
      auto &flg = b.launch("fused_layernorm_grad", {x, gamma, dy, r},
                           {fdg, fdb, fres, fres16, fbias});
      flg.floats["epsilon"] = 1e-5;
      flg.body = epi;
      cuda::EmitOptions opts;
      opts.layernormStaged = staged;
      HostKernels kernels(emitForHost(b.p, HostTarget::Sm80, opts));
      ASSERT_TRUE(kernels.ok()) << kernels.error;
      EXPECT_EQ(b.p.functions[0].launches[1].grid[0], 38u); // 3 groups
      for (int k : {1, 3}) { // the gradients: staged where asked and C % 4 == 0
        const rt::Launch &l = b.p.functions[0].launches[size_t(k)];
        EXPECT_EQ(b.p.kernels[size_t(l.deviceKernel)].source.find(", true>(") !=
                      std::string::npos,
                  staged && C % 4 == 0)
            << l.kernel;
      }
      std::vector<exec::HostTensor> data = runOnRandomData(b.p, kernels, 7);

      const float tol = 2e-5f;
      expectLayernormAndGrad(data, x, gamma, beta, dy, ln, dx, dgamma, dbeta,
                             1e-4f);
      std::vector<exec::HostTensor> fw =
          exec::fusedLayernorm(pro, {&data[x], &data[a], &data[sc]},
                               data[gamma], data[beta], shape, 1e-5f);
      expectNear(fw[0], data[fln].f32, tol, "fused_layernorm");
      for (float &v : fw[1].f32)
        v = exec::roundToBF16(v);
      expectSame(fw[1], data[fsum].f32, "fused_layernorm's bf16 sum");
      std::vector<exec::HostTensor> lnb =
          exec::fusedLayernormGrad(epi, data[x], data[gamma], data[dy],
                                   {&data[r]}, {shape, shape, {C}}, 1e-5f);
      expectNear(lnb[0], data[fdg].f32, 1e-4f, "fused_layernorm_grad dgamma");
      expectNear(lnb[1], data[fdb].f32, 1e-4f, "fused_layernorm_grad dbeta");
      expectNear(lnb[2], data[fres].f32, tol, "fused_layernorm_grad dx + r");
      expectNear(lnb[3], data[fres16].f32, 8e-3f,
                 "fused_layernorm_grad dx + r as bf16");
      expectNear(lnb[4], data[fbias].f32, 1e-4f,
                 "fused_layernorm_grad's column sums of dx + r");
    }
}

// The staged layernorm gradients where warps take several rows, so that
// each row after a warp's first comes from its stage: 2,200 rows of 132
// (two chunks a lane, the second partial), 256 blocks of 8 warps, 152 of
// them with two rows. dy bf16 (8-byte copies, kept as loaded) and float32
// (16-byte copies, read from the stage in the first pass), and bf16 x with
// float32 dy (x's row of 264 bytes: dy's row starts at the next 16 bytes).
TEST(TemplateKernelsOnHost, StagedLayernormGradientsWalkTheirRows) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  for (auto [xType, dyType] :
       {std::pair{f32, bf16}, std::pair{f32, f32}, std::pair{bf16, f32}}) {
    SCOPED_TRACE(std::string(xType == f32 ? "float32" : "bf16") + " x, " +
                 (dyType == f32 ? "float32" : "bf16") + " dy");
    const int64_t C = 132;
    const Shape shape = {2, 1100, C};
    Builder b;
    int x = b.buf(xType, shape), gamma = b.buf(f32, {C}),
        dy = b.buf(dyType, shape);
    int dx = b.buf(f32, shape), dgamma = b.buf(f32, {C}),
        dbeta = b.buf(f32, {C});
    b.launch("layernorm_grad", {x, gamma, dy}, {dx, dgamma, dbeta})
        .floats["epsilon"] = 1e-5;
    int r = b.buf(f32, shape), fdg = b.buf(f32, {C}), fdb = b.buf(f32, {C}),
        fres = b.buf(f32, shape);
    exec::ScalarProgram epi; // dx + r
    epi.numArgs = 2;
    epi.code.push_back({exec::Opcode::Add, 2, 1, 0, 0});
    epi.numRegisters = 3;
    epi.results = {2};
    auto &flg =
        b.launch("fused_layernorm_grad", {x, gamma, dy, r}, {fdg, fdb, fres});
    flg.floats["epsilon"] = 1e-5;
    flg.body = epi;
    cuda::EmitOptions opts;
    opts.layernormStaged = true;
    HostKernels kernels(emitForHost(b.p, HostTarget::Sm80, opts));
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    for (const rt::Launch &l : b.p.functions[0].launches) {
      EXPECT_EQ(l.grid[0], 256u);
      EXPECT_NE(b.p.kernels[size_t(l.deviceKernel)].source.find(", true>("),
                std::string::npos);
    }
    std::vector<exec::HostTensor> data = runOnRandomData(b.p, kernels, 11);
    std::vector<exec::HostTensor> lg =
        exec::layernormGrad(data[x], data[gamma], data[dy], 1e-5f);
    expectNear(lg[0], data[dx].f32, 2e-5f, "layernorm_grad dx");
    expectNear(lg[1], data[dgamma].f32, 1e-4f, "layernorm_grad dgamma");
    expectNear(lg[2], data[dbeta].f32, 1e-4f, "layernorm_grad dbeta");
    std::vector<exec::HostTensor> lnb = exec::fusedLayernormGrad(
        epi, data[x], data[gamma], data[dy], {&data[r]}, {shape}, 1e-5f);
    expectNear(lnb[0], data[fdg].f32, 1e-4f, "fused_layernorm_grad dgamma");
    expectNear(lnb[1], data[fdb].f32, 1e-4f, "fused_layernorm_grad dbeta");
    expectNear(lnb[2], data[fres].f32, 2e-5f, "fused_layernorm_grad dx + r");
  }
}

namespace {

/// The implementation of the attention backward's kernel the emitter
/// picks for `backward` (attentionImpl's names): the wgmma backward's
/// entry is attentionBackwardTensorCores, which compiles to the atomic
/// kernel for targets without wgmma.
const char *backwardImpl(AttentionBackward backward) {
  return backward == AttentionBackward::Split ? "Mma"
         : backward == AttentionBackward::Wgmma ||
                 backward == AttentionBackward::WgmmaOverlap ||
                 backward == AttentionBackward::WgmmaBulk ||
                 backward == AttentionBackward::WgmmaOrdered
             ? "TensorCores"
         : backward == AttentionBackward::WgmmaSplit ||
                 backward == AttentionBackward::WgmmaSplitSs
             ? "SplitTensorCores"
         : backward == AttentionBackward::WgmmaDs ? "StoredDsTensorCores"
                                                  : "Atomic";
}

/// Whether kernel source `source` runs the atomic backward with 128 keys a
/// block (its second template argument list ends in ", 2").
bool twoKeyTiles(const std::string &source) {
  return source.find("AtomicBackwardShared<") != std::string::npos &&
         source.find(", 2>) == ") != std::string::npos;
}

// The tensor-core attention with bf16 q, k, v, dout: two query and two key
// tiles of 64, head dim 64, the mma.m16n8k16 fragments (and, for sm_90a,
// the forward's wgmma) emulated as PTX defines them. Probabilities (and dS)
// are rounded to bf16 between the two products, as FlashAttention does:
// agreement to bf16 precision.
void checkTensorCoreAttention(
    HostTarget target, AttentionBackward backward = AttentionBackward::Split) {
  SCOPED_TRACE(std::string(targetName(target)) + ", " +
               backwardName(backward));
  const bool atomic = backward != AttentionBackward::Split;
  Builder b;
  AttentionBothWays attention(b, DType::BF16, {1, 2, 128, 64}, 0.125f);
  rt::Program &p = b.p;
  HostKernels kernels(emitForHost(p, target, backward), target);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  for (const rt::DeviceKernel &dk : p.kernels) {
    EXPECT_EQ(twoKeyTiles(dk.source),
              backward == AttentionBackward::Atomic128 &&
                  dk.name.find("grad") != std::string::npos)
        << dk.name;
    ASSERT_EQ(attentionImpl(dk.source),
              dk.name.find("row_dot") != std::string::npos ? ""
              : dk.name.find("grad") == std::string::npos
                  ? (target == HostTarget::Sm90a ? "TensorCores" : "Mma")
                  : backwardImpl(backward))
        << dk.name;
  }

  std::vector<exec::HostTensor> data = runOnRandomData(p, kernels, 200);
  if (atomic) {
    // Each launch leaves its dq sums and tile counts zero: a second run
    // gives the same bits.
    std::vector<exec::HostTensor> again = runOnRandomData(p, kernels, 200);
    for (int id : attention.results())
      expectSame(data[id], again[id].f32, "the second run");
  }
  // The row dot: 16-byte loads of bf16 out and dout, 8 lanes a row of 64.
  attention.check(data, 1e-2f, 1e-5f, 1e-5f, 2e-2f);
}

} // namespace

TEST(TemplateKernelsOnHost, TensorCoreAttentionMatchesTheCpuExecutor) {
  checkTensorCoreAttention(HostTarget::Sm80);
}
TEST(TemplateKernelsOnHost, WgmmaAttentionMatchesTheCpuExecutor) {
  checkTensorCoreAttention(HostTarget::Sm90a);
}
TEST(TemplateKernelsOnHost, AtomicAttentionBackwardMatchesTheCpuExecutor) {
  checkTensorCoreAttention(HostTarget::Sm80, AttentionBackward::Atomic);
}
// 128 keys a block of 8 warps: causal, the second key tile's warps sit the
// first query tile out, and the dq product takes the first key tile alone.
TEST(TemplateKernelsOnHost, Atomic128AttentionBackwardMatchesTheCpuExecutor) {
  checkTensorCoreAttention(HostTarget::Sm80, AttentionBackward::Atomic128);
}
// Every product of the backward a wgmma on sm_90a; the same source built
// for sm_80 runs the atomic mma.sync kernel in the same launch (the split
// one for wgmma-split, wgmma-split-ss and wgmma-ds). Run twice
// (checkTensorCoreAttention): wgmma-ds's dq blocks read the dSᵀ the dk/dv
// blocks of the same launch stored, each launch's own.
TEST(TemplateKernelsOnHost, WgmmaAttentionBackwardMatchesTheCpuExecutor) {
  for (AttentionBackward backward :
       {AttentionBackward::Wgmma, AttentionBackward::WgmmaOverlap,
        AttentionBackward::WgmmaSplit, AttentionBackward::WgmmaSplitSs,
        AttentionBackward::WgmmaDs, AttentionBackward::WgmmaBulk,
        AttentionBackward::WgmmaOrdered}) {
    checkTensorCoreAttention(HostTarget::Sm90a, backward);
    checkTensorCoreAttention(HostTarget::Sm80, backward);
  }
}

// The atomic backward's dq product splits D by 16 rows over 4 warps: at
// D = 48 (and on the float32 path) the split kernel stays.
TEST(TemplateKernelsOnHost, AtomicBackwardKeepsTheSplitKernelElsewhere) {
  const DType f32 = DType::F32, bf = DType::BF16;
  for (auto [D, t] : {std::pair<int64_t, DType>{48, bf}, {64, f32}}) {
    Builder b;
    Shape qs = {1, 2, 128, D};
    int q = b.buf(t, qs), k = b.buf(t, qs), v = b.buf(t, qs),
        dout = b.buf(t, qs), o = b.buf(t, qs), lse = b.buf(f32, {1, 2, 128});
    int delta = b.buf(f32, {1, 2, 128});
    b.launch("flash_attention_grad", {q, k, v, o, lse, dout, delta},
             {b.buf(f32, qs), b.buf(f32, qs), b.buf(f32, qs)});
    rt::Program &p = emitForHost(b.p, HostTarget::Sm80, AttentionBackward::Atomic);
    EXPECT_EQ(attentionImpl(p.kernels[0].source),
              t == bf ? "Mma" : "Simple")
        << "D " << D;
    EXPECT_EQ(p.functions[0].launches[0].sharedBytes, 0u);
  }
}

// Without the causal mask keys and queries may differ in number: S keys
// in blocks of 64 (or 128) add to each of 2 query tiles (the last arrival
// writes dq). `grid`: how many blocks a head.
namespace {
void checkAtomicWithMoreKeys(AttentionBackward backward, int64_t S,
                             unsigned grid) {
  SCOPED_TRACE(std::string(backwardName(backward)) + ", S " +
               std::to_string(S));
  const DType f32 = DType::F32, bf = DType::BF16;
  Builder b;
  Shape qs = {1, 2, 128, 64}, ks = {1, 2, S, 64};
  int q = b.buf(bf, qs), k = b.buf(bf, ks), v = b.buf(bf, ks),
      dout = b.buf(bf, qs);
  int o = b.buf(bf, qs), lse = b.buf(f32, {1, 2, 128});
  auto &fa = b.launch("flash_attention", {q, k, v}, {o, lse});
  fa.ints["causal"] = 0;
  fa.floats["scale"] = 0.125;
  int dq = b.buf(f32, qs), dk = b.buf(f32, ks), dv = b.buf(f32, ks);
  int delta = b.rowDot(o, dout, {1, 2, 128});
  auto &fag = b.launch("flash_attention_grad",
                       {q, k, v, o, lse, dout, delta}, {dq, dk, dv});
  fag.ints["causal"] = 0;
  fag.floats["scale"] = 0.125;
  rt::Program &p = emitForHost(b.p, HostTarget::Sm80, backward);
  ASSERT_EQ(attentionImpl(p.kernels[2].source), "Atomic");
  // (the 2 heads in one group, blocks a head, 1 group).
  EXPECT_EQ(p.functions[0].launches[2].grid[0], 2u);
  EXPECT_EQ(p.functions[0].launches[2].grid[1], grid);
  EXPECT_EQ(p.functions[0].launches[2].grid[2], 1u);
  EXPECT_EQ(p.functions[0].launches[2].block[0], S / grid * 2);
  // Its module scratch: dq's float32 sums, [2 heads, 128, 64], and a count
  // for each of the 2 heads' 2 query tiles.
  EXPECT_EQ(p.kernels[2].scratchBytes, 2 * 128 * 64 * 4 + 2 * 2 * 4);
  EXPECT_EQ(p.kernels[0].scratchBytes, 0);
  HostKernels kernels(p);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  std::vector<exec::HostTensor> data = runOnRandomData(p, kernels, 400);
  // The forward's too: the gradients' reference takes its out and lse.
  std::vector<exec::HostTensor> fw =
      exec::flashAttention(data[q], data[k], data[v], 0.125f, false);
  expectNear(fw[0], data[o].f32, 1e-2f, "flash_attention out");
  expectNear(fw[1], data[lse].f32, 1e-5f, "flash_attention lse");
  std::vector<exec::HostTensor> bw = exec::flashAttentionGrad(
      data[q], data[k], data[v], data[o], data[lse], data[dout], 0.125f,
      false);
  expectNear(bw[0], data[dq].f32, 2e-2f, "flash_attention_grad dq");
  expectNear(bw[1], data[dk].f32, 2e-2f, "flash_attention_grad dk");
  expectNear(bw[2], data[dv].f32, 2e-2f, "flash_attention_grad dv");
}
} // namespace

// The wgmma backwards (sm_90a, emulated) with more keys than queries,
// without the causal mask: T = 128, S = 192 (the forward too is wgmma's). The
// atomic kinds' 3 key blocks each add to both query tiles; wgmma-split's grid
// has the 2 dq blocks first, each walking 3 key tiles (a refilled buffer), then
// the 3 dk/dv blocks, each walking both query tiles; wgmma-ds's the 3 dk/dv
// blocks first, each storing 2 tiles of dSᵀ, then the 2 dq blocks, each
// summing 3 of those; wgmma-ordered's 3 key blocks walk the query tiles
// from the last down, key tile 2 adding its shares after key tile 0's.
TEST(TemplateKernelsOnHost, WgmmaBackwardsWithMoreKeysThanQueries) {
  const DType f32 = DType::F32, bf = DType::BF16;
  for (AttentionBackward backward :
       {AttentionBackward::Wgmma, AttentionBackward::WgmmaOverlap,
        AttentionBackward::WgmmaSplit, AttentionBackward::WgmmaSplitSs,
        AttentionBackward::WgmmaDs, AttentionBackward::WgmmaBulk,
        AttentionBackward::WgmmaOrdered}) {
    SCOPED_TRACE(backwardName(backward));
    const bool split = backward == AttentionBackward::WgmmaSplit ||
                       backward == AttentionBackward::WgmmaSplitSs ||
                       backward == AttentionBackward::WgmmaDs;
    Builder b;
    Shape qs = {1, 2, 128, 64}, ks = {1, 2, 192, 64};
    int q = b.buf(bf, qs), k = b.buf(bf, ks), v = b.buf(bf, ks),
        dout = b.buf(bf, qs);
    int o = b.buf(bf, qs), lse = b.buf(f32, {1, 2, 128});
    auto &fa = b.launch("flash_attention", {q, k, v}, {o, lse});
    fa.ints["causal"] = 0;
    fa.floats["scale"] = 0.125;
    int dq = b.buf(f32, qs), dk = b.buf(f32, ks), dv = b.buf(f32, ks);
    int delta = b.rowDot(o, dout, {1, 2, 128});
    auto &fag = b.launch("flash_attention_grad",
                         {q, k, v, o, lse, dout, delta}, {dq, dk, dv});
    fag.ints["causal"] = 0;
    fag.floats["scale"] = 0.125;
    rt::Program &p = emitForHost(b.p, HostTarget::Sm90a, backward);
    ASSERT_EQ(attentionImpl(p.kernels[2].source), backwardImpl(backward));
    // Blocks a head: a key tile each, or (split) a query tile or a key
    // tile each.
    EXPECT_EQ(p.functions[0].launches[2].grid[1], split ? 5u : 3u);
    HostKernels kernels(p, HostTarget::Sm90a);
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    std::vector<exec::HostTensor> data = runOnRandomData(p, kernels, 400);
    // The wgmma forward's too (sm_90a runs it), over 3 key tiles.
    std::vector<exec::HostTensor> fw =
        exec::flashAttention(data[q], data[k], data[v], 0.125f, false);
    expectNear(fw[0], data[o].f32, 1e-2f, "flash_attention out");
    expectNear(fw[1], data[lse].f32, 1e-5f, "flash_attention lse");
    std::vector<exec::HostTensor> bw = exec::flashAttentionGrad(
        data[q], data[k], data[v], data[o], data[lse], data[dout], 0.125f,
        false);
    expectNear(bw[0], data[dq].f32, 2e-2f, "flash_attention_grad dq");
    expectNear(bw[1], data[dk].f32, 2e-2f, "flash_attention_grad dk");
    expectNear(bw[2], data[dv].f32, 2e-2f, "flash_attention_grad dv");
  }
}

TEST(TemplateKernelsOnHost, AtomicAttentionBackwardWithMoreKeysThanQueries) {
  checkAtomicWithMoreKeys(AttentionBackward::Atomic, 192, 3);
  // 128 keys a block where S allows; 192 keys keep blocks of 64.
  checkAtomicWithMoreKeys(AttentionBackward::Atomic128, 256, 2);
  checkAtomicWithMoreKeys(AttentionBackward::Atomic128, 192, 3);
}

// The tensor-core backward reads D from delta, not out: a float32 out
// (which no gpt op produces from bf16 q, but the kernel-level form allows)
// keeps the tensor cores, and so does a float32 dout's row dot its
// 16-byte loads. A bf16 dout is what the tensor cores need.
TEST(TemplateKernelsOnHost, AttentionBackwardReadsDeltaNotOut) {
  const DType f32 = DType::F32, bf = DType::BF16;
  for (DType doutType : {bf, f32}) {
    Builder b;
    Shape qs = {1, 2, 128, 64};
    int q = b.buf(bf, qs), k = b.buf(bf, qs), v = b.buf(bf, qs),
        dout = b.buf(doutType, qs), o = b.buf(doutType, qs),
        lse = b.buf(f32, {1, 2, 128});
    b.launch("flash_attention", {q, k, v}, {b.buf(bf, qs), lse});
    int delta = b.rowDot(o, dout, {1, 2, 128});
    b.launch("flash_attention_grad", {q, k, v, o, lse, dout, delta},
             {b.buf(f32, qs), b.buf(f32, qs), b.buf(f32, qs)});
    rt::Program &p = emitForHost(b.p);
    ASSERT_EQ(p.kernels.size(), 3u);
    EXPECT_EQ(attentionImpl(p.kernels[0].source), "Mma");
    EXPECT_NE(p.kernels[1].source.find(doutType == bf ? ", 8, 8, 4>(in0, in1"
                                                      : ", 4, 16, 4>(in0, in1"),
              std::string::npos);
    EXPECT_EQ(attentionImpl(p.kernels[2].source),
              doutType == bf ? "Mma" : "Simple");
  }
}

// gpt.attention_row_dot alone, on the layouts and widths it takes:
// [B, H, T, D] and packed [B, T, H·D]; 16-byte loads of bf16 (8 lanes a
// row at D = 64, 2 at D = 16), float32 4 at a time (32 lanes at D = 136),
// and one element at a time where a row's start is not 16-byte aligned
// (D = 12 of bf16: 8 lanes, a lane's second chunk past D for some). B = 2,
// H = 3, T = 40: 240 rows; a block takes 4 rounds of 256 / lanes rows (128
// at 8 lanes), so a last block only partly full, whose rows past the end
// read the last row and write nothing.
TEST(TemplateKernelsOnHost, AttentionRowDotMatchesTheCpuExecutor) {
  struct Case {
    int64_t D;
    DType type;
    bool packed;
    const char *call;
  };
  for (const Case &c : {Case{64, DType::BF16, true, ", 8, 8, 4>(in0, in1"},
                        Case{16, DType::BF16, false, ", 8, 2, 4>(in0, in1"},
                        Case{136, DType::F32, true, ", 4, 32, 4>(in0, in1"},
                        Case{12, DType::BF16, true, ", 1, 8, 4>(in0, in1"}}) {
    SCOPED_TRACE("D " + std::to_string(c.D) + (c.packed ? ", packed" : ""));
    const int64_t B = 2, H = 3, T = 40;
    Builder b;
    Shape shape = c.packed ? Shape{B, T, H * c.D} : Shape{B, H, T, c.D};
    int o = b.buf(c.type, shape), dout = b.buf(c.type, shape);
    int delta = b.rowDot(o, dout, {B, H, T}, c.packed ? H : 0);
    rt::Program &p = emitForHost(b.p);
    ASSERT_NE(p.kernels[0].source.find(c.call), std::string::npos)
        << p.kernels[0].source.substr(p.kernels[0].source.rfind("extern"));
    HostKernels kernels(p);
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    std::vector<exec::HostTensor> data = runOnRandomData(p, kernels, 500);
    expectNear(exec::attentionRowDot(data[o], data[dout], c.packed ? H : 0),
               data[delta].f32, 1e-5f, "attention_row_dot");
  }
}

namespace {

/// gpt.flash_attention_qkv and its gradient read q, k and v in place from
/// a packed [B, T, 3C] tensor and write out [B, T, C] and dqkv [B, T, 3C].
/// B = H = 2, so both halves of a head (batch · H + head) matter; with
/// 1100·D bytes of L2 for a group of heads, the tensor-core grids take them
/// in groups of 2 (forward) and 1 (backward), so that the grid's x and z
/// both place heads. The reference is the CPU executor's unpack, run, pack. Tensor cores: bf16
/// inputs (T = 128, D = tensorD), tolerances as above; otherwise float32
/// (the Simple kernels, D = 8), tolerances as for the [B, H, T, D] op.
void checkPackedAttention(
    bool tensorCores, HostTarget target = HostTarget::Sm80,
    int64_t tensorD = 64,
    AttentionBackward backward = AttentionBackward::Split) {
  SCOPED_TRACE(std::string(targetName(target)) + ", D " +
               std::to_string(tensorD) + ", " + backwardName(backward));
  const bool atomic = backward != AttentionBackward::Split;
  const DType f32 = DType::F32, in = tensorCores ? DType::BF16 : f32;
  const int64_t B = 2, H = 2, D = tensorCores ? tensorD : 8;
  const int64_t T = tensorCores ? 128 : 16, C = H * D;
  const float scale = tensorCores ? 0.125f : 0.35f;
  Builder b;
  int qkv = b.buf(in, {B, T, 3 * C}), dout = b.buf(in, {B, T, C});
  std::vector<int> attn;
  for (int causal : {1, 0}) {
    int o = b.buf(in, {B, T, C}), lse = b.buf(f32, {B, H, T});
    auto &fa = b.launch("flash_attention_qkv", {qkv}, {o, lse});
    fa.ints = {{"causal", causal}, {"num_heads", H}};
    fa.floats["scale"] = scale;
    int dqkv = b.buf(f32, {B, T, 3 * C});
    int delta = b.rowDot(o, dout, {B, H, T}, H);
    auto &fag = b.launch("flash_attention_qkv_grad",
                         {qkv, o, lse, dout, delta}, {dqkv});
    fag.ints = {{"causal", causal}, {"num_heads", H}};
    fag.floats["scale"] = scale;
    attn.insert(attn.end(), {o, lse, dqkv});
  }
  rt::Program &p = b.p;
  cuda::EmitOptions opts = withBackward({}, backward);
  opts.attentionL2Bytes = 1100 * D; // 4TD = 512D a head shared, or 1024(D+1)
  HostKernels kernels(emitForHost(p, target, opts), target);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  for (const rt::Launch &l : p.functions[0].launches) {
    if (!tensorCores || l.kernel.find("row_dot") != std::string::npos)
      continue;
    const bool grad = l.kernel.find("grad") != std::string::npos;
    // (heads of a group, blocks a head, groups).
    EXPECT_EQ(l.grid[0], grad ? 1u : 2u) << l.kernel;
    EXPECT_EQ(l.grid[2], grad ? 4u : 2u) << l.kernel;
  }
  for (const rt::DeviceKernel &k : p.kernels) {
    if (k.name.find("row_dot") != std::string::npos)
      continue;
    // 128 keys a block for D of 32 and 64.
    EXPECT_EQ(twoKeyTiles(k.source), backward == AttentionBackward::Atomic128 &&
                                         tensorD >= 32 &&
                                         k.name.find("grad") != std::string::npos)
        << k.name;
    ASSERT_EQ(attentionImpl(k.source) != "Simple", tensorCores) << k.name;
    // (wgmma-ds stores dS at D of 32 and 64; at 16 it is wgmma-split.)
    if (atomic && k.name.find("grad") != std::string::npos)
      ASSERT_EQ(attentionImpl(k.source),
                backward == AttentionBackward::WgmmaDs && tensorD == 16
                    ? backwardImpl(AttentionBackward::WgmmaSplit)
                    : backwardImpl(backward))
          << k.name;
  }

  std::vector<exec::HostTensor> data = runOnRandomData(p, kernels, 300);
  const float outTol = tensorCores ? 1e-2f : 2e-5f;
  const float lseTol = tensorCores ? 1e-5f : 2e-5f;
  const float gradTol = tensorCores ? 2e-2f : 1e-4f;
  for (int c = 0; c < 2; ++c) {
    bool causal = c == 0;
    const int *a = attn.data() + 3 * c;
    std::vector<exec::HostTensor> fw =
        exec::flashAttentionQKV(data[qkv], H, scale, causal);
    expectNear(fw[0], data[a[0]].f32, outTol, "flash_attention_qkv out");
    expectNear(fw[1], data[a[1]].f32, lseTol, "flash_attention_qkv lse");
    std::vector<exec::HostTensor> bw = exec::flashAttentionQKVGrad(
        data[qkv], data[a[0]], data[a[1]], data[dout], H, scale, causal);
    expectNear(bw[0], data[a[2]].f32, gradTol, "flash_attention_qkv_grad");
  }
}

} // namespace

namespace {

/// Where function `name` of a kernel source begins and ends: its definition
/// (the first `name(` after a space or at a line's start, followed by `{`
/// before any `;`) to the `}` that starts a line after it.
std::pair<size_t, size_t> functionSpan(const std::string &source,
                                       const std::string &name) {
  for (size_t at = source.find(name + "("); at != std::string::npos;
       at = source.find(name + "(", at + 1)) {
    if (at == 0 || (source[at - 1] != ' ' && source[at - 1] != '\n'))
      continue;
    size_t brace = source.find('{', at), semi = source.find(';', at);
    if (brace < semi)
      return {at, source.find("\n}", brace)};
  }
  return {std::string::npos, std::string::npos};
}

/// One packed causal attention, forward and backward, B = H = 1, D = 64,
/// T = 192: three tiles of 64, so that a double buffer is refilled (256
/// for the backward with 128 keys a block: two key blocks; 256 for the
/// forward with three V buffers, --attention-forward=wgmma-overlap, which
/// `forward` names, else the target's default).
rt::Program &packedAttentionForRaces(
    Builder &b, HostTarget target = HostTarget::Sm80,
    AttentionBackward backward = AttentionBackward::Split,
    const char *forward = nullptr) {
  const bool threeBuffers =
      forward && std::string(forward) == "wgmma-overlap";
  // (wgmma-k128: three steps of 128 keys, so that a buffer is refilled.)
  const bool keys128 = forward && std::string(forward) == "wgmma-k128";
  const int64_t B = 1, H = 1, D = 64,
                T = keys128 ? 384
                    : backward == AttentionBackward::Atomic128 || threeBuffers
                        ? 256
                        : 192,
                C = H * D;
  int qkv = b.buf(DType::BF16, {B, T, 3 * C}),
      dout = b.buf(DType::BF16, {B, T, C});
  int o = b.buf(DType::BF16, {B, T, C}), lse = b.buf(DType::F32, {B, H, T});
  auto &fa = b.launch("flash_attention_qkv", {qkv}, {o, lse});
  fa.ints = {{"causal", 1}, {"num_heads", H}};
  fa.floats["scale"] = 0.125;
  int dqkv = b.buf(DType::F32, {B, T, 3 * C});
  int delta = b.rowDot(o, dout, {B, H, T}, H);
  auto &fag = b.launch("flash_attention_qkv_grad",
                       {qkv, o, lse, dout, delta}, {dqkv});
  fag.ints = {{"causal", 1}, {"num_heads", H}};
  fag.floats["scale"] = 0.125;
  cuda::EmitOptions opts = withBackward({}, backward);
  if (forward && !cuda::selectAttentionAlgorithm(opts, true, forward))
    throw std::logic_error(std::string("no forward ") + forward);
  return emitForHost(b.p, target, opts);
}

/// Runs `check` on `p` with kernel `k`'s source [at, at + length) replaced
/// by `replacement`, compiled for the host (with the line of `at`); false
/// (and a failure) if it does not compile.
bool withMutation(
    const rt::Program &p, size_t k, size_t at, size_t length,
    const std::string &replacement, HostTarget target,
    const std::function<void(rt::Program &, HostKernels &, size_t)> &check) {
  const std::string &source = p.kernels[k].source;
  rt::Program mutated = p;
  mutated.kernels[k].source =
      source.substr(0, at) + replacement + source.substr(at + length);
  HostKernels kernels(mutated, target);
  EXPECT_TRUE(kernels.ok()) << kernels.error;
  if (!kernels.ok())
    return false;
  check(mutated, kernels,
        std::count(source.begin(), source.begin() + at, '\n') + 1);
  return true;
}

/// Takes each `statement` out of function `fn` of kernel `k`, one at a
/// time, and expects the run to report `message`; returns how many.
int expectEachNeeded(const rt::Program &p, size_t k, const std::string &fn,
                     const std::string &statement, const std::string &message,
                     HostTarget target, const std::string &replacement = "") {
  const std::string source = p.kernels[k].source;
  auto [from, to] = functionSpan(source, fn);
  EXPECT_NE(from, std::string::npos) << fn;
  int removed = 0;
  for (size_t at = source.find(statement, from); at < to;
       at = source.find(statement, at + 1)) {
    const bool compiled = withMutation(
        p, k, at, statement.size(), replacement, target,
        [&](rt::Program &mutated, HostKernels &kernels, size_t line) {
          try {
            runOnRandomData(mutated, kernels, 7);
            ADD_FAILURE() << p.kernels[k].name << ": nothing reported with "
                          << statement << " at line " << line
                          << " replaced by '" << replacement << "'";
          } catch (const std::runtime_error &e) {
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
                << statement << " at line " << line << ": " << e.what();
          }
        });
    if (!compiled)
      return removed;
    ++removed;
  }
  return removed;
}

// embedding_grad's ids come through a ring in shared memory kIdRounds
// rounds ahead: a thread reads its round's 4 only after its wait for that
// round's copy group. Waiting for one group fewer (kIdRounds in flight)
// reads a copy still in flight, which the race checker reports. (600
// positions: two rounds, the third group of the prologue empty.)
TEST(TemplateKernelsOnHost, EmbeddingGradWaitsForItsIdCopies) {
  Builder b;
  int dy = b.buf(DType::F32, {1, 600, 200}), ids = b.buf(DType::I32, {1, 600}),
      table = b.buf(DType::F32, {20, 200});
  b.launch("embedding_grad", {dy, ids}, {table});
  const rt::Program p = emitForHost(b.p);
  EXPECT_EQ(expectEachNeeded(p, 0, "embeddingBackward",
                             "waitCopies<kIdRounds - 1>();",
                             "reads a cp.async its writer has not waited for",
                             HostTarget::Sm80, "waitCopies<kIdRounds>();"),
            1);
}

/// A wgmma kernel's function `fn` (on sm_90a): each of its `barriers`
/// __syncthreads() and its one fence.proxy.async is needed, taken out one
/// at a time (expectEachNeeded).
void expectBarriersAndProxyFenceNeeded(const rt::Program &p, size_t k,
                                       const std::string &fn, int barriers) {
  const HostTarget sm90a = HostTarget::Sm90a;
  EXPECT_EQ(expectEachNeeded(p, k, fn, "__syncthreads();",
                             "shared-memory race", sm90a),
            barriers)
      << fn;
  EXPECT_EQ(expectEachNeeded(p, k, fn, "fenceProxyAsync();",
                             "with no fence.proxy.async", sm90a),
            1)
      << fn;
}

/// Whether some element of `got` differs from `want`'s (NaN from any).
bool anyOutputDiffers(const std::vector<exec::HostTensor> &got,
                      const std::vector<exec::HostTensor> &want) {
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t j = 0; j < got[i].f32.size(); ++j)
      if (!(got[i].f32[j] == want[i].f32[j]))
        return true;
  return false;
}

/// Raises each `wgmmaWait<N>();` of function `fn` of kernel `k` to N + 1,
/// one at a time, and expects the run to notice: a product that is still in
/// flight when its accumulators are read leaves the emulation's poison (a
/// NaN) in them, so some output differs from the unmutated run's, or a
/// misuse is reported. Returns how many waits were raised; `spared` lists
/// those (by index in source order) not expected to be caught, with why.
int expectEachWaitNeeded(const rt::Program &p, size_t k, const std::string &fn,
                         HostTarget target,
                         const std::map<int, std::string> &spared = {}) {
  HostKernels whole(p, target);
  EXPECT_TRUE(whole.ok()) << whole.error;
  if (!whole.ok())
    return 0;
  rt::Program base = p;
  const std::vector<exec::HostTensor> want = runOnRandomData(base, whole, 7);
  const std::string source = p.kernels[k].source;
  auto [from, to] = functionSpan(source, fn);
  EXPECT_NE(from, std::string::npos) << fn;
  const std::string wait = "wgmmaWait<";
  int raised = 0;
  for (size_t at = source.find(wait, from); at < to;
       at = source.find(wait, at + 1), ++raised) {
    const size_t digit = at + wait.size();
    const int n = source[digit] - '0';
    if (spared.count(raised))
      continue;
    const bool compiled = withMutation(
        p, k, digit, 1, std::to_string(n + 1), target,
        [&](rt::Program &mutated, HostKernels &kernels, size_t line) {
          try {
            EXPECT_TRUE(
                anyOutputDiffers(runOnRandomData(mutated, kernels, 7), want))
                << p.kernels[k].name << ": wgmmaWait<" << n << "> at line "
                << line << " raised by one, and every output is the same";
          } catch (const std::runtime_error &e) {
            EXPECT_NE(std::string(e.what()).find("wgmma"), std::string::npos)
                << "wgmmaWait<" << n << "> at line " << line << ": "
                << e.what();
          }
        });
    if (!compiled)
      return raised;
  }
  EXPECT_EQ(size_t(std::count_if(spared.begin(), spared.end(),
                                 [&](const auto &s) { return s.first < raised; })),
            spared.size());
  return raised;
}

} // namespace

// The race check (HostKernels.cpp) sees what the emulation, one thread
// after another, would hide: every barrier of the tensor-core attention
// orders shared-memory tiles, and without any one of them (taken out of the
// emitted source, one at a time) the forward or the backward races.
TEST(TemplateKernelsOnHost, EveryAttentionBarrierIsNeeded) {
  Builder b;
  rt::Program &p = packedAttentionForRaces(b);
  ASSERT_EQ(p.kernels.size(), 3u);
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    if (p.kernels[k].name.find("row_dot") != std::string::npos)
      continue;
    bool grad = p.kernels[k].name.find("grad") != std::string::npos;
    EXPECT_GE(expectEachNeeded(p, k,
                               grad ? "attentionBackwardMma"
                                    : "attentionForwardMma",
                               "__syncthreads();", "shared-memory race",
                               HostTarget::Sm80),
              3)
        << p.kernels[k].name;
  }
}

// --attention-forward=mma-pipe has one barrier a key tile where the mma
// forward has two (k copied one tile ahead of v), and one after q and the
// first k land: T = 192, so the last block walks three key tiles, the
// third alone after a round of two. Without either barrier a warp reads a
// tile another thread's copies have not filled, or a copy overwrites a
// tile another warp still reads.
TEST(TemplateKernelsOnHost, EveryPipelinedForwardBarrierIsNeeded) {
  Builder b;
  rt::Program &p =
      packedAttentionForRaces(b, HostTarget::Sm80, AttentionBackward::Split,
                              "mma-pipe");
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    if (p.kernels[k].name.find("flash_attention_qkv_0") == std::string::npos)
      continue;
    EXPECT_EQ(expectEachNeeded(p, k, "attentionForwardMmaPipelined",
                               "__syncthreads();", "shared-memory race",
                               HostTarget::Sm80),
              2)
        << p.kernels[k].name;
  }
}

namespace {
/// The forwards with 128 queries a block: --attention-forward=mma128 (8
/// warps of 16 rows), mma2 (4 warps of 32, two row tiles a warp) and
/// wgmma128 (two warpgroups sharing each key tile; sm_90a).
enum class WideForward { Warps8, RowPairs, Warpgroups2 };
const char *wideName(WideForward w) {
  return w == WideForward::Warps8     ? "mma128"
         : w == WideForward::RowPairs ? "mma2"
                                      : "wgmma128";
}
HostTarget wideTarget(WideForward w) {
  return w == WideForward::Warpgroups2 ? HostTarget::Sm90a : HostTarget::Sm80;
}

/// The packed forward attention with 128 queries a block: B = 1, T = 256
/// (two blocks; causal, the second walks four key tiles, so each buffer is
/// refilled), H heads of D, causal or not.
rt::Program &wideForward(Builder &b, WideForward w, int64_t H, int64_t D,
                         bool causal) {
  const int64_t T = 256, C = H * D;
  int qkv = b.buf(DType::BF16, {1, T, 3 * C});
  int o = b.buf(DType::BF16, {1, T, C}), lse = b.buf(DType::F32, {1, H, T});
  auto &fa = b.launch("flash_attention_qkv", {qkv}, {o, lse});
  fa.ints = {{"causal", causal}, {"num_heads", H}};
  fa.floats["scale"] = 0.125;
  cuda::EmitOptions opts;
  EXPECT_TRUE(cuda::selectAttentionAlgorithm(opts, true, wideName(w)));
  return emitForHost(b.p, wideTarget(w), opts);
}
} // namespace

// 128 queries a block against the CPU executor, at D = 64 and 32, causal
// (where the block's first half of rows skips its last key tile, wholly in
// their future, and the second half takes its diagonal in the second tile)
// and not. With two row tiles a warp, each k and v fragment serves both;
// with two warpgroups, each its 64 queries' products.
TEST(TemplateKernelsOnHost, WideForwardAttentionMatchesTheCpuExecutor) {
  for (WideForward w : {WideForward::Warps8, WideForward::RowPairs,
                        WideForward::Warpgroups2})
    for (int64_t D : {64, 32})
      for (bool causal : {true, false}) {
        SCOPED_TRACE(std::string(wideName(w)) + ", D = " + std::to_string(D) +
                     (causal ? ", causal" : ""));
        const int64_t H = 2;
        Builder b;
        rt::Program &p = wideForward(b, w, H, D, causal);
        ASSERT_EQ(p.kernels.size(), 1u);
        EXPECT_NE(p.kernels[0].source.find(
                      w == WideForward::Warps8     ? ", 8>(in0, in0 + "
                      : w == WideForward::RowPairs ? ", 4, 2>(in0, in0 + "
                                                   : ", false, 2>(in0, in0 + "),
                  std::string::npos);
        const rt::Launch &l = p.functions[0].launches[0];
        EXPECT_EQ(l.grid[0], uint32_t(H)); // one group of H heads
        EXPECT_EQ(l.grid[1], 2u);
        EXPECT_EQ(l.grid[2], 1u);
        EXPECT_EQ(l.block[0], w == WideForward::RowPairs ? 128u : 256u);
        HostKernels kernels(p, wideTarget(w));
        ASSERT_TRUE(kernels.ok()) << kernels.error;
        std::vector<exec::HostTensor> data =
            runOnRandomData(p, kernels, 400);
        std::vector<exec::HostTensor> fw =
            exec::flashAttentionQKV(data[0], H, 0.125f, causal);
        expectNear(fw[0], data[1].f32, 1e-2f, "flash_attention_qkv out");
        expectNear(fw[1], data[2].f32, 1e-5f, "flash_attention_qkv lse");
      }
}

// Their four barriers: q and the first key tile landed, q (staged in the
// two tiles the second key tile reuses) read, and the double buffer's two.
// wgmma128's two, as the wgmma forward's: tiles landed before either
// warpgroup's wgmma reads them, read by both before they are refilled.
TEST(TemplateKernelsOnHost, EveryWideForwardBarrierIsNeeded) {
  for (WideForward w : {WideForward::Warps8, WideForward::RowPairs,
                        WideForward::Warpgroups2}) {
    SCOPED_TRACE(wideName(w));
    Builder b;
    rt::Program &p = wideForward(b, w, 1, 64, true);
    const bool wgmma = w == WideForward::Warpgroups2;
    EXPECT_EQ(expectEachNeeded(p, 0,
                               wgmma ? "attentionForwardWgmma"
                                     : "attentionForwardMma",
                               "__syncthreads();", "shared-memory race",
                               wideTarget(w)),
              wgmma ? 2 : 4);
  }
}

// And for the atomic backward (its arrival at the query tiles is a helper:
// what it orders, the blocks' atomics before their count, is between
// blocks, which the emulation runs one after another).
TEST(TemplateKernelsOnHost, EveryAtomicAttentionBarrierIsNeeded) {
  for (AttentionBackward backward :
       {AttentionBackward::Atomic, AttentionBackward::Atomic128}) {
    SCOPED_TRACE(backwardName(backward));
    Builder b;
    rt::Program &p = packedAttentionForRaces(b, HostTarget::Sm80, backward);
    ASSERT_EQ(p.kernels.size(), 3u);
    const size_t k = kernelWithImpl(p, "Atomic");
    ASSERT_LT(k, p.kernels.size());
    EXPECT_EQ(twoKeyTiles(p.kernels[k].source),
              backward == AttentionBackward::Atomic128);
    // The prologue's two, and one a query tile.
    EXPECT_EQ(expectEachNeeded(p, k, "attentionBackwardAtomic",
                               "__syncthreads();", "shared-memory race",
                               HostTarget::Sm80),
              3);
  }
}

/// What a wgmma forward (function `fn` of kernel k) needs, each taken out
/// in turn and reported by the emulation: `barriers` __syncthreads, one
/// fence.proxy.async, each of `fences` (the batches' wgmma.fence), each
/// fence of `narrowed` replaced by its narrower second (naming fewer
/// operands than its batch writes), and `waits` wgmma waits; with all of
/// them, no report.
struct WgmmaForwardSync {
  const char *fn;
  int barriers;
  std::vector<const char *> fences;
  std::vector<std::pair<const char *, const char *>> narrowed;
  int waits;
  /// Waits random data never reaches (by their order in fn), with why.
  std::map<int, std::string> spared = {};
};
void expectEveryWgmmaForwardSyncNeeded(rt::Program &p, size_t k,
                                       const WgmmaForwardSync &sync) {
  const HostTarget sm90a = HostTarget::Sm90a;
  expectBarriersAndProxyFenceNeeded(p, k, sync.fn, sync.barriers);
  for (const char *fence : sync.fences)
    EXPECT_EQ(expectEachNeeded(p, k, sync.fn, fence,
                               "no wgmma.fence since the last wait", sm90a),
              1)
        << fence;
  for (auto [fence, narrower] : sync.narrowed)
    EXPECT_EQ(expectEachNeeded(p, k, sync.fn, fence,
                               "operands its wgmma.fence did not name", sm90a,
                               narrower),
              1)
        << fence;
  EXPECT_EQ(expectEachWaitNeeded(p, k, sync.fn, sm90a, sync.spared),
            sync.waits);
  HostKernels kernels(p, sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  runOnRandomData(p, kernels, 7);
}

// The same for the wgmma forward, and its two fences: without a thread's
// fence.proxy.async its copies are not ordered before wgmma's reads of
// them; without a wgmma.fence a batch starts on accumulators the threads
// just wrote, and a fence must name the batch's own operands (what it
// orders are their writes; test/cuda/wgmma-fences.test checks the PTX).
// The loop's two barriers: tiles landed before wgmma reads them, read
// before they are refilled (q's tile is written once, before the first).
// Each wait lands what is read next (the scores, then the output).
TEST(TemplateKernelsOnHost, EveryWgmmaBarrierAndFenceIsNeeded) {
  Builder b;
  rt::Program &p = packedAttentionForRaces(b, HostTarget::Sm90a);
  ASSERT_EQ(p.kernels.size(), 3u);
  const size_t k = kernelWithImpl(p, "TensorCores");
  ASSERT_LT(k, p.kernels.size());
  expectEveryWgmmaForwardSyncNeeded(
      p, k,
      {"attentionForwardWgmma", 2, {"wgmmaFence(s, qa);", "wgmmaFence(acc, pa);"},
       {{"wgmmaFence(acc, pa);", "wgmmaFence(s, pa);"},
        {"wgmmaFence(s, qa);", "wgmmaFence(acc, qa);"}},
       2});
}

// The same for --attention-forward=wgmma-overlap: its one barrier a tile
// (tiles landed before wgmma reads them, and the buffers the next copies
// take read: tile t - 1's K, tile t - 2's V), its fence.proxy.async, the
// wgmma.fence of each of its three batches (the first tile's scores, a
// tile's scores with the last one's output product, the last output
// product), and its waits: the first tile's scores, a tile's scores, the
// output product before its rescaling and before its probabilities are
// packed again, the last before out is written. (The rescale's own wait,
// on tiles whose maxima moved, random data never reaches:
// WgmmaOverlapForwardWaitsBeforeItsRescale.)
TEST(TemplateKernelsOnHost, EveryWgmmaOverlapForwardBarrierFenceAndWaitIsNeeded) {
  Builder b;
  rt::Program &p = packedAttentionForRaces(
      b, HostTarget::Sm90a, AttentionBackward::Split, "wgmma-overlap");
  ASSERT_EQ(p.kernels.size(), 3u);
  const size_t k = kernelWithImpl(p, "TensorCores");
  ASSERT_LT(k, p.kernels.size());
  ASSERT_NE(p.kernels[k].source.find(", true>("), std::string::npos)
      << "the overlap forward's instantiation";
  expectEveryWgmmaForwardSyncNeeded(
      p, k,
      {"attentionForwardWgmmaOverlap",
       1,
       {"wgmmaFence(s, qa);", "wgmmaFence(s, qa, acc, pa);",
        "wgmmaFence(acc, pa);"},
       {{"wgmmaFence(s, qa, acc, pa);", "wgmmaFence(s, qa);"}},
       5,
       {{2, "the rescale's, on tiles whose maxima moved"}}});
}

// The same for --attention-forward=wgmma-k128: a step's two barriers
// (its copies landed before wgmma reads them; the buffer read before it
// is refilled), its fence.proxy.async, each batch's wgmma.fence naming its
// operands (the scores' two tiles), and its two waits.
TEST(TemplateKernelsOnHost, EveryWgmmaKeys128ForwardBarrierFenceAndWaitIsNeeded) {
  Builder b;
  rt::Program &p = packedAttentionForRaces(
      b, HostTarget::Sm90a, AttentionBackward::Split, "wgmma-k128");
  ASSERT_EQ(p.kernels.size(), 3u);
  const size_t k = kernelWithImpl(p, "Keys128TensorCores");
  ASSERT_LT(k, p.kernels.size());
  expectEveryWgmmaForwardSyncNeeded(
      p, k,
      {"attentionForwardWgmmaKeys128", 2,
       {"wgmmaFence(s0, qa, s1, qa);", "wgmmaFence(acc, pa);"},
       {{"wgmmaFence(acc, pa);", "wgmmaFence(s0, pa);"},
        {"wgmmaFence(s0, qa, s1, qa);", "wgmmaFence(s0, qa);"}},
       2});
}

// --attention-forward=wgmma-k128 against the CPU executor, at D = 64 and
// 32, causal and not, T = 384 (six query blocks, three steps of 128
// keys): causal blocks end on a step of one tile (the diagonal; the second
// tile's products still run, its scores -inf) or of two (the diagonal
// second). One block of 64 queries and 4 warps, as the wgmma forward's,
// with 73 KB of dynamic shared memory at D = 64 (36 at 32).
TEST(TemplateKernelsOnHost, WgmmaKeys128ForwardMatchesTheCpuExecutor) {
  for (int64_t D : {64, 32})
    for (bool causal : {true, false}) {
      SCOPED_TRACE("D = " + std::to_string(D) + (causal ? ", causal" : ""));
      const int64_t H = 2, T = 384, C = H * D;
      Builder b;
      int qkv = b.buf(DType::BF16, {1, T, 3 * C});
      int o = b.buf(DType::BF16, {1, T, C}),
          lse = b.buf(DType::F32, {1, H, T});
      auto &fa = b.launch("flash_attention_qkv", {qkv}, {o, lse});
      fa.ints = {{"causal", causal}, {"num_heads", H}};
      fa.floats["scale"] = 0.125;
      cuda::EmitOptions opts;
      ASSERT_TRUE(cuda::selectAttentionAlgorithm(opts, true, "wgmma-k128"));
      rt::Program &p = emitForHost(b.p, HostTarget::Sm90a, opts);
      ASSERT_EQ(p.kernels.size(), 1u);
      EXPECT_NE(p.kernels[0].source.find(
                    "  attentionForwardKeys128TensorCores<"),
                std::string::npos);
      const rt::Launch &l = p.functions[0].launches[0];
      EXPECT_EQ(l.grid[1], uint32_t(T / 64));
      EXPECT_EQ(l.block[0], 128u);
      EXPECT_EQ(l.sharedBytes,
                uint32_t(9 * 64 * D * 2 + (D == 64 ? 1024 : 128) - 16));
      HostKernels kernels(p, HostTarget::Sm90a);
      ASSERT_TRUE(kernels.ok()) << kernels.error;
      std::vector<exec::HostTensor> data = runOnRandomData(p, kernels, 401);
      std::vector<exec::HostTensor> fw =
          exec::flashAttentionQKV(data[0], H, 0.125f, causal);
      expectNear(fw[0], data[1].f32, 1e-2f, "flash_attention_qkv out");
      expectNear(fw[1], data[2].f32, 1e-5f, "flash_attention_qkv lse");
    }
}

// And for the wgmma backward: the loop's two barriers (the tile's copies
// landed and seen by wgmma, and dSᵀ whole before the dq product reads it;
// each also frees what the other half of the loop refills), its
// fence.proxy.async, and each of its three batches' wgmma.fence, which
// must name that batch's operands.
TEST(TemplateKernelsOnHost, EveryWgmmaBackwardBarrierAndFenceIsNeeded) {
  Builder b;
  rt::Program &p =
      packedAttentionForRaces(b, HostTarget::Sm90a, AttentionBackward::Wgmma);
  ASSERT_EQ(p.kernels.size(), 3u);
  const size_t k = kernelCalling(p, "attentionBackwardTensorCores");
  ASSERT_LT(k, p.kernels.size());
  const HostTarget sm90a = HostTarget::Sm90a;
  const char *fn = "attentionBackwardWgmma";
  expectBarriersAndProxyFenceNeeded(p, k, fn, 2);
  // A query tile half's two batches are wgmmaKeysOnQueryHalf's, which
  // only this kernel calls in this program.
  const char *half = "wgmmaKeysOnQueryHalf";
  for (const char *fence :
       {"wgmmaFenceKept(p, kRows, ds, vRows);",
        "wgmmaFence(accV, pa, accK, dsa);"})
    EXPECT_EQ(expectEachNeeded(p, k, half, fence,
                               "no wgmma.fence since the last wait", sm90a),
              1)
        << fence;
  // The second half's dv and dk are still in flight there: the last fence
  // is theirs, which names other registers than the dq product's.
  EXPECT_EQ(expectEachNeeded(p, k, fn, "wgmmaFence(dqAcc, dsT);",
                             "operands its wgmma.fence did not name", sm90a),
            1);
  EXPECT_EQ(expectEachNeeded(p, k, half, "wgmmaFence(accV, pa, accK, dsa);",
                             "operands its wgmma.fence did not name", sm90a,
                             "wgmmaFence(accV, pa, accK, pa);"),
            1);
  EXPECT_EQ(expectEachNeeded(p, k, half, "wgmmaFenceKept(p, kRows, ds, vRows);",
                             "operands its wgmma.fence did not name", sm90a,
                             "wgmmaFence(p, kRows.a);"),
            1);
  HostKernels kernels(p, sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  runOnRandomData(p, kernels, 7);
}

// --attention-backward=wgmma-bulk: the loop's two barriers and proxy fence
// as wgmma's; addDqShareInBulk's two barriers (dSᵀ's tile read by every
// warp, and the stage by the last bulk reduction, before dq's share goes
// there; the share whole before the bulk reductions read it) and its
// fence.proxy.async (the share seen by them);
// and its bulk waits. The emulation reads a bulk reduction's source at
// the wait for its reads and adds its sums at the wait for them: without
// either wait for the reads (dSᵀ's part at each tile's first barrier, the
// stage's before the next share) the next tile's writes are read in their
// place, and some dq differs; without the wait for the sums the thread
// ends with them in flight.
TEST(TemplateKernelsOnHost, EveryWgmmaBulkBarrierFenceAndWaitIsNeeded) {
  Builder b;
  rt::Program &p = packedAttentionForRaces(b, HostTarget::Sm90a,
                                           AttentionBackward::WgmmaBulk);
  ASSERT_EQ(p.kernels.size(), 3u);
  const size_t k = kernelCalling(p, "attentionBackwardTensorCores");
  ASSERT_LT(k, p.kernels.size());
  const HostTarget sm90a = HostTarget::Sm90a;
  expectBarriersAndProxyFenceNeeded(p, k, "attentionBackwardWgmma", 2);
  expectBarriersAndProxyFenceNeeded(p, k, "addDqShareInBulk", 2);
  EXPECT_EQ(expectEachNeeded(p, k, "attentionBackwardWgmma", "bulkWait<0>();",
                             "thread ends with a bulk reduction in flight",
                             sm90a),
            1);
  HostKernels whole(p, sm90a);
  ASSERT_TRUE(whole.ok()) << whole.error;
  rt::Program base = p;
  const std::vector<exec::HostTensor> want = runOnRandomData(base, whole, 7);
  const std::string &source = p.kernels[k].source;
  for (const char *fn : {"attentionBackwardWgmma", "addDqShareInBulk"}) {
    auto [from, to] = functionSpan(source, fn);
    const std::string readWait = "bulkWaitRead<";
    const size_t at = source.find(readWait, from);
    ASSERT_LT(at, to) << fn;
    const size_t end = source.find(";", at) + 1;
    withMutation(p, k, at, end - at, ";", sm90a,
                 [&](rt::Program &mutated, HostKernels &kernels, size_t line) {
                   EXPECT_TRUE(anyOutputDiffers(
                       runOnRandomData(mutated, kernels, 7), want))
                       << "no bulkWaitRead at line " << line
                       << ", and every output is the same";
                 });
  }
}

// wgmma-ordered over eight key tiles (T = 512), causal and not: each
// query tile's sums in two copies of up to four shares, each added in its
// turn (key tile n after n - 2), summed by the last block in order; the
// same bits a second run, and the CPU executor's results.
TEST(TemplateKernelsOnHost,
     WgmmaOrderedOverEightKeyTilesMatchesTheCpuExecutor) {
  Builder b;
  AttentionBothWays attention(b, DType::BF16, {1, 1, 512, 64}, 0.125f);
  rt::Program &p = b.p;
  HostKernels kernels(
      emitForHost(p, HostTarget::Sm90a, AttentionBackward::WgmmaOrdered),
      HostTarget::Sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  std::vector<exec::HostTensor> data = runOnRandomData(p, kernels, 200);
  std::vector<exec::HostTensor> again = runOnRandomData(p, kernels, 200);
  for (int id : attention.results())
    expectSame(data[id], again[id].f32, "the second run");
  attention.check(data, 1e-2f, 1e-5f, 1e-5f, 2e-2f);
}

// --attention-backward=wgmma-ordered: three key tiles (T = 192), so key
// tile 2 adds its share of query tile 2 to the sums' copy 0 after key
// tile 0 counted its own in. Blocks run in blockIdx order here, so a wait
// is never seen waiting; what is seen is a wait for a count the blocks
// before did not reach (its turn one later, or a count left out), and one
// past its turn (the last share counted before every warp saw its turn;
// the counts not left zero for the next launch, seen by the second run).
TEST(TemplateKernelsOnHost, WgmmaOrderedAddsEachShareInItsTurn) {
  Builder b;
  rt::Program &p = packedAttentionForRaces(b, HostTarget::Sm90a,
                                           AttentionBackward::WgmmaOrdered);
  const size_t k = kernelCalling(p, "attentionBackwardTensorCores");
  ASSERT_LT(k, p.kernels.size());
  const HostTarget sm90a = HostTarget::Sm90a;
  const std::string notReached =
      "waits for a count the blocks before it did not reach";
  EXPECT_EQ(expectEachNeeded(p, k, "addDqShareInBulk",
                             "waitForCount(turns, turn, reached);", notReached,
                             sm90a, "waitForCount(turns, turn + 1, reached);"),
            1);
  EXPECT_EQ(expectEachNeeded(p, k, "countDqShare", "atomicAdd(turns, 1u);",
                             notReached, sm90a),
            1);
  // (The last share is counted after a barrier: every warp has seen its
  // turn by then, and none finds the count past it.)
  EXPECT_EQ(expectEachNeeded(p, k, "countLastDqShare", "__syncthreads();",
                             "past the one", sm90a),
            1);
  HostKernels whole(p, sm90a);
  ASSERT_TRUE(whole.ok()) << whole.error;
  rt::Program base = p;
  const std::vector<exec::HostTensor> first = runOnRandomData(base, whole, 7);
  EXPECT_FALSE(anyOutputDiffers(runOnRandomData(base, whole, 7), first));
  const std::string &source = p.kernels[k].source;
  const std::string reset = "turns[t * kCopies + threadIdx.x] = 0;";
  const size_t at = source.find(reset);
  ASSERT_NE(at, std::string::npos);
  withMutation(p, k, at, reset.size(), ";", sm90a,
               [&](rt::Program &mutated, HostKernels &kernels, size_t) {
                 runOnRandomData(mutated, kernels, 7);
                 try {
                   runOnRandomData(mutated, kernels, 7);
                   ADD_FAILURE() << "the counts not reset, and nothing seen";
                 } catch (const std::runtime_error &e) {
                   EXPECT_NE(std::string(e.what()).find("past the one"),
                             std::string::npos)
                       << e.what();
                 }
               });
}

// The emulation lands a wgmma's products when wgmma.wait_group retires its
// group, not at once: waiting for one group fewer than the backward does
// is seen wherever the products would then be read in flight. One wait
// is not needed for that, and is spared: #0, the first half's dv and dk,
// waited for after the second half's fragment loads, which the second
// half's wait<1> would land. Left in flight across the second half's
// scores, they want more registers than 3 blocks an SM leave, and ptxas
// then serializes every wgmma (C7512; test/cuda/wgmma-fences.test checks
// that it does not). With --attention-backward=wgmma-overlap, #0 is not
// compiled (kOverlap), and the second half's wait<1> lands them. The
// second half's dv and dk land with the dq product (#3); the next tile's
// copies into the buffers they read start after the next barrier, so no
// warp's copy can overtake another warp's wait.
namespace {
/// Runs `check` on packedAttentionForRaces with each wgmma backward (wgmma,
/// wgmma-overlap), given the program and its backward kernel's index.
void forEachWgmmaBackward(
    const std::function<void(AttentionBackward, rt::Program &, size_t)>
        &check) {
  for (AttentionBackward backward :
       {AttentionBackward::Wgmma, AttentionBackward::WgmmaOverlap}) {
    SCOPED_TRACE(backwardName(backward));
    Builder b;
    rt::Program &p = packedAttentionForRaces(b, HostTarget::Sm90a, backward);
    const size_t k = kernelCalling(p, "attentionBackwardTensorCores");
    ASSERT_LT(k, p.kernels.size());
    check(backward, p, k);
  }
}
} // namespace

TEST(TemplateKernelsOnHost, EveryWgmmaBackwardWaitIsNeeded) {
  forEachWgmmaBackward([](AttentionBackward backward, rt::Program &p,
                          size_t k) {
    const bool overlap = backward == AttentionBackward::WgmmaOverlap;
    // A query tile half's three (wgmmaKeysOnQueryHalf), then dq's.
    EXPECT_EQ(expectEachWaitNeeded(
                  p, k, "wgmmaKeysOnQueryHalf", HostTarget::Sm90a,
                  {{0, overlap ? "not compiled" : "lands under the next wait<1>"}}),
              3);
    EXPECT_EQ(expectEachWaitNeeded(p, k, "attentionBackwardWgmma",
                                   HostTarget::Sm90a),
              1);
  });
}

// The device reads a wgmma's B at some time before the wait_group that
// retires it, and one warp's wait returning says nothing of another's: B
// may be written again only after a barrier that every thread of the
// warpgroup reached past its wait. The emulation checks that whatever
// order it runs the warps in. The wgmma backward starts the next query
// tile's copies after the tile's first barrier; started before it (as the
// kernel once did, with a wait and a barrier more to make up for it), they
// overwrite q's and dout's tiles while the last tile's second-half dv and
// dk products, landed by some warps, may still read them.
TEST(TemplateKernelsOnHost, WgmmaBIsRewrittenOnlyAfterEveryWarpsWait) {
  forEachWgmmaBackward([](AttentionBackward, rt::Program &p, size_t k) {
    const std::string &source = p.kernels[k].source;
    auto [from, to] = functionSpan(source, "attentionBackwardWgmma");
    ASSERT_NE(from, std::string::npos);
    const std::string top = "    waitCopies<0>();   // this tile's copies, the "
                            "only ones in flight\n";
    const std::string copiesEnd = "      commitCopies();\n    }\n";
    const size_t at = source.find(top, from);
    ASSERT_LT(at, to);
    const size_t copies = source.find(
        "    if (kOrdered ? i0 + kStep >= first : i0 + kStep < T) {\n", at);
    const size_t end = source.find(copiesEnd, copies) + copiesEnd.size();
    ASSERT_LT(end, to);
    // The copies first, then the wait (for both tiles' copies), the proxy
    // fence and the barrier.
    const std::string swapped = source.substr(copies, end - copies) +
                                source.substr(at, copies - at);
    withMutation(p, k, at, end - at, swapped, HostTarget::Sm90a,
                 [&](rt::Program &mutated, HostKernels &kernels, size_t line) {
                   try {
                     runOnRandomData(mutated, kernels, 7);
                     ADD_FAILURE() << "nothing reported with the copies at line "
                                   << line << " before the barrier";
                   } catch (const std::runtime_error &e) {
                     EXPECT_NE(std::string(e.what()).find(
                                   "what a wgmma reads as B"),
                               std::string::npos)
                         << e.what();
                   }
                 });
  });
}

// The deterministic wgmma backward (--attention-backward=wgmma-split, and
// wgmma-split-ss with the kept rows read from shared memory): in each of
// its two blocks (dq; dk and dv) the loop's one barrier and
// fence.proxy.async, each batch's wgmma.fence (naming that batch's
// operands) and each wait but one. The waits before each barrier land
// what the next tile's copies overwrite (the dq block's k, the dk/dv
// block's q and dout) and the last products before the results are
// stored. With wgmma-split-ss the copies also overwrite what the products
// read as A only after those waits (the emulation reads A from shared
// memory as a product lands).
TEST(TemplateKernelsOnHost, EveryWgmmaSplitBackwardBarrierFenceAndWaitIsNeeded) {
  for (AttentionBackward backward :
       {AttentionBackward::WgmmaSplit, AttentionBackward::WgmmaSplitSs}) {
    SCOPED_TRACE(backwardName(backward));
    const bool shared = backward == AttentionBackward::WgmmaSplitSs;
    Builder b;
    rt::Program &p =
        packedAttentionForRaces(b, HostTarget::Sm90a, backward);
    ASSERT_EQ(p.kernels.size(), 3u);
    const size_t k = kernelCalling(p, "attentionBackwardSplitTensorCores");
    ASSERT_LT(k, p.kernels.size());
    const HostTarget sm90a = HostTarget::Sm90a;
    for (const char *fn : {"wgmmaQueryTileDq", "wgmmaKeyTileDkDv"}) {
      SCOPED_TRACE(fn);
      const bool dqBlock = std::string(fn) == "wgmmaQueryTileDq";
      expectBarriersAndProxyFenceNeeded(p, k, fn, 1);
      // The dk/dv block's query tile halves are wgmmaKeysOnQueryHalf's.
      const char *batches = dqBlock ? fn : "wgmmaKeysOnQueryHalf";
      const std::string scores =
          dqBlock ? "wgmmaFenceKept(s, qRows, dp, dRows);"
                  : "wgmmaFenceKept(p, kRows, ds, vRows);";
      const std::string products = dqBlock ? "wgmmaFence(dqAcc, dsa);"
                                           : "wgmmaFence(accV, pa, accK, dsa);";
      for (const std::string &fence : {scores, products})
        EXPECT_EQ(expectEachNeeded(p, k, batches, fence,
                                   "no wgmma.fence since the last wait", sm90a),
                  1)
            << fence;
      // A fence that names the scores' product alone (and, held, its A).
      const std::string scoresAlone =
          shared ? (dqBlock ? "wgmmaFence(s, s);" : "wgmmaFence(p, p);")
                 : (dqBlock ? "wgmmaFence(s, qRows.a);"
                            : "wgmmaFence(p, kRows.a);");
      EXPECT_EQ(expectEachNeeded(p, k, batches, scores,
                                 "operands its wgmma.fence did not name",
                                 sm90a, scoresAlone),
                1);
      if (dqBlock) {
        EXPECT_EQ(expectEachWaitNeeded(p, k, fn, sm90a), 3);
      } else {
        // A half's #0 (the first half's dv and dk) would land under the
        // second half's wait<1>: spared, as in the wgmma backward. Then
        // the wait before the barrier.
        EXPECT_EQ(expectEachWaitNeeded(p, k, batches, sm90a,
                                       {{0, "lands under the next wait<1>"}}),
                  3);
        EXPECT_EQ(expectEachWaitNeeded(p, k, fn, sm90a), 1);
      }
    }
    HostKernels kernels(p, sm90a);
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    runOnRandomData(p, kernels, 7);
  }
}

// The stored-dS backward's dq block (--attention-backward=wgmma-ds): its
// loop's barrier and fence.proxy.async, its batch's wgmma.fence and its
// wait. (Its wait for the dk/dv blocks'
// counts, and their fence before counting, order blocks, which the
// emulation runs one after another: the GPU's --check-kernels runs and
// the comparison at load see those.) The dk/dv block is wgmma-split's,
// tested above.
TEST(TemplateKernelsOnHost, EveryStoredDsDqBarrierFenceAndWaitIsNeeded) {
  Builder b;
  rt::Program &p = packedAttentionForRaces(b, HostTarget::Sm90a,
                                           AttentionBackward::WgmmaDs);
  ASSERT_EQ(p.kernels.size(), 3u);
  const size_t k = kernelCalling(p, "attentionBackwardStoredDsTensorCores");
  ASSERT_LT(k, p.kernels.size());
  const HostTarget sm90a = HostTarget::Sm90a;
  const std::string fn = "wgmmaQueryTileDqFromDs";
  expectBarriersAndProxyFenceNeeded(p, k, fn, 1);
  EXPECT_EQ(expectEachNeeded(p, k, fn, "wgmmaFence(dqAcc, dsa);",
                             "no wgmma.fence since the last wait", sm90a),
            1);
  EXPECT_EQ(expectEachWaitNeeded(p, k, fn, sm90a), 1);
  HostKernels kernels(p, sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  runOnRandomData(p, kernels, 7);
}

namespace {

/// Removes each `__syncthreads();` of `functions` in `p`'s only kernel, one
/// at a time, and runs the kernel with `run`: each removal must be caught
/// as a race (the checker sees what the barrier ordered), not pass
/// unnoticed as it would on the host without it. `spared` names barriers
/// left out as "function #index" (0-based, in source order) with why.
void expectEveryBarrierNeeded(
    rt::Program &p, const std::vector<std::string> &functions,
    const std::map<std::string, std::string> &spared,
    const std::function<void(rt::Program &, HostKernels &)> &run) {
  ASSERT_EQ(p.kernels.size(), 1u);
  const std::string source = p.kernels[0].source;
  const std::string barrier = "__syncthreads();";
  size_t checked = 0, skipped = 0;
  for (const std::string &fn : functions) {
    auto [from, to] = functionSpan(source, fn);
    ASSERT_NE(from, std::string::npos) << fn << " in " << p.kernels[0].name;
    int index = 0;
    for (size_t at = source.find(barrier, from); at < to;
         at = source.find(barrier, at + 1), ++index) {
      std::string which = fn + " #" + std::to_string(index);
      if (spared.count(which)) {
        ++skipped;
        continue;
      }
      rt::Program mutated = p;
      mutated.kernels[0].source =
          source.substr(0, at) + source.substr(at + barrier.size());
      HostKernels kernels(mutated);
      ASSERT_TRUE(kernels.ok()) << kernels.error;
      try {
        run(mutated, kernels);
        ADD_FAILURE() << p.kernels[0].name << ": no race without barrier "
                      << which;
      } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("race in block"),
                  std::string::npos)
            << which << ": " << e.what();
      }
      ++checked;
    }
  }
  EXPECT_EQ(skipped, spared.size()) << p.kernels[0].name;
  EXPECT_GT(checked, 0u) << p.kernels[0].name;
  // And with every barrier: no race.
  HostKernels kernels(p);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  run(p, kernels);
}

/// The barriers no kernel here needs, or that order what the checker does
/// not follow: blocks run one after another on the host.
const std::map<std::string, std::string> kSpared = {
    // Order the block's global writes before its arrival ticket, for the
    // last block, which reads them (another block: not checked).
    {"lastBlockToArrive #0", "orders writes for other blocks"},
    // Guard scratch against the reads of a previous call in the same
    // block, which no kernel makes (one row a block).
    {"warpsToScratch #0", "no second call in a block"},
    {"blockMaxSum #0", "no second call in a block"},
};

std::map<std::string, std::string> spared(std::vector<std::string> names) {
  std::map<std::string, std::string> out;
  for (const std::string &n : names)
    out[n] = kSpared.at(n);
  return out;
}

auto runRandom(int32_t idLimit) {
  return [idLimit](rt::Program &p, HostKernels &kernels) {
    runOnRandomData(p, kernels, 11, idLimit);
  };
}

} // namespace

// Every barrier of the template kernels with shared memory or a block-wide
// handoff (EveryAttentionBarrierIsNeeded has the attention's): removing
// any one is reported by the race checker, for shared memory and for the
// block's writes to global memory alike.
TEST(TemplateKernelsOnHost, EveryBarrierIsNeeded) {
  const DType f32 = DType::F32, i32 = DType::I32;
  {
    SCOPED_TRACE("reduce_sum: a tree in shared memory, slices of rows "
                 "added by the last block");
    Builder b;
    int big = b.buf(f32, {64, 100}), sum = b.buf(f32, {});
    b.launch("reduce_sum", {big}, {sum});
    expectEveryBarrierNeeded(emitForHost(b.p),
                             {"reduceSum", "lastBlockToArrive"},
                             spared({"lastBlockToArrive #0"}), runRandom(1));
  }
  {
    SCOPED_TRACE("cross_entropy_with_grad: the row's max and sum, the "
                 "counted rows, the mean in the last block");
    Builder b;
    int logits = b.buf(f32, {3, 7, 64}), targets = b.buf(i32, {3, 7});
    int dloss = b.buf(f32, {}), loss = b.buf(f32, {}),
        dlogits = b.buf(f32, {3, 7, 64});
    b.launch("cross_entropy_with_grad", {logits, targets, dloss},
             {loss, dlogits})
        .ints = {{"num_classes", 45}, {"ignore_index", -1}};
    expectEveryBarrierNeeded(
        emitForHost(b.p),
        {"blockMaxSum", "warpsToScratch", "finishLoss", "lastBlockToArrive"},
        spared({"blockMaxSum #0", "warpsToScratch #0", "lastBlockToArrive #0"}),
        runRandom(45));
  }
  {
    SCOPED_TRACE("cross_entropy_with_grad, bf16 max-first: the stashed "
                 "row's max, then its sum, over the block (the scratch's "
                 "first barrier, spared where blockSum is its only user, is "
                 "needed here: blockSum comes after blockMax's reads), then "
                 "the counted rows (the mean's barriers are checked above)");
    Builder b;
    const DType bf = DType::BF16;
    int logits = b.buf(bf, {1, 3, 512}), targets = b.buf(i32, {1, 3});
    int dloss = b.buf(f32, {}), loss = b.buf(f32, {}),
        dlogits = b.buf(bf, {1, 3, 512});
    b.launch("cross_entropy_with_grad", {logits, targets, dloss},
             {loss, dlogits})
        .ints = {{"num_classes", 500}, {"ignore_index", -1}};
    cuda::EmitOptions opts;
    opts.maxFirstCrossEntropy = true;
    expectEveryBarrierNeeded(
        emitForHost(b.p, HostTarget::Sm80, opts),
        {"warpsToScratch"}, {}, runRandom(500));
  }
  {
    SCOPED_TRACE("embedding_grad: hits compacted in shared memory, each "
                 "round's compaction between two barriers (a thread adds "
                 "and writes only its own columns, so no barrier before "
                 "the write)");
    Builder b;
    int dy = b.buf(f32, {1, 600, 200}), ids = b.buf(i32, {1, 600}),
        table = b.buf(f32, {20, 200});
    b.launch("embedding_grad", {dy, ids}, {table});
    expectEveryBarrierNeeded(emitForHost(b.p), {"embeddingBackward"}, {},
                             runRandom(20));
  }
  {
    SCOPED_TRACE("layernorm_grad: warps add their dgamma/dbeta partials in "
                 "turn, in shared memory");
    Builder b;
    int x = b.buf(f32, {2, 5, 40}), gamma = b.buf(f32, {40}),
        dy = b.buf(f32, {2, 5, 40});
    int dx = b.buf(f32, {2, 5, 40}), dgamma = b.buf(f32, {40}),
        dbeta = b.buf(f32, {40});
    b.launch("layernorm_grad", {x, gamma, dy}, {dx, dgamma, dbeta})
        .floats["epsilon"] = 1e-5;
    expectEveryBarrierNeeded(emitForHost(b.p),
                             {"layernormBackwardWith", "lastBlockToArrive"},
                             spared({"lastBlockToArrive #0"}), runRandom(1));
  }
  {
    SCOPED_TRACE("multi_tensor_reduce: a tree of doubles, twice in the last "
                 "block");
    Builder b;
    int x0 = b.buf(f32, {3000}), x1 = b.buf(f32, {36}),
        x2 = b.buf(f32, {4, 7037}), s = b.buf(f32, {}), sum = b.buf(f32, {});
    auto &reduce = b.launch("multi_tensor_reduce", {x0, x1, x2, s}, {sum});
    reduce.ints["num_tensors"] = 3;
    reduce.body = scaledSquare();
    expectEveryBarrierNeeded(emitForHost(b.p),
                             {"blockTreeSum", "lastBlockToArrive"},
                             spared({"lastBlockToArrive #0"}), runRandom(1));
  }
}

namespace {

/// What the race checker says about `body`, a kernel of two warps with a
/// float32 output `out` and a bf16 output `narrow` of 64 elements each
/// (t is threadIdx.x): the first race's message, or "" if none.
std::string raceIn(const std::string &body) {
  Builder b;
  int out = b.buf(DType::F32, {64}), narrow = b.buf(DType::BF16, {64});
  rt::Launch &l = b.launch("probe", {}, {out, narrow});
  l.deviceKernel = 0;
  l.block[0] = 64;
  b.p.kernels.push_back(
      {"probe",
       cuda::kernelTemplate("types.cuh") +
           "extern \"C\" __global__ void probe(float *out, bf16 *narrow) {\n"
           "  const int t = threadIdx.x;\n" +
           body + "\n}\n",
       {}, "", {}});
  HostKernels kernels(b.p);
  if (!kernels.ok())
    return "does not compile: " + kernels.error;
  std::vector<float> o(64);
  std::vector<uint16_t> n(64);
  try {
    kernels.run(0, {o.data(), n.data()});
  } catch (const std::runtime_error &e) {
    return e.what();
  }
  return "";
}

} // namespace

// What each missing ordering gets from the race checker, on plain C++
// accesses (the instrumentation's), and what is not a race. Races are
// counted per 2-byte granule; the message names the first.
TEST(HostRaceChecker, NamesEachMissingOrdering) {
  const std::string written = "__shared__ float s[64];\n  s[t] = float(t);\n";
  // Another warp's write, read in the same barrier interval.
  EXPECT_EQ(raceIn(written + "  if (t >= 32) out[t] = s[t - 32];"),
            "shared-memory race in block (0, 0, 0): thread 32 reads, in the "
            "barrier interval another warp writes, byte 0 of s, last written "
            "by thread 0 (64 races in all)");
  EXPECT_EQ(raceIn(written + "  __syncthreads();\n"
                             "  if (t >= 32) out[t] = s[t - 32];"),
            "");
  // Another lane's write, with no warp-wide operation since.
  EXPECT_EQ(raceIn(written + "  if (t % 2) out[t] = s[t - 1];"),
            "shared-memory race in block (0, 0, 0): thread 1 reads, with no "
            "warp-wide operation since, what another lane of its warp "
            "writes: byte 0 of s, last written by thread 0 (64 races in all)");
  EXPECT_EQ(raceIn(written + "  out[t] = __shfl_xor_sync(0xffffffffu, 0.0f, 1);"
                             "\n  if (t % 2) out[t] = s[t - 1];"),
            "");
  // Never written.
  EXPECT_EQ(raceIn("__shared__ float s[64];\n  out[t] = s[t];"),
            "shared-memory race in block (0, 0, 0): thread 0 reads, never "
            "written, byte 0 of s (128 races in all)");
  // Overwritten while another warp may still read it.
  EXPECT_EQ(raceIn(written + "  __syncthreads();\n"
                             "  out[t] = s[0];\n"
                             "  if (t == 32) s[0] = 1.0f;"),
            "shared-memory race in block (0, 0, 0): thread 32 writes, in the "
            "barrier interval another warp reads, byte 0 of s, last written "
            "by thread 0 (64 races in all)");
  // Global memory the launch writes follows the same rules.
  EXPECT_EQ(raceIn("out[0] = float(t);"),
            "global-memory race in block (0, 0, 0): thread 1 writes, in the "
            "barrier interval another thread writes, byte 0 of output 0, last "
            "written by thread 0 (126 races in all)");
  EXPECT_EQ(raceIn("out[t] = 1.0f;\n  if (t >= 32) out[t] += out[t - 32];"),
            "global-memory race in block (0, 0, 0): thread 32 reads, in the "
            "barrier interval another warp writes, byte 0 of output 0, last "
            "written by thread 0 (64 races in all)");
  EXPECT_EQ(raceIn("out[t] = 1.0f;\n  __syncthreads();\n"
                   "  if (t >= 32) out[t] += out[t - 32];"),
            "");
  // Neighbouring bf16 elements written by two threads are not a race.
  EXPECT_EQ(raceIn("narrow[t] = fromFloat<bf16>(float(t));"), "");
}

TEST(TemplateKernelsOnHost, PackedAttentionMatchesTheCpuExecutor) {
  checkPackedAttention(/*tensorCores=*/false);
}

TEST(TemplateKernelsOnHost, PackedTensorCoreAttentionMatchesTheCpuExecutor) {
  checkPackedAttention(/*tensorCores=*/true);
}

// The wgmma forward at gpt2-tiny's head size, 32 (wgmma's n32 for the
// output; the scores are n64 whatever D is).
TEST(TemplateKernelsOnHost, PackedWgmmaAttentionMatchesTheCpuExecutor) {
  checkPackedAttention(/*tensorCores=*/true, HostTarget::Sm90a, 32);
}

/// Packed forward attentions over qkv [B, T, 3·H·D], causal and then not,
/// scale 1/8: their out and lse ids appended to `results` in that order;
/// qkv's id.
int packedForwardsBothWays(Builder &b, int64_t B, int64_t H, int64_t D,
                           int64_t T, std::vector<int> &results) {
  const int64_t C = H * D;
  const int qkv = b.buf(DType::BF16, {B, T, 3 * C});
  for (int causal : {1, 0}) {
    int o = b.buf(DType::BF16, {B, T, C}), lse = b.buf(DType::F32, {B, H, T});
    auto &fa = b.launch("flash_attention_qkv", {qkv}, {o, lse});
    fa.ints = {{"causal", causal}, {"num_heads", H}};
    fa.floats["scale"] = 0.125;
    results.insert(results.end(), {o, lse});
  }
  return qkv;
}

/// The lazy-maxima tests' forwards (packedForwardsBothWays at B = 1, H =
/// 2, D = 64, T = 256) and runOnRandomData's reshape for their qkv: key
/// row t scaled by 1 + 6t/T, so that later tiles' scores pass the maxima
/// the first tiles set.
struct GrowingKeysForwards {
  static constexpr int64_t B = 1, H = 2, T = 256, D = 64, C = H * D;
  Builder b;
  std::vector<int> results; // out and lse, causal then not
  int qkv = packedForwardsBothWays(b, B, H, D, T, results);
  std::function<void(int, std::vector<float> &)> growingKeys =
      [q = qkv](int id, std::vector<float> &x) {
        if (id != q)
          return;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = C; c < 2 * C; ++c) // k's columns
            x[t * 3 * C + c] *= 1.0f + 6.0f * float(t) / float(T);
      };
};

// The forward's maxima are raised lazily (OnlineSoftmax): only when a
// tile's score passes a row's maximum by more than 8 in log2 units. On
// random data the first tile sets maxima the later ones seldom pass by
// that much; here key row j is scaled by 1 + 6j/T, so the later tiles'
// scores grow past them (moves after the first tile) and, between moves,
// are taken against maxima below their own (probabilities over 1). Every
// forward algorithm, causal and not, against the CPU executor.
TEST(TemplateKernelsOnHost, ForwardAttentionRaisesItsMaximaLazily) {
  GrowingKeysForwards f;
  struct Way {
    HostTarget target;
    const char *forward;
  };
  for (Way way : {Way{HostTarget::Sm80, "mma"}, Way{HostTarget::Sm80, "mma128"},
                  Way{HostTarget::Sm80, "mma2"}, Way{HostTarget::Sm80, "mma-pipe"},
                  Way{HostTarget::Sm90a, "wgmma"},
                  Way{HostTarget::Sm90a, "wgmma-overlap"},
                  Way{HostTarget::Sm90a, "wgmma128"},
                  Way{HostTarget::Sm90a, "wgmma-k128"}}) {
    SCOPED_TRACE(way.forward);
    rt::Program p = f.b.p;
    cuda::EmitOptions opts;
    ASSERT_TRUE(cuda::selectAttentionAlgorithm(opts, true, way.forward));
    HostKernels kernels(emitForHost(p, way.target, opts), way.target);
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    std::vector<exec::HostTensor> data =
        runOnRandomData(p, kernels, 43, 1, f.growingKeys);
    for (int c = 0; c < 2; ++c) {
      SCOPED_TRACE(c == 0 ? "causal" : "not causal");
      std::vector<exec::HostTensor> want =
          exec::flashAttentionQKV(data[f.qkv], f.H, 0.125f, c == 0);
      expectNear(want[0], data[f.results[2 * c]].f32, 1e-2f,
                 "flash_attention_qkv out");
      expectNear(want[1], data[f.results[2 * c + 1]].f32, 1e-5f,
                 "flash_attention_qkv lse");
    }
  }
}

// The wgmma-overlap forward waits for the last tile's output product twice
// on a tile whose maxima moved: in the branch that rescales acc (so that
// ptxas, which hoists a wait to the top of its block, keeps it after the
// softmax), then before the probabilities are packed. Random data seldom
// moves the maxima after the first tile; the growing keys of
// ForwardAttentionRaisesItsMaximaLazily do. Raised by one, the rescale's
// wait lets it read accumulators still in flight.
TEST(TemplateKernelsOnHost, WgmmaOverlapForwardWaitsBeforeItsRescale) {
  GrowingKeysForwards f;
  cuda::EmitOptions opts;
  ASSERT_TRUE(cuda::selectAttentionAlgorithm(opts, true, "wgmma-overlap"));
  rt::Program &p = emitForHost(f.b.p, HostTarget::Sm90a, opts);
  const size_t k = kernelWithImpl(p, "TensorCores");
  ASSERT_LT(k, p.kernels.size());
  HostKernels whole(p, HostTarget::Sm90a);
  ASSERT_TRUE(whole.ok()) << whole.error;
  const std::vector<exec::HostTensor> want =
      runOnRandomData(p, whole, 43, 1, f.growingKeys);
  const std::string wait = "wgmmaWait<0, 1>();";
  const size_t at = p.kernels[k].source.find(wait);
  ASSERT_NE(at, std::string::npos) << "the rescale's wait";
  EXPECT_EQ(p.kernels[k].source.find(wait, at + 1), std::string::npos);
  withMutation(
      p, k, at + std::string("wgmmaWait<").size(), 1, "1", HostTarget::Sm90a,
      [&](rt::Program &mutated, HostKernels &kernels, size_t) {
        try {
          EXPECT_TRUE(anyOutputDiffers(
              runOnRandomData(mutated, kernels, 43, 1, f.growingKeys), want))
              << "the rescale's wait raised, every output the same";
        } catch (const std::runtime_error &e) {
          EXPECT_NE(std::string(e.what()).find("wgmma"), std::string::npos)
              << e.what();
        }
      });
}

/// Packed attention forwards (causal and not; B batches of H heads of D,
/// length T) on the same random data with `reference`'s algorithm and with
/// `other`'s, whose kernels' sources, and only theirs, contain `marker`:
/// the same bits, and both within the mma forward's tolerance of the CPU
/// executor.
void expectForwardsGiveTheSameBits(int64_t B, int64_t H, int64_t D, int64_t T,
                                   HostTarget target, const char *reference,
                                   const char *other, const char *marker,
                                   uint32_t seed) {
  Builder b;
  std::vector<int> results;
  const int qkv = packedForwardsBothWays(b, B, H, D, T, results);
  std::vector<std::vector<exec::HostTensor>> runs;
  for (const char *forward : {reference, other}) {
    rt::Program p = b.p;
    cuda::EmitOptions opts;
    ASSERT_TRUE(cuda::selectAttentionAlgorithm(opts, true, forward));
    HostKernels kernels(emitForHost(p, target, opts), target);
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    for (const rt::DeviceKernel &dk : p.kernels)
      ASSERT_EQ(dk.source.find(marker) != std::string::npos, forward == other)
          << forward << " " << dk.name;
    runs.push_back(runOnRandomData(p, kernels, seed));
  }
  for (int id : results)
    expectSame(runs[0][id], runs[1][id].f32, other);
  for (int c = 0; c < 2; ++c) {
    std::vector<exec::HostTensor> want =
        exec::flashAttentionQKV(runs[1][qkv], H, 0.125f, c == 0);
    expectNear(want[0], runs[1][results[2 * c]].f32, 1e-2f,
               "flash_attention_qkv out");
    expectNear(want[1], runs[1][results[2 * c + 1]].f32, 1e-5f,
               "flash_attention_qkv lse");
  }
}

// --attention-forward=mma-pipe issues the next key tile's scores before
// this tile's softmax, k copied one tile ahead of v, one barrier a tile:
// the same operations in the same order as the mma forward, so the same
// bits, causal or not, at one key tile, two, and an odd number (the
// kernel takes two a round), at each head size the mma forward takes.
TEST(TemplateKernelsOnHost, MmaPipeForwardGivesTheMmaForwardsBits) {
  for (int64_t D : {64, 32, 16})
    for (int64_t T : {64, 128, 320}) {
      SCOPED_TRACE("D " + std::to_string(D) + ", T " + std::to_string(T));
      expectForwardsGiveTheSameBits(2, 2, D, T, HostTarget::Sm80, "mma",
                                    "mma-pipe",
                                    "  attentionForwardMmaPipelined<", 47);
    }
}

// --attention-forward=wgmma-overlap runs the wgmma forward's operations in
// the same order, its output products later: the same bits, causal or
// not, at D = 64 and 32, with five key tiles (each of the three V buffers
// refilled) and two heads.
TEST(TemplateKernelsOnHost, WgmmaOverlapForwardGivesTheWgmmaForwardsBits) {
  for (int64_t D : {64, 32}) {
    SCOPED_TRACE("D " + std::to_string(D));
    expectForwardsGiveTheSameBits(1, 2, D, 320, HostTarget::Sm90a, "wgmma",
                                  "wgmma-overlap", ", true>(", 41);
  }
}

// The atomic backward's dq product splits D over the 4 warps by 16 rows,
// then the 64 queries: one row block a warp at D = 64, two warps a row
// block at 32, four at 16.
TEST(TemplateKernelsOnHost, PackedAtomicAttentionBackwardMatchesTheCpuExecutor) {
  for (int64_t D : {64, 32, 16})
    checkPackedAttention(/*tensorCores=*/true, HostTarget::Sm80, D,
                         AttentionBackward::Atomic);
}
// The wgmma backwards at D = 64 and 32 (n32 for dk, dv and dq); at 16 the
// atomic kernel (the split one for wgmma-split, wgmma-split-ss and
// wgmma-ds).
TEST(TemplateKernelsOnHost, PackedWgmmaAttentionBackwardMatchesTheCpuExecutor) {
  for (int64_t D : {64, 32, 16})
    for (AttentionBackward backward :
         {AttentionBackward::Wgmma, AttentionBackward::WgmmaOverlap,
          AttentionBackward::WgmmaSplit, AttentionBackward::WgmmaSplitSs,
          AttentionBackward::WgmmaDs})
      checkPackedAttention(/*tensorCores=*/true, HostTarget::Sm90a, D,
                           backward);
}
// With 8 warps a block the dq product's row blocks are shared by two warps
// at D = 64, four at 32; at 16 (one n-tile a warp) blocks of 64 keys stay.
TEST(TemplateKernelsOnHost, PackedAtomic128AttentionBackwardMatchesTheCpuExecutor) {
  for (int64_t D : {64, 32, 16})
    checkPackedAttention(/*tensorCores=*/true, HostTarget::Sm80, D,
                         AttentionBackward::Atomic128);
}

namespace {

/// bf16 bits of `t`'s values, rounded to nearest even.
std::vector<uint16_t> bf16Bits(const exec::HostTensor &t) {
  std::vector<uint16_t> bits(t.f32.size());
  for (size_t i = 0; i < bits.size(); ++i)
    bits[i] = exec::bf16BitsOf(t.f32[i]);
  return bits;
}

/// bf16 bits against the reference's: each the same or one ulp from it
/// (GELU's sigmoid form is within a few float32 ulp of the tanh form, and
/// rounds the other way only near a tie), and at most 1% one ulp off.
void expectWithinOneUlp(const std::vector<uint16_t> &want,
                        const std::vector<uint16_t> &got, const char *what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  size_t off = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i] || ((got[i] | want[i]) & 0x7fff) == 0)
      continue;
    ++off;
    ASSERT_TRUE((got[i] ^ want[i]) < 0x8000 &&
                std::abs(int(got[i]) - int(want[i])) == 1)
        << what << " element " << i << ": bits " << got[i] << " against "
        << want[i];
  }
  EXPECT_LE(off * 100, got.size()) << what << ": " << off << " one ulp off";
}

exec::HostTensor fromBf16Bits(const std::vector<uint16_t> &bits, Shape shape) {
  exec::HostTensor t = exec::HostTensor::floats(std::move(shape));
  for (size_t i = 0; i < bits.size(); ++i) {
    uint32_t u = uint32_t(bits[i]) << 16;
    std::memcpy(&t.f32[i], &u, 4);
  }
  return t;
}

} // namespace

// The kernels that stand in for a fused GEMM epilogue cuBLASLt refuses
// (gemm_fallback.cuh), on D as a plain GEMM left it, against the CPU
// executor's fused GEMMs (run on D times the identity, which leaves D
// exact): the bias and pre-activation bit for bit; GELU and its derivative
// (a sigmoid form of the executor's tanh form) within one bf16 ulp, mostly
// the same bits, or 1e-6 in float32; the column sums (4 chunks of 64 rows,
// 2 column blocks, the second partly outside) to float32 rounding.
TEST(TemplateKernelsOnHost, GemmFallbacksMatchTheCpuExecutor) {
  const DType bf16 = DType::BF16, f32 = DType::F32;
  const int64_t rows = 200, cols = 40, k = 16;
  Builder b;
  int x = b.buf(bf16, {rows, k}), w = b.buf(bf16, {k, cols}),
      bias = b.buf(bf16, {cols}), h = b.buf(bf16, {rows, cols}),
      pre = b.buf(bf16, {rows, cols});
  b.launch("matmul_epilogue", {x, w, bias}, {h, pre}).ints["gelu"] = 1;
  int dy = b.buf(bf16, {rows, k}), wt = b.buf(bf16, {cols, k}),
      dp = b.buf(bf16, {rows, cols}), db = b.buf(bf16, {cols});
  b.launch("matmul_gelu_grad", {dy, wt, pre}, {dp, db}).ints["transpose_b"] = 1;
  int dw = b.buf(f32, {k, cols}), db2 = b.buf(f32, {cols});
  b.launch("matmul_bias_grad", {x, dp}, {dw, db2}).ints["transpose_a"] = 1;
  // GELU's derivative without its bias gradient (c_fc's, since that is
  // its weight-gradient GEMM's): gptc's bf16 pass after a plain GEMM.
  int dpAlone = b.buf(bf16, {rows, cols});
  b.launch("matmul_gelu_grad", {dy, wt, pre}, {dpAlone}).ints["transpose_b"] = 1;
  // The float32 forms, whose bits show every operation and constant.
  int biasF = b.buf(f32, {cols}), hF = b.buf(f32, {rows, cols}),
      preF = b.buf(f32, {rows, cols}), dpF = b.buf(f32, {rows, cols});
  b.launch("matmul_epilogue", {x, w, biasF}, {hF, preF}).ints["gelu"] = 1;
  b.launch("matmul_gelu_grad", {dy, wt, preF}, {dpF}).ints["transpose_b"] = 1;
  // A float32 bias gradient: float32 column partials.
  int xF = b.buf(f32, {rows, k}), dwF = b.buf(f32, {k, cols}),
      dbF = b.buf(f32, {cols});
  b.launch("matmul_bias_grad", {xF, dpF}, {dwF, dbF}).ints["transpose_a"] = 1;
  rt::Program &p = b.p;
  HostKernels kernels(emitForHost(p));
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  std::vector<std::string> names;
  for (const rt::DeviceKernel &dk : p.kernels)
    names.push_back(dk.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "gemm_fallback_bias_f32", "gemm_fallback_bias_bf16",
                       "gemm_fallback_gelu_grad_f32",
                       "gemm_fallback_gelu_grad_bf16", "gemm_fallback_gelu_f32",
                       "gemm_fallback_gelu_bf16",
                       "gemm_fallback_column_partials_f32",
                       "gemm_fallback_column_partials_bf16",
                       "gemm_fallback_column_sums_f32",
                       "gemm_fallback_column_sums_bf16"}));

  exec::HostTensor identity = exec::HostTensor::floats({cols, cols});
  for (int64_t i = 0; i < cols; ++i)
    identity.f32[size_t(i * cols + i)] = 1.0f;
  auto address = [](auto &v) { return uint64_t(reinterpret_cast<uintptr_t>(v.data())); };

  // Bias and GELU, keeping the pre-activation.
  exec::HostTensor d = fromBf16Bits(bf16Bits(randomFloats({rows, cols}, 1)),
                                    {rows, cols});
  exec::HostTensor bs = fromBf16Bits(bf16Bits(randomFloats({cols}, 2)), {cols});
  std::vector<uint16_t> dBits = bf16Bits(d), biasBits = bf16Bits(bs),
                        preBits(dBits.size());
  kernels.call("gemm_fallback_bias_bf16",
               {address(dBits), address(biasBits), address(preBits),
                uint64_t(rows), uint64_t(cols), 1},
               uint32_t((rows * cols + 255) / 256));
  std::vector<exec::HostTensor> fused =
      exec::matmulEpilogue(d, identity, bs, false, false, true, true);
  expectWithinOneUlp(bf16Bits(fused[0]), dBits, "GELU(d + bias)");
  EXPECT_EQ(preBits, bf16Bits(fused[1])) << "d + bias";

  // GELU alone, after cuBLASLt's BIAS wrote d + bias (bf16, as the GEMM
  // rounded it): out of place and in place, from one block's 4 chunks of
  // 2,048 elements (8,000 here, the last chunk short) and from 3 blocks
  // taking turns (grid-stride); then 8,003 elements, whose last 3 take
  // the element-at-a-time path. Each matches the CPU executor's GELU of
  // that pre-activation within one bf16 ulp (1e-6 in float32).
  for (int64_t n : {rows * cols, rows * cols + 3})
    for (uint32_t blocks : {1u, 3u}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", blocks " +
                   std::to_string(blocks));
      exec::HostTensor x = fromBf16Bits(bf16Bits(randomFloats({n}, 11)), {n});
      std::vector<uint16_t> xBits = bf16Bits(x), outBits(size_t(n), 0xffff);
      exec::HostTensor one = exec::HostTensor::floats({1, 1}),
                       zero = exec::HostTensor::floats({1});
      one.f32[0] = 1.0f;
      exec::HostTensor want = exec::matmulEpilogue(
          fromBf16Bits(xBits, {n, 1}), one, zero, false, false, true, false)[0];
      kernels.call("gemm_fallback_gelu_bf16",
                   {address(outBits), address(xBits), uint64_t(n)}, blocks);
      expectWithinOneUlp(bf16Bits(want), outBits, "GELU(pre)");
      kernels.call("gemm_fallback_gelu_bf16",
                   {address(xBits), address(xBits), uint64_t(n)}, blocks);
      expectWithinOneUlp(bf16Bits(want), xBits, "GELU(pre) in place");
      exec::HostTensor xF = randomFloats({n}, 12), outF = xF;
      kernels.call("gemm_fallback_gelu_f32",
                   {address(outF.f32), address(xF.f32), uint64_t(n)}, blocks);
      exec::HostTensor column = xF;
      column.shape = {n, 1};
      expectNear(exec::matmulEpilogue(column, one, zero, false, false, true,
                                      false)[0],
                 outF.f32, 1e-6f, "GELU(pre) in f32");
    }

  // GELU and its derivative in float32 over [-12, 12], where the sigmoid
  // saturates both ways (e^-2u overflows below about -9.8), against
  // float64's tanh form: within 4e-6 of the value (absolute near the
  // derivative's zero, and where GELU itself is about 0). The exponent's
  // rounding (2^-24 of up to about 140) is most of it; float32's tanh form
  // loses every digit there (1 + tanh(u) cancels).
  {
    const int64_t n = 24001;
    std::vector<float> x(n), gelu(n), slope(n, 1.0f);
    for (int64_t i = 0; i < n; ++i)
      x[size_t(i)] = -12.0f + 24.0f * float(i) / float(n - 1);
    kernels.call("gemm_fallback_gelu_f32",
                 {address(gelu), address(x), uint64_t(n)}, 4);
    kernels.call("gemm_fallback_gelu_grad_f32",
                 {address(slope), address(x), uint64_t(n)}, 4);
    const double k0 = std::sqrt(2.0 / M_PI), k1 = 0.044715;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[size_t(i)], t = std::tanh(k0 * (v + k1 * v * v * v));
      const double want = 0.5 * v * (1 + t),
                   wantSlope = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k0 *
                                                   (1 + 3 * k1 * v * v);
      ASSERT_NEAR(gelu[size_t(i)], want, 4e-6 * std::max(1e-6, std::fabs(want)))
          << "GELU(" << v << ")";
      ASSERT_NEAR(slope[size_t(i)], wantSlope,
                  4e-6 * std::max(1.0, std::fabs(wantSlope)))
          << "GELU'(" << v << ")";
    }
  }

  // Column sums of bf16 x [rows, n], with GELU's derivative at `pre` (if
  // any) applied in place first: partials of chunks of 64 rows (4 chunks,
  // the last of 8 rows: a warp's 8 rows in flight once, then one) into
  // `partial`, then their float32 sums.
  int64_t perChunk = 64, chunks = 4;
  auto columnSums = [&](std::vector<uint16_t> &x,
                        const std::vector<uint16_t> *pre, int64_t n,
                        std::vector<float> &partial) {
    partial.assign(size_t(chunks * n), -1.0f);
    std::vector<float> sums(n);
    kernels.call("gemm_fallback_column_partials_bf16",
                 {address(x), pre ? address(*pre) : 0, address(partial),
                  uint64_t(rows), uint64_t(n), uint64_t(perChunk)},
                 1, uint32_t(chunks));
    kernels.call("gemm_fallback_column_sums_f32",
                 {address(partial), address(sums), uint64_t(chunks),
                  uint64_t(n)},
                 uint32_t((n + 31) / 32));
    return sums;
  };

  // GELU's derivative at that pre-activation, in place, and its column
  // sums (before rounding), in one pass.
  exec::HostTensor d2 = fromBf16Bits(bf16Bits(randomFloats({rows, cols}, 3)),
                                     {rows, cols});
  std::vector<uint16_t> d2Bits = bf16Bits(d2);
  std::vector<float> partial;
  std::vector<float> sums = columnSums(d2Bits, &preBits, cols, partial);
  exec::HostTensor preValues = fromBf16Bits(preBits, {rows, cols});
  std::vector<exec::HostTensor> dgelu =
      exec::matmulGeluGrad(d2, identity, preValues, false, false, true);
  expectWithinOneUlp(bf16Bits(dgelu[0]), d2Bits, "gelu'(pre) * d");
  expectNear(dgelu[1], sums, 1e-5f, "column sums of gelu'(pre) * d");
  // The derivative alone, 16-byte accesses (8,000 elements: every chunk
  // whole), two blocks of a grid-stride loop: the column pass's bits.
  std::vector<uint16_t> alone = bf16Bits(d2);
  kernels.call("gemm_fallback_gelu_grad_bf16",
               {address(alone), address(preBits), uint64_t(rows * cols)}, 2);
  EXPECT_EQ(alone, d2Bits) << "gelu'(pre) * d alone";

  // The same in float32.
  exec::HostTensor dF = randomFloats({rows, cols}, 4), biasValues = randomFloats({cols}, 5);
  exec::HostTensor outF = dF, preOutF = exec::HostTensor::floats({rows, cols});
  kernels.call("gemm_fallback_bias_f32",
               {address(outF.f32), address(biasValues.f32),
                address(preOutF.f32), uint64_t(rows), uint64_t(cols), 1},
               3);
  fused = exec::matmulEpilogue(dF, identity, biasValues, false, false, true, true);
  expectNear(fused[0], outF.f32, 1e-6f, "GELU(d + bias) in f32");
  expectSame(fused[1], preOutF.f32, "d + bias in f32");
  exec::HostTensor gradF = randomFloats({rows, cols}, 6), dgF = gradF;
  kernels.call("gemm_fallback_gelu_grad_f32",
               {address(dgF.f32), address(preOutF.f32), uint64_t(rows * cols)}, 5);
  expectNear(exec::matmulGeluGrad(gradF, identity, preOutF, false, false, false)[0],
             dgF.f32, 1e-6f, "gelu'(pre) * d in f32");

  // Column sums of d2 (no pre: it stays) into float32 and bf16.
  std::vector<uint16_t> sumBits(cols), before = d2Bits;
  sums = columnSums(d2Bits, nullptr, cols, partial);
  EXPECT_EQ(d2Bits, before);
  kernels.call("gemm_fallback_column_sums_bf16",
               {address(partial), address(sumBits), uint64_t(chunks),
                uint64_t(cols)},
               uint32_t((cols + 31) / 32));
  exec::HostTensor want =
      exec::reduceSum(fromBf16Bits(d2Bits, {rows, cols}), {cols});
  expectNear(want, sums, 1e-5f, "column sums");
  expectNear(want, fromBf16Bits(sumBits, {cols}).f32, 1.0f / 128,
             "column sums in bf16");
  // Chunks of 128 rows (partialRows' size for 768 columns): a warp's rows
  // in two rounds of 8 in flight, the second chunk's second round short.
  perChunk = 128, chunks = 2;
  sums = columnSums(d2Bits, nullptr, cols, partial);
  expectNear(want, sums, 1e-5f, "column sums, chunks of 128 rows");
  perChunk = 64, chunks = 4;

  // A row length that is no multiple of 8 takes the element-at-a-time
  // path (and the last lane's columns run past the end): the same values.
  const int64_t odd = 37;
  exec::HostTensor d3 =
      fromBf16Bits(bf16Bits(randomFloats({rows, odd}, 7)), {rows, odd});
  exec::HostTensor pre3 =
      fromBf16Bits(bf16Bits(randomFloats({rows, odd}, 8)), {rows, odd});
  std::vector<uint16_t> d3Bits = bf16Bits(d3), pre3Bits = bf16Bits(pre3);
  std::vector<float> sums3 = columnSums(d3Bits, &pre3Bits, odd, partial);
  exec::HostTensor identity3 = exec::HostTensor::floats({odd, odd});
  for (int64_t i = 0; i < odd; ++i)
    identity3.f32[size_t(i * odd + i)] = 1.0f;
  dgelu = exec::matmulGeluGrad(d3, identity3, pre3, false, false, true);
  expectWithinOneUlp(bf16Bits(dgelu[0]), d3Bits, "gelu'(pre) * d, 37 columns");
  expectNear(dgelu[1], sums3, 1e-5f, "column sums, 37 columns");

  // Many chunks (each warp's 4 loads in flight, then one at a time), 37
  // columns over two blocks: the partials' sums.
  const int64_t many = 70;
  exec::HostTensor parts = randomFloats({many, odd}, 9);
  std::vector<float> manySums(odd);
  kernels.call("gemm_fallback_column_sums_f32",
               {address(parts.f32), address(manySums), uint64_t(many),
                uint64_t(odd)},
               2);
  expectNear(exec::reduceSum(parts, {odd}), manySums, 1e-5f,
             "column sums of 70 chunks");

  // Float32 column partials (4 rows a lane in flight), chunks of 64 rows:
  // the column sums of dF.
  std::vector<float> partialF(size_t(chunks * cols), -1.0f), sumsF(cols);
  kernels.call("gemm_fallback_column_partials_f32",
               {address(dF.f32), 0, address(partialF), uint64_t(rows),
                uint64_t(cols), uint64_t(perChunk)},
               1, uint32_t(chunks));
  kernels.call("gemm_fallback_column_sums_f32",
               {address(partialF), address(sumsF), uint64_t(chunks),
                uint64_t(cols)},
               uint32_t((cols + 31) / 32));
  expectNear(exec::reduceSum(dF, {cols}), sumsF, 1e-5f,
             "column sums in float32");
}
