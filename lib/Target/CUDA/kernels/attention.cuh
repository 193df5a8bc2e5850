//===- attention.cuh - flash attention: layouts and simple kernels --------===//
//
// q has T rows of D per head, k and v S rows; heads are numbered
// batch · H + h (the simple kernels' blockIdx.y; the tensor-core kernels'
// grids hold them in groups, blockWork below), and lse is [B·H, T]
// float32. Where a head's rows are is a layout type (HeadRows below) per
// operand, so one kernel serves gpt.flash_attention's [B, H, T, D] tensors
// and gpt.flash_attention_qkv's heads read in place from the packed
// [B, T, 3C] c_attn output (and out written as [B, T, C]). LQ places q and
// dq, LK k, v, dk and dv, LO out and dout.
//
// The kernels compute the definitions of lib/Executor/AttentionKernels.cpp.
// One header a part, in the order a kernel's source takes them
// (EmitAttention.cpp; the row dot's takes this one alone):
// - attention.cuh: the layouts, the work split, attention*Simple (any
//   dtype and shape, one thread per row, float32 on CUDA cores: correct,
//   not fast; the fp32 and fp16 paths) and attentionRowDot.
// - attention_mma.cuh: the pieces of the bf16 tensor-core kernels on
//   mma.sync (sm_80+): tiles, products, the online softmax.
// - attention_wgmma.cuh: the tiles as Hopper's warpgroup MMA reads them
//   (sm_90a).
// - attention_forward_mma.cuh, attention_forward_wgmma.cuh: the forwards.
// - attention_backward_mma.cuh: the split and the atomic backward.
// - attention_backward_wgmma.cuh: the wgmma backwards whose blocks add dq
//   across blocks (atomic, bulk, ordered).
// - attention_backward_wgmma_split.cuh: the deterministic wgmma backwards
//   (split, stored dS).
// Each wgmma header ends with the entry points the emitter calls: warpgroup
// MMA on sm_90a for D of 32 or 64, else the mma.sync kernel of the same
// grid. The backward reads each query row's D = Σ dout·out from `delta`,
// which gpt.attention_row_dot (attentionRowDot, below) writes before it,
// once a row: FlashAttention-2's preprocessing.
//
//===----------------------------------------------------------------------===//

#define GPTC_NEG_INF (-__int_as_float(0x7f800000))

/// Element d of row t of head bh (batch · kHeads + h) is at
/// head(bh) + t · kRowStride + d:
/// - [B·H, rows, D] contiguous: HeadRows<1, D, 0, rows · D>;
/// - one part of packed [B, T, width] rows, head h at column h · D (the
///   part's own columns added to the pointer by the caller):
///   HeadRows<H, width, D, T · width>.
/// The tensor-core kernels load rows 16 bytes at a time: kRowStride, kHead
/// and the caller's column offset must be multiples of 8 bf16 elements.
/// Head offsets are 32-bit: in 64-bit arithmetic the packed forward spills
/// at its 128 registers. Operands have fewer than 2^32 elements (the
/// emitter checks both).
template <int kHeads, i64 kRow, i64 kHead, i64 kBatch> struct HeadRows {
  static constexpr i64 kRowStride = kRow;
  static __device__ __forceinline__ u32 head(i64 bh) {
    const u32 b = u32(bh) / kHeads, h = u32(bh) % kHeads;
    return b * u32(kBatch) + h * u32(kHead);
  }
};

/// Where a block of a tensor-core grid works. The grid is (heads of a
/// group, ranks, groups): rank 0 is a head's longest block (causal: the
/// most tiles to walk), the last rank its shortest. Blocks start in about
/// blockIdx order, x fastest. Read head by head, a causal grid ends on the
/// last heads' long blocks with most SMs idle: in a list-scheduling model
/// of GPT-2's grids (bench/attention_order_model.py: B=16, T=1024, 132
/// SMs) 7 to 20% over the balanced time. Taken rank by rank across a
/// group of heads, longest first, it ends on short blocks (1 to 4% over).
/// The emitter sizes the groups so that what a group's heads share between
/// their blocks stays in L2. Both are unsigned, as blockIdx is: as signed
/// ints, the 64-key atomic backward spilled at its 168 registers.
struct BlockWork {
  unsigned rank, head;
};
__device__ __forceinline__ BlockWork blockWork() {
  return {blockIdx.y, blockIdx.z * gridDim.x + blockIdx.x};
}

//===----------------------------------------------------------------------===//
// Simple kernels
//===----------------------------------------------------------------------===//

