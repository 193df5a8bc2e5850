//===- EmitAttention.cpp - the flash attention kernels' instantiations ----===//
//
// gpt.flash_attention, gpt.flash_attention_qkv (forward and gradient) and
// gpt.attention_row_dot: which kernel of kernels/attention*.cuh a launch
// takes (the algorithm EmitOptions names, as the launch's sizes allow it),
// its template arguments, grid, dynamic shared memory and module scratch.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

namespace gptc::cuda::detail {

/// What differs between the [B, H, T, D] and the packed attention ops: the
/// sizes, the HeadRows type of each operand group (attention.cuh) and the
/// kernel's pointer arguments.
struct Emitter::AttentionLayout {
  int64_t D, T, S, heads; ///< heads = B·H
  std::string lq, lk, lo; ///< q and dq; k, v, dk and dv; out and dout
  std::string
      args;  ///< q, k, v, out, lse or q, k, v, lse, dout, delta, dq, dk, dv
  bool bf16; ///< q, k, v (and dout) are bf16
  bool aligned16; ///< every row start is 16-byte aligned
};

/// HeadRows of [heads, rows, D] contiguous.
static std::string contiguousRows(int64_t rows, int64_t D) {
  return "HeadRows<1, " + std::to_string(D) + ", 0, " + i64Literal(rows * D) +
         ">";
}

/// HeadRows of H heads of D side by side in rows `width` apart, T rows a
/// batch: packed [B, T, width] (c_attn's output, out and dout).
static std::string packedRows(int64_t H, int64_t width, int64_t D, int64_t T) {
  return "HeadRows<" + std::to_string(H) + ", " + i64Literal(width) + ", " +
         std::to_string(D) + ", " + i64Literal(T * width) + ">";
}

/// sizeof(AtomicBackwardShared<D, keyTiles>) (attention_backward_mma.cuh): 64 x
/// (D + 8) bf16 tiles of q and dout twice and of k keyTiles times, twice
/// keyTiles 64 x 72 tiles of dS, and 4 x 64 floats of row terms.
static uint32_t atomicSharedBytes(int64_t D, int keyTiles) {
  return uint32_t((4 + keyTiles) * 64 * (D + 8) * 2 +
                  2 * keyTiles * 64 * 72 * 2 + 4 * 64 * 4);
}

/// sizeof(WgmmaBackwardShared<D>) (attention_backward_wgmma.cuh): six 64 x D
/// bf16 tiles (q and dout twice, k, v), a 64 x 72 bf16 tile of dSᵀ, and 4 x 64
/// floats of row terms; with `bulk` (WgmmaBulkBackwardShared) 2,048 floats
/// more, where dq's shares wait for their bulk reductions.
static uint32_t wgmmaBackwardSharedBytes(int64_t D, bool bulk) {
  return uint32_t(6 * 64 * D * 2 + 64 * 72 * 2 + 4 * 64 * 4 +
                  (bulk ? 2048 * 4 : 0));
}

/// sizeof(WgmmaSplitShared<D>) (attention_backward_wgmma_split.cuh): six 64 x D
/// bf16 tiles (two kept, two walked twice) and 4 x 64 floats of row terms.
static uint32_t wgmmaSplitSharedBytes(int64_t D) {
  return uint32_t(6 * 64 * D * 2 + 4 * 64 * 4);
}

/// sizeof(WgmmaStoredDsShared<D>) (attention_backward_wgmma_split.cuh): two 64
/// x D bf16 tiles of k and two 64 x 72 of dSᵀ.
static uint32_t wgmmaStoredDsSharedBytes(int64_t D) {
  return uint32_t(2 * 64 * D * 2 + 2 * 64 * 72 * 2);
}

/// alignof of the wgmma backwards' shared memory (wg::OperandTile): 1,024
/// where D is 64 (swizzled tiles), 128 where it is 32 (core matrices).
/// wg::dynamicSharedAs starts it at such a boundary, so their launches ask
/// for this less 16 bytes more than its size.
static uint32_t wgmmaSharedAlign(int64_t D) { return D == 64 ? 1024 : 128; }

/// sizeof(WgmmaKeys128Shared<D>): q's core-matrix tile and 8 operand tiles
/// (two buffers of two 64-key tiles of k and of v), each 64·D bf16; at
/// D = 64 the operand tiles are 1,024-byte aligned (swizzled), and q's 8 KB
/// keeps them so.
static uint32_t wgmmaKeys128SharedBytes(int64_t D) {
  return uint32_t(9 * 64 * D * 2);
}

/// The heads a group of a tensor-core attention grid takes together
/// (blockWork in attention.cuh): the most that divide `heads` and keep what
/// their blocks share, `bytes` a head, within `budget` bytes of L2
/// (EmitOptions::attentionL2Bytes).
static int64_t headsPerGroup(int64_t heads, int64_t bytes, int64_t budget) {
  const int64_t most = std::max<int64_t>(1, budget / bytes);
  for (int64_t g = std::min(most, heads); g > 1; --g)
    if (heads % g == 0)
      return g;
  return 1;
}

/// The forward a tensor-core launch runs for `chosen`: an algorithm of 128
/// queries (or keys) a step falls back to its 64-row form where T (or S) is
/// no multiple of 128.
static AttentionForward forwardAt(AttentionForward chosen, int64_t T,
                                  int64_t S) {
  using Fwd = AttentionForward;
  switch (chosen) {
  case Fwd::Mma128:
  case Fwd::Mma2:
    return T % 128 == 0 ? chosen : Fwd::Mma;
  case Fwd::Wgmma128:
    return T % 128 == 0 ? chosen : Fwd::Wgmma;
  case Fwd::WgmmaK128:
    return S % 128 == 0 ? chosen : Fwd::Wgmma;
  default:
    return chosen;
  }
}

/// Whether `b` sums dq's shares in float32 module scratch (the atomic
/// kernels and their warpgroup forms), one block a key tile.
static bool sumsDq(AttentionBackward b) {
  using Bwd = AttentionBackward;
  return b == Bwd::Atomic || b == Bwd::Atomic128 || b == Bwd::Wgmma ||
         b == Bwd::WgmmaOverlap || b == Bwd::WgmmaBulk ||
         b == Bwd::WgmmaOrdered;
}

/// The backward a tensor-core launch runs for `chosen`: the atomic kernels
/// split dq's product over 4 warps, so they take D of 16, 32 or 64 (else
/// split); atomic128's two n-tiles a warp and wgmma-split's shared-memory
/// forms want D of 32 or 64 (else atomic, wgmma-split), atomic128 S a
/// multiple of 128 as well.
static AttentionBackward backwardAt(AttentionBackward chosen, int64_t D,
                                    int64_t S) {
  using Bwd = AttentionBackward;
  const bool d32or64 = D == 32 || D == 64;
  if (sumsDq(chosen) && !(D == 16 || d32or64))
    return Bwd::Split;
  switch (chosen) {
  case Bwd::Atomic128:
    return d32or64 && S % 128 == 0 ? chosen : Bwd::Atomic;
  case Bwd::WgmmaSplitSs:
  case Bwd::WgmmaDs:
    return d32or64 ? chosen : Bwd::WgmmaSplit;
  default:
    return chosen;
  }
}

namespace {
/// How a tensor-core attention algorithm is instantiated: the template
/// (attentionForward<impl> or attentionBackward<impl>), its arguments after
/// the shared ones, a block's threads and the blocks an SM it is written
/// for, and the query rows a forward block takes.
struct AttentionKernel {
  const char *impl;
  const char *options;
  int threads;
  int blocksPerSM;
  int queryRows = 64;
};
} // namespace

// Blocks an SM: the forward at 4 fits in 128 registers (left alone, ptxas
// spills at small head sizes). The backward wants 216 for no spills at
// D=64, but at 3 (168 registers, then a spill of 84 bytes) it ran 20%
// faster on an H100 (1075 against 1344 µs, GPT-2 at T=1024). Taking the
// query tiles in halves, it no longer spills on sm_90a, nor does the
// atomic backward.
static AttentionKernel forwardKernel(AttentionForward f) {
  using Fwd = AttentionForward;
  switch (f) {
  case Fwd::Mma:
    return {"Mma", "", 128, 4};
  // 8 warps, 128 queries: the same 128 registers a thread.
  case Fwd::Mma128:
    return {"Mma", ", 8", 256, 2, 128};
  // 4 warps of 32 queries: up to 255 registers a thread.
  case Fwd::Mma2:
    return {"Mma", ", 4, 2", 128, 2, 128};
  // (attentionForwardTensorCores picks wgmma or mma.sync by the target
  // NVRTC compiles for: the runtime may compile the source for another.)
  case Fwd::Wgmma:
    return {"TensorCores", "", 128, 4};
  // A third V buffer, the same 4 blocks an SM.
  case Fwd::WgmmaOverlap:
    return {"TensorCores", ", true", 128, 4};
  // The next tile's scores under this one's softmax, 32 registers more:
  // 162 at D=64.
  case Fwd::MmaPipe:
    return {"MmaPipelined", "", 128, 3};
  // Two warpgroups share each key tile's copies.
  case Fwd::Wgmma128:
    return {"TensorCores", ", false, 2", 256, 2, 128};
  // Two 64-key tiles of k and v double-buffered in dynamic shared memory.
  case Fwd::WgmmaK128:
    return {"Keys128TensorCores", "", 128, 3};
  // q read from shared memory, no fragments held: 90 registers at D = 64.
  case Fwd::WgmmaSs:
    return {"TensorCores", ", false, 1, true", 128, 5};
  }
  return {"Mma", "", 128, 4};
}

static AttentionKernel backwardKernel(AttentionBackward b) {
  using Bwd = AttentionBackward;
  switch (b) {
  case Bwd::Split:
    return {"Mma", "", 128, 3};
  case Bwd::Atomic:
    return {"Atomic", "", 128, 3};
  // Two key tiles a block: 91 KB of shared memory, so at most 2 blocks an
  // SM, and 128 registers a thread spill: 1 block, 8 warps.
  case Bwd::Atomic128:
    return {"Atomic", ", 2", 256, 1};
  case Bwd::Wgmma:
    return {"TensorCores", "", 128, 3};
  // dv and dk in flight longer: 186 registers at D=64.
  case Bwd::WgmmaOverlap:
    return {"TensorCores", ", true", 128, 2};
  case Bwd::WgmmaSplit:
    return {"SplitTensorCores", "", 128, 3};
  // The kept rows read from shared memory by every product: 124 registers
  // at D=64 (155 held).
  case Bwd::WgmmaSplitSs:
    return {"SplitTensorCores", ", true", 128, 4};
  case Bwd::WgmmaDs:
    return {"StoredDsTensorCores", "", 128, 3};
  // dq's shares from 8 KB more of shared memory: still 3 blocks an SM.
  case Bwd::WgmmaBulk:
    return {"TensorCores", ", false, true", 128, 3};
  case Bwd::WgmmaOrdered:
    return {"TensorCores", ", false, true, true", 128, 3};
  }
  return {"Mma", "", 128, 3};
}

void Emitter::emitAttention(const AttentionLayout &a, bool grad) {
  using Fwd = AttentionForward;
  using Bwd = AttentionBackward;
  // HeadRows::head computes element offsets in 32 bits.
  for (size_t i = 0; i < l.inputs.size(); ++i)
    if (in(i).numel() >= (int64_t(1) << 32))
      unsupported("an operand has 2^32 elements or more (head offsets are "
                  "32-bit)");
  for (size_t i = 0; i < l.outputs.size(); ++i)
    if (out(i).numel() >= (int64_t(1) << 32))
      unsupported("a result has 2^32 elements or more (head offsets are "
                  "32-bit)");
  bool causal = intAttr("causal", 0) != 0;
  std::string scale = floatLiteral(floatAttr("scale", 1.0));
  // The tensor-core kernels (bf16 tiles of 64 rows, D a multiple of 16 up
  // to 64) or, for anything else, the simple one.
  bool mma = a.bf16 && a.aligned16 && a.T % 64 == 0 && a.S % 64 == 0 &&
             a.D % 16 == 0 && a.D <= 64 && (!causal || a.T == a.S);
  const Fwd fwd = forwardAt(opts.attentionForward, a.T, a.S);
  const Bwd bwd = backwardAt(opts.attentionBackward, a.D, a.S);
  const AttentionKernel kernel = !mma   ? AttentionKernel{"Simple", "", 64, 0}
                                 : grad ? backwardKernel(bwd)
                                        : forwardKernel(fwd);
  const bool d32or64 = a.D == 32 || a.D == 64;
  // The backward's dq summed in module scratch (atomic), and how.
  const bool atomic = grad && mma && sumsDq(bwd);
  const bool wgmmaAtomic =
      atomic && bwd != Bwd::Atomic && bwd != Bwd::Atomic128;
  const bool bulk =
      atomic && (bwd == Bwd::WgmmaBulk || bwd == Bwd::WgmmaOrdered);
  const bool ordered = atomic && bwd == Bwd::WgmmaOrdered;
  const int keyTiles = atomic && bwd == Bwd::Atomic128 ? 2 : 1;
  // The split backward's warpgroup forms, with their layouts in dynamic
  // shared memory at D of 32 or 64.
  const bool wgmmaSplit = grad && mma &&
                          (bwd == Bwd::WgmmaSplit || bwd == Bwd::WgmmaSplitSs ||
                           bwd == Bwd::WgmmaDs);
  const bool storedDs = grad && mma && bwd == Bwd::WgmmaDs;
  const bool keys128 = !grad && mma && fwd == Fwd::WgmmaK128;
  // The attention headers this direction's kernels take (attention.cuh
  // lists them): the simple kernels need the first alone.
  useHeader("attention.cuh");
  if (mma) {
    useHeader("attention_mma.cuh");
    useHeader("attention_wgmma.cuh");
    if (grad) {
      useHeader("attention_backward_mma.cuh");
      useHeader("attention_backward_wgmma.cuh");
      useHeader("attention_backward_wgmma_split.cuh");
    } else {
      useHeader("attention_forward_mma.cuh");
      useHeader("attention_forward_wgmma.cuh");
    }
  }
  std::string tmpl = std::to_string(a.D) + ", " + std::to_string(a.T) + ", " +
                     std::to_string(a.S) + ", " + (causal ? "true" : "false") +
                     ", " + a.lq + ", " + a.lk + ", " + a.lo;
  begin(entry, kernel.threads, kernel.blocksPerSM);
  if (atomic) {
    // dq's float32 sums ([heads, T, D]; two copies, ordered) and each
    // query tile's arrivals, left zero by every launch for the next.
    deviceScratch("float", "gptcDqSum",
                  a.heads * a.T * a.D * (ordered ? 2 : 1));
    deviceScratch("unsigned", "gptcArrivals", a.heads * (a.T / 64));
    // The turns that put the ordered kernel's adds in one order.
    if (ordered)
      deviceScratch("unsigned", "gptcDqTurns", a.heads * (a.T / 64) * 2);
    pre << "static_assert(sizeof(AtomicBackwardShared<" << a.D
        << (keyTiles == 2 ? ", 2" : "")
        << ">) == " << atomicSharedBytes(a.D, keyTiles)
        << ", \"the launch's dynamic shared memory\");\n";
    if (wgmmaAtomic && d32or64) {
      const char *type =
          bulk ? "WgmmaBulkBackwardShared" : "WgmmaBackwardShared";
      pre << "#if GPTC_WGMMA\nstatic_assert(sizeof(" << type << "<" << a.D
          << ">) == " << wgmmaBackwardSharedBytes(a.D, bulk) << " && alignof("
          << type << "<" << a.D << ">) == " << wgmmaSharedAlign(a.D)
          << ", \"the wgmma backward's dynamic shared memory\");\n#endif\n";
    }
    pre << "\n";
  }
  if (keys128 && d32or64)
    pre << "#if GPTC_WGMMA\nstatic_assert(sizeof(WgmmaKeys128Shared<" << a.D
        << ">) == " << wgmmaKeys128SharedBytes(a.D)
        << " && alignof(WgmmaKeys128Shared<" << a.D
        << ">) == " << wgmmaSharedAlign(a.D)
        << ", \"the launch's dynamic shared memory\");\n#endif\n\n";
  if (wgmmaSplit && d32or64) {
    // The structs the kernel lays its dynamic shared memory out as.
    auto sharedIs = [&](const char *type, uint32_t bytes, const char *what) {
      pre << "static_assert(sizeof(" << type << "<" << a.D << ">) == " << bytes
          << " && alignof(" << type << "<" << a.D
          << ">) == " << wgmmaSharedAlign(a.D) << ", \"" << what << "\");\n";
    };
    pre << "#if GPTC_WGMMA\n";
    sharedIs("WgmmaSplitShared", wgmmaSplitSharedBytes(a.D),
             "the launch's dynamic shared memory");
    if (storedDs)
      sharedIs("WgmmaStoredDsShared", wgmmaStoredDsSharedBytes(a.D),
               "the dq blocks' dynamic shared memory");
    pre << "#endif\n\n";
  }
  if (storedDs) {
    // Each tile pair's dSᵀ (64 x 64 bf16, as pairs) and each query tile's
    // count of dk/dv blocks done with it, left zero by every launch.
    const int64_t qt = a.T / 64, kt = a.S / 64;
    const int64_t tiles = causal ? qt * (qt + 1) / 2 : qt * kt;
    deviceScratch("unsigned", "gptcDsT", a.heads * tiles * 2048);
    deviceScratch("unsigned", "gptcDsReady", a.heads * qt);
    pre << "\n";
  }
  os << "  attention" << (grad ? "Backward" : "Forward") << kernel.impl << "<"
     << tmpl << kernel.options << ">(" << a.args << ", " << scale
     << (ordered    ? ", gptcDqSum, gptcArrivals, gptcDqTurns"
         : atomic   ? ", gptcDqSum, gptcArrivals"
         : storedDs ? ", gptcDsT, gptcDsReady"
                    : "")
     << ");\n}\n";
  l.block[0] = uint32_t(kernel.threads);
  // A forward block takes a tile of queries; the split backward has a dq
  // block a query tile and a dk/dv block a key tile, the atomic one a
  // block a key tile.
  const int64_t ranks = atomic ? a.S / (64 * keyTiles)
                        : grad ? ceilDiv(a.T, 64) + ceilDiv(a.S, 64)
                               : ceilDiv(a.T, kernel.queryRows);
  if (mma) {
    // (heads of a group, ranks, groups), blockWork's order. A head's
    // blocks share k and v (forward); q, k, v, dout and the row terms
    // (split backward); q, dout, the row terms and dq's float32 sums
    // (atomic; two copies of the sums, ordered).
    const int64_t shared = atomic ? (ordered ? 12 : 8) * a.T * a.D + 8 * a.T
                           : grad ? 4 * (a.T + a.S) * a.D + 8 * a.T
                                  : 4 * a.S * a.D;
    const int64_t group = headsPerGroup(a.heads, shared, opts.attentionL2Bytes);
    if (a.heads / group > 65535)
      unsupported("more than 65535 groups of heads for the grid's z");
    l.grid[0] = uint32_t(group);
    l.grid[1] = uint32_t(ranks);
    l.grid[2] = uint32_t(a.heads / group);
  } else {
    if (a.heads > 65535)
      unsupported("more than 65535 heads (B·H) for the grid's y");
    l.grid[0] = toGrid(ranks);
    l.grid[1] = uint32_t(a.heads);
  }
  if (atomic)
    l.sharedBytes = atomicSharedBytes(a.D, keyTiles);
  // The runtime may compile the source for a target without wgmma: the
  // launch has room for either kernel.
  if (wgmmaAtomic && d32or64)
    l.sharedBytes =
        std::max(l.sharedBytes, wgmmaBackwardSharedBytes(a.D, bulk) +
                                    wgmmaSharedAlign(a.D) - 16);
  // (The mma.sync forward the source falls back to off sm_90a has static
  // shared memory: it leaves this unused.)
  if (keys128 && d32or64)
    l.sharedBytes = wgmmaKeys128SharedBytes(a.D) + wgmmaSharedAlign(a.D) - 16;
  // (the split kernel's shared memory is static: it leaves this unused)
  if (wgmmaSplit && d32or64)
    l.sharedBytes = std::max(wgmmaSplitSharedBytes(a.D),
                             storedDs ? wgmmaStoredDsSharedBytes(a.D) : 0u) +
                    wgmmaSharedAlign(a.D) - 16;
}

void Emitter::emitFlashAttention(bool grad) {
  if (grad && l.inputs.size() == 6)
    unsupported("no delta operand (gpt.attention_row_dot's result, which "
                "gpt-autodiff writes)");
  expectArity(grad ? 7 : 3, grad ? 3 : 2);
  const Shape &q = in(0).shape, &k = in(1).shape;
  if (q.size() < 2 || k.size() != q.size())
    unsupported("q and k need rank 2 or more");
  if (grad && (in(4).dtype != DType::F32 || in(6).dtype != DType::F32))
    unsupported("lse and delta must be f32");
  AttentionLayout a;
  a.T = q[q.size() - 2];
  a.D = q.back();
  a.S = k[k.size() - 2];
  a.heads = numel(q) / (a.T * a.D);
  a.lq = a.lo = contiguousRows(a.T, a.D);
  a.lk = contiguousRows(a.S, a.D);
  // q, k, v, lse, dout, delta -> dq, dk, dv (out is delta's input only).
  a.args = grad ? "in0, in1, in2, in4, in5, in6, out0, out1, out2"
                : "in0, in1, in2, out0, out1";
  a.bf16 = in(0).dtype == DType::BF16 && in(1).dtype == DType::BF16 &&
           in(2).dtype == DType::BF16 && (!grad || in(5).dtype == DType::BF16);
  a.aligned16 = a.D % 8 == 0; // 8 bf16s: rows start at multiples of D
  emitAttention(a, grad);
}

void Emitter::emitFlashAttentionQKV(bool grad) {
  if (grad && l.inputs.size() == 4)
    unsupported("no delta operand (gpt.attention_row_dot's result, which "
                "gpt-autodiff writes)");
  expectArity(grad ? 5 : 1, grad ? 1 : 2);
  const Shape &qkv = in(0).shape;
  int64_t H = intAttr("num_heads", 0);
  if (qkv.size() != 3 || H <= 0 || qkv[2] % (3 * H) != 0)
    unsupported("expected qkv [B, T, 3 * num_heads * head size]");
  if (grad && (in(2).dtype != DType::F32 || in(4).dtype != DType::F32))
    unsupported("lse and delta must be f32");
  AttentionLayout a;
  const int64_t B = qkv[0], T = qkv[1], C = qkv[2] / 3;
  a.T = a.S = T;
  a.D = C / H;
  a.heads = B * H;
  // Head h of q at column h·D of [B, T, 3C] rows (k and v: the pointer
  // moved by C and 2C); out, dout [B, T, C] rows.
  a.lq = a.lk = packedRows(H, 3 * C, a.D, T);
  a.lo = packedRows(H, C, a.D, T);
  const std::string c = i64Literal(C), c2 = i64Literal(2 * C);
  // qkv -> out, lse; qkv, out, lse, dout, delta -> dqkv (out is delta's
  // input only).
  a.args = grad ? "in0, in0 + " + c + ", in0 + " + c2 +
                      ", in2, in3, in4, out0, out0 + " + c + ", out0 + " + c2
                : "in0, in0 + " + c + ", in0 + " + c2 + ", out0, out1";
  a.bf16 = in(0).dtype == DType::BF16 && (!grad || in(3).dtype == DType::BF16);
  // The tensor-core kernels load rows 16 bytes (8 bf16s) at a time: the
  // row strides (3C, C), the head offsets (h·D) and the part offsets (C,
  // 2C) must all be multiples of 8. Padded GPT-2 has C a multiple of 64
  // and D = 64; anything else takes the simple kernel.
  a.aligned16 = C % 8 == 0 && a.D % 8 == 0;
  emitAttention(a, grad);
}

void Emitter::emitAttentionRowDot() {
  expectArity(2, 1);
  const Shape &o = in(0).shape;
  int64_t H = intAttr("num_heads", 0);
  if (in(1).shape != o || in(1).dtype != in(0).dtype)
    unsupported("out and dout differ");
  if (out(0).dtype != DType::F32)
    unsupported("delta must be f32");
  // The layout of out: [B, H, T, D] contiguous, or packed [B, T, H·D].
  int64_t T, D, heads;
  std::string lo;
  if (o.size() == 4 && H == 0) {
    T = o[2], D = o[3], heads = o[0] * o[1];
    lo = contiguousRows(T, D);
  } else if (o.size() == 3 && H > 0 && o[2] % H == 0) {
    T = o[1], D = o[2] / H, heads = o[0] * H;
    lo = packedRows(H, o[2], D, T);
  } else {
    unsupported("expected out [B, H, T, D], or [B, T, C] with num_heads");
  }
  if (in(0).numel() >= (int64_t(1) << 32))
    unsupported("out has 2^32 elements or more (head offsets are 32-bit)");
  // 16-byte loads where every row starts 16 bytes aligned: 8 bf16s or f16s,
  // 4 floats.
  const bool narrow = in(0).dtype != DType::F32;
  const int64_t rowStride = o.size() == 4 ? D : o[2];
  const int width = narrow && D % 8 == 0 && rowStride % 8 == 0    ? 8
                    : !narrow && D % 4 == 0 && rowStride % 4 == 0 ? 4
                                                                  : 1;
  int lanes = 1; // the most lanes, a power of two up to 32, with a chunk each
  while (lanes < 32 && lanes * 2 * width <= D)
    lanes *= 2;
  useHeader("attention.cuh");
  begin(entry, 256);
  const int64_t rows = heads * T;
  os << "  attentionRowDot<" << D << ", " << T << ", " << i64Literal(rows)
     << ", " << lo << ", " << width << ", " << lanes << ", " << kRowDotRounds
     << ">(in0, in1, out0);\n}\n";
  l.block[0] = 256;
  l.grid[0] = toGrid(ceilDiv(rows, 256 / lanes * kRowDotRounds));
}

} // namespace gptc::cuda::detail
