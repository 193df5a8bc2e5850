//===- AttentionOnHostTest.cpp - attention kernels run on the CPU --------===//
//
// The attention kernels (lib/Target/CUDA/kernels/attention*.cuh), compiled
// as host C++ by HostKernels (the CUDA built-ins, mma.sync, wgmma,
// cp.async and the bulk copies emulated; each block's threads run as
// coroutines under a race checker), against the CPU executor: every
// forward and backward algorithm at bf16 precision, packed and not, with
// more keys than queries; the same bits where two forms promise them; and
// each barrier, fence and wait of the tensor-core kernels taken out one at
// a time, which the race checker must report. KernelsOnHostTest.cpp does
// the other kernels.
//
//===----------------------------------------------------------------------===//

#include "OnHostTestUtil.h"

#include "gptc/Executor/Kernels.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

using namespace gptc;
using namespace gptc::test;

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

/// A packed forward attention (flash_attention_qkv, H heads, scale 1/8):
/// the ids of its qkv, out and lse.
struct PackedForward {
  int qkv, out, lse;
  int64_t H;
  bool causal;
};

/// Appends one over qkv [B, T, 3·H·D] to `b`: `qkv` where given, else a
/// new bf16 buffer.
PackedForward packedForward(Builder &b, int64_t B, int64_t T, int64_t H,
                            int64_t D, bool causal, int qkv = -1) {
  const int64_t C = H * D;
  PackedForward f{qkv >= 0 ? qkv : b.buf(DType::BF16, {B, T, 3 * C}),
                  b.buf(DType::BF16, {B, T, C}), b.buf(DType::F32, {B, H, T}),
                  H, causal};
  auto &fa = b.launch("flash_attention_qkv", {f.qkv}, {f.out, f.lse});
  fa.ints = {{"causal", causal}, {"num_heads", H}};
  fa.floats["scale"] = 0.125;
  return f;
}

/// `f`'s out and lse in `data` (a run's tensors by id) against the CPU
/// executor's, to bf16 precision.
void expectPackedForwardNear(const std::vector<exec::HostTensor> &data,
                             const PackedForward &f) {
  std::vector<exec::HostTensor> want =
      exec::flashAttentionQKV(data[f.qkv], f.H, 0.125f, f.causal);
  expectNear(want[0], data[f.out].f32, 1e-2f, "flash_attention_qkv out");
  expectNear(want[1], data[f.lse].f32, 1e-5f, "flash_attention_qkv lse");
}