/// blockDim.x threads, one query row each; grid (ceil(T / blockDim.x), heads).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TQ, typename TK, typename TV, typename TO>
__device__ void attentionForwardSimple(const TQ *q, const TK *k, const TV *v,
                                       TO *out, float *lse, float scale) {
  const i64 h = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T)
    return;
  k += LK::head(h);
  v += LK::head(h);
  float qr[D], acc[D];
  for (int d = 0; d < D; ++d) {
    qr[d] = toFloat(q[LQ::head(h) + i * LQ::kRowStride + d]);
    acc[d] = 0.0f;
  }
  float m = GPTC_NEG_INF, l = 0.0f;
  const int end = kCausal ? i + 1 : S;
  for (int j = 0; j < end; ++j) {
    const TK *kr = k + j * LK::kRowStride;
    const TV *vr = v + j * LK::kRowStride;
    float s = 0.0f;
    for (int d = 0; d < D; ++d)
      s += qr[d] * toFloat(kr[d]);
    s *= scale;
    float mNew = fmaxf(m, s);
    float correction = expf(m - mNew), p = expf(s - mNew);
    l = l * correction + p;
    for (int d = 0; d < D; ++d)
      acc[d] = acc[d] * correction + p * toFloat(vr[d]);
    m = mNew;
  }
  for (int d = 0; d < D; ++d)
    out[LO::head(h) + i * LO::kRowStride + d] = fromFloat<TO>(acc[d] / l);
  lse[h * T + i] = m + logf(l);
}

/// gpt.attention_row_dot: delta[bh·T + t] = Σ_d dout·out of query row t of
/// head bh, float32, for kRows = heads · T rows. kLanes lanes (a power of
/// two) take a row, kW elements at a time: 8 is one 16-byte access of
/// bf16 or f16 (rows 16-byte aligned), 4 one of float32 or 8 bytes of
/// bf16, 1 any. 256 threads a block, kRounds rows a lane group, the
/// rows of a round 256/kLanes apart, every load of them issued before the
/// sums (one row a group took its two 16-byte loads alone: ncu on an H200
/// found warps stalled on them 71% of their cycles, DRAM 74% busy); grid-
/// stride over the rows in steps the whole block takes, so that every lane
/// of a warp reaches the shuffles.
template <int D, int T, i64 kRows, class LO, int kW, int kLanes, int kRounds,
          typename TO>
__device__ void attentionRowDot(const TO *out, const TO *dout, float *delta) {
  static_assert(D % kW == 0 && 32 % kLanes == 0, "whole chunks, whole warps");
  constexpr int kRowsPerRound = 256 / kLanes;
  constexpr int kRowsPerBlock = kRowsPerRound * kRounds;
  // A lane's chunks of a row (the last may lie past D).
  constexpr int kChunks = (D + kLanes * kW - 1) / (kLanes * kW);
  const int lane = threadIdx.x % kLanes;
  for (i64 r0 = i64(blockIdx.x) * kRowsPerBlock; r0 < kRows;
       r0 += i64(gridDim.x) * kRowsPerBlock) {
    float x[kRounds][kChunks][kW], y[kRounds][kChunks][kW];
#pragma unroll
    for (int u = 0; u < kRounds; ++u) {
      // A row past the last reads the last (its sum is not written), so
      // that no branch stands between the loads: all are in flight at once.
      const i64 r = r0 + u * kRowsPerRound + threadIdx.x / kLanes;
      const i64 rr = r < kRows ? r : kRows - 1;
      const i64 row = LO::head(rr / T) + (rr % T) * LO::kRowStride;
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        const int c = (lane + j * kLanes) * kW;
        if (D % (kLanes * kW) == 0 || c < D) {
          if constexpr (kW == 8) {
            load8(out + row + c, x[u][j]);
            load8(dout + row + c, y[u][j]);
          } else {
            loadW<kW>(out + row + c, x[u][j]);
            loadW<kW>(dout + row + c, y[u][j]);
          }
        } else {
#pragma unroll
          for (int e = 0; e < kW; ++e)
            x[u][j][e] = y[u][j][e] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kRounds; ++u) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < kChunks; ++j)
#pragma unroll
        for (int e = 0; e < kW; ++e)
          s = fmaf(x[u][j][e], y[u][j][e], s);
#pragma unroll
      for (int o = kLanes / 2; o > 0; o /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, o);
      const i64 r = r0 + u * kRowsPerRound + threadIdx.x / kLanes;
      if (r < kRows && lane == 0)
        delta[r] = s;
    }
  }
}

