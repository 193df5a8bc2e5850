//===- KernelsOnHostTest.cpp - generated kernels run on the CPU -----------===//
//
// Each kernel, compiled as host C++ by HostKernels (HostKernels.h: the CUDA
// built-ins and the inline PTX emulated, each block's threads run as
// coroutines), against the CPU executor's kernel on small hand-built
// programs: bit for bit for the glue (index arithmetic, broadcasting,
// vector paths, the multi-tensor block table), to float32 rounding for the
// reductions, to bf16 precision for the tensor-core attention. No GPU
// needed; timing and the real tensor cores are left to the runtime's
// kernel check on a GPU. The attention kernels' own tests are
// AttentionOnHostTest.cpp's; ProgramKernelsTest runs a whole program's
// kernels this way.
//
//===----------------------------------------------------------------------===//

#include "OnHostTestUtil.h"

#include "gptc/Executor/FusedLayerNorm.h"
#include "gptc/Executor/Kernels.h"
#include "gptc/Executor/Precision.h"
#include "gptc/Executor/ScalarProgram.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <tuple>

using namespace gptc;
using namespace gptc::test;

namespace {

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

/// A host buffer's address as a kernel argument (HostKernels::call).
template <typename T> uint64_t address(const std::vector<T> &v) {
  return uint64_t(reinterpret_cast<uintptr_t>(v.data()));
}

/// Adds c_fc's forward to `b`: a bf16 GEMM with GELU's epilogue, x
/// [rows, depth] by w [depth, cols] + bias [cols], its output and
/// pre-activation [rows, cols]; returns (x, the pre-activation).
std::pair<int, int> addGeluGemm(Builder &b, int64_t rows, int64_t cols,
                                int64_t depth) {
  const DType bf16 = DType::BF16;
  int x = b.buf(bf16, {rows, depth}), w = b.buf(bf16, {depth, cols}),
      bias = b.buf(bf16, {cols}), out = b.buf(bf16, {rows, cols}),
      pre = b.buf(bf16, {rows, cols});
  b.launch("matmul_epilogue", {x, w, bias}, {out, pre}).ints["gelu"] = 1;
  return {x, pre};
}

/// The names of the program's own wgmma GEMM kernels, in its order.
std::vector<std::string> ownKernels(const rt::Program &p) {
  std::vector<std::string> names;
  for (const rt::DeviceKernel &dk : p.kernels)
    if (dk.name.rfind("gemm_wgmma_", 0) == 0)
      names.push_back(dk.name);
  return names;
}

/// Runs gptc's wgmma GEMM `name` of m, n, k on `blocks` blocks (the
/// paired ones in clusters of two, as the runtime launches them): a and b
/// as their tensor maps (rt::wgmmaOperandMaps, in the emulation's layout,
/// as the runtime passes the driver's), then the arguments `rest`.
void callWgmmaGemm(HostKernels &kernels, const std::string &name,
                   const std::vector<uint16_t> &a,
                   const std::vector<uint16_t> &b, int64_t m, int64_t n,
                   int64_t k, const std::vector<uint64_t> &rest,
                   unsigned blocks = 1, bool lastFirst = false) {
  using rt::GemmFallback;
  for (GemmFallback kind :
       {GemmFallback::WgmmaBiasGelu, GemmFallback::WgmmaGeluGrad,
        GemmFallback::WgmmaWideBiasGelu, GemmFallback::WgmmaWideGeluGrad,
        GemmFallback::WgmmaGeluGradBias, GemmFallback::WgmmaWideGeluGradBias,
        GemmFallback::WgmmaPlain, GemmFallback::WgmmaWidePlain,
        GemmFallback::WgmmaBias, GemmFallback::WgmmaWideBias,
        GemmFallback::WgmmaPairedBiasGelu, GemmFallback::WgmmaPairedGeluGrad,
        GemmFallback::WgmmaPairedGeluGradBias, GemmFallback::WgmmaWeightGrad,
        GemmFallback::WgmmaWideWeightGrad, GemmFallback::WgmmaPairedWeightGrad})
    if (rt::gemmFallbackKernel(kind, DType::BF16) == name) {
      const auto maps = rt::wgmmaOperandMaps(kind, m, n, k);
      std::vector<uint64_t> args = {kernels.tensorMap(a.data(), maps[0]),
                                    kernels.tensorMap(b.data(), maps[1])};
      args.insert(args.end(), rest.begin(), rest.end());
      kernels.call(name, args, blocks, 1, rt::gemmFallbackCluster(name),
                   lastFirst);
      return;
    }
  ADD_FAILURE() << name << " is no wgmma GEMM";
}

/// The stream-K weight-gradient GEMM `name` (gemmWgmmaWeightGrad, tiles of
/// `cols` columns) on `blocks` blocks: out = xᵀ·dy, or old + xᵀ·dy where
/// old is non-null (it may be out), with fresh partial slots and
/// `counters`.
void callStreamK(HostKernels &kernels, const std::string &name,
                 const std::vector<uint16_t> &x,
                 const std::vector<uint16_t> &dy, int64_t m, int64_t n,
                 int64_t k, int64_t cols, const float *old, float *out,
                 std::vector<uint32_t> &counters, unsigned blocks,
                 bool lastFirst = false) {
  std::vector<float> partials(size_t(2 * blocks * 128 * cols), -1.0f);
  callWgmmaGemm(kernels, name, x, dy, m, n, k,
                {reinterpret_cast<uint64_t>(old),
                 reinterpret_cast<uint64_t>(out), address(partials),
                 address(counters), uint64_t(m), uint64_t(n), uint64_t(k)},
                blocks, lastFirst);
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

namespace {} // namespace

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

// Where whole 16-byte vectors of a row are kept (the innermost dimension
// and the row a multiple of 8 bf16 or 4 floats, at least 32 vectors of
// results), each thread sums 8 (4) adjacent columns, one load a row:
// GPT-2's q bias gradient at 256 columns of 3 x 256, a float32 sum to 128
// columns, and two that stay a column a thread (rows of 3 x 260 bf16,
// whose vectors would straddle 16 bytes; 16 columns, too few for a warp).
// Each against the CPU executor's sum of its corner.
TEST(TemplateKernelsOnHost, ReduceSumLoadsWholeVectorsOfARow) {
  const DType f32 = DType::F32, bf = DType::BF16;
  Builder b;
  int dqkv = b.buf(bf, {2048, 3, 256}), dq = b.buf(f32, {256});
  b.launch("reduce_sum", {dqkv}, {dq}).lists["corner"] = {2048, 1, 256};
  int x = b.buf(f32, {300, 128}), xs = b.buf(f32, {128});
  b.launch("reduce_sum", {x}, {xs});
  int odd = b.buf(bf, {512, 3, 260}), os = b.buf(f32, {256});
  b.launch("reduce_sum", {odd}, {os}).lists["corner"] = {512, 1, 256};
  int few = b.buf(bf, {512, 16}), fs = b.buf(f32, {16});
  b.launch("reduce_sum", {few}, {fs});
  rt::Program &p = emitForHost(b.p);
  const std::vector<const char *> vectors = {", 8>(in0", ", 4>(in0", ", 1>(in0",
                                             ", 1>(in0"};
  for (size_t i = 0; i < vectors.size(); ++i)
    EXPECT_NE(p.kernels[p.functions[0].launches[i].deviceKernel].source.find(
                  vectors[i]),
              std::string::npos)
        << "launch " << i << ": " << vectors[i];
  HostKernels kernels(p);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  std::vector<exec::HostTensor> data = runOnRandomData(p, kernels, 7);
  expectNear(exec::reduceSum(exec::slice(data[dqkv], {2048, 1, 256}), {256}),
             data[dq].f32, 1e-3f, "q's third, 8 columns a thread");
  expectNear(exec::reduceSum(data[x], {128}), data[xs].f32, 1e-4f,
             "float32, 4 columns a thread");
  expectNear(exec::reduceSum(exec::slice(data[odd], {512, 1, 256}), {256}),
             data[os].f32, 1e-3f, "rows of 260");
  expectNear(exec::reduceSum(data[few], {16}), data[fs].f32, 1e-3f,
             "16 columns");
}

// gpt.attention_bias_grad in one launch: dq's column sums read in place
// (the first C of each row of 3C), zeros for k, dout's column sums, each
// against the CPU executor. GPT-2's form (bf16, 16-byte loads, slices of
// rows summed by the last block of a column) at C = 256; float32 at C =
// 128 over [2, 150] rows (4 floats a load); and C = 36 (a column a
// thread, fewer columns than a warp). The result starts random, so k's
// third is written, and is exactly zero.
TEST(TemplateKernelsOnHost, AttentionBiasGradSumsDqAndDoutWritesZerosForK) {
  const DType f32 = DType::F32, bf = DType::BF16;
  struct Case {
    DType type;
    std::vector<int64_t> rows;
    int64_t C;
    const char *form; ///< the template's kVec, as the source calls it
  };
  for (const Case &c :
       {Case{bf, {2048}, 256, ", 8>(in0"}, Case{f32, {2, 150}, 128, ", 4>(in0"},
        Case{bf, {4, 64}, 36, ", 1>(in0"}}) {
    SCOPED_TRACE("C " + std::to_string(c.C));
    std::vector<int64_t> qkvShape = c.rows, doutShape = c.rows;
    qkvShape.push_back(3 * c.C);
    doutShape.push_back(c.C);
    Builder b;
    int dqkv = b.buf(c.type, qkvShape), dout = b.buf(c.type, doutShape);
    int db = b.buf(f32, {3 * c.C});
    b.launch("attention_bias_grad", {dqkv, dout}, {db});
    rt::Program &p = emitForHost(b.p);
    EXPECT_NE(
        p.kernels[p.functions[0].launches[0].deviceKernel].source.find(c.form),
        std::string::npos);
    HostKernels kernels(p);
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    std::vector<exec::HostTensor> data = runOnRandomData(p, kernels, 11);
    exec::HostTensor want = exec::attentionBiasGrad(data[dqkv], data[dout]);
    const std::vector<float> &got = data[db].f32;
    for (int64_t k = c.C; k < 2 * c.C; ++k)
      ASSERT_EQ(got[k], 0.0f) << "k's third, column " << k - c.C;
    expectNear(want, got, 1e-3f, "dq's and dout's sums");
    double largest = 0;
    for (float v : want.f32)
      largest = std::max(largest, std::abs(double(v)));
    EXPECT_GT(largest, 1.0) << "sums that a wrong operand would change";
  }
}

// The bf16 loss gradient keeps each row in shared memory between its
// passes (kStash: V·2 bytes of dynamic shared memory), and writes dlogits
// into a buffer of its own or over the logits (the lowering's in-place
// case): against the CPU executor on the same bf16-rounded logits, over a
// padded vocabulary: 64 columns, 45 classes (5 chunks of classes, one of 5
// classes and 3 padding columns, two of padding: one warp's chunks), 200
// columns, 197 classes (25 chunks: slices of 13 and 12 chunks, or of 7, 7,
// 7 and 4), and 1024 columns, 1000 classes (a chunk a thread of 128: the
// row's max and sum are the block's). Each form: the online one (its own
// kernel), the max-first one (the "maxfirst" variant emitCUDA adds) and
// its cluster forms (2 and 4 blocks a row, launched in clusters, each with
// a slice: at 64 columns and 4 blocks, the last slice is padding alone):
// into a buffer of its own with dloss 1.5, and in place with dloss -0.75
// (the max-first forms' negated exponentials) and the rows whose target is
// 3 ignored.
TEST(TemplateKernelsOnHost, Bf16CrossEntropyGradientKeepsRowsInSharedMemory) {
  for (auto [V, classes] :
       {std::pair<int64_t, int32_t>{64, 45}, {200, 197}, {1024, 1000}})
    for (int form : {0, 1, 2, 4}) // online, max-first, clusters of 2 and 4
      for (auto [inPlace, dlossValue] :
           {std::pair<bool, float>{false, 1.5f}, {true, -0.75f}}) {
        if (V == 200 && form < 2)
          continue; // (slices of unequal length: the cluster forms')
        const bool maxFirst = form >= 1, ctas = form >= 2;
        SCOPED_TRACE(std::to_string(V) + " columns, " +
                     (form == 0   ? "online"
                      : form == 1 ? "max-first"
                                  : "clusters of " + std::to_string(form)) +
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
        opts.crossEntropyCluster = ctas ? form : 0;
        const HostTarget target = ctas ? HostTarget::Sm90a : HostTarget::Sm80;
        rt::Program &p = emitForHost(b.p, target, opts);
        const std::string call =
            ctas       ? ", " + std::to_string(form) + ">(in0, in1, in2"
            : maxFirst ? ", true, true>(in0, in1"
                       : ", true>(in0, in1, in2";
        EXPECT_NE(p.kernels[0].source.find(call), std::string::npos);
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
        if (ctas) {
          const int64_t slice = (V / 8 + form - 1) / form;
          EXPECT_EQ(launch.sharedBytes, uint32_t(slice * 16 + form * 8));
          EXPECT_EQ(launch.cluster, uint32_t(form));
          EXPECT_EQ(launch.grid[0], uint32_t(21 * form));
          EXPECT_EQ(launch.block[0], uint32_t(128 / form));
        } else {
          EXPECT_EQ(launch.sharedBytes, uint32_t(V * 2));
          EXPECT_EQ(launch.cluster, 1u);
        }
        HostKernels kernels(p, target);
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

// The cluster form's two barrier.cluster, each taken out alone: without
// the first, a block stores its pair into the others' shared memory before
// they may have started (reported as a misuse); without the second, a
// block reads the pairs before the others have stored them (a race: at
// byte 520 of the shared memory, block 1's pair behind block 0's slice of
// 32 chunks and its own pair).
TEST(TemplateKernelsOnHost, CrossEntropyClusterNeedsBothClusterBarriers) {
  const DType f32 = DType::F32, bf = DType::BF16;
  Builder b;
  int logits = b.buf(bf, {4, 1024}), targets = b.buf(DType::I32, {4});
  int dloss = b.buf(f32, {}), loss = b.buf(f32, {});
  int dlogits = b.buf(bf, {4, 1024});
  b.launch("cross_entropy_with_grad", {logits, targets, dloss}, {loss, dlogits})
      .ints = {{"num_classes", 1000}};
  cuda::EmitOptions opts;
  opts.maxFirstCrossEntropy = true;
  opts.crossEntropyCluster = 4;
  rt::Program &p = emitForHost(b.p, HostTarget::Sm90a, opts);
  expectRunsUnreported(p, HostTarget::Sm90a);
  const std::string &source = p.kernels[0].source;
  auto [from, to] = functionSpan(source, "crossEntropyWithGradCluster");
  ASSERT_NE(from, std::string::npos);
  const std::string sync = "clusterSync();";
  const size_t first = source.find(sync, from);
  const size_t second = source.find(sync, first + 1);
  ASSERT_LT(second, to);
  EXPECT_GT(source.find(sync, second + 1), to) << "two, no more";
  for (auto [at, says] :
       {std::pair<size_t, const char *>{first, "may not have started"},
        {second, "reads, never written, byte 520 of gptcDynamicShared"}}) {
    SCOPED_TRACE(says);
    withMutation(
        p, 0, at, sync.size(), "", HostTarget::Sm90a,
        [&](rt::Program &mutated, HostKernels &kernels, size_t) {
          try {
            runOnRandomData(mutated, kernels, 7, 1000);
            ADD_FAILURE() << "nothing reported";
          } catch (const std::runtime_error &e) {
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos)
                << e.what();
          }
        });
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

// embedding_grad in place (the tied table's gradient in grads, which its
// GEMM wrote there; grads_accumulate's gathered tables): the table is its
// own last operand and there is no addend, so a row some id hits becomes
// old + its float32 sum in position order, and every other row keeps its
// bytes. 5,000 rows (157 groups) of 301 columns (the last slice 45 wide),
// 1,203 positions whose ids fall in the first 1,500 rows, a third of them
// one frequent id; the rows are -0.0, which an add of a zero sum would
// turn into +0.0.
TEST(TemplateKernelsOnHost, EmbeddingGradInPlaceKeepsRowsNoIdHits) {
  const DType f32 = DType::F32, i32 = DType::I32;
  const int64_t positions = 1203, C = 301, V = 5000;
  Builder b;
  int ids = b.buf(i32, {positions}), dy = b.buf(f32, {positions, C});
  int table = b.buf(f32, {V, C});
  b.launch("embedding_grad", {dy, ids, table}, {table}).ints["accumulate"] = 1;
  HostKernels kernels(emitForHost(b.p));
  ASSERT_TRUE(kernels.ok()) << kernels.error;

  exec::HostTensor grad = randomFloats({positions, C}, 41);
  exec::HostTensor idT = exec::HostTensor::ids({positions});
  std::mt19937 rng(43);
  for (int32_t &id : idT.i32)
    id = rng() % 3 == 0 ? 1201 : int32_t(rng() % 1500);
  std::vector<float> old(size_t(V * C), -0.0f);
  for (int64_t i = 0; i < 1500 * C; ++i)
    old[i] = float(rng() % 1000) / 250.0f - 2.0f;
  std::vector<float> got = old;
  kernels.run(0, {grad.f32.data(), idT.i32.data(), got.data(), got.data()});

  std::vector<float> sum(size_t(V * C), 0.0f);
  std::vector<bool> hit(size_t(V), false);
  for (int64_t p = 0; p < positions; ++p) {
    hit[idT.i32[p]] = true;
    for (int64_t k = 0; k < C; ++k)
      sum[idT.i32[p] * C + k] += grad.f32[p * C + k];
  }
  int64_t kept = 0;
  for (int64_t r = 0; r < V; ++r)
    for (int64_t k = 0; k < C; ++k) {
      const int64_t i = r * C + k;
      const float want = hit[r] ? old[i] + sum[i] : old[i];
      ASSERT_EQ(std::memcmp(&want, &got[i], 4), 0)
          << "row " << r << " column " << k << ": " << got[i] << " for "
          << want;
      kept += !hit[r];
    }
  EXPECT_GT(kept, (V - 1500) * C); // the -0.0 rows, and some of the first
}

namespace {

/// sort_ids' keys as its kernel writes them: id · 2^bits + position for the
/// ids in [0, rows), ascending, then -1 for each of the others.
std::vector<int32_t> sortedKeys(const std::vector<int32_t> &ids, int64_t rows,
                                int bits) {
  std::vector<int32_t> keys;
  for (size_t p = 0; p < ids.size(); ++p)
    if (ids[p] >= 0 && ids[p] < rows)
      keys.push_back(int32_t(int64_t(ids[p]) << bits | int64_t(p)));
  std::sort(keys.begin(), keys.end());
  keys.resize(ids.size(), -1);
  return keys;
}

/// Ids of `positions` positions over `rows` rows: a third of them `frequent`,
/// one in ten outside the table (-1, rows, 2^20), the rest below `spread`.
std::vector<int32_t> skewedIds(int64_t positions, int64_t rows,
                               int32_t frequent, int64_t spread,
                               uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(positions));
  const int32_t outside[3] = {-1, int32_t(rows), 1 << 20};
  for (int32_t &id : ids) {
    const uint32_t r = rng() % 30;
    id = r < 10   ? frequent
         : r < 13 ? outside[rng() % 3]
                  : int32_t(rng() % uint32_t(spread));
  }
  return ids;
}

} // namespace

// sort_ids (embedding.cuh's sortIds): one block of 1,024 threads, an LSD
// radix sort of 4 bits a pass, each pass stable, so each row's positions
// stay in order. Against std::sort of the same keys: 1,200 positions (two
// a thread, the last 848 threads' second past the end) over 100 rows (7
// bits of row: 2 passes); GPT-2's 16,384 over 50,257 rows (16 a thread, 16
// bits: 4 passes); 300 over 5 rows (one pass). A third of the ids are one
// row, a tenth outside the table: those come last, as -1.
TEST(TemplateKernelsOnHost, SortIdsKeepEachRowsPositionsInOrder) {
  const DType i32 = DType::I32;
  struct Case {
    int64_t positions, rows;
  };
  for (Case c : {Case{1200, 100}, Case{16384, 50257}, Case{300, 5}}) {
    SCOPED_TRACE(std::to_string(c.positions) + " positions, " +
                 std::to_string(c.rows) + " rows");
    Builder b;
    int ids = b.buf(i32, {c.positions}), keys = b.buf(i32, {c.positions});
    const int bits = exec::sortedIdPositionBits(c.positions);
    b.launch("sort_ids", {ids}, {keys}).ints = {{"rows", c.rows},
                                                {"position_bits", bits}};
    rt::Program &p = emitForHost(b.p);
    EXPECT_EQ(p.functions[0].launches[0].block[0], 1024u);
    HostKernels kernels(p);
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    std::vector<int32_t> in =
        skewedIds(c.positions, c.rows, int32_t(c.rows / 2), c.rows, 51);
    std::vector<int32_t> got(static_cast<size_t>(c.positions), 12345);
    kernels.run(0, {in.data(), got.data()});
    const std::vector<int32_t> want = sortedKeys(in, c.rows, bits);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << "key " << i;
  }
}

// embedding_grad from sort_ids' keys (embeddingBackwardSorted): blocks of
// 32 sorted keys by 256-column slices. 1,203 positions over 5,000 rows: a
// third one row (about 400 hits, 13 windows: its pieces go to scratch and
// the last block to arrive adds them), the rest in the first 1,500 rows
// but a tenth outside the table (no row takes them). Every form: in place
// (the gradient its last operand, no addend: rows no id hits keep their
// bytes, -0.0 here, which an add of zero would make +0.0), with an addend
// (every row written: the dense blocks), with both (grads_accumulate's
// tied table) and with neither (zeros). Rows of 1,000 columns (four
// slices, the last 232 wide), 301 (odd: one element at a time, the last
// pair half past the row) and 64. Each row is its float32 sum in the
// kernel's order, to the bit: position order within a window, the windows'
// sums added in order (computed so here); and near the executor's double
// sum over the ids in the table.
TEST(TemplateKernelsOnHost, SortedEmbeddingGradSumsRowsWindowByWindow) {
  const DType f32 = DType::F32, i32 = DType::I32;
  const int64_t positions = 1203, V = 5000;
  const int bits = exec::sortedIdPositionBits(positions);
  for (int64_t C : {1000, 301, 64})
    for (auto [withAddend, inPlace] : {std::pair{false, true},
                                       {true, false},
                                       {true, true},
                                       {false, false}}) {
      SCOPED_TRACE("C " + std::to_string(C) +
                   (withAddend ? ", addend" : ", no addend") +
                   (inPlace ? ", in place" : ""));
      Builder b;
      int ids = b.buf(i32, {positions}), keys = b.buf(i32, {positions}),
          dy = b.buf(f32, {positions, C}), add = b.buf(f32, {V, C}),
          table = b.buf(f32, {V, C});
      b.launch("sort_ids", {ids}, {keys}).ints = {{"rows", V},
                                                  {"position_bits", bits}};
      std::vector<int> in = {dy, keys};
      if (withAddend)
        in.push_back(add);
      if (inPlace)
        in.push_back(table);
      rt::Launch &l = b.launch("embedding_grad", in, {table});
      l.ints["position_bits"] = bits;
      if (inPlace)
        l.ints["accumulate"] = 1;
      rt::Program &p = emitForHost(b.p);
      const bool dense = withAddend || !inPlace;
      EXPECT_EQ(p.functions[0].launches[1].grid[0],
                uint32_t((38 + (dense ? 40 : 0)) * ((C + 255) / 256)));
      HostKernels kernels(p);
      ASSERT_TRUE(kernels.ok()) << kernels.error;

      std::vector<int32_t> idv = skewedIds(positions, V, 1201, 1500, 61);
      exec::HostTensor grad = randomFloats({positions, C}, 62);
      exec::HostTensor addend = randomFloats({V, C}, 63);
      std::mt19937 rng(64);
      std::vector<float> old(size_t(V * C), -0.0f);
      for (int64_t i = 0; i < 1500 * C; ++i)
        old[size_t(i)] = float(rng() % 1000) / 250.0f - 2.0f;
      std::vector<int32_t> sorted(static_cast<size_t>(positions));
      kernels.run(0, {idv.data(), sorted.data()});
      ASSERT_EQ(sorted, sortedKeys(idv, V, bits));
      std::vector<float> got = old;
      std::vector<void *> ptrs = {grad.f32.data(), sorted.data()};
      if (withAddend)
        ptrs.push_back(addend.f32.data());
      if (inPlace)
        ptrs.push_back(got.data());
      ptrs.push_back(got.data());
      kernels.run(1, ptrs);

      // Each row's sums by window of 32 sorted keys, then added in order.
      std::map<int32_t, std::vector<std::pair<size_t, std::vector<float>>>>
          pieces;
      for (size_t i = 0; i < sorted.size() && sorted[i] >= 0; ++i) {
        const int32_t row = sorted[i] >> bits,
                      pos = sorted[i] & ((1 << bits) - 1);
        auto &rowPieces = pieces[row];
        if (rowPieces.empty() || rowPieces.back().first != i / 32)
          rowPieces.push_back({i / 32, std::vector<float>(size_t(C), 0.0f)});
        for (int64_t k = 0; k < C; ++k)
          rowPieces.back().second[size_t(k)] += grad.f32[size_t(pos * C + k)];
      }
      EXPECT_GT(pieces[1201].size(), 10u); // the frequent row's windows
      std::vector<float> sum(size_t(V * C), 0.0f);
      std::vector<bool> hit(size_t(V), false);
      for (const auto &[row, rowPieces] : pieces) {
        hit[size_t(row)] = true;
        for (int64_t k = 0; k < C; ++k) {
          float total =
              rowPieces.size() == 1 ? rowPieces[0].second[size_t(k)] : 0.0f;
          if (rowPieces.size() > 1)
            for (const auto &piece : rowPieces)
              total += piece.second[size_t(k)];
          sum[size_t(row * C + k)] = total;
        }
      }
      for (int64_t r = 0; r < V; ++r)
        for (int64_t k = 0; k < C; ++k) {
          const size_t i = size_t(r * C + k);
          float want = old[i];
          if (hit[size_t(r)] || !inPlace || withAddend) {
            const float v = withAddend ? addend.f32[i] + sum[i] : sum[i];
            want = inPlace ? old[i] + v : v;
          }
          ASSERT_EQ(std::memcmp(&want, &got[i], 4), 0)
              << "row " << r << " column " << k << ": " << got[i] << " for "
              << want;
        }
      // Near the executor's double sum over the ids in the table.
      exec::HostTensor inTable = exec::HostTensor::ids({positions});
      exec::HostTensor dyInTable = grad;
      for (int64_t q = 0; q < positions; ++q) {
        const bool inside = idv[size_t(q)] >= 0 && idv[size_t(q)] < V;
        inTable.i32[size_t(q)] = inside ? idv[size_t(q)] : 0;
        if (!inside)
          for (int64_t k = 0; k < C; ++k)
            dyInTable.f32[size_t(q * C + k)] = 0.0f;
      }
      exec::HostTensor near = exec::embeddingGrad(dyInTable, inTable, {V, C});
      std::vector<float> gotSum(size_t(V * C));
      for (size_t i = 0; i < gotSum.size(); ++i)
        gotSum[i] = hit[i / size_t(C)] ? sum[i] : 0.0f;
      expectNear(near, gotSum, 2e-5f, "the windows' sums");
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
    SCOPED_TRACE("sort_ids: each pass's counts, their prefix sums (the "
                 "block's scan through shared memory) and the scatter "
                 "between barriers, each thread reloading its keys after");
    Builder b;
    int ids = b.buf(i32, {1500}), keys = b.buf(i32, {1500});
    auto &sort = b.launch("sort_ids", {ids}, {keys});
    sort.ints = {{"rows", 300}, {"position_bits", 11}};
    expectEveryBarrierNeeded(emitForHost(b.p), {"sortIds"}, {}, runRandom(300));
  }
  {
    SCOPED_TRACE("embedding_grad from sorted keys: the window's keys, the "
                 "dense rows' hits, and a piece's row span (the keys here "
                 "are 600 positions of row 0, in no order: one row across "
                 "every window, its pieces added by the last block)");
    Builder b;
    int dy = b.buf(f32, {600, 200}), keys = b.buf(i32, {600}),
        table = b.buf(f32, {20, 200});
    b.launch("embedding_grad", {dy, keys}, {table}).ints["position_bits"] = 10;
    expectEveryBarrierNeeded(emitForHost(b.p),
                             {"embeddingBackwardSorted", "lastBlockToArrive"},
                             spared({"lastBlockToArrive #0"}), runRandom(600));
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

namespace {

/// What the emulation says about `body`, a kernel run as one cluster of
/// two blocks of 128 threads with 4 KB of dynamic shared memory each (t
/// is threadIdx.x, rank the block's in the cluster, `bar` an mbarrier at
/// the start of that memory), which writes `out` [256] floats: the first
/// race or misuse, or "" and each element (block r's thread t's at 128r +
/// t) in `values`.
std::string clusterRun(const std::string &body,
                       std::vector<float> *values = nullptr) {
  Builder b;
  int out = b.buf(DType::F32, {256});
  rt::Launch &l = b.launch("probe", {}, {out});
  l.deviceKernel = 0;
  l.grid[0] = 2;
  l.block[0] = 128;
  l.sharedBytes = 4096;
  b.p.kernels.push_back(
      {"probe",
       cuda::kernelTemplate("types.cuh") +
           "extern \"C\" __global__ void probe(float *out) {\n"
           "  const int t = threadIdx.x, rank = blockIdx.x % 2;\n"
           "  extern __shared__ uint4 gptcDynamicShared[];\n"
           "  unsigned long long *bar =\n"
           "      reinterpret_cast<unsigned long long "
           "*>(gptcDynamicShared);\n" +
           body + "\n}\n",
       {},
       "",
       {}});
  HostKernels kernels(b.p);
  if (!kernels.ok())
    return "does not compile: " + kernels.error;
  std::vector<float> o(256, -1.0f);
  try {
    kernels.run(0, 0, {o.data()}, 2);
  } catch (const std::runtime_error &e) {
    return e.what();
  }
  if (values)
    *values = o;
  return "";
}

} // namespace

// Clusters in the emulation (threads.h: runCluster): the two blocks run
// together, each with its own dynamic shared memory, and meet at
// barrier.cluster; block 1's thread arrives at block 0's mbarrier through
// its cluster address (mapa), which block 0's threads wait for. What each
// misuse gets: an arrival from the other block with no barrier.cluster
// since the block started and the mbarrier's init, a wait no arrival ends,
// global memory both blocks write with no barrier.cluster between, mapa of a
// __shared__ static (which has no copy a block) or to a rank outside the
// cluster.
TEST(HostClusterEmulation, BlocksOfAClusterMeetAndArriveAtEachOther) {
  const std::string init = "  if (t == 0) mbarrierInit(bar, 1);\n";
  const std::string arrive =
      "  if (rank == 1 && t == 0)\n"
      "    mbarrierArriveRemote(clusterSharedAddress(sharedAddress(bar), "
      "0));\n";
  const std::string wait = "  if (rank == 0) mbarrierWaitCluster(bar, 0);\n"
                           "  out[128 * rank + t] = 1000.0f * rank + t;\n";
  std::vector<float> values;
  EXPECT_EQ(clusterRun(init + "  clusterSync();\n" + arrive + wait +
                           "  clusterSync();",
                       &values),
            "");
  for (int i = 0; i < 256; ++i)
    EXPECT_EQ(values[size_t(i)], 1000.0f * float(i / 128) + float(i % 128));
  // Each block's dynamic shared memory is its own: the same offset holds
  // each block's rank.
  EXPECT_EQ(clusterRun("  float *mine = reinterpret_cast<float *>(bar);\n"
                       "  if (t == 0) mine[0] = float(rank);\n"
                       "  __syncthreads();\n"
                       "  out[128 * rank + t] = mine[0];",
                       &values),
            "");
  for (int i = 0; i < 256; ++i)
    EXPECT_EQ(values[size_t(i)], float(i / 128));
  // (An arrival before the first barrier.cluster: block 0 may not have
  // started, nor initialised its mbarrier; both are reported.)
  EXPECT_EQ(clusterRun(init + "  __syncthreads();\n" + arrive + wait +
                       "  clusterSync();"),
            "cluster misuse in block (1, 0, 0): thread 128: an arrival at "
            "another block's mbarrier before a barrier.cluster (it may not "
            "have started) (2 races in all)");
  // After it, an mbarrier initialised since is still not another's to
  // arrive at before the next.
  EXPECT_EQ(clusterRun("  clusterSync();\n" + init + "  __syncthreads();\n" +
                       arrive + wait + "  clusterSync();"),
            "mbarrier misuse in block (1, 0, 0): thread 128: arrive from "
            "another block of the cluster, with no barrier.cluster (or "
            "mbarrier) since the mbarrier's init (1 race in all)");
  EXPECT_EQ(clusterRun(init + "  clusterSync();\n" + wait + "  clusterSync();"),
            "mbarrier misuse in block (0, 0, 0): thread 0: waits for a phase "
            "that no arrival completes (the block deadlocks) (128 races in "
            "all)");
  // Global memory both blocks write, unordered.
  EXPECT_EQ(clusterRun("  if (t == 0) out[0] = float(rank);"),
            "global-memory race in block (1, 0, 0): thread 128 writes, with "
            "no barrier.cluster (or mbarrier) since, what another block of "
            "the cluster writes: byte 0 of output 0, last written by thread 0 "
            "(2 races in all)");
  EXPECT_EQ(clusterRun("  if (t == 0 && rank == 0) out[0] = 1.0f;\n"
                       "  clusterSync();\n"
                       "  if (t == 0 && rank == 1) out[0] = 2.0f;",
                       &values),
            "");
  EXPECT_EQ(values[0], 2.0f);
  EXPECT_EQ(
      clusterRun("  __shared__ float s[4];\n"
                 "  if (t == 0) out[128 * rank] = float(clusterSharedAddress("
                 "sharedAddress(s), 0));"),
      "cluster misuse in block (0, 0, 0): thread 0: mapa of an address "
      "outside the dynamic shared memory, or to a rank outside the "
      "cluster (2 races in all)");
  EXPECT_EQ(
      clusterRun("  if (t == 0) out[128 * rank] = float(clusterSharedAddress("
                 "sharedAddress(bar), 2));"),
      "cluster misuse in block (0, 0, 0): thread 0: mapa of an address "
      "outside the dynamic shared memory, or to a rank outside the "
      "cluster (2 races in all)");
}

// A multicast tensor copy by block 0 lands in each block its mask names
// and counts its bytes at that block's mbarrier (at the same address):
// with both named, both blocks' waits end; with block 0 alone, block 1
// waits for a phase no copy completes. A mask of no block or of a rank
// past the cluster is refused (and then every thread's wait deadlocks).
// (The box: `out` as 8 rows of 64 bf16.)
TEST(HostClusterEmulation, MulticastCopiesLandInTheBlocksTheyName) {
  auto copy = [](const char *mask) {
    return std::string(
               "  alignas(64) static TensorMap map;\n"
               "  char *base = reinterpret_cast<char *>(bar) + 16;\n"
               "  char *box = base + (1024 - reinterpret_cast<unsigned long "
               "long>(base) % 1024) % 1024;\n"
               "  if (t == 0) {\n"
               "    gptcEmuEncodeTensorMap(&map, out, 64, 8, 128, 64, 8);\n"
               "    mbarrierInit(bar, 1);\n"
               "  }\n"
               "  clusterSync();\n"
               "  if (t == 0) mbarrierArriveExpectTx(bar, 1024);\n"
               "  if (rank == 0 && t == 0)\n"
               "    tensorCopy2dMulticast(sharedAddress(box), &map, 0, 0, bar, ") +
           mask +
           ");\n"
           "  mbarrierWait(bar, 0);\n"
           "  clusterSync();";
  };
  EXPECT_EQ(clusterRun(copy("3")), "");
  EXPECT_EQ(clusterRun(copy("1")),
            "mbarrier misuse in block (1, 0, 0): thread 128: waits for a phase "
            "that no arrival completes (the block deadlocks) (128 races in "
            "all)");
  for (const char *mask : {"0", "4"})
    EXPECT_EQ(clusterRun(copy(mask)),
              "tensor copy misuse in block (0, 0, 0): thread 0: a multicast "
              "to no block, or to a rank outside the cluster (257 races in "
              "all)")
        << mask;
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

/// Each of got's bf16 values within one ulp of want's (2^-7 of it, so
/// one ulp at the top of a binade too), or within `tinyAt` of it: where the
/// executor's tanh form saturates to 0, GELU's sigmoid form gives tiny
/// values (down to -2^-126) and its derivative's values within 4e-6 of
/// float64's (gemm_fallback.cuh), times the product it scales. Returns how
/// many values stood where the executor's were 0.
int64_t expectWithinOneUlpOrTiny(const std::vector<uint16_t> &want,
                                 const std::vector<uint16_t> &got,
                                 const char *what, float tinyAt = 1e-6f) {
  EXPECT_EQ(want.size(), got.size()) << what;
  const int64_t n = int64_t(got.size());
  const exec::HostTensor g = fromBf16Bits(got, {n}),
                         w = fromBf16Bits(want, {n});
  int64_t tiny = 0;
  for (int64_t i = 0; i < n && i < int64_t(want.size()); ++i) {
    const float x = g.f32[size_t(i)], y = w.f32[size_t(i)];
    tiny += y == 0.0f && x != 0.0f;
    if (!(std::fabs(x - y) <= std::ldexp(std::fabs(y), -7) + tinyAt)) {
      ADD_FAILURE() << what << " element " << i << ": " << x << " against "
                    << y;
      break;
    }
  }
  return tiny;
}

// gptc's own GEMMs (gemm_wgmma.cuh) on the host's emulation of wgmma, with
// the race checker, against the CPU executor's fused GEMMs: pre = x·w +
// bias and out = GELU(pre) (w [k, n]); GELU's derivative, gelu'(pre) ·
// (dy·wtᵀ) (wt [n, k]). Each bf16 result is the executor's rounding or one
// ulp from it (the products summed in another order; GELU's sigmoid
// form), but where that form's tiny values stand for the executor's 0.
// One block walking the 4 tiles of 128 x 128, each warpgroup 2 in turn
// (5 steps of 64 each, 20 through 6 stages, so every stage is filled
// again), one walking the 2 tiles of 128 x 256 (through 4 stages), and a
// cluster of two taking those in a pair, each staged a warp at a time.
// The emitter adds the kernels for sm_90a alone, and only for GEMMs whose
// shapes fit their tiles (the pairs' m a multiple of 256).
TEST(TemplateKernelsOnHost, WgmmaGemmsWithGeluMatchTheCpuExecutor) {
  const DType bf16 = DType::BF16;
  const int64_t m = 256, n = 256, k = 320;
  Builder b;
  int x = b.buf(bf16, {2, m / 2, k}), w = b.buf(bf16, {k, n}),
      bias = b.buf(bf16, {n}), out = b.buf(bf16, {2, m / 2, n}),
      pre = b.buf(bf16, {2, m / 2, n});
  b.launch("matmul_epilogue", {x, w, bias}, {out, pre}).ints["gelu"] = 1;
  int wt = b.buf(bf16, {n, k}), dp = b.buf(bf16, {m, n});
  b.launch("matmul_gelu_grad", {x, wt, pre}, {dp}).ints["transpose_b"] = 1;
  // Each in blocks of 128 x 128, of 128 x 256, and those in pairs.
  const std::vector<std::string> own = {
      "gemm_wgmma_bias_gelu_bf16",        "gemm_wgmma_gelu_grad_bf16",
      "gemm_wgmma_wide_bias_gelu_bf16",   "gemm_wgmma_wide_gelu_grad_bf16",
      "gemm_wgmma_paired_bias_gelu_bf16", "gemm_wgmma_paired_gelu_grad_bf16"};
  rt::Program sm80 = b.p;
  EXPECT_TRUE(ownKernels(emitForHost(sm80, HostTarget::Sm80)).empty());
  // Shapes off their tiles: rows, columns or depth.
  for (auto [rows, cols, depth] :
       {std::tuple<int64_t, int64_t, int64_t>{200, 256, 64},
        {256, 192, 64},
        {256, 256, 96}}) {
    Builder off;
    auto [ox, op] = addGeluGemm(off, rows, cols, depth);
    int owt = off.buf(bf16, {cols, depth}), odp = off.buf(bf16, {rows, cols});
    off.launch("matmul_gelu_grad", {ox, owt, op}, {odp}).ints["transpose_b"] =
        1;
    EXPECT_TRUE(ownKernels(emitForHost(off.p, HostTarget::Sm90a)).empty())
        << rows << " x " << cols << " x " << depth;
  }
  // 384 columns: the 128-column blocks alone.
  {
    Builder narrow;
    addGeluGemm(narrow, 128, 384, 64);
    EXPECT_EQ(ownKernels(emitForHost(narrow.p, HostTarget::Sm90a)),
              std::vector<std::string>{own[0]});
  }
  // 128 rows: no pairs.
  {
    Builder rows;
    addGeluGemm(rows, 128, 256, 64);
    EXPECT_EQ(ownKernels(emitForHost(rows.p, HostTarget::Sm90a)),
              (std::vector<std::string>{own[0], own[2]}));
  }

  rt::Program &p = emitForHost(b.p, HostTarget::Sm90a);
  EXPECT_EQ(ownKernels(p), own);
  HostKernels kernels(p, HostTarget::Sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  const std::vector<uint32_t> shared = rt::dynamicSharedBytes(p);
  EXPECT_EQ(shared[shared.size() - 5], rt::kGemmWgmmaSharedBytes);
  EXPECT_EQ(shared[shared.size() - 3], rt::kGemmWgmmaWideSharedBytes);
  EXPECT_EQ(shared.back(), rt::kGemmWgmmaPairedSharedBytes);
  const std::vector<uint16_t> xBits = bf16Bits(randomFloats({m, k}, 21)),
                              wBits = bf16Bits(randomFloats({k, n}, 22)),
                              biasBits = bf16Bits(randomFloats({n}, 23)),
                              wtBits = bf16Bits(randomFloats({n, k}, 24));
  const std::vector<exec::HostTensor> fused = exec::matmulEpilogue(
      fromBf16Bits(xBits, {m, k}), fromBf16Bits(wBits, {k, n}),
      fromBf16Bits(biasBits, {n}), false, false, true, true);
  for (int shape = 0; shape < 3; ++shape) {
    SCOPED_TRACE(shape == 2   ? "128 x 256 tiles in pairs"
                 : shape == 1 ? "128 x 256 tiles"
                              : "128 x 128 tiles in turns");
    // One block (or pair) walks all the tiles.
    const unsigned blocks = shape == 2 ? 2 : 1;
    std::vector<uint16_t> outBits(size_t(m * n), 0xffff),
        preBits(size_t(m * n), 0xffff), dpBits(size_t(m * n), 0xffff);
    callWgmmaGemm(kernels, own[size_t(2 * shape)], xBits, wBits, m, n, k,
                  {address(biasBits), address(outBits), address(preBits),
                   uint64_t(m), uint64_t(n), uint64_t(k)},
                  blocks);
    expectWithinOneUlp(bf16Bits(fused[1]), preBits, "x·w + bias");
    EXPECT_GT(expectWithinOneUlpOrTiny(bf16Bits(fused[0]), outBits,
                                       "GELU(x·w + bias)"),
              0)
        << "no pre-activation far enough below 0 to tell";

    // GELU's derivative at that pre-activation.
    callWgmmaGemm(kernels, own[size_t(2 * shape + 1)], xBits, wtBits, m, n, k,
                  {address(preBits), address(dpBits), uint64_t(m), uint64_t(n),
                   uint64_t(k)},
                  blocks);
    const std::vector<exec::HostTensor> dgelu = exec::matmulGeluGrad(
        fromBf16Bits(xBits, {m, k}), fromBf16Bits(wtBits, {n, k}),
        fromBf16Bits(preBits, {m, n}), false, true, false);
    // (The products here are up to about 100: 4e-6 of them.)
    expectWithinOneUlpOrTiny(bf16Bits(dgelu[0]), dpBits, "gelu'(pre) · (x·wtᵀ)",
                             4e-4f);
  }
}

// gptc's own GEMMs without an epilogue (GemmPlain: ways to a plain bf16
// matmul with transpose_b) and with the bias alone (GemmBias: a forward
// projection's, b [k, n]), so that tuning times the blocks' products with
// a light epilogue against cuBLASLt's: out = x·wtᵀ and y = x·w + bias
// within one ulp of the executor's rounding, 5 steps each: 4 tiles of 128
// x 128 walked by 3 blocks (the first takes 2, its second warpgroup one;
// the others one, their second warpgroups none), and 2 of 128 x 256 by
// 2. The emitter adds them for sm_90a alone, and not for the other
// layout of b, a shape off the tiles or a float32 result.
TEST(TemplateKernelsOnHost, WgmmaPlainAndBiasGemmsMatchTheCpuExecutor) {
  const DType bf16 = DType::BF16;
  const int64_t m = 256, n = 256, k = 320;
  Builder b;
  int x = b.buf(bf16, {2, m / 2, k}), wt = b.buf(bf16, {n, k}),
      out = b.buf(bf16, {2, m / 2, n}), w = b.buf(bf16, {k, n}),
      bias = b.buf(bf16, {n}), y = b.buf(bf16, {m, n});
  b.launch("matmul", {x, wt}, {out}).ints["transpose_b"] = 1;
  b.launch("matmul_epilogue", {x, w, bias}, {y});
  rt::Program sm80 = b.p;
  EXPECT_TRUE(ownKernels(emitForHost(sm80, HostTarget::Sm80)).empty());
  {
    // b not transposed, and transposed with a bias; 192 columns; a
    // float32 result.
    Builder off;
    int ox = off.buf(bf16, {256, 64}), ow = off.buf(bf16, {64, 256}),
        oo = off.buf(bf16, {256, 256}), ot = off.buf(bf16, {192, 64}),
        oo2 = off.buf(bf16, {256, 192}), of = off.buf(DType::F32, {256, 256}),
        owt = off.buf(bf16, {256, 64}), ob = off.buf(bf16, {256}),
        oy = off.buf(bf16, {256, 256});
    off.launch("matmul", {ox, ow}, {oo});
    off.launch("matmul", {ox, ot}, {oo2}).ints["transpose_b"] = 1;
    off.launch("matmul", {ox, owt}, {of}).ints["transpose_b"] = 1;
    off.launch("matmul_epilogue", {ox, owt, ob}, {oy}).ints["transpose_b"] = 1;
    EXPECT_TRUE(ownKernels(emitForHost(off.p, HostTarget::Sm90a)).empty());
  }
  rt::Program &p = emitForHost(b.p, HostTarget::Sm90a);
  const std::vector<std::string> own = {
      "gemm_wgmma_plain_bf16", "gemm_wgmma_wide_plain_bf16",
      "gemm_wgmma_bias_bf16", "gemm_wgmma_wide_bias_bf16"};
  std::vector<std::string> got = ownKernels(p);
  std::sort(got.begin(), got.end());
  std::vector<std::string> sorted = own;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(got, sorted);
  HostKernels kernels(p, HostTarget::Sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  const std::vector<uint16_t> xBits = bf16Bits(randomFloats({m, k}, 51)),
                              wtBits = bf16Bits(randomFloats({n, k}, 52)),
                              wBits = bf16Bits(randomFloats({k, n}, 53)),
                              biasBits = bf16Bits(randomFloats({n}, 54));
  const exec::HostTensor want = exec::matmul(
      fromBf16Bits(xBits, {m, k}), fromBf16Bits(wtBits, {n, k}), false, true);
  const std::vector<exec::HostTensor> wantY = exec::matmulEpilogue(
      fromBf16Bits(xBits, {m, k}), fromBf16Bits(wBits, {k, n}),
      fromBf16Bits(biasBits, {n}), false, false, false, false);
  for (int wide = 0; wide < 2; ++wide) {
    SCOPED_TRACE(wide ? "128 x 256 tiles" : "128 x 128 tiles in turns");
    const uint32_t blocks = wide ? 2 : 3;
    std::vector<uint16_t> outBits(size_t(m * n), 0xffff),
        yBits(size_t(m * n), 0xffff);
    callWgmmaGemm(kernels, own[size_t(wide)], xBits, wtBits, m, n, k,
                  {address(outBits), uint64_t(m), uint64_t(n), uint64_t(k)},
                  blocks);
    expectWithinOneUlp(bf16Bits(want), outBits, "x·wtᵀ");
    callWgmmaGemm(kernels, own[size_t(2 + wide)], xBits, wBits, m, n, k,
                  {address(biasBits), address(yBits), uint64_t(m), uint64_t(n),
                   uint64_t(k)},
                  blocks);
    expectWithinOneUlp(bf16Bits(wantY[0]), yBits, "x·w + bias");
  }
}

// gptc's weight-gradient GEMM (gemmWgmmaWeightGrad, stream-K) on the
// host's wgmma emulation with the race checker, against the CPU executor's
// matmul with transpose_a: out = xᵀ·dy in float32, x [k, m] read M-major
// (the wgmma's transposed A), dy [k, n]; and old + xᵀ·dy, in place. 4
// tiles of 128 x 128, 5 depth steps each: 20 iterations cut into 1 span
// (whole tiles, taken in turns), 3 (tiles 1 and 2 shared by two blocks:
// a block's last segment and the next one's first), 7 (a block inside a
// tile: three blocks a tile) and 20 (five blocks a tile, one step each);
// and 384 x 256 (tiles along m first) at 4 and 9. The wide blocks (128 x
// 256 tiles, both warpgroups a segment): 2 tiles, 10 iterations, at 1, 3,
// 7 (four blocks a tile) and 10; 384 x 256 at 4 and 9. In pairs (256 x 256
// tiles, clusters of two blocks sharing b): 1 tile, 5 iterations, at 1, 3
// and 5 pairs; 512 x 256 at 2 and 7 pairs. Each within float32's rounding
// of the executor's sums, the same bits with the blocks (or pairs) run
// last to first, the counters back at 0 after every launch. The emitter
// adds the three kernels for sm_90a alone (a matmul_bias_grad's too), and
// none for a shape off the tiles, a bf16 result or b transposed.
TEST(TemplateKernelsOnHost, WgmmaWeightGradStreamKMatchesTheCpuExecutor) {
  const DType bf16 = DType::BF16, f32 = DType::F32;
  const int64_t m = 256, n = 256, k = 320;
  const std::string narrow = "gemm_wgmma_weight_grad_bf16",
                    wide = "gemm_wgmma_wide_weight_grad_bf16",
                    paired = "gemm_wgmma_paired_weight_grad_bf16";
  Builder b;
  int x = b.buf(bf16, {k, m}), dy = b.buf(bf16, {k, n}),
      out = b.buf(f32, {m, n}), sum = b.buf(f32, {m, n});
  b.launch("matmul", {x, dy}, {out}).ints["transpose_a"] = 1;
  rt::Launch &acc = b.launch("matmul", {x, dy, sum}, {sum});
  acc.ints["transpose_a"] = 1;
  acc.ints["accumulate"] = 1;
  // (With a bias gradient too: the same kernel, the runtime's column sums
  // after it.)
  int gw = b.buf(f32, {m, n}), gb = b.buf(f32, {n});
  b.launch("matmul_bias_grad", {x, dy}, {gw, gb}).ints["transpose_a"] = 1;
  rt::Program sm80 = b.p;
  EXPECT_TRUE(ownKernels(emitForHost(sm80, HostTarget::Sm80)).empty());
  {
    // 192 rows; 192 columns; a bf16 result; b transposed; a 3-D a (the
    // kernel level's weight gradients take 2-D views).
    Builder off;
    int ox = off.buf(bf16, {64, 192}), oy = off.buf(bf16, {64, 256}),
        oo = off.buf(f32, {192, 256}), ox2 = off.buf(bf16, {64, 256}),
        oy2 = off.buf(bf16, {64, 192}), oo2 = off.buf(f32, {256, 192}),
        ob = off.buf(bf16, {256, 256}), oyt = off.buf(bf16, {256, 64}),
        ot = off.buf(f32, {256, 256}), o3 = off.buf(bf16, {2, 32, 256});
    off.launch("matmul", {ox, oy}, {oo}).ints["transpose_a"] = 1;
    off.launch("matmul", {ox2, oy2}, {oo2}).ints["transpose_a"] = 1;
    off.launch("matmul", {ox2, oy}, {ob}).ints["transpose_a"] = 1;
    rt::Launch &t = off.launch("matmul", {ox2, oyt}, {ot});
    t.ints["transpose_a"] = 1;
    t.ints["transpose_b"] = 1;
    off.launch("matmul", {o3, oy}, {ot}).ints["transpose_a"] = 1;
    EXPECT_TRUE(ownKernels(emitForHost(off.p, HostTarget::Sm90a)).empty());
  }
  rt::Program &p = emitForHost(b.p, HostTarget::Sm90a);
  EXPECT_EQ(ownKernels(p), (std::vector<std::string>{narrow, wide, paired}));
  HostKernels kernels(p, HostTarget::Sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  // (The kernels take their sizes at run time: 384 x 256 too, whose 3 x 2
  // tiles walk m fastest.)
  auto check = [&](const std::string &name, int64_t m, int64_t n,
                   std::vector<unsigned> grids) {
    SCOPED_TRACE(name + " " + std::to_string(m) + " x " + std::to_string(n));
    const int64_t cols = name == narrow ? 128 : 256;
    const std::vector<uint16_t> xBits = bf16Bits(randomFloats({k, m}, 61)),
                                dyBits = bf16Bits(randomFloats({k, n}, 62));
    const exec::HostTensor want = exec::matmul(
        fromBf16Bits(xBits, {k, m}), fromBf16Bits(dyBits, {k, n}), true, false);
    const exec::HostTensor old = randomFloats({m, n}, 63);
    exec::HostTensor wantSum = old;
    for (size_t i = 0; i < wantSum.f32.size(); ++i)
      wantSum.f32[i] = old.f32[i] + want.f32[i];
    // Summed in another order than the executor's: within 2^-20 of the
    // sum of the products' magnitudes (float32's k · 2^-24 bound is 20
    // times that; cancellation leaves some sums far below it).
    exec::HostTensor xAbs = fromBf16Bits(xBits, {k, m}),
                     dyAbs = fromBf16Bits(dyBits, {k, n});
    for (exec::HostTensor *t : {&xAbs, &dyAbs})
      for (float &v : t->f32)
        v = std::fabs(v);
    const exec::HostTensor magnitude = exec::matmul(xAbs, dyAbs, true, false);
    auto expectSums = [&](const exec::HostTensor &want,
                          const std::vector<float> &got, const char *what) {
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(want.f32[i], got[i], std::ldexp(magnitude.f32[i], -20))
            << what << " element " << i;
    };
    const int64_t tiles = m / 128 * (n / 128);
    for (unsigned blocks : grids) {
      SCOPED_TRACE(std::to_string(blocks) + " blocks");
      std::vector<float> got(size_t(m * n), -1.0f);
      std::vector<uint32_t> counters(size_t(4 * tiles), 0);
      callStreamK(kernels, name, xBits, dyBits, m, n, k, cols, nullptr,
                  got.data(), counters, blocks);
      expectSums(want, got, "xᵀ·dy");
      EXPECT_EQ(counters, std::vector<uint32_t>(size_t(4 * tiles), 0));
      // The blocks last to first: another warp counts in last at each
      // shared tile and sums the slots, in the same order.
      std::vector<float> lastFirst(got.size(), -1.0f);
      callStreamK(kernels, name, xBits, dyBits, m, n, k, cols, nullptr,
                  lastFirst.data(), counters, blocks, true);
      EXPECT_EQ(0, std::memcmp(lastFirst.data(), got.data(),
                               got.size() * sizeof(float)))
          << "other bits with the blocks last to first";
      EXPECT_EQ(counters, std::vector<uint32_t>(size_t(4 * tiles), 0));
      // Accumulating in place.
      std::vector<float> sumValues = old.f32;
      callStreamK(kernels, name, xBits, dyBits, m, n, k, cols,
                  sumValues.data(), sumValues.data(), counters, blocks);
      expectSums(wantSum, sumValues, "old + xᵀ·dy");
      EXPECT_EQ(counters, std::vector<uint32_t>(size_t(4 * tiles), 0));
    }
  };
  check(narrow, m, n, {1u, 3u, 7u, 20u});
  check(narrow, 384, 256, {4u, 9u});
  check(wide, m, n, {1u, 3u, 7u, 10u});
  check(wide, 384, 256, {4u, 9u});
  check(paired, m, n, {2u, 6u, 10u});
  check(paired, 512, 256, {4u, 14u});
}

// The stream-K kernels' waits, turns and counters, each taken out in turn:
// the run then reports a race or a misuse, or its sums or counters differ.
// 3 blocks over 4 tiles of 12 steps (k = 768): 16 fills of the 6 stages a
// block, two segments each (whole and part, part and part, part and whole),
// the middle tiles shared by two blocks. In the wide tiles, 3 blocks over
// 2 tiles: 8 fills of the 4 stages a block, the second tile shared by
// blocks 1 and 2 and the first by 0 and 1. In pairs, 3 pairs over two
// 256 x 256 tiles (m = 512): 8 fills each, the middle pair's two segments
// a part of each tile. Not covered: the emulation runs
// blocks one after another and its __threadfence does nothing, so the
// fences and the __syncwarp before a warp counts in (which order its lanes'
// partial stores before another block's reads) change nothing here.
TEST(TemplateKernelsOnHost, EveryStreamKSyncIsNeeded) {
  const DType bf16 = DType::BF16, f32 = DType::F32;
  const int64_t n = 256, k = 768;
  Builder b;
  int x = b.buf(bf16, {k, 256}), dy = b.buf(bf16, {k, n}),
      out = b.buf(f32, {256, n});
  b.launch("matmul", {x, dy}, {out}).ints["transpose_a"] = 1;
  rt::Program &p = emitForHost(b.p, HostTarget::Sm90a);
  const std::vector<uint16_t> dyBits = bf16Bits(randomFloats({k, n}, 72));
  HostKernels whole(p, HostTarget::Sm90a);
  ASSERT_TRUE(whole.ok()) << whole.error;
  struct Mutation {
    const char *fn, *statement, *replacement;
    bool turnsAlone; // only the blocks taking turns run it
  };
  const Mutation mutations[] = {
      {"gemmWgmmaWeightGrad", "gemmBarriersReady<Shape>();", "", false},
      {"gemmStreamCopyStages", "gemmAwaitEmptyStage(", "(void)(", false},
      {"gemmMultiplyRun", "mbarrierWait(", "(void)(", false},
      {"gemmMultiplyRun", "wgmmaWait<1>", "wgmmaWait<2>", false},
      {"gemmMultiplyRun", "wgmmaWait<0>", "wgmmaWait<1>", false},
      {"gemmMultiplyRun", "gemmReleaseStage(", "(void)(", false},
      {"gemmStreamMultiplyStages", "gemmAwaitTurn(", "(void)(", true},
      {"gemmMultiplyRun", "gemmPassTurn(", "(void)(", true},
      // The last warp to count in sums the tile and clears its counter.
      // (The first one summing too soon goes unseen here: its counter back
      // at 0, the next block's warp counts in first again and sums last.)
      {"gemmStreamMultiplyStages", "!= unsigned(b1 - b0)",
       "!= unsigned(b1 - b0 + 1)", false},
      {"gemmStreamMultiplyStages", "*counter = 0;", "(void)counter;", false}};
  // (The kernels take their sizes at run time.)
  for (auto [name, m, cols, blocks, count] :
       {std::tuple<std::string, int64_t, int64_t, unsigned, int>{
            "gemm_wgmma_weight_grad_bf16", 256, 128, 3, 11},
        {"gemm_wgmma_wide_weight_grad_bf16", 256, 256, 3, 9},
        {"gemm_wgmma_paired_weight_grad_bf16", 512, 256, 6, 9}}) {
    SCOPED_TRACE(name);
    const bool turns = cols == 128;
    const std::vector<uint16_t> xBits = bf16Bits(randomFloats({k, m}, 71));
    const int64_t tiles = m / 128 * (n / 128); // of 128 x 128
    size_t kernel = p.kernels.size();
    for (size_t i = 0; i < p.kernels.size(); ++i)
      if (p.kernels[i].name == name)
        kernel = i;
    ASSERT_LT(kernel, p.kernels.size());
    // The sums' bits, then the counters after the launch.
    auto run = [&](HostKernels &kernels) {
      std::vector<float> got(size_t(m * n), -1.0f);
      std::vector<uint32_t> counters(size_t(4 * tiles), 0);
      callStreamK(kernels, name, xBits, dyBits, m, n, k, cols, nullptr,
                  got.data(), counters, blocks);
      std::vector<uint32_t> bits(got.size());
      std::memcpy(bits.data(), got.data(), got.size() * sizeof(float));
      bits.insert(bits.end(), counters.begin(), counters.end());
      return bits;
    };
    const std::vector<uint32_t> want = run(whole);
    EXPECT_EQ(std::vector<uint32_t>(want.end() - 4 * tiles, want.end()),
              std::vector<uint32_t>(size_t(4 * tiles), 0));
    int done = 0;
    for (const Mutation &mu : mutations)
      if (!mu.turnsAlone || turns)
        done += expectEachMutationSeen<std::vector<uint32_t>>(
            p, kernel, mu.fn, mu.statement, mu.replacement, HostTarget::Sm90a,
            want, run);
    EXPECT_EQ(done, count);
  }
}

namespace {
/// One plain bf16 matmul with a transposed b, x [m, k] by wt [n, k] (the
/// form gptc's WgmmaPlain GEMMs take), emitted for sm_90a.
rt::Program &plainWgmmaGemm(Builder &b, int64_t m, int64_t n, int64_t k) {
  const DType bf16 = DType::BF16;
  int x = b.buf(bf16, {m, k}), wt = b.buf(bf16, {n, k}),
      out = b.buf(bf16, {m, n});
  b.launch("matmul", {x, wt}, {out}).ints["transpose_b"] = 1;
  return emitForHost(b.p, HostTarget::Sm90a);
}
} // namespace

// Taking turns over many laps: one block walks 6 tiles of 128 x 128 at
// GPT-2's depth (768: 12 steps a tile, 72 fills of the 6 stages), each
// warpgroup 3 in turn, so that every barrier's phase parity wraps (the
// second warpgroup waits for its turn's phases 0, 1 and 2). x·wtᵀ within
// one ulp of the executor's rounding, or 2e-5 of it near 0.
TEST(TemplateKernelsOnHost, WgmmaGemmTurnsOverManyLapsMatchTheCpuExecutor) {
  const int64_t m = 384, n = 256, k = 768;
  Builder b;
  HostKernels kernels(plainWgmmaGemm(b, m, n, k), HostTarget::Sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  const std::vector<uint16_t> xBits = bf16Bits(randomFloats({m, k}, 61)),
                              wtBits = bf16Bits(randomFloats({n, k}, 62));
  std::vector<uint16_t> outBits(size_t(m * n), 0xffff);
  callWgmmaGemm(kernels, "gemm_wgmma_plain_bf16", xBits, wtBits, m, n, k,
                {address(outBits), uint64_t(m), uint64_t(n), uint64_t(k)});
  const exec::HostTensor want = exec::matmul(
      fromBf16Bits(xBits, {m, k}), fromBf16Bits(wtBits, {n, k}), false, true);
  // Summed in another order than the executor's: float32 partial sums of
  // up to about 100 (768 products of about 1 in size) differ by a few of
  // their ulps, up to about 2e-5, which is more than a bf16 ulp where the
  // sum is near 0 (2 of the 98,304 elements here).
  expectWithinOneUlpOrTiny(bf16Bits(want), outBits, "x·wtᵀ", 2e-5f);
}

// What the emulation says of a wgmma GEMM given wrong tensor maps, each
// a run that throws naming it: a's map with half of a's rows (the second
// tile's copy leaves the tensor), and a's address where its map belongs.
// HostKernels::tensorMap refuses what cuTensorMapEncodeTiled would: a box
// of more than 256 rows.
TEST(TemplateKernelsOnHost, WgmmaGemmCopiesThroughWrongMapsAreReported) {
  const int64_t m = 256, n = 128, k = 64;
  Builder b;
  HostKernels kernels(plainWgmmaGemm(b, m, n, k), HostTarget::Sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  const std::vector<uint16_t> xBits = bf16Bits(randomFloats({m, k}, 71)),
                              wtBits = bf16Bits(randomFloats({n, k}, 72));
  std::vector<uint16_t> outBits(size_t(m * n), 0xffff);
  const std::string name = "gemm_wgmma_plain_bf16";
  const auto maps = rt::wgmmaOperandMaps(rt::GemmFallback::WgmmaPlain, m, n, k);
  auto expectReported = [&](uint64_t a, const std::string &what) {
    try {
      kernels.call(name,
                   {a, kernels.tensorMap(wtBits.data(), maps[1]),
                    address(outBits), uint64_t(m), uint64_t(n), uint64_t(k)},
                   1);
      ADD_FAILURE() << "nothing reported; expected: " << what;
    } catch (const std::runtime_error &e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos)
          << e.what();
    }
  };
  rt::WgmmaOperandMap half = maps[0];
  half.outer = m / 2;
  expectReported(kernels.tensorMap(xBits.data(), half),
                 "a box of 64 x 128 at (0, 128) leaves the 64 x 128 tensor");
  expectReported(address(xBits), "an acquire through no encoded tensor map");
  rt::WgmmaOperandMap tall = maps[0];
  tall.boxRows = 512;
  EXPECT_THROW(kernels.tensorMap(xBits.data(), tall), std::invalid_argument);
}

// GELU's derivative with its bias gradient (--bias-grads=gelu: c_fc's),
// in gptc's own blocks of each shape: gelu'(pre) · (dy·wtᵀ) within one
// ulp of the executor's rounding, as above, and the bias gradient's
// partial sums (16 rows each) adding up, in order, to the executor's
// column sums of the float32 derivative. One block walks 2 tiles of
// 128 x 256, or 4 of 128 x 128 in turns, and a pair the 2 of 128 x 256, 5
// steps each, so the stages fill again. Where n is no multiple of 256, the
// 128-column kernel alone fits.
TEST(TemplateKernelsOnHost,
     WgmmaGeluGradWithBiasGradientMatchesTheCpuExecutor) {
  const DType bf16 = DType::BF16;
  const int64_t m = 256, n = 256, k = 320;
  Builder b;
  int dy = b.buf(bf16, {m, k}), wt = b.buf(bf16, {n, k}),
      pre = b.buf(bf16, {m, n}), dp = b.buf(bf16, {m, n}),
      db = b.buf(bf16, {n});
  b.launch("matmul_gelu_grad", {dy, wt, pre}, {dp, db}).ints["transpose_b"] = 1;
  const std::string own[3] = {"gemm_wgmma_gelu_grad_bias_bf16",
                              "gemm_wgmma_wide_gelu_grad_bias_bf16",
                              "gemm_wgmma_paired_gelu_grad_bias_bf16"};
  auto hasOwn = [&](rt::Program &p, const std::string &kernel) {
    for (const rt::DeviceKernel &dk : p.kernels)
      if (dk.name == kernel)
        return true;
    return false;
  };
  {
    Builder narrow; // 384 columns: the wide blocks do not fit
    int ndy = narrow.buf(bf16, {128, 64}), nwt = narrow.buf(bf16, {384, 64}),
        npre = narrow.buf(bf16, {128, 384}), ndp = narrow.buf(bf16, {128, 384}),
        ndb = narrow.buf(bf16, {384});
    narrow.launch("matmul_gelu_grad", {ndy, nwt, npre}, {ndp, ndb})
        .ints["transpose_b"] = 1;
    rt::Program &np = emitForHost(narrow.p, HostTarget::Sm90a);
    EXPECT_TRUE(hasOwn(np, own[0]));
    EXPECT_FALSE(hasOwn(np, own[1]));
    EXPECT_FALSE(hasOwn(np, "gemm_wgmma_gelu_grad_bf16"));
  }
  rt::Program &p = emitForHost(b.p, HostTarget::Sm90a);
  ASSERT_TRUE(hasOwn(p, own[0]) && hasOwn(p, own[1]) && hasOwn(p, own[2]));
  EXPECT_FALSE(hasOwn(p, "gemm_wgmma_gelu_grad_bf16"));
  HostKernels kernels(p, HostTarget::Sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  const std::vector<uint16_t> dyBits = bf16Bits(randomFloats({m, k}, 41)),
                              wtBits = bf16Bits(randomFloats({n, k}, 42)),
                              preBits = bf16Bits(randomFloats({m, n}, 43));
  const std::vector<exec::HostTensor> want = exec::matmulGeluGrad(
      fromBf16Bits(dyBits, {m, k}), fromBf16Bits(wtBits, {n, k}),
      fromBf16Bits(preBits, {m, n}), false, true, true);
  for (const std::string &name : own) {
    SCOPED_TRACE(name);
    std::vector<uint16_t> dpBits(size_t(m * n), 0xffff);
    std::vector<float> partials(size_t(m / 16 * n), -1.0f);
    callWgmmaGemm(kernels, name, dyBits, wtBits, m, n, k,
                  {address(preBits), address(dpBits), address(partials),
                   uint64_t(m), uint64_t(n), uint64_t(k)},
                  rt::gemmFallbackCluster(name));
    expectWithinOneUlpOrTiny(bf16Bits(want[0]), dpBits, "gelu'(pre) · (dy·wtᵀ)",
                             4e-4f);
    // (ColumnSums's order: chunk after chunk.)
    std::vector<float> sums(size_t(n), 0.0f);
    for (int64_t c = 0; c < m / 16; ++c)
      for (int64_t j = 0; j < n; ++j)
        sums[size_t(j)] += partials[size_t(c * n + j)];
    expectNear(want[1], sums, 1e-3f, "the bias gradient");
  }
}

// The paired blocks in several clusters, each pair walking its share of
// the 256 x 256 tiles (2 steps deep, so that one pair's 4 tiles fill its 4
// stages twice): pre = x·w + bias and GELU(pre) as the executor's, from
// one cluster, two, and three (4 tiles: 2, 1 and 1). A grid of an odd
// number of blocks is refused before it runs.
TEST(TemplateKernelsOnHost, WgmmaPairsWalkTheirTilesInClusters) {
  const int64_t m = 512, n = 512, k = 128;
  Builder b;
  addGeluGemm(b, m, n, k);
  HostKernels kernels(emitForHost(b.p, HostTarget::Sm90a), HostTarget::Sm90a);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  const std::vector<uint16_t> xBits = bf16Bits(randomFloats({m, k}, 51)),
                              wBits = bf16Bits(randomFloats({k, n}, 52)),
                              biasBits = bf16Bits(randomFloats({n}, 53));
  const std::vector<exec::HostTensor> fused = exec::matmulEpilogue(
      fromBf16Bits(xBits, {m, k}), fromBf16Bits(wBits, {k, n}),
      fromBf16Bits(biasBits, {n}), false, false, true, true);
  const std::string name = "gemm_wgmma_paired_bias_gelu_bf16";
  for (unsigned clusters : {1u, 2u, 3u}) {
    SCOPED_TRACE(std::to_string(clusters) + " clusters");
    std::vector<uint16_t> outBits(size_t(m * n), 0xffff),
        preBits(size_t(m * n), 0xffff);
    callWgmmaGemm(kernels, name, xBits, wBits, m, n, k,
                  {address(biasBits), address(outBits), address(preBits),
                   uint64_t(m), uint64_t(n), uint64_t(k)},
                  2 * clusters);
    expectWithinOneUlp(bf16Bits(fused[1]), preBits, "x·w + bias");
    expectWithinOneUlpOrTiny(bf16Bits(fused[0]), outBits, "GELU(x·w + bias)");
  }
  std::vector<uint16_t> outBits(size_t(m * n)), preBits(size_t(m * n));
  EXPECT_THROW(
      callWgmmaGemm(kernels, name, xBits, wBits, m, n, k,
                    {address(biasBits), address(outBits), address(preBits),
                     uint64_t(m), uint64_t(n), uint64_t(k)},
                    3),
      std::invalid_argument);
}

// The race checker and the emulation's in-flight poison see each of the
// wgmma GEMMs' syncs: taken out one at a time (each barrier), or a wait
// raised by one, in each block shape, a run races, is refused, deadlocks
// or writes other bits. One block walks 2 tiles of 128 x 128 in turns, or
// 2 of 128 x 256; a pair 2 tiles of 256 x 256: the
// barrier after the mbarriers' init (in a pair, barrier.cluster); the
// copier's wait for an empty stage (in a pair, for its multipliers' drain,
// its two passes of that to both blocks, and its wait for both blocks'),
// its arrival that expects a stage's bytes, and that arrival expecting
// fewer bytes than the copies land (only a's) or more; the multipliers'
// wait for a full stage, their waits for products before they release
// one (and before the epilogue), both releases and the arrival they make,
// and the warp syncs around the staged results (13 in all, 16 in a pair);
// taking turns, also the wait for a turn and the arrival that passes it
// on (15). (Not here: a pair's barrier.cluster before it ends, which the
// emulation cannot miss. Its arrivals land at once, so the other block's
// last one is in before the copy that block waits for.)
TEST(TemplateKernelsOnHost, EveryWgmmaGemmSyncIsNeeded) {
  const int64_t m = 256, n = 256, k = 384;
  Builder b;
  addGeluGemm(b, m, n, k);
  rt::Program &p = emitForHost(b.p, HostTarget::Sm90a);
  // Wide: 2 tiles of 6 steps, 12 fills of the 4 stages. In turns: 2
  // tiles of 12 steps (m = 256, n = 128, k = 768), 24 fills of the 6, so
  // that the second warpgroup's first stage is the first's of two laps
  // before, which its turn keeps it from taking. In a pair: 2 tiles of 6
  // steps (n = 512), 12 fills of the 4 in each block.
  enum Shape { Turns = 1, Wide = 2, Paired = 4 };
  const std::vector<uint16_t> xBits = bf16Bits(randomFloats({m, 2 * k}, 31)),
                              wBits = bf16Bits(randomFloats({2 * k, n}, 32)),
                              biasBits = bf16Bits(randomFloats({n}, 33));
  // The kernel's out and pre, one block (or pair) walking all the tiles.
  auto run = [&](HostKernels &kernels, const std::string &name, Shape shape) {
    const int64_t cols = shape == Turns  ? n / 2
                         : shape == Wide ? n
                                         : 2 * n,
                  depth = shape == Turns ? 2 * k : k;
    std::vector<uint16_t> outBits(size_t(m * cols), 0xffff),
        preBits(size_t(m * cols), 0xffff);
    callWgmmaGemm(kernels, name, xBits, wBits, m, cols, depth,
                  {address(biasBits), address(outBits), address(preBits),
                   uint64_t(m), uint64_t(cols), uint64_t(depth)},
                  shape == Paired ? 2 : 1);
    outBits.insert(outBits.end(), preBits.begin(), preBits.end());
    return outBits;
  };
  struct Mutation {
    const char *fn, *statement, *replacement;
    int shapes; // the block shapes that run it
  };
  const int all = Turns | Wide | Paired;
  const Mutation mutations[] = {
      {"gemmWgmmaWalk", "gemmBarriersReady<Shape>();", "", all},
      {"gemmAwaitEmptyStage", "mbarrierWait(&s.empty", "(void)(&s.empty",
       Turns | Wide},
      {"gemmAwaitEmptyStage", "mbarrierWait(&s.drained", "(void)(&s.drained",
       Paired},
      {"gemmAwaitEmptyStage", "mbarrierArriveRemote(", "(void)(", Paired},
      {"gemmAwaitEmptyStage", "mbarrierWaitCluster(", "(void)(", Paired},
      {"gemmLoadStage", "mbarrierArriveExpectTx(", "(void)(", all},
      {"gemmLoadStage", "sizeof st)", "sizeof st.a)", all},
      {"gemmLoadStage", "sizeof st)", "sizeof st + 16)", all},
      {"gemmMultiplyRun", "mbarrierWait(", "(void)(", all},
      {"gemmMultiplyRun", "wgmmaWait<1>", "wgmmaWait<2>", all},
      {"gemmMultiplyRun", "wgmmaWait<0>", "wgmmaWait<1>", all},
      {"gemmMultiplyRun", "gemmReleaseStage(", "(void)(", all},
      {"gemmReleaseStage", "mbarrierArrive(", "(void)(", all},
      {"gemmMultiplyStages", "__syncwarp();", "", all},
      {"gemmAwaitTurn", "mbarrierWait(", "(void)(", Turns},
      {"gemmPassTurn", "mbarrierArrive(", "(void)(", Turns}};
  for (auto [shape, name, count] :
       {std::tuple<Shape, const char *, int>{Turns, "gemm_wgmma_bias_gelu_bf16",
                                             15},
        {Wide, "gemm_wgmma_wide_bias_gelu_bf16", 13},
        {Paired, "gemm_wgmma_paired_bias_gelu_bf16", 16}}) {
    SCOPED_TRACE(name);
    size_t kernel = p.kernels.size();
    for (size_t i = 0; i < p.kernels.size(); ++i)
      if (p.kernels[i].name == name)
        kernel = i;
    ASSERT_LT(kernel, p.kernels.size());
    HostKernels whole(p, HostTarget::Sm90a);
    ASSERT_TRUE(whole.ok()) << whole.error;
    const std::vector<uint16_t> want = run(whole, name, shape);
    int done = 0;
    for (const Mutation &mu : mutations)
      if (mu.shapes & shape)
        done += expectEachMutationSeen<std::vector<uint16_t>>(
            p, kernel, mu.fn, mu.statement, mu.replacement, HostTarget::Sm90a,
            want, [&](HostKernels &kernels) { return run(kernels, name, shape); });
    EXPECT_EQ(done, count);
  }
}