// The tensor-core attention with bf16 q, k, v, dout: two query and two key
// tiles of 64, head dim 64, the mma.m16n8k16 fragments (and, for sm_90a,
// the forward's wgmma) emulated as PTX defines them. Probabilities (and dS)
// are rounded to bf16 between the two products, as FlashAttention does:
// agreement to bf16 precision.
void checkTensorCoreAttention(
    HostTarget target, AttentionBackward backward = AttentionBackward::Split,
    int64_t D = 64) {
  SCOPED_TRACE(std::string(targetName(target)) + ", " + backwardName(backward) +
               ", D " + std::to_string(D));
  const bool atomic = backward != AttentionBackward::Split;
  Builder b;
  AttentionBothWays attention(b, DType::BF16, {1, 2, 128, D}, 0.125f);
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
// D = 48, a multiple of 16 up to 64 as the tensor-core kernels take, but
// 6 chunks of 16 bytes a row, which 128 threads do not divide: each
// thread's tile copies work out their own rows and columns (mma::Tile::
// loadAsync; the kernels did not compile before). sm_90a's wgmma kernels
// are for D of 32 or 64: there too the mma.sync ones run.
TEST(TemplateKernelsOnHost, HeadSize48AttentionMatchesTheCpuExecutor) {
  checkTensorCoreAttention(HostTarget::Sm80, AttentionBackward::Split, 48);
  checkTensorCoreAttention(HostTarget::Sm90a, AttentionBackward::Split, 48);
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
    rt::Program &p =
        emitForHost(b.p, HostTarget::Sm80, AttentionBackward::Atomic);
    EXPECT_EQ(attentionImpl(p.kernels[0].source), t == bf ? "Mma" : "Simple")
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
  auto &fag = b.launch("flash_attention_grad", {q, k, v, o, lse, dout, delta},
                       {dq, dk, dv});
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
      data[q], data[k], data[v], data[o], data[lse], data[dout], 0.125f, false);
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
    auto &fag = b.launch("flash_attention_grad", {q, k, v, o, lse, dout, delta},
                         {dq, dk, dv});
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
    std::vector<exec::HostTensor> bw =
        exec::flashAttentionGrad(data[q], data[k], data[v], data[o], data[lse],
                                 data[dout], 0.125f, false);
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
/// both place heads. The reference is the CPU executor's unpack, run, pack.
/// Tensor cores: bf16 inputs (T = 128, D = tensorD), tolerances as above;
/// otherwise float32 (the Simple kernels, D = 8), tolerances as for the [B, H,
/// T, D] op.
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
    auto &fag = b.launch("flash_attention_qkv_grad", {qkv, o, lse, dout, delta},
                         {dqkv});
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
    EXPECT_EQ(twoKeyTiles(k.source),
              backward == AttentionBackward::Atomic128 && tensorD >= 32 &&
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

/// One packed causal attention, forward and backward, B = H = 1, D = 64,
/// T = 192: three tiles of 64, so that a double buffer is refilled (256
/// for the backward with 128 keys a block: two key blocks; 256 for the
/// forward with three V buffers, --attention-forward=wgmma-overlap, which
/// `forward` names, else the target's default).
rt::Program &
packedAttentionForRaces(Builder &b, HostTarget target = HostTarget::Sm80,
                        AttentionBackward backward = AttentionBackward::Split,
                        const char *forward = nullptr) {
  const bool threeBuffers = forward && std::string(forward) == "wgmma-overlap";
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
  auto &fag =
      b.launch("flash_attention_qkv_grad", {qkv, o, lse, dout, delta}, {dqkv});
  fag.ints = {{"causal", 1}, {"num_heads", H}};
  fag.floats["scale"] = 0.125;
  cuda::EmitOptions opts = withBackward({}, backward);
  if (forward && !cuda::selectAttentionAlgorithm(opts, true, forward))
    throw std::logic_error(std::string("no forward ") + forward);
  return emitForHost(b.p, target, opts);
}

/// A wgmma kernel's function `fn` (on sm_90a): each of its `barriers`
/// __syncthreads() and its one fence.proxy.async is needed, taken out one
/// at a time (expectEachNeeded).
void expectBarriersAndProxyFenceNeeded(const rt::Program &p, size_t k,
                                       const std::string &fn, int barriers) {
  const HostTarget sm90a = HostTarget::Sm90a;
  EXPECT_EQ(expectEachNeeded(p, k, fn, "__syncthreads();", "shared-memory race",
                             sm90a),
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
  EXPECT_EQ(
      size_t(std::count_if(spared.begin(), spared.end(),
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
    EXPECT_GE(expectEachNeeded(
                  p, k, grad ? "attentionBackwardMma" : "attentionForwardMma",
                  "__syncthreads();", "shared-memory race", HostTarget::Sm80),
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
  rt::Program &p = packedAttentionForRaces(
      b, HostTarget::Sm80, AttentionBackward::Split, "mma-pipe");
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
  packedForward(b, 1, 256, H, D, causal);
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
  for (WideForward w :
       {WideForward::Warps8, WideForward::RowPairs, WideForward::Warpgroups2})
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
        expectPackedForwardNear(runOnRandomData(p, kernels, 400),
                                {0, 1, 2, H, causal});
      }
}

// Their four barriers: q and the first key tile landed, q (staged in the
// two tiles the second key tile reuses) read, and the double buffer's two.
// wgmma128's two, as the wgmma forward's: tiles landed before either
// warpgroup's wgmma reads them, read by both before they are refilled.
TEST(TemplateKernelsOnHost, EveryWideForwardBarrierIsNeeded) {
  for (WideForward w :
       {WideForward::Warps8, WideForward::RowPairs, WideForward::Warpgroups2}) {
    SCOPED_TRACE(wideName(w));
    Builder b;
    rt::Program &p = wideForward(b, w, 1, 64, true);
    const bool wgmma = w == WideForward::Warpgroups2;
    EXPECT_EQ(expectEachNeeded(
                  p, 0, wgmma ? "attentionForwardWgmma" : "attentionForwardMma",
                  "__syncthreads();", "shared-memory race", wideTarget(w)),
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
  expectRunsUnreported(p, sm90a);
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
      {"attentionForwardWgmma",
       2,
       {"wgmmaFenceKept(s, qRows);", "wgmmaFence(acc, pa);"},
       {{"wgmmaFence(acc, pa);", "wgmmaFence(s, pa);"},
        {"wgmmaFenceKept(s, qRows);", "wgmmaFence(acc, qRows.a);"}},
       2});
}

// The same for --attention-forward=wgmma-ss, whose scores' wgmma reads q
// from shared memory: the fence before them names the scores alone (no A
// fragments), and named for the wrong accumulators it is reported; q's
// tile, read by every tile's products, is written once, before the loop.
TEST(TemplateKernelsOnHost, EveryWgmmaSharedQueryForwardSyncIsNeeded) {
  Builder b;
  rt::Program &p = packedAttentionForRaces(
      b, HostTarget::Sm90a, AttentionBackward::Split, "wgmma-ss");
  ASSERT_EQ(p.kernels.size(), 3u);
  const size_t k = kernelWithImpl(p, "TensorCores");
  ASSERT_LT(k, p.kernels.size());
  ASSERT_NE(p.kernels[k].source.find(", false, 1, true>("), std::string::npos)
      << "the shared-query forward's instantiation";
  expectEveryWgmmaForwardSyncNeeded(
      p, k,
      {"attentionForwardWgmma",
       2,
       {"wgmmaFenceKept(s, qRows);", "wgmmaFence(acc, pa);"},
       {{"wgmmaFence(acc, pa);", "wgmmaFence(s, pa);"},
        {"wgmmaFenceKept(s, qRows);", "wgmmaFence(acc);"}},
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
TEST(TemplateKernelsOnHost,
     EveryWgmmaOverlapForwardBarrierFenceAndWaitIsNeeded) {
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
TEST(TemplateKernelsOnHost,
     EveryWgmmaKeys128ForwardBarrierFenceAndWaitIsNeeded) {
  Builder b;
  rt::Program &p = packedAttentionForRaces(
      b, HostTarget::Sm90a, AttentionBackward::Split, "wgmma-k128");
  ASSERT_EQ(p.kernels.size(), 3u);
  const size_t k = kernelWithImpl(p, "Keys128TensorCores");
  ASSERT_LT(k, p.kernels.size());
  expectEveryWgmmaForwardSyncNeeded(
      p, k,
      {"attentionForwardWgmmaKeys128",
       2,
       {"wgmmaFence(s0, qa, s1, qa);", "wgmmaFence(acc, pa);"},
       {{"wgmmaFence(acc, pa);", "wgmmaFence(s0, pa);"},
        {"wgmmaFence(s0, qa, s1, qa);", "wgmmaFence(s0, qa);"}},
       2});
}

/// --attention-forward=`label` against the CPU executor, at D = 64 and 32,
/// causal and not, T = 384 (six query blocks of 64): its entry calls
/// attentionForward`impl`, in blocks of 128 threads with `sharedBytes(D)`
/// of dynamic shared memory.
void expectForwardMatchesCpuExecutor(
    const char *label, const std::string &impl,
    const std::function<uint32_t(int64_t D)> &sharedBytes) {
  for (int64_t D : {64, 32})
    for (bool causal : {true, false}) {
      SCOPED_TRACE("D = " + std::to_string(D) + (causal ? ", causal" : ""));
      const int64_t T = 384;
      Builder b;
      const PackedForward f = packedForward(b, 1, T, 2, D, causal);
      cuda::EmitOptions opts;
      ASSERT_TRUE(cuda::selectAttentionAlgorithm(opts, true, label));
      rt::Program &p = emitForHost(b.p, HostTarget::Sm90a, opts);
      ASSERT_EQ(p.kernels.size(), 1u);
      EXPECT_NE(p.kernels[0].source.find("  attentionForward" + impl + "<"),
                std::string::npos);
      const rt::Launch &l = p.functions[0].launches[0];
      EXPECT_EQ(l.grid[1], uint32_t(T / 64));
      EXPECT_EQ(l.block[0], 128u);
      EXPECT_EQ(l.sharedBytes, sharedBytes(D));
      HostKernels kernels(p, HostTarget::Sm90a);
      ASSERT_TRUE(kernels.ok()) << kernels.error;
      expectPackedForwardNear(runOnRandomData(p, kernels, 401), f);
    }
}

// --attention-forward=wgmma-k128 (three steps of 128 keys): causal blocks
// end on a step of one tile (the diagonal; the second tile's products
// still run, its scores -inf) or of two (the diagonal second). One block
// of 64 queries and 4 warps, as the wgmma forward's, with 73 KB of dynamic
// shared memory at D = 64 (36 at 32).
TEST(TemplateKernelsOnHost, WgmmaKeys128ForwardMatchesTheCpuExecutor) {
  expectForwardMatchesCpuExecutor(
      "wgmma-k128", "Keys128TensorCores", [](int64_t D) {
        return uint32_t(9 * 64 * D * 2 + (D == 64 ? 1024 : 128) - 16);
      });
}

// --attention-forward=wgmma-ss: the wgmma forward with q read from shared
// memory by the scores' products (static shared memory, as the wgmma
// forward's).
TEST(TemplateKernelsOnHost, WgmmaSharedQueryForwardMatchesTheCpuExecutor) {
  expectForwardMatchesCpuExecutor("wgmma-ss", "TensorCores",
                                  [](int64_t) { return 0u; });
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
  for (const char *fence : {"wgmmaFenceKept(p, kRows, ds, vRows);",
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
  expectRunsUnreported(p, sm90a);
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
    EXPECT_EQ(
        expectEachWaitNeeded(
            p, k, "wgmmaKeysOnQueryHalf", HostTarget::Sm90a,
            {{0, overlap ? "not compiled" : "lands under the next wait<1>"}}),
        3);
    EXPECT_EQ(
        expectEachWaitNeeded(p, k, "attentionBackwardWgmma", HostTarget::Sm90a),
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
    const std::string swapped =
        source.substr(copies, end - copies) + source.substr(at, copies - at);
    withMutation(
        p, k, at, end - at, swapped, HostTarget::Sm90a,
        [&](rt::Program &mutated, HostKernels &kernels, size_t line) {
          try {
            runOnRandomData(mutated, kernels, 7);
            ADD_FAILURE() << "nothing reported with the copies at line " << line
                          << " before the barrier";
          } catch (const std::runtime_error &e) {
            EXPECT_NE(std::string(e.what()).find("what a wgmma reads as B"),
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
TEST(TemplateKernelsOnHost,
     EveryWgmmaSplitBackwardBarrierFenceAndWaitIsNeeded) {
  for (AttentionBackward backward :
       {AttentionBackward::WgmmaSplit, AttentionBackward::WgmmaSplitSs}) {
    SCOPED_TRACE(backwardName(backward));
    const bool shared = backward == AttentionBackward::WgmmaSplitSs;
    Builder b;
    rt::Program &p = packedAttentionForRaces(b, HostTarget::Sm90a, backward);
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
          dqBlock ? "wgmmaFenceKept(s[half], qRows, dp[half], dRows);"
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
          shared ? (dqBlock ? "wgmmaFence(s[half], s[half]);"
                            : "wgmmaFence(p, p);")
                 : (dqBlock ? "wgmmaFence(s[half], qRows.a);"
                            : "wgmmaFence(p, kRows.a);");
      EXPECT_EQ(expectEachNeeded(p, k, batches, scores,
                                 "operands its wgmma.fence did not name", sm90a,
                                 scoresAlone),
                1);
      if (dqBlock) {
        // In source order: S0's, S1's, dP0's, dP1's (with the first half's
        // dq product: spared, since the second half's may accumulate into
        // the same registers while it is in flight, which the emulation
        // allows as the ISA does; landing it first keeps dqAcc out of the
        // fence's reach while in flight), and the one before the barrier.
        EXPECT_EQ(expectEachWaitNeeded(
                      p, k, fn, sm90a,
                      {{3, "the second dq product may chain on the first"}}),
                  5);
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
    expectRunsUnreported(p, sm90a);
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
  rt::Program &p =
      packedAttentionForRaces(b, HostTarget::Sm90a, AttentionBackward::WgmmaDs);
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
  expectRunsUnreported(p, sm90a);
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

/// Two packed forward attentions over one qkv [B, T, 3·H·D], causal and
/// then not.
std::vector<PackedForward>
packedForwardsBothWays(Builder &b, int64_t B, int64_t H, int64_t D, int64_t T) {
  const PackedForward causal = packedForward(b, B, T, H, D, true);
  return {causal, packedForward(b, B, T, H, D, false, causal.qkv)};
}

/// The lazy-maxima tests' forwards (packedForwardsBothWays at B = 1, H =
/// 2, D = 64, T = 256) and runOnRandomData's reshape for their qkv: key
/// row t scaled by 1 + 6t/T, so that later tiles' scores pass the maxima
/// the first tiles set.
struct GrowingKeysForwards {
  static constexpr int64_t B = 1, H = 2, T = 256, D = 64, C = H * D;
  Builder b;
  std::vector<PackedForward> forwards = packedForwardsBothWays(b, B, H, D, T);
  int qkv = forwards[0].qkv;
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
  for (Way way :
       {Way{HostTarget::Sm80, "mma"}, Way{HostTarget::Sm80, "mma128"},
        Way{HostTarget::Sm80, "mma2"}, Way{HostTarget::Sm80, "mma-pipe"},
        Way{HostTarget::Sm90a, "wgmma"},
        Way{HostTarget::Sm90a, "wgmma-overlap"},
        Way{HostTarget::Sm90a, "wgmma128"},
        Way{HostTarget::Sm90a, "wgmma-k128"},
        Way{HostTarget::Sm90a, "wgmma-ss"}}) {
    SCOPED_TRACE(way.forward);
    rt::Program p = f.b.p;
    cuda::EmitOptions opts;
    ASSERT_TRUE(cuda::selectAttentionAlgorithm(opts, true, way.forward));
    HostKernels kernels(emitForHost(p, way.target, opts), way.target);
    ASSERT_TRUE(kernels.ok()) << kernels.error;
    std::vector<exec::HostTensor> data =
        runOnRandomData(p, kernels, 43, 1, f.growingKeys);
    for (const PackedForward &forward : f.forwards) {
      SCOPED_TRACE(forward.causal ? "causal" : "not causal");
      expectPackedForwardNear(data, forward);
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
  const std::vector<PackedForward> forwards =
      packedForwardsBothWays(b, B, H, D, T);
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
  for (const PackedForward &f : forwards) {
    expectSame(runs[0][f.out], runs[1][f.out].f32, other);
    expectSame(runs[0][f.lse], runs[1][f.lse].f32, other);
    expectPackedForwardNear(runs[1], f);
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
TEST(TemplateKernelsOnHost,
     PackedAtomicAttentionBackwardMatchesTheCpuExecutor) {
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
TEST(TemplateKernelsOnHost,
     PackedAtomic128AttentionBackwardMatchesTheCpuExecutor) {
  for (int64_t D : {64, 32, 16})
    checkPackedAttention(/*tensorCores=*/true, HostTarget::Sm80, D,
                         AttentionBackward::Atomic128);
}