/// Blocks [0, ceil(T/64)) compute dq rows, the rest dk/dv rows; 64 threads,
/// one row each. delta: each query row's Σ dout·out (attentionRowDot).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TQ, typename TK, typename TV, typename TDO, typename TDQ,
          typename TDK, typename TDV>
__device__ void attentionBackwardSimple(const TQ *q, const TK *k, const TV *v,
                                        const float *lse, const TDO *dout,
                                        const float *delta, TDQ *dq, TDK *dk,
                                        TDV *dv, float scale) {
  const i64 h = blockIdx.y;
  constexpr int kQueryBlocks = (T + 63) / 64;
  // Row i of this head's q (dq) and dout, row j of k and v (dk, dv).
  auto qRow = [&](int i) { return LQ::head(h) + i * LQ::kRowStride; };
  auto oRow = [&](int i) { return LO::head(h) + i * LO::kRowStride; };
  auto kRow = [&](int j) { return LK::head(h) + j * LK::kRowStride; };
  auto rowDot = [&](int i) { return delta[h * T + i]; };
  if (blockIdx.x < kQueryBlocks) {
    const int i = blockIdx.x * 64 + threadIdx.x;
    if (i >= T)
      return;
    const TQ *qr = q + qRow(i);
    const TDO *dor = dout + oRow(i);
    float acc[D];
    for (int d = 0; d < D; ++d)
      acc[d] = 0.0f;
    const float rowLse = lse[h * T + i], di = rowDot(i);
    const int end = kCausal ? i + 1 : S;
    for (int j = 0; j < end; ++j) {
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        s += toFloat(qr[d]) * toFloat(k[kRow(j) + d]);
        dp += toFloat(dor[d]) * toFloat(v[kRow(j) + d]);
      }
      float ds = expf(s * scale - rowLse) * (dp - di);
      for (int d = 0; d < D; ++d)
        acc[d] += ds * toFloat(k[kRow(j) + d]);
    }
    for (int d = 0; d < D; ++d)
      dq[qRow(i) + d] = fromFloat<TDQ>(scale * acc[d]);
    return;
  }
  const int j = (blockIdx.x - kQueryBlocks) * 64 + threadIdx.x;
  if (j >= S)
    return;
  // Only the accumulators live in registers; the thread's own k and v rows
  // are re-read from L1 (four rows of D would spill).
  const TK *kr = k + kRow(j);
  const TV *vr = v + kRow(j);
  float accK[D], accV[D];
  for (int d = 0; d < D; ++d)
    accK[d] = accV[d] = 0.0f;
  for (int i = kCausal ? j : 0; i < T; ++i) {
    float s = 0.0f, dp = 0.0f;
    for (int d = 0; d < D; ++d) {
      s += toFloat(q[qRow(i) + d]) * toFloat(kr[d]);
      dp += toFloat(dout[oRow(i) + d]) * toFloat(vr[d]);
    }
    float p = expf(s * scale - lse[h * T + i]);
    float ds = p * (dp - rowDot(i));
    for (int d = 0; d < D; ++d) {
      accV[d] += p * toFloat(dout[oRow(i) + d]);
      accK[d] += ds * toFloat(q[qRow(i) + d]);
    }
  }
  for (int d = 0; d < D; ++d) {
    dk[kRow(j) + d] = fromFloat<TDK>(scale * accK[d]);
    dv[kRow(j) + d] = fromFloat<TDV>(accV[d]);
  }
}

/// A 4 x 4 transpose across four lanes kLaneStride apart (lane i of them,
/// i = 0..3: 4 apart, the lanes of an mma fragment whose g % 4 is i, which
/// hold four consecutive rows; 1 apart, the lanes tq = i of a fragment's
/// row): before, lane i holds m[i][e] in v[e]; after, m[s][i] in v[s].
/// Two butterfly rounds, two shuffles each.
template <int kLaneStride = 4, typename V>
__device__ __forceinline__ void transposeAcrossLanes4(V (&v)[4], int i) {
#pragma unroll
  for (int mask = 1; mask <= 2; mask *= 2) {
    const bool upper = (i & mask) != 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (e & mask)
        continue;
      // The lower lane keeps slot e and takes the partner's slot e into
      // slot e ^ mask; the upper one the other way round.
      V got = __shfl_xor_sync(0xffffffffu, upper ? v[e] : v[e ^ mask],
                              kLaneStride * mask);
      if (upper)
        v[e] = got;
      else
        v[e ^ mask] = got;
    }
  }
}
