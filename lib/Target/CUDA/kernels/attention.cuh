//===- attention.cuh - flash attention forward and backward ---------------===//
//
// q has T rows of D per head, k and v S rows; heads are numbered
// batch · H + h (the simple kernels' blockIdx.y; the tensor-core kernels'
// grids hold them in groups, blockWork below), and lse is [B·H, T]
// float32. Where a head's rows are is a
// layout type (HeadRows below) per operand, so one kernel serves
// gpt.flash_attention's [B, H, T, D] tensors and gpt.flash_attention_qkv's
// heads read in place from the packed [B, T, 3C] c_attn output (and out
// written as [B, T, C]). LQ places q and dq, LK k, v, dk and dv, LO out and
// dout.
//
// Two implementations of the same definitions as lib/Executor/
// AttentionKernels.cpp:
// - attention*Mma: bf16 q/k/v, T and S multiples of 64, D a multiple of 16
//   up to 64 (GPT-2's 64). FlashAttention-2 on mma.sync.m16n8k16 tensor
//   cores: a block of 4 warps takes 64 rows, a warp 16; tiles of 64 keys
//   (or queries) go through shared memory; scores, probabilities and
//   accumulators stay in registers (float32), and a tile's probabilities are
//   rounded to bf16 to feed the next product, as FlashAttention does.
//   The softmax works in log2 units (a score times scale · log2 e, one fma
//   with the row's offset), so that each exponential is one ex2.approx
//   (fastExp2, within a few ulp) rather than expf's dozen instructions:
//   per score, the softmax's arithmetic is what
//   bounds these kernels next to the mma.sync products. The causal mask is
//   applied on the diagonal tile only; the others have no later key.
//   On sm_90a the forward with D of 32 or 64 runs on warpgroup MMA
//   instead (attentionForwardWgmma, at the end of this file): the same
//   softmax, both products as wgmma reading K and V from shared memory.
// - attention*Simple: any dtype and shape, one thread per row, float32 on
//   CUDA cores. Correct, not fast: the fp32 and fp16 paths.
// The backward reads each query row's D = Σ dout·out from `delta`, which
// gpt.attention_row_dot (attentionRowDot, below) writes before it, once a
// row: FlashAttention-2's preprocessing. out itself is not read. It is
// deterministic without atomics: a grid of T/64 "dq" blocks (one query
// tile each, walking the key tiles) and S/64 "dk/dv" blocks (one key tile
// each, walking the query tiles); both recompute the probabilities from
// lse. A query tile's lse and D values arrive by cp.async with its q and
// dout tiles, one tile ahead: the loop of a dk/dv block issues no plain
// global load, and waits at one barrier a tile. Opt-in,
// attentionBackwardAtomic is FlashAttention-2's backward instead: the
// dk/dv blocks alone, each adding its share of dq with atomics.
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

//===----------------------------------------------------------------------===//
// Tensor-core kernels (bf16, sm_80+)
//===----------------------------------------------------------------------===//

namespace mma {

/// c += a · b for one m16n8k16 tile (types.cuh).
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4],
                                         u32 b0, u32 b1) {
  mmaBf16m16n8k16(c, a, b0, b1);
}

/// A 64 x D bf16 tile in shared memory; rows padded by 8 elements (16
/// bytes) so that the 8 rows an ldmatrix reads at once hit 32 different
/// banks.
template <int D> struct Tile {
  static constexpr int kStride = D + 8;
  alignas(16) unsigned short data[64 * kStride];

  /// Starts the copies of rows [row0, row0 + 64) of D bf16 elements,
  /// `stride` apart from `src` on (HeadRows), 16 bytes a thread with
  /// cp.async: in flight until the caller commits and waits for them.
  /// kThreads is the block's size (blockDim.x). Chunk c is row c / (D/8),
  /// columns c % (D/8) · 8 on. A thread's chunks are kThreads apart (a
  /// multiple of D/8): the same columns, rows kThreads / (D/8) apart, so
  /// the unrolled copies' addresses differ by constants (sm_90a SASS: the
  /// forward's key tile is 8 consecutive LDGSTS; a loop over blockDim.x
  /// spent 22 instructions a copy on index arithmetic). !kUnrolled keeps
  /// a loop, for a kernel whose registers cannot spare the addresses (the
  /// atomic backward: unrolled, it spilled at its 168).
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsync(const bf16 *src, i64 stride,
                                            i64 row0) {
    constexpr int kChunks = 64 * D / 8, kRowStep = kThreads / (D / 8);
    static_assert(kThreads % (D / 8) == 0, "a thread's chunks share columns");
    const int r = threadIdx.x / (D / 8), col = threadIdx.x % (D / 8) * 8;
    const u32 to = sharedAddress(data) + 2 * (r * kStride + col);
    const bf16 *from = src + (row0 + r) * stride + col;
#pragma unroll(kUnrolled ? 8 : 1)
    for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i)
      if (kChunks % kThreads == 0 || threadIdx.x + i * kThreads < kChunks)
        copyAsync16(to + 2 * i * kRowStep * kStride,
                    from + i * kRowStep * stride);
  }
  /// This lane's row address for loadMatrices of the 16 x 16 block at (r0,
  /// c0): matrix m is the 8 x 8 block at rows r0 + 8·(m % 2), columns c0 +
  /// 8·(m / 2).
  __device__ __forceinline__ u32 block(int r0, int c0) const {
    const int lane = threadIdx.x % 32, m = lane / 8;
    return sharedAddress(data) +
           2 * ((r0 + 8 * (m % 2) + lane % 8) * kStride + c0 + 8 * (m / 2));
  }
  /// The same block in the other order, matrix m at rows r0 + 8·(m / 2),
  /// columns c0 + 8·(m % 2): with the tile's rows as B's columns (a·bᵀ),
  /// registers 0 and 1 are b0 and b1 of the n-tile of rows r0.., 2 and 3 of
  /// rows r0 + 8... An mma reads its B as a register pair, so in A's order
  /// (b0 and b1 in registers 0 and 2) ptxas moved every pair into place:
  /// 263 moves in the sm_90a SASS of GPT-2's split backward, now 45.
  __device__ __forceinline__ u32 blockB(int r0, int c0) const {
    const int lane = threadIdx.x % 32, m = lane / 8;
    return sharedAddress(data) +
           2 * ((r0 + 8 * (m / 2) + lane % 8) * kStride + c0 + 8 * (m % 2));
  }
};

// Fragment layouts of mma.m16n8k16 (PTX ISA), with g = lane / 4 and
// t = lane % 4: A (16x16) a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g,
// 2t+8..), a3 = (g+8, 2t+8..); B (16x8) b0 = (k 2t..2t+1, n g), b1 = (k
// 2t+8.., n g); C (16x8) c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..).
// Tile::block's matrix order is A's: one loadMatrices is an A fragment;
// Tile::blockB's gives two n-tiles' B fragments, each a register pair.

/// A fragment of rows [r0, r0+16) x columns [k0, k0+16) of a tile.
template <int D>
__device__ __forceinline__ void loadA(u32 (&a)[4], const Tile<D> &t, int r0,
                                      int k0) {
  loadMatrices(a, t.block(r0, k0));
}

__device__ __forceinline__ void zero(float (&c)[4]) {
  c[0] = c[1] = c[2] = c[3] = 0.0f;
}
template <int N> __device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    zero(c[i]);
}

/// The A fragment of columns [16kc, 16kc+16) of a 16 x 8N accumulator held
/// as N C fragments: the C layout of two n-tiles is the A layout.
template <int N>
__device__ __forceinline__ void accToA(u32 (&a)[4], const float (&c)[N][4],
                                       int kc) {
  a[0] = packBf16(c[2 * kc][0], c[2 * kc][1]);
  a[1] = packBf16(c[2 * kc][2], c[2 * kc][3]);
  a[2] = packBf16(c[2 * kc + 1][0], c[2 * kc + 1][1]);
  a[3] = packBf16(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}

/// c[N][4] = rows [r0, r0+16) of `a` times rows [8 n0, 8 n0 + 8N) of `b`
/// (all 64 by default), transposed: a 16 x 8N block of a·bᵀ over D.
/// B[k][n] = b[n][k]: the tile's rows are B's columns, so one loadMatrices
/// of the 16 x 16 block at (8 n0 + 16np, 16kc) holds two n-tiles'
/// fragments, b0 and b1 of 2np in registers 0 and 1, of 2np+1 in 2 and 3
/// (Tile::blockB).
template <int D, int N = 8>
__device__ __forceinline__ void productABt(float (&c)[N][4],
                                           const u32 (&a)[D / 16][4],
                                           const Tile<D> &b, int n0 = 0) {
#pragma unroll
  for (int np = 0; np < N / 2; ++np) {
    zero(c[2 * np]);
    zero(c[2 * np + 1]);
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      u32 f[4];
      loadMatrices(f, b.blockB(n0 * 8 + np * 16, kc * 16));
      mma16816(c[2 * np], a[kc], f[0], f[1]);
      mma16816(c[2 * np + 1], a[kc], f[2], f[3]);
    }
  }
}

/// acc[D/8][4] += p (16 x 8N, as C fragments) times rows [8 k0, 8 k0 + 8N)
/// of the 64 x D tile (all by default). B[k][n] = b[k][n]: B's fragments
/// run down the tile's columns, which loadMatricesTransposed of the block
/// at (8 k0 + 16kc, 16np) delivers: b0 and b1 of n-tile 2np in registers 0
/// and 1, of 2np+1 in 2 and 3.
template <int D, int N = 8>
__device__ __forceinline__ void accumulatePB(float (&acc)[D / 8][4],
                                             const float (&p)[N][4],
                                             const Tile<D> &b, int k0 = 0) {
#pragma unroll
  for (int kc = 0; kc < N / 2; ++kc) {
    u32 a[4];
    accToA(a, p, kc);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      u32 f[4];
      loadMatricesTransposed(f, b.block(k0 * 8 + kc * 16, np * 16));
      mma16816(acc[2 * np], a, f[0], f[1]);
      mma16816(acc[2 * np + 1], a, f[2], f[3]);
    }
  }
}

/// productABt (all 64 columns) for kM row tiles of `a` at once: each B
/// fragment loaded serves every row tile, one ldmatrix for 2·kM products
/// rather than 2 (an ldmatrix.x4 is 512 bytes, four cycles of an SM's
/// shared memory).
template <int D, int kM>
__device__ __forceinline__ void productABtRows(float (&c)[kM][8][4],
                                               const u32 (&a)[kM][D / 16][4],
                                               const Tile<D> &b) {
#pragma unroll
  for (int np = 0; np < 4; ++np) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      zero(c[m][2 * np]);
      zero(c[m][2 * np + 1]);
    }
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      u32 f[4];
      loadMatrices(f, b.blockB(np * 16, kc * 16));
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        mma16816(c[m][2 * np], a[m][kc], f[0], f[1]);
        mma16816(c[m][2 * np + 1], a[m][kc], f[2], f[3]);
      }
    }
  }
}

/// accumulatePB (all 64 rows of b) for kM row tiles of p at once, each B
/// fragment loaded once for all of them.
template <int D, int kM>
__device__ __forceinline__ void accumulatePBRows(float (&acc)[kM][D / 8][4],
                                                 const float (&p)[kM][8][4],
                                                 const Tile<D> &b) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    u32 a[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m)
      accToA(a[m], p[m], kc);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      u32 f[4];
      loadMatricesTransposed(f, b.block(kc * 16, np * 16));
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        mma16816(acc[m][2 * np], a[m], f[0], f[1]);
        mma16816(acc[m][2 * np + 1], a[m], f[2], f[3]);
      }
    }
  }
}

/// Writes a 16 x D accumulator (rows row0.., scaled) to rows of D elements
/// `stride` apart from `dst` on. A template argument: as a function argument
/// (constant after inlining all the same) NVRTC's register allocation
/// differs and the forward spills at 128 registers.
///
/// 2-byte elements with D a multiple of 32 and 16-byte aligned rows: the
/// four lanes of a fragment's row hold its 8 columns of each n-tile as
/// pairs; transposed across them in sets of four n-tiles, each lane holds
/// one n-tile's 8 columns, one 16-byte store. Element by element, a warp's
/// store wrote 2 bytes a lane into 8 sectors: ncu counted 3.1 million
/// excess sectors, 17% of the wgmma forward's, on an H200. kWide false
/// keeps the element stores: the mma.sync kernels, at their register
/// caps, spilled with the transposes (the split backward 16 bytes at
/// D = 64, the atomic one 8 at D = 32, the forward 8 at 128 registers).
template <int D, i64 stride, bool kWide = true, typename T>
__device__ __forceinline__ void storeAcc(T *dst, i64 row0,
                                         const float (&acc)[D / 8][4],
                                         float scaleLo, float scaleHi) {
  int g = threadIdx.x % 32 / 4, tq = threadIdx.x % 4;
  if constexpr (kWide && sizeof(T) == 2 && D % 32 == 0 && stride % 8 == 0) {
    if (reinterpret_cast<unsigned long long>(dst) % 16 == 0) {
#pragma unroll
      for (int half = 0; half < 2; ++half) { // rows g, g + 8
        const float scale = half ? scaleHi : scaleLo;
        T *row = dst + (row0 + g + 8 * half) * stride;
#pragma unroll
        for (int set = 0; set < D / 32; ++set) {
          u32 v[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float *x = acc[4 * set + e] + 2 * half;
            v[e] = u32(fromFloat<T>(x[0] * scale).bits) |
                   u32(fromFloat<T>(x[1] * scale).bits) << 16;
          }
          transposeAcrossLanes4<1>(v, tq);
          storeGlobal128(row + 8 * (4 * set + tq), v[0], v[1], v[2], v[3]);
        }
      }
      return;
    }
  }
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    int c = nt * 8 + 2 * tq;
    dst[(row0 + g) * stride + c] = fromFloat<T>(acc[nt][0] * scaleLo);
    dst[(row0 + g) * stride + c + 1] = fromFloat<T>(acc[nt][1] * scaleLo);
    dst[(row0 + g + 8) * stride + c] = fromFloat<T>(acc[nt][2] * scaleHi);
    dst[(row0 + g + 8) * stride + c + 1] = fromFloat<T>(acc[nt][3] * scaleHi);
  }
}

/// On the diagonal tile, sets the scores whose key comes after their query
/// to `value`. This lane holds rows rowLo and rowLo + 8 of the tile, columns
/// (n0 + nt)·8 + 2tq + (e & 1); kRowsAreKeys: rows are keys and columns
/// queries (the dk/dv products), else the other way round.
template <bool kRowsAreKeys, int N = 8>
__device__ __forceinline__ void maskFuture(float (&s)[N][4], int rowLo,
                                           float value, int n0 = 0) {
  const int tq = threadIdx.x % 4;
#pragma unroll
  for (int nt = 0; nt < N; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int col = (n0 + nt) * 8 + 2 * tq + (e & 1), row = rowLo + (e < 2 ? 0 : 8);
      if (kRowsAreKeys ? col < row : col > row)
        s[nt][e] = value;
    }
}

/// The forward's online softmax over a warp's 16 query rows, rows lo = g
/// and hi = g + 8 of this lane (g = lane / 4; the four lanes of a quad hold
/// one row pair): the maxima the probabilities are taken against (log2
/// units) and the sums so far.
///
/// The maxima are raised lazily, as FlashAttention-4 does: only when some
/// row of the warp sees a score more than kSlack (log2 units) above its
/// maximum, and then every row's to its true maximum. Until then a tile's
/// probabilities are taken against the old maxima, so they are at most
/// 2^kSlack, and acc and the sums are not rescaled: 32 multiplies and two
/// exponentials a tile fewer once the first tiles have set the maxima. The
/// output (acc over the sums) and lse (maximum plus log of the sum) are
/// the same functions of the scores either way; only rounding differs.
struct OnlineSoftmax {
  static constexpr float kSlack = 8.0f;
  float mLo = GPTC_NEG_INF, mHi = GPTC_NEG_INF, lLo = 0.0f, lHi = 0.0f;

  /// One key tile: s (scores) becomes the tile's probabilities in place,
  /// and acc is rescaled by the change of the rows' maxima, if they
  /// changed. `diagonal`: the causal tile, masked past row `row` (the
  /// warp's 16 rows on).
  template <int D>
  __device__ __forceinline__ void tile(float (&s)[8][4], float (&acc)[D / 8][4],
                                       float scaleLog2, bool diagonal,
                                       int row) {
    float corrLo, corrHi;
    if (probabilities(s, scaleLog2, diagonal, row, corrLo, corrHi))
      rescale<D>(acc, corrLo, corrHi);
  }

  /// lo[0] and hi[0] become the maxima of lo[0, 2W) and hi[0, 2W), a
  /// level of the tree at a time (constant indices at every level: a loop
  /// over the levels left 16-element arrays in local memory).
  template <int W, int N>
  static __device__ __forceinline__ void foldMax(float (&lo)[N],
                                                 float (&hi)[N]) {
    if constexpr (W > 0) {
#pragma unroll
      for (int i = 0; i < W; ++i) {
        lo[i] = fmaxf(lo[i], lo[i + W]);
        hi[i] = fmaxf(hi[i], hi[i + W]);
      }
      foldMax<W / 2>(lo, hi);
    }
  }

  /// tile() in two steps, for a kernel whose acc is still being written
  /// (a product in flight) when s is ready: s becomes the probabilities
  /// and the rows' sums are updated; corrLo and corrHi are what acc must
  /// then be multiplied by (rescale), 1 where the maxima stayed. Returns
  /// whether they moved (the same for the whole warp).
  /// (N n-tiles of 8 keys: 8, a 64-key tile; 16, the two of
  /// attentionForwardWgmmaKeys128, diagonal masked by the caller.)
  template <int N>
  __device__ __forceinline__ bool probabilities(float (&s)[N][4],
                                                float scaleLog2, bool diagonal,
                                                int row, float &corrLo,
                                                float &corrHi) {
    // The scores stay unscaled: scale > 0 (the op's verifier), so the
    // row's largest score scaled is the largest scaled score, and each
    // term is one fma into the exponential (FlashAttention-2's), not a
    // multiply a score and then a subtraction.
    if (diagonal)
      maskFuture<false, N>(s, row, GPTC_NEG_INF);
    // This thread's maxima, as a tree: they are on the way from the
    // scores to the exponentials, and a fold one element at a time was a
    // chain of 16 dependent FMNMX a row (the SASS; ptxas does not
    // reassociate it). The same maxima.
    float lo[N], hi[N];
#pragma unroll
    for (int nt = 0; nt < N; ++nt) {
      lo[nt] = fmaxf(s[nt][0], s[nt][1]);
      hi[nt] = fmaxf(s[nt][2], s[nt][3]);
    }
    foldMax<N / 2>(lo, hi);
    float tileLo = lo[0], tileHi = hi[0];
    // Whether some row's max moves past the slack: some thread's own
    // elements do, the 4 threads of a row (a quad) holding the same max.
    // The rows' maxima over their quads, two rounds of shuffles, are only
    // needed then: most tiles skip them, and their latency.
    const bool moved =
        __ballot_sync(0xffffffffu, tileLo * scaleLog2 > mLo + kSlack ||
                                       tileHi * scaleLog2 > mHi + kSlack) != 0;
    corrLo = corrHi = 1.0f;
    if (moved) {
      for (int o = 1; o <= 2; o <<= 1) {
        tileLo = fmaxf(tileLo, __shfl_xor_sync(0xffffffffu, tileLo, o));
        tileHi = fmaxf(tileHi, __shfl_xor_sync(0xffffffffu, tileHi, o));
      }
      // Every row sees key 0 in the first tile: the max is finite from
      // then on (and the first tile always moves it, from -inf).
      const float newLo = fmaxf(mLo, tileLo * scaleLog2),
                  newHi = fmaxf(mHi, tileHi * scaleLog2);
      corrLo = fastExp2(mLo - newLo);
      corrHi = fastExp2(mHi - newHi);
      mLo = newLo;
      mHi = newHi;
    }
    float sumLo = 0.0f, sumHi = 0.0f;
#pragma unroll
    for (int nt = 0; nt < N; ++nt) {
      s[nt][0] = fastExp2(fmaf(s[nt][0], scaleLog2, -mLo));
      s[nt][1] = fastExp2(fmaf(s[nt][1], scaleLog2, -mLo));
      s[nt][2] = fastExp2(fmaf(s[nt][2], scaleLog2, -mHi));
      s[nt][3] = fastExp2(fmaf(s[nt][3], scaleLog2, -mHi));
      sumLo += s[nt][0] + s[nt][1];
      sumHi += s[nt][2] + s[nt][3];
    }
    lLo = lLo * corrLo + sumLo;
    lHi = lHi * corrHi + sumHi;
    return moved;
  }

  template <int D>
  __device__ __forceinline__ void rescale(float (&acc)[D / 8][4], float corrLo,
                                          float corrHi) {
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      acc[nt][0] *= corrLo;
      acc[nt][1] *= corrLo;
      acc[nt][2] *= corrHi;
      acc[nt][3] *= corrHi;
    }
  }

  /// Writes the warp's rows [row0, row0 + 16) of out (acc over the sums)
  /// and their lse, in natural units.
  /// kWide: storeAcc's 16-byte stores (the mma.sync forwards, at their
  /// register caps, spilled with them).
  template <int D, int T, class LO, bool kWide = true, typename TO>
  __device__ __forceinline__ void finish(TO *out, float *lse, i64 h, int row0,
                                         const float (&acc)[D / 8][4]) {
    for (int o = 1; o <= 2; o <<= 1) {
      lLo += __shfl_xor_sync(0xffffffffu, lLo, o);
      lHi += __shfl_xor_sync(0xffffffffu, lHi, o);
    }
    storeAcc<D, LO::kRowStride, kWide>(out + LO::head(h), row0, acc,
                                       1.0f / lLo, 1.0f / lHi);
    if (threadIdx.x % 4 == 0) {
      constexpr float kLn2 = 0.6931471805599453f;
      const int rowLo = row0 + threadIdx.x % 32 / 4;
      lse[h * T + rowLo] = mLo * kLn2 + logf(lLo);
      lse[h * T + rowLo + 8] = mHi * kLn2 + logf(lHi);
    }
  }
};

} // namespace mma

/// Starts the copies of key tile j0 (k and v rows [j0, j0 + 64) of head h)
/// into kTile and vTile, as one cp.async group; kThreads a block.
template <class LK, int kThreads, class Tile>
__device__ __forceinline__ void loadKeyTileAsync(Tile &kTile, Tile &vTile,
                                                 const bf16 *k, const bf16 *v,
                                                 i64 h, int j0) {
  kTile.template loadAsync<kThreads>(k + LK::head(h), LK::kRowStride, j0);
  vTile.template loadAsync<kThreads>(v + LK::head(h), LK::kRowStride, j0);
  commitCopies();
}

/// The forwards' key loop at tile j0 (buffer buf): starts the next tile's
/// copies into the other buffer, if there is a next tile, and waits for
/// this thread's copies of this one. A barrier must follow before other
/// threads' copies are read.
template <class LK, int kThreads, class Tile>
__device__ __forceinline__ void prefetchNextKeyTile(Tile (&sK)[2], Tile (&sV)[2],
                                                    const bf16 *k, const bf16 *v,
                                                    i64 h, int j0, int keyEnd,
                                                    int buf) {
  if (j0 + 64 < keyEnd) {
    loadKeyTileAsync<LK, kThreads>(sK[buf ^ 1], sV[buf ^ 1], k, v, h, j0 + 64);
    waitCopies<1>(); // this tile's copies, not the next one's
  } else {
    waitCopies<0>();
  }
}

/// grid (heads of a group, T/kRows, groups), 32·kWarps threads: a warp's
/// 16·kRowTiles query rows against 64-key tiles, kRows = 16·kWarps·
/// kRowTiles a block. K and V tiles are double-buffered: the next tile's
/// cp.async copies run while this one is multiplied. 128 rows a block (T a
/// multiple of 128) copy each key tile once for 128 queries rather than
/// 64: half the traffic from L2 a query. kWarps = 8 does it at the same
/// registers a thread; kRowTiles = 2 (4 warps of 32 rows, FlashAttention-
/// 2's layout at D=64) with every k and v fragment read from shared memory
/// once for both row tiles: half the ldmatrix a product, twice the
/// registers.
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          int kWarps = 4, int kRowTiles = 1, typename TO>
__device__ void attentionForwardMma(const bf16 *q, const bf16 *k,
                                    const bf16 *v, TO *out, float *lse,
                                    float scale) {
  using namespace mma;
  constexpr int kWarpRows = 16 * kRowTiles, kRows = kWarpRows * kWarps;
  static_assert(kRows == 64 || kRows == 128, "q is staged in one or two tiles");
  // q is staged in sK[1] first (and its second 64 rows in sV[1]).
  __shared__ Tile<D> sK[2], sV[2];
  // Causal: the last query tiles see the most keys; start them first. A
  // head's k and v are what its blocks share.
  const BlockWork work = blockWork();
  const i64 h = work.head;
  constexpr i64 kQ = LQ::kRowStride;
  // The head's offsets are recomputed where used: pointers moved once here
  // would hold registers across the loop (the parameters stay in constant
  // memory), and at 128 registers the kernel would spill.
  const int i0 = (T / kRows - 1 - work.rank) * kRows, warp = threadIdx.x / 32;
  const int g = threadIdx.x % 32 / 4;
  const int row0 = i0 + warp * kWarpRows; // this warp's first query

  // q and the first key tile in one group: one round trip, not two.
  sK[1].template loadAsync<32 * kWarps>(q + LQ::head(h), kQ, i0);
  if (kRows == 128)
    sV[1].template loadAsync<32 * kWarps>(q + LQ::head(h), kQ, i0 + 64);
  loadKeyTileAsync<LK, 32 * kWarps>(sK[0], sV[0], k, v, h, 0);
  waitCopies<0>();
  __syncthreads();
  u32 qa[kRowTiles][D / 16][4];
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m) {
    const int r = warp * kWarpRows + 16 * m; // within the block's rows
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
      loadA(qa[m][kc], r >= 64 ? sV[1] : sK[1], r % 64, kc * 16);
  }
  __syncthreads(); // sK[1] and sV[1] are free for the second key tile

  float acc[kRowTiles][D / 8][4];
  OnlineSoftmax rows[kRowTiles];
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m)
    zero(acc[m]);
  const float scaleLog2 = scale * log2e();
  const int keyEnd = kCausal ? i0 + kRows : S;
  for (int j0 = 0, buf = 0; j0 < keyEnd; j0 += 64, buf ^= 1) {
    prefetchNextKeyTile<LK, 32 * kWarps>(sK, sV, k, v, h, j0, keyEnd, buf);
    __syncthreads(); // every thread's copies of this tile have landed
    // Causal, 128 rows: the block's last key tile is wholly in the future
    // of the first half's rows.
    if (!kCausal || j0 <= row0 + kWarpRows - 1) {
      float s[kRowTiles][8][4];
      productABtRows<D, kRowTiles>(s, qa, sK[buf]);
      // The tile that holds a row tile's diagonal is masked past each row
      // (the row's index within the tile).
#pragma unroll
      for (int m = 0; m < kRowTiles; ++m) {
        const int r = row0 + 16 * m;
        rows[m].template tile<D>(s[m], acc[m], scaleLog2,
                                 kCausal && j0 == r / 64 * 64, r - j0 + g);
      }
      accumulatePBRows<D, kRowTiles>(acc, s, sV[buf]);
    }
    __syncthreads(); // done with this buffer before it is refilled
  }
#pragma unroll
  for (int m = 0; m < kRowTiles; ++m)
    rows[m].template finish<D, T, LO, false>(out, lse, h, row0 + 16 * m,
                                             acc[m]);
}

/// attentionForwardMma (4 warps, 64 queries a block) with the next key
/// tile's scores under this tile's softmax (--attention-forward=mma-pipe):
/// a warp issues s' = q·kᵀ of tile j + 1 before the softmax of tile j,
/// which needs nothing from it, so that its tensor-core products and its
/// softmax arithmetic overlap, as FlashAttention-3 overlaps them within a
/// warpgroup; the mma forward's warps stall between the two (an H100's
/// ncu: 7.8 cycles between a warp's instructions, at 4 warps a scheduler).
/// k is copied one tile ahead of v, each double-buffered, so one barrier
/// a tile does: after it, the k buffer tile j's scores read (the previous
/// iteration's) and the v buffer tile j - 1's product read are free for
/// k of tile j + 2 and v of tile j + 1. The same operations in the same
/// order as attentionForwardMma: the same bits. The second scores take 32
/// registers more: 3 blocks an SM.
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TO>
__device__ void attentionForwardMmaPipelined(const bf16 *q, const bf16 *k,
                                             const bf16 *v, TO *out,
                                             float *lse, float scale) {
  using namespace mma;
  __shared__ Tile<D> sK[2], sV[2];
  const BlockWork work = blockWork();
  const i64 h = work.head;
  const int i0 = (T / 64 - 1 - work.rank) * 64, warp = threadIdx.x / 32;
  const int g = threadIdx.x % 32 / 4;
  const int tiles = (kCausal ? i0 + 64 : S) / 64;
  auto loadK = [&](int j) {
    sK[j % 2].template loadAsync<128>(k + LK::head(h), LK::kRowStride, 64 * j);
  };
  auto loadV = [&](int j) {
    sV[j % 2].template loadAsync<128>(v + LK::head(h), LK::kRowStride, 64 * j);
  };

  // q (staged in sV[1], free until tile 1's v) and k of tile 0; then q's
  // fragments and tile 0's scores; then k of tile 1 and v of tile 0.
  sV[1].template loadAsync<128>(q + LQ::head(h), LQ::kRowStride, i0);
  loadK(0);
  commitCopies();
  waitCopies<0>();
  __syncthreads();
  u32 qa[D / 16][4];
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc)
    loadA(qa[kc], sV[1], warp * 16, kc * 16);
  float s0[8][4], s1[8][4];
  productABt<D>(s0, qa, sK[0]);
  if (tiles > 1)
    loadK(1);
  loadV(0);
  commitCopies();

  float acc[D / 8][4];
  zero(acc);
  OnlineSoftmax rows;
  const float scaleLog2 = scale * log2e();
  // Tile j with its scores in s, the next tile's going to next. The
  // diagonal tile (causal) is the last, masked past each row.
  auto tile = [&](int j, float (&s)[8][4], float (&next)[8][4]) {
    waitCopies<0>(); // k of tile j + 1, v of tile j
    __syncthreads();  // every thread's, and every warp done with j - 1
    if (j + 2 < tiles)
      loadK(j + 2);
    if (j + 1 < tiles)
      loadV(j + 1);
    commitCopies();
    if (j + 1 < tiles)
      productABt<D>(next, qa, sK[(j + 1) % 2]);
    rows.template tile<D>(s, acc, scaleLog2, kCausal && j == tiles - 1,
                          warp * 16 + g);
    accumulatePB<D>(acc, s, sV[j % 2]);
  };
  // Two tiles a round, so that the scores' registers swap roles without
  // copies.
  for (int j = 0; j < tiles; j += 2) {
    tile(j, s0, s1);
    if (j + 1 < tiles)
      tile(j + 1, s1, s0);
  }
  rows.template finish<D, T, LO, false>(out, lse, h, i0 + warp * 16, acc);
}

/// Starts the copies of the row terms of queries [i0, i0 + 64): their lse
/// values into sLse and their Σ dout·out (delta) into sDot, both 16-byte
/// aligned; `lse` and `delta` point at this head's [T] rows. Not committed:
/// they join the caller's group.
__device__ __forceinline__ void loadRowTermsAsync(float *sLse, float *sDot,
                                                  const float *lse,
                                                  const float *delta, int i0) {
  // The first warp's lanes 0..15 copy lse, 16..31 delta: one copy with
  // its operands selected, where two branches cost ptxas a reconvergence
  // and their own address arithmetic each (25 instructions a query tile
  // in wgmma-split's dk/dv loop, nvdisasm).
  if (threadIdx.x < 32) {
    const bool dot = threadIdx.x >= 16;
    const int c = 4 * (threadIdx.x % 16);
    copyAsync16(sharedAddress((dot ? sDot : sLse) + c),
                (dot ? delta : lse) + i0 + c);
  }
}

/// Starts the copies of query tile i0 for the backward: its q and dout rows
/// (this head's, LQ and LO apart) into two tiles and its row terms into
/// sLse and sDot (tiles of mma::Tile's layout or wg::CoreTile's), kThreads
/// a block. Not committed: they join the caller's group.
template <class LQ, class LO, int kThreads, bool kUnrolled = true, class QTile>
__device__ __forceinline__ void
loadQueryTileAsync(QTile &sQ, QTile &sDout, float *sLse,
                   float *sDot, const bf16 *q, const bf16 *dout,
                   const float *lse, const float *delta, int i0) {
  sQ.template loadAsync<kThreads, kUnrolled>(q, LQ::kRowStride, i0);
  sDout.template loadAsync<kThreads, kUnrolled>(dout, LO::kRowStride, i0);
  loadRowTermsAsync(sLse, sDot, lse, delta, i0);
}

/// The dk/dv work of a warp's 16 keys (ka, va: their k and v rows as A
/// fragments) on queries [8 n0, 8 n0 + 8N) of a query tile (its q and dout
/// tiles, its row terms: lse and Σ dout·out): P and dS with rows
/// keys, dv += P·dout, dk += dS·q (unscaled); dS is left in `ds`. Part of
/// a tile at a time: the whole tile's scores and dS on top of the
/// fragments and both accumulators spill. `diagonal`: a causal tile that
/// holds some of these keys' future, masked; keyRow is the warp's first key
/// less the tile's first query (0 to 48).
template <int D, int N>
__device__ __forceinline__ void
keyRowsOnQueries(float (&ds)[N][4], float (&accK)[D / 8][4],
                 float (&accV)[D / 8][4], const u32 (&ka)[D / 16][4],
                 const u32 (&va)[D / 16][4], const mma::Tile<D> &q,
                 const mma::Tile<D> &dout, const float *tileLse,
                 const float *tileDot, float scaleLog2, bool diagonal,
                 int keyRow, int n0) {
  using namespace mma;
  const int tq = threadIdx.x % 4;
  float p[N][4];
  productABt<D, N>(p, ka, q, n0);
  productABt<D, N>(ds, va, dout, n0);
#pragma unroll
  for (int nt = 0; nt < N; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int c = (n0 + nt) * 8 + 2 * tq + (e & 1); // query within the tile
      p[nt][e] = fastExp2(fmaf(p[nt][e], scaleLog2, -log2e() * tileLse[c]));
    }
  if (diagonal)
    maskFuture<true>(p, keyRow + threadIdx.x % 32 / 4, 0.0f, n0);
#pragma unroll
  for (int nt = 0; nt < N; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int c = (n0 + nt) * 8 + 2 * tq + (e & 1);
      ds[nt][e] = p[nt][e] * (ds[nt][e] - tileDot[c]);
    }
  accumulatePB<D, N>(accV, p, dout, n0);
  accumulatePB<D, N>(accK, ds, q, n0);
}

/// Moves the backward's operands to head h's rows.
template <int T, class LQ, class LK, class LO, typename TDQ, typename TDK,
          typename TDV>
__device__ __forceinline__ void
backwardToHead(i64 h, const bf16 *&q, const bf16 *&k, const bf16 *&v,
               const float *&lse, const bf16 *&dout, const float *&delta,
               TDQ *&dq, TDK *&dk, TDV *&dv) {
  q += LQ::head(h);
  dq += LQ::head(h);
  k += LK::head(h);
  v += LK::head(h);
  dk += LK::head(h);
  dv += LK::head(h);
  dout += LO::head(h);
  lse += h * T;
  delta += h * T;
}

/// grid (heads of a group, T/64 + S/64, groups), 128 threads; a head's dq
/// and dk/dv blocks alternate by rank. q, k, v and dout are bf16 (they
/// feed the tensor cores); lse and delta (Σ dout·out) float32 [heads, T].
/// The tiles a block walks are double-buffered with cp.async, as in the
/// forward, and every operand, the row terms included, arrives that way.
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TDQ, typename TDK, typename TDV>
__device__ void attentionBackwardMma(const bf16 *q, const bf16 *k,
                                     const bf16 *v, const float *lse,
                                     const bf16 *dout, const float *delta,
                                     TDQ *dq, TDK *dk, TDV *dv, float scale) {
  using namespace mma;
  // Double-buffered tiles the loop walks (dq: k and v; dk/dv: q and dout,
  // with their rows' lse and delta). The second buffers first hold the
  // tile whose fragments stay in registers (dq: q and dout; dk/dv: k, v).
  __shared__ Tile<D> sA[2], sB[2];
  alignas(16) __shared__ float sLse[2][64], sDot[2][64]; // cp.async targets
  constexpr int kQueryBlocks = T / 64;
  // A head's blocks share its q, k, v, dout and row terms. Where T == S,
  // the head's ranks alternate: dq of query tile T/64 - 1 - r/2 (even r)
  // and dk/dv of key tile r/2 (odd r) walk as many tiles, the most first
  // when causal. Otherwise the dq blocks come first.
  const BlockWork work = blockWork();
  const bool dqBlock =
      T == S ? work.rank % 2 == 0 : work.rank < kQueryBlocks;
  const int tile = T == S             ? work.rank / 2
                   : dqBlock ? work.rank
                             : work.rank - kQueryBlocks;
  const i64 h = work.head;
  const int warp = threadIdx.x / 32;
  const int g = threadIdx.x % 32 / 4;
  // This head's rows from here on.
  backwardToHead<T, LQ, LK, LO>(h, q, k, v, lse, dout, delta, dq, dk, dv);
  constexpr i64 kQ = LQ::kRowStride, kK = LK::kRowStride;
  const float scaleLog2 = scale * log2e();

  if (dqBlock) {
    // dq = scale · Σ_keys dS · k, dS = P ∘ (dout·vᵀ − rowDot), the last
    // query tiles (the most keys when causal) first.
    const int i0 = (kQueryBlocks - 1 - tile) * 64;
    const int rLo = warp * 16 + g, rHi = rLo + 8; // rows within the tile
    // This tile's q and dout (in the second buffers, free until the second
    // key tile) and row terms, then the first key tile.
    loadQueryTileAsync<LQ, LO, 128>(sB[1], sA[1], sLse[0], sDot[0], q, dout,
                                    lse, delta, i0);
    commitCopies();
    sA[0].template loadAsync<128>(k, kK, 0);
    sB[0].template loadAsync<128>(v, kK, 0);
    commitCopies();
    waitCopies<1>(); // the query tile, not yet the key tile
    __syncthreads();
    u32 qa[D / 16][4], da[D / 16][4];
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      loadA(qa[kc], sB[1], warp * 16, kc * 16);
      loadA(da[kc], sA[1], warp * 16, kc * 16);
    }
    // What a score in log2 units is offset by, and the rows' delta.
    const float lseLo = -log2e() * sLse[0][rLo], lseHi = -log2e() * sLse[0][rHi];
    const float dotLo = sDot[0][rLo], dotHi = sDot[0][rHi];
    __syncthreads(); // sA[1] and sB[1] are read; the loop may refill them
    float acc[D / 8][4];
    zero(acc);
    const int keyEnd = kCausal ? i0 + 64 : S;
    for (int j0 = 0, buf = 0; j0 < keyEnd; j0 += 64, buf ^= 1) {
      if (j0 + 64 < keyEnd) {
        sA[buf ^ 1].template loadAsync<128>(k, kK, j0 + 64);
        sB[buf ^ 1].template loadAsync<128>(v, kK, j0 + 64);
        commitCopies();
        waitCopies<1>();
      } else {
        waitCopies<0>();
      }
      __syncthreads();
      // Half a key tile at a time, as the dk/dv blocks take query tiles:
      // the whole tile's scores and dout·vᵀ spilled on sm_80.
#pragma unroll
      for (int n0 = 0; n0 < 8; n0 += 4) {
        float s[4][4], dp[4][4];
        productABt<D, 4>(s, qa, sA[buf], n0);
        productABt<D, 4>(dp, da, sB[buf], n0);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[nt][e] =
                fastExp2(fmaf(s[nt][e], scaleLog2, e < 2 ? lseLo : lseHi));
        if (kCausal && j0 == i0)
          maskFuture<false, 4>(s, rLo, 0.0f, n0);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[nt][e] *= dp[nt][e] - (e < 2 ? dotLo : dotHi);
        accumulatePB<D, 4>(acc, s, sA[buf], n0);
      }
      __syncthreads(); // done with this buffer before it is refilled
    }
    storeAcc<D, kQ, false>(dq, i0 + warp * 16, acc, scale, scale);
    return;
  }

  // dv = Σ_queries Pᵀ · dout, dk = scale · Σ_queries dSᵀ · q, computed as
  // transposed products: rows are keys, columns queries.
  const int j0 = tile * 64;
  const int first = kCausal ? j0 : 0;
  // This tile's k and v (in the second buffers, free until the second
  // query tile) and the first query tile, one group.
  sA[1].template loadAsync<128>(k, kK, j0);
  sB[1].template loadAsync<128>(v, kK, j0);
  loadQueryTileAsync<LQ, LO, 128>(sA[0], sB[0], sLse[0], sDot[0], q, dout, lse,
                                  delta, first);
  commitCopies();
  waitCopies<0>();
  __syncthreads();
  u32 ka[D / 16][4], va[D / 16][4];
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    loadA(ka[kc], sA[1], warp * 16, kc * 16);
    loadA(va[kc], sB[1], warp * 16, kc * 16);
  }
  __syncthreads(); // sA[1] and sB[1] are read; the loop may refill them
  float accK[D / 8][4], accV[D / 8][4];
  zero(accK);
  zero(accV);
  // One barrier a tile: it follows the wait for the next tile's copies,
  // and it also frees this tile's buffers for the copies after next.
  for (int i0 = first, buf = 0; i0 < T; i0 += 64, buf ^= 1) {
    const bool more = i0 + 64 < T;
    if (more) {
      loadQueryTileAsync<LQ, LO, 128>(sA[buf ^ 1], sB[buf ^ 1], sLse[buf ^ 1],
                                      sDot[buf ^ 1], q, dout, lse, delta,
                                      i0 + 64);
      commitCopies();
    }
    // Causal: the first query tile is the diagonal one. A quarter of it at
    // a time: in halves, sm_80 spilled 16 bytes.
#pragma unroll
    for (int n0 = 0; n0 < 8; n0 += 2) {
      float ds[2][4];
      keyRowsOnQueries<D, 2>(ds, accK, accV, ka, va, sA[buf], sB[buf],
                             sLse[buf], sDot[buf], scaleLog2,
                             kCausal && i0 == j0, warp * 16, n0);
    }
    if (!more)
      break;
    waitCopies<0>();
    __syncthreads();
  }
  storeAcc<D, kK, false>(dk, j0 + warp * 16, accK, scale, scale);
  storeAcc<D, kK, false>(dv, j0 + warp * 16, accV, 1.0f, 1.0f);
}

//===----------------------------------------------------------------------===//
// Backward with dq summed by atomics (--attention-backward=atomic)
//===----------------------------------------------------------------------===//

/// The shared memory of attentionBackwardAtomic, dynamic: 64 KB at D = 64
/// with one 64-key tile a block, 91 KB with two; over the 48 KB a kernel
/// may declare statically. The query tiles it walks (q, dout, and their lse
/// and delta) are double-buffered, and so is `ds`, the block's dS (rows
/// keys, columns queries) as bf16 for the dq product: one barrier a tile.
/// `k`, the block's keys, stays for the dq product's kᵀ fragments: held in
/// registers across the loop instead, they were 16 of the 168 a thread has
/// at 3 blocks an SM, and sm_80 spilled.
template <int D, int kKeyTiles = 1> struct AtomicBackwardShared {
  mma::Tile<D> q[2], dout[2], k[kKeyTiles];
  mma::Tile<64> ds[2][kKeyTiles];
  alignas(16) float lse[2][64], dot[2][64]; // cp.async destinations
};

/// attentionBackwardAtomic's end: counts this block in at query tiles
/// [firstTile, T/64), whose dq it added to (kCausal: key tiles 0..t add to
/// query tile t), once every thread's atomics are done; last[t] says
/// whether it was the last, which resets tile t's count for the next launch.
/// Blocks take kKeys keys each: causal, those whose first key is at most
/// tile t's last query add to it.
template <int T, int S, bool kCausal, int kKeys>
__device__ __forceinline__ void arriveAtQueryTiles(unsigned *arrivals,
                                                   u32 *last, int firstTile) {
  __threadfence();
  __syncthreads();
  for (int t = firstTile + threadIdx.x; t < T / 64; t += blockDim.x) {
    const unsigned blocks = kCausal ? (64 * t + 63) / kKeys + 1 : S / kKeys;
    last[t] = atomicAdd(arrivals + t, 1u) == blocks - 1;
    if (last[t])
      arrivals[t] = 0;
  }
  __syncthreads();
  __threadfence();
}

/// attentionBackwardAtomic's last block for a query tile: dq = scale · the
/// tile's 64 x D sums (rows kQ apart from `dq` on), and the sums zeroed.
/// Each thread's loads first, so that they are in flight together (through
/// L2: other blocks' adds). Not inlined: unrolled into the kernel, it made
/// ptxas spill more in the loop.
template <int D, i64 kQ, int kThreads, typename TDQ>
__device__ __noinline__ void writeQueryTileDq(TDQ *dq, float *dqSum,
                                              float scale) {
  constexpr int kLoads = 64 * D / (kThreads * 4);
  static_assert(kLoads >= 1, "a float4 a thread at least");
  float4 *sums = reinterpret_cast<float4 *>(dqSum);
  float4 x[kLoads];
#pragma unroll
  for (int j = 0; j < kLoads; ++j)
    x[j] = __ldcg(sums + threadIdx.x + kThreads * j);
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int e = 4 * (threadIdx.x + kThreads * j);
    TDQ *row = dq + e / D * kQ + e % D;
    row[0] = fromFloat<TDQ>(scale * x[j].x);
    row[1] = fromFloat<TDQ>(scale * x[j].y);
    row[2] = fromFloat<TDQ>(scale * x[j].z);
    row[3] = fromFloat<TDQ>(scale * x[j].w);
    sums[threadIdx.x + kThreads * j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

/// grid (heads of a group, S/(64 kKeyTiles), groups), 128 kKeyTiles threads,
/// sizeof(AtomicBackwardShared<D, kKeyTiles>) bytes of dynamic shared
/// memory; D of 16, 32 or 64 (two key tiles: 32 or 64). FlashAttention-2's
/// backward: one block a key tile (or two: 128 keys, 8 warps, as
/// FlashAttention-2 takes them) computes dk and dv as attentionBackwardMma's
/// dk/dv blocks do, and also adds each query tile's share of dq,
/// scale-free, into dqSum ([heads, T, D] float32) with atomics; the last
/// block to add to a query tile (counted in arrivals, [heads, T/64]) writes
/// its dq and leaves dqSum and arrivals zero for the next launch. Five
/// products a tile pair rather than seven, but dq's float32 sums depend on
/// the blocks' order. With two key tiles a block, each query tile is copied
/// and its dq added to once for 128 keys rather than 64.
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          int kKeyTiles = 1, typename TDQ, typename TDK, typename TDV>
__device__ void attentionBackwardAtomic(const bf16 *q, const bf16 *k,
                                        const bf16 *v, const float *lse,
                                        const bf16 *dout, const float *delta,
                                        TDQ *dq, TDK *dk, TDV *dv, float scale,
                                        float *dqSum, unsigned *arrivals) {
  using namespace mma;
  static_assert(D == 16 || D == 32 || D == 64, "dq splits D by 16 rows a warp");
  static_assert(kKeyTiles == 1 || kKeyTiles == 2, "v is staged in two tiles");
  constexpr int kWarps = 4 * kKeyTiles, kKeys = 64 * kKeyTiles;
  extern __shared__ uint4 gptcDynamicShared[];
  AtomicBackwardShared<D, kKeyTiles> &sm =
      *reinterpret_cast<AtomicBackwardShared<D, kKeyTiles> *>(
          gptcDynamicShared);
  __shared__ u32 lastFor[T / 64]; // this block writes query tile t's dq
  // Causal: the first key tiles meet the most queries. A head's blocks
  // share its q, dout, row terms and dq sums.
  const BlockWork work = blockWork();
  const i64 h = work.head;
  const int warp = threadIdx.x / 32;
  const int g = threadIdx.x % 32 / 4, tq = threadIdx.x % 4;
  backwardToHead<T, LQ, LK, LO>(h, q, k, v, lse, dout, delta, dq, dk, dv);
  dqSum += h * T * D;
  arrivals += h * (T / 64);
  constexpr i64 kQ = LQ::kRowStride, kK = LK::kRowStride;
  const float scaleLog2 = scale * log2e();
  // The dq product dqᵀ = kᵀ · dsᵀ (D x 64 queries, over the block's keys)
  // is split over the warps by 16 rows of D, then by n-tiles of queries:
  // kSplit warps share a row block, each taking kTiles of the 8 n-tiles.
  constexpr int kRowBlocks = D / 16, kSplit = kWarps / kRowBlocks,
                kTiles = 8 / kSplit;
  static_assert(kTiles >= 2, "the dq product takes n-tiles in pairs");
  const int rowBlock = warp % kRowBlocks, tile0 = warp / kRowBlocks * kTiles;

  const int j0 = work.rank * kKeys;
  const int first = kCausal ? j0 : 0;
  // This warp's 16 keys: rows keyRow0.. of k tile kt (and of v's). With
  // one key tile, constants that the compiler cannot see (warp < 4): a
  // tile picked at run time costs registers, and ptxas spilled.
  const int kt = kKeyTiles == 1 ? 0 : warp / 4;
  const int keyRow0 = kKeyTiles == 1 ? warp * 16 : warp % 4 * 16;
  const int myKey0 = j0 + warp * 16;
  // The block's k (for good) and v (in the second dout buffer and, for
  // a second key tile, the second q buffer: free until the second query
  // tile) and the first query tile, one group.
#pragma unroll
  for (int t = 0; t < kKeyTiles; ++t) {
    sm.k[t].template loadAsync<32 * kWarps, false>(k, kK, j0 + 64 * t);
    (t == 0 ? sm.dout[1] : sm.q[1])
        .template loadAsync<32 * kWarps, false>(v, kK, j0 + 64 * t);
  }
  loadQueryTileAsync<LQ, LO, 32 * kWarps, false>(
      sm.q[0], sm.dout[0], sm.lse[0], sm.dot[0], q, dout, lse, delta, first);
  commitCopies();
  waitCopies<0>();
  __syncthreads();
  // ka, va: this warp's 16 keys as A fragments.
  u32 ka[D / 16][4], va[D / 16][4];
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    loadA(ka[kc], sm.k[kt], keyRow0, kc * 16);
    loadA(va[kc], kt == 0 ? sm.dout[1] : sm.q[1], keyRow0, kc * 16);
  }
  __syncthreads(); // v's tiles are read; the loop may refill them
  float accK[D / 8][4], accV[D / 8][4];
  zero(accK);
  zero(accV);
  // One barrier a tile: it makes dS whole, follows the wait for the next
  // tile's copies, and frees this tile's buffers for the copies after next
  // (ds[buf] is next written two tiles on, after the next barrier).
  for (int i0 = first, buf = 0; i0 < T; i0 += 64, buf ^= 1) {
    const bool more = i0 + 64 < T;
    if (more) {
      loadQueryTileAsync<LQ, LO, 32 * kWarps, false>(sm.q[buf ^ 1],
                                                     sm.dout[buf ^ 1],
                                              sm.lse[buf ^ 1], sm.dot[buf ^ 1],
                                              q, dout, lse, delta, i0 + 64);
      commitCopies();
    }
    const float *tileLse = sm.lse[buf], *tileDot = sm.dot[buf];
    Tile<64> &sDs = sm.ds[buf][kt];
    // Causal: this warp's keys less the tile's first query. From 64 on
    // every query of the tile precedes them (two key tiles: the second's
    // warps on the block's first query tile), and the dq product below
    // leaves their dS rows out; from 0 on the tile holds their diagonal.
    // (One key tile: 0 to 48 on the diagonal tile, the first.)
    const int keyRow = kKeyTiles == 1 ? keyRow0 : myKey0 - i0;
    const bool diagonal =
        kCausal && (kKeyTiles == 1 ? i0 == j0 : keyRow >= 0);
    if (!kCausal || kKeyTiles == 1 || keyRow < 64) {
      // Half a query tile at a time: the whole tile's scores and dS on
      // top of the fragments and both accumulators spill.
#pragma unroll
      for (int n0 = 0; n0 < 8; n0 += 4) {
        float ds[4][4];
        keyRowsOnQueries<D, 4>(ds, accK, accV, ka, va, sm.q[buf],
                               sm.dout[buf], tileLse, tileDot, scaleLog2,
                               diagonal, keyRow, n0);
        // dS to shared memory, bf16 as the products take it: rows keys.
        unsigned short *lo = sDs.data + (keyRow0 + g) * Tile<64>::kStride;
        unsigned short *hi = lo + 8 * Tile<64>::kStride;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int c = (n0 + nt) * 8 + 2 * tq;
          *reinterpret_cast<u32 *>(lo + c) = packBf16(ds[nt][0], ds[nt][1]);
          *reinterpret_cast<u32 *>(hi + c) = packBf16(ds[nt][2], ds[nt][3]);
        }
      }
    }
    waitCopies<0>();
    __syncthreads(); // dS is whole; q[buf] and dout[buf] are free
    // This warp's part of dqᵀ: B = dsᵀ with keys as k, down ds's rows, over
    // the block's keys that precede some query of the tile (causal: 64 of
    // 128 on the block's first query tile). In parts of at most 4
    // n-tiles: 8 tiles' sums on top of the loop's registers spilled.
    const int kcEnd = kCausal && kKeyTiles > 1 && i0 == j0 ? 4 : kKeys / 16;
    constexpr int kPart = kTiles > 4 ? 4 : kTiles;
    const int i = g % 4;
#pragma unroll
    for (int part = 0; part < kTiles; part += kPart) {
      float acc[kPart][4];
      zero(acc);
#pragma unroll
      for (int kc = 0; kc < kKeys / 16; ++kc) {
        if (kc >= kcEnd)
          break;
        // kᵀ's rows [16 rowBlock, +16) over keys [16kc, +16): an A fragment
        // by ldmatrix.trans of k's block, its matrices in blockB's order so
        // that the transposes arrive as a0, a1, a2, a3 (in block's, as a0,
        // a2, a1, a3, which ptxas moved into place).
        u32 f[4], kta[4];
        loadMatricesTransposed(
            kta, sm.k[kc / 4].blockB(kc % 4 * 16, rowBlock * 16));
#pragma unroll
        for (int np = 0; np < kPart / 2; ++np) {
          loadMatricesTransposed(f, sm.ds[buf][kc / 4].block(
                                        kc % 4 * 16,
                                        (tile0 + part) * 8 + np * 16));
          mma16816(acc[2 * np], kta, f[0], f[1]);
          mma16816(acc[2 * np + 1], kta, f[2], f[3]);
        }
      }
      // acc[nt][e]: d = 16 rowBlock + g (+8 for e >= 2), query (tile0 +
      // part + nt)·8 + 2tq + (e & 1). Four lanes (g = 4a + i) swap values
      // until lane i holds query 2tq + (i & 1) at d = 16 rowBlock + 4a +
      // 8(i >> 1) + s in slot s: one 16-byte reduction instead of four.
#pragma unroll
      for (int nt = 0; nt < kPart; ++nt) {
        transposeAcrossLanes4(acc[nt], i);
        const int d = rowBlock * 16 + (g - i) + 8 * (i >> 1);
        const int row = i0 + (tile0 + part + nt) * 8 + 2 * tq + (i & 1);
        reduceAddGlobal4(dqSum + row * D + d, acc[nt]);
      }
    }
  }
  storeAcc<D, kK, false>(dk, myKey0, accK, scale, scale);
  storeAcc<D, kK, false>(dv, myKey0, accV, 1.0f, 1.0f);

  arriveAtQueryTiles<T, S, kCausal, kKeys>(arrivals, lastFor, first / 64);
  for (int t = first / 64; t < T / 64; ++t)
    if (lastFor[t]) // the same for the whole block
      writeQueryTileDq<D, kQ, 32 * kWarps>(dq + t * 64 * kQ,
                                           dqSum + t * 64 * D, scale);
}

//===----------------------------------------------------------------------===//
// Warpgroup-MMA forward (sm_90a)
//===----------------------------------------------------------------------===//

#if GPTC_WGMMA
namespace wg {

/// A 64 x D bf16 tile in shared memory as wgmma reads it without swizzling:
/// 8 x 8 core matrices of 128 contiguous bytes (8 rows of 16), the one of
/// rows [8rb, 8rb+8) and columns [8cb, 8cb+8) at (rb·D/8 + cb)·128 bytes.
/// Read as a K-major B (keys are N, the D columns K): LBO 128 bytes, SBO
/// D/8·128. Read as an N-major B (keys are K, the columns N): LBO D/8·128,
/// SBO 128.
template <int D> struct CoreTile {
  static constexpr u32 kRowGroupBytes = D / 8 * 128;
  alignas(128) unsigned short data[64 * D];

  /// Chunk c of 16 bytes is row 8·(c / D) + c % 8, columns 8·(c / 8 % (D/8))
  /// on, and lands at byte 16c: the 8 lanes of a quarter warp fill one core
  /// matrix (no bank conflict) and a warp reads 64 contiguous bytes of 8 rows.
  static __device__ __forceinline__ void chunk(int c, int &row, int &col) {
    row = 8 * (c / D) + c % 8;
    col = 8 * (c / 8 % (D / 8));
  }
  /// Starts the copies of rows [row0, row0 + 64) of D bf16 elements,
  /// `stride` apart from `src` on (HeadRows), 16 bytes a thread with
  /// cp.async: in flight until the caller commits and waits for them.
  /// kThreads is the block's size (blockDim.x). A thread's chunks are
  /// kThreads apart (a multiple of D): the same columns, rows 8 · kThreads
  /// / D apart, so the unrolled copies' addresses differ by constants
  /// (kUnrolled as in mma::Tile::loadAsync).
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsync(const bf16 *src, i64 stride,
                                            i64 row0) {
    loadAsyncFrom<kThreads, kUnrolled>(
        src + row0 * stride + threadChunkOffset(stride), stride);
  }
  /// Where this thread's first chunk of a tile starts, in elements from
  /// the tile's first row (WalkedRows keeps it through a loop).
  static __device__ __forceinline__ i64 threadChunkOffset(i64 stride) {
    int r, col;
    chunk(threadIdx.x, r, col);
    return r * stride + col;
  }
  /// loadAsync from this thread's first chunk `from` on.
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsyncFrom(const bf16 *from, i64 stride) {
    constexpr int kChunks = 64 * D / 8, kRowStep = 8 * kThreads / D;
    static_assert(kThreads % D == 0, "a thread's chunks share columns");
    const u32 to = sharedAddress(data) + 16 * threadIdx.x;
#pragma unroll(kUnrolled ? 8 : 1)
    for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i)
      if (kChunks % kThreads == 0 || threadIdx.x + i * kThreads < kChunks)
        copyAsync16(to + 16 * i * kThreads, from + i * kRowStep * stride);
  }
  /// This lane's row address for loadMatrices of the 16 x 16 block at (r0,
  /// c0), matrices in mma::Tile::block's order (an A fragment).
  __device__ __forceinline__ u32 block(int r0, int c0) const {
    const int lane = threadIdx.x % 32, m = lane / 8;
    const int r = r0 + 8 * (m % 2) + lane % 8, c = c0 + 8 * (m / 2);
    return sharedAddress(data) + (r / 8) * kRowGroupBytes + (c / 8) * 128 +
           (r % 8) * 16;
  }
  /// B = this tileᵀ (keys along N), columns [16kc, 16kc+16) as K, rows
  /// from n0 (a multiple of 8) on as N.
  __device__ __forceinline__ unsigned long long keysAlongN(int kc,
                                                           int n0 = 0) const {
    return wgmmaDescriptorPlus(
        wgmmaDescriptor(sharedAddress(data), 128, kRowGroupBytes),
        n0 / 8 * kRowGroupBytes + kc * 256);
  }
  /// B = this tile (keys along K), rows [16kc, 16kc+16).
  __device__ __forceinline__ unsigned long long keysAlongK(int kc) const {
    return wgmmaDescriptorPlus(
        wgmmaDescriptor(sharedAddress(data), kRowGroupBytes, 128),
        kc * 2 * kRowGroupBytes);
  }
  /// A = this tile, its 64 rows as M and columns [16kc, 16kc+16) as K: a
  /// K-major A is laid out as a K-major B, so keysAlongN's descriptor.
  __device__ __forceinline__ unsigned long long rowsAlongM(int kc) const {
    return keysAlongN(kc);
  }
};

/// A 64 x 64 bf16 tile as CUTLASS and FlashAttention-3 lay one out for
/// wgmma: rows of 128 bytes (64 elements), the 16-byte chunk q of row r
/// at chunk q ^ (r % 8) (SWIZZLE_128B), 1,024-byte aligned. On an H200
/// the wgmma forward with k and v in these took 119.9 µs at GPT-2's sizes,
/// 213.9 with both in CoreTiles (155.0 with k alone swizzled), though the
/// tensor cores alone read either layout as fast (docs/benchmarks.md,
/// twenty-seventh session).
template <int D> struct SwizzledTile {
  static_assert(D == 64, "rows of 128 bytes");
  alignas(1024) unsigned short data[64 * D];

  /// Starts the copies of rows [row0, row0 + 64), `stride` apart from
  /// `src` on, 16 bytes a thread with cp.async (8 threads a row): in
  /// flight until the caller commits and waits for them. kThreads is the
  /// block's size.
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsync(const bf16 *src, i64 stride,
                                            i64 row0) {
    loadAsyncFrom<kThreads>(src + row0 * stride + threadChunkOffset(stride),
                            stride);
  }
  /// Where this thread's first chunk of a tile starts, in elements from
  /// the tile's first row (WalkedRows keeps it through a loop).
  static __device__ __forceinline__ i64 threadChunkOffset(i64 stride) {
    return threadIdx.x / 8 * stride + threadIdx.x % 8 * 8;
  }
  /// loadAsync from this thread's first chunk `from` on.
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsyncFrom(const bf16 *from, i64 stride) {
    constexpr int kChunks = 64 * D / 8;
    static_assert(kChunks % kThreads == 0, "whole rounds");
    const int r = threadIdx.x / 8, q = threadIdx.x % 8;
    const u32 to = sharedAddress(data) + r * 128 + ((q ^ (r % 8)) * 16);
    // A thread's rows are kThreads / 8 apart, a multiple of 8: the same
    // swizzle, addresses a constant apart.
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i)
      copyAsync16(to + i * (kThreads / 8) * 128,
                  from + i * (kThreads / 8) * stride);
  }
  /// This lane's row address for loadMatrices of the 16 x 16 block at (r0,
  /// c0), as CoreTile::block: a matrix's 8 rows hold its columns in 8
  /// different chunks, so its reads meet no bank twice.
  __device__ __forceinline__ u32 block(int r0, int c0) const {
    const int lane = threadIdx.x % 32, m = lane / 8;
    const int r = r0 + 8 * (m % 2) + lane % 8, c = c0 + 8 * (m / 2);
    return sharedAddress(data) + r * 128 + ((c / 8) ^ (r % 8)) * 16;
  }
  /// B = this tileᵀ (keys along N), columns [16kc, 16kc+16) as K and rows
  /// from n0 (a multiple of 8, so the swizzle is unchanged) on as N: the
  /// start 32 bytes a k16 step into the rows, 1,024 bytes a group of 8.
  __device__ __forceinline__ unsigned long long keysAlongN(int kc,
                                                           int n0 = 0) const {
    return wgmmaDescriptorPlus(
        wgmmaDescriptor(sharedAddress(data), 16, 1024, true),
        n0 * 128 + kc * 32);
  }
  /// B = this tile (keys along K, N-major), rows [16kc, 16kc+16): one
  /// swizzle atom spans the 64 columns.
  __device__ __forceinline__ unsigned long long keysAlongK(int kc) const {
    return wgmmaDescriptorPlus(
        wgmmaDescriptor(sharedAddress(data), 16, 1024, true), kc * 2048);
  }
  /// A = this tile, its 64 rows as M and columns [16kc, 16kc+16) as K (as
  /// CoreTile::rowsAlongM).
  __device__ __forceinline__ unsigned long long rowsAlongM(int kc) const {
    return keysAlongN(kc);
  }
};

/// The tiles the wgmma kernels read as B (the forwards' k and v, every
/// operand tile of the backwards): swizzled where D is 64, core matrices
/// where it is 32 (rows of 64 bytes).
template <int D> struct OperandTileOf { using type = CoreTile<D>; };
template <> struct OperandTileOf<64> { using type = SwizzledTile<64>; };
template <int D> using OperandTile = typename OperandTileOf<D>::type;

/// A thread's copies of the 64-row tiles a loop walks down one operand:
/// its first chunk's address, worked out once and stepped a tile at a
/// time, and the same rows of a twin operand (v beside k) a fixed distance
/// on. Given a tile's first row, ptxas computed (row0 + r)·stride + col
/// again every trip, in 64 bits: 15 to 20 instructions a trip of the
/// wgmma-overlap forward's and wgmma-split's dk/dv loops (nvdisasm).
template <class Tile, int kThreads> struct WalkedRows {
  const bf16 *from; // this thread's first chunk of the tile at the cursor
  i64 stride;
  __device__ __forceinline__ WalkedRows(const bf16 *src, i64 stride, i64 row0)
      : from(src + row0 * stride + Tile::threadChunkOffset(stride)),
        stride(stride) {}
  /// The cursor `rows` rows on (back, if negative).
  __device__ __forceinline__ void step(int rows) { from += rows * stride; }
  /// Starts the copies of the tile at the cursor into t (not committed).
  __device__ __forceinline__ void load(Tile &t) const {
    t.template loadAsyncFrom<kThreads>(from, stride);
  }
  /// Starts the copies of the twin's tile, `bytes` (twinBytes) after this
  /// operand's, into t.
  __device__ __forceinline__ void loadTwin(Tile &t, i64 bytes) const {
    t.template loadAsyncFrom<kThreads>(
        reinterpret_cast<const bf16 *>(
            reinterpret_cast<unsigned long long>(from) + bytes),
        stride);
  }
  /// The distance from operand a to its twin b, in bytes (as integers:
  /// they may be different buffers).
  static __device__ __forceinline__ i64 twinBytes(const bf16 *a,
                                                  const bf16 *b) {
    return i64(reinterpret_cast<unsigned long long>(b) -
               reinterpret_cast<unsigned long long>(a));
  }
};

/// The block's dynamic shared memory as a T, from its first alignof(T)
/// boundary on: it is only 16-byte aligned, and a swizzled tile's pattern
/// follows the address bits. Its launches ask for alignof(T) - 16 bytes
/// more than sizeof(T) (EmitTemplates.cpp). The pointer is the array's
/// plus a pad, so the compiler still knows it for shared memory: rounded
/// as an integer it did not, and the kernels' plain reads of their row
/// terms were generic loads (LD, not LDS: 28 in wgmma-split-ss).
template <class T> __device__ __forceinline__ T &dynamicSharedAs() {
  extern __shared__ uint4 gptcDynamicShared[];
  char *base = reinterpret_cast<char *>(gptcDynamicShared);
  const unsigned long long pad =
      (0 - reinterpret_cast<unsigned long long>(base)) & (alignof(T) - 1);
  return *reinterpret_cast<T *>(base + pad);
}

} // namespace wg

/// The query tiles a wgmma backward's dk/dv loop walks: q's rows and
/// dout's (wg::WalkedRows, each with its own stride), and their row terms.
template <int D, class LQ, class LO> struct WalkedQueryTiles {
  wg::WalkedRows<wg::OperandTile<D>, 128> q, dout;
  __device__ __forceinline__ WalkedQueryTiles(const bf16 *q, const bf16 *dout,
                                              int i0)
      : q(q, LQ::kRowStride, i0), dout(dout, LO::kRowStride, i0) {}
  /// The cursors `rows` query rows on (back, if negative).
  __device__ __forceinline__ void step(int rows) {
    q.step(rows);
    dout.step(rows);
  }
  /// Starts the copies of the tile at the cursors (its first query i0), as
  /// loadQueryTileAsync: not committed.
  __device__ __forceinline__ void load(wg::OperandTile<D> &sQ,
                                       wg::OperandTile<D> &sDout, float *sLse,
                                       float *sDot, const float *lse,
                                       const float *delta, int i0) const {
    q.load(sQ);
    dout.load(sDout);
    loadRowTermsAsync(sLse, sDot, lse, delta, i0);
  }
};

/// Loads the A fragments of this warp's 16 rows (16 warp.. of its
/// warpgroup) of tile `t`, columns 16kc.. as fragment kc, which a wgmma
/// kernel holds through its loop: a forward's q, a backward key tile
/// block's k and v, a query tile block's q and dout; loaded on the loop's
/// first tile, after its barrier. ptxas 13.0 once gave the probabilities'
/// A fragments the registers of the wgmma forward's held q (78e8693), so
/// each held array is zeroed before the loop (defined on every path; the
/// forward's q held without that came out mixed up again in an
/// experiment, with it not), and test/cuda/held_fragments.py reads the
/// SASS of each kernel that holds A fragments: no instruction in the loop
/// may write their registers but the first tile's LDSMs. A mix-up it did
/// not see would still fail the GPU job's --check-kernels runs and, for a
/// variant, the comparison at load.
template <int N, class Tile>
__device__ __forceinline__ void wgmmaHoldRows(u32 (&a)[N][4], const Tile &t) {
  const int warp = threadIdx.x / 32 % 4;
#pragma unroll
  for (int kc = 0; kc < N; ++kc)
    loadMatrices(a[kc], t.block(warp * 16, kc * 16));
}

/// The A operand of the products a wgmma backward block repeats through
/// its loop, rows of a tile it keeps (a dk/dv block's k or v, a
/// wgmma-split dq block's q or dout): fragments held in registers from the
/// loop's first tile on (hold: wgmmaHoldRows; zeroed first), or, kShared
/// (--attention-backward=wgmma-split-ss), read by each product from the
/// tile in shared memory. The pair of them held takes 32 registers at
/// D = 64, the difference between wgmma-split's 3 blocks an SM and 4.
template <int D, bool kShared> struct KeptRows {
  const wg::OperandTile<D> &tile;
  u32 a[D / 16][4] = {};
  __device__ __forceinline__ void hold() { wgmmaHoldRows(a, tile); }
  /// d += these rows' columns [16kc, +16) · b; the first step (kc 0)
  /// starts d.
  template <int N>
  __device__ __forceinline__ void product(float (&d)[N][4], int kc,
                                          unsigned long long b) {
    wgmmaBf16<false>(d, a[kc], b, kc > 0);
  }
};
template <int D> struct KeptRows<D, true> {
  const wg::OperandTile<D> &tile;
  __device__ __forceinline__ void hold() {}
  template <int N>
  __device__ __forceinline__ void product(float (&d)[N][4], int kc,
                                          unsigned long long b) {
    wgmmaBf16<false>(d, tile.rowsAlongM(kc), b, kc > 0);
  }
};
/// wgmmaFence before a batch of two products on kept rows: into d with
/// x's, into d2 with y's.
template <int D, int N, int N2>
__device__ __forceinline__ void wgmmaFenceKept(float (&d)[N][4],
                                               KeptRows<D, false> &x,
                                               float (&d2)[N2][4],
                                               KeptRows<D, false> &y) {
  wgmmaFence(d, x.a, d2, y.a);
}
template <int D, int N, int N2>
__device__ __forceinline__ void wgmmaFenceKept(float (&d)[N][4],
                                               KeptRows<D, true> &,
                                               float (&d2)[N2][4],
                                               KeptRows<D, true> &) {
  wgmmaFence(d, d2);
}

/// attentionForwardMma with both products on warpgroup MMA: each 4 warps
/// are one warpgroup, of 64 queries, and each product is one batch of D/16
/// (scores) or 4 (output) wgmma instructions on the 64 rows, B read from
/// shared memory directly (no ldmatrix). q, the probabilities and the
/// softmax stay as in attentionForwardMma, in the same fragment layout. D
/// is 32 or 64. kGroups warpgroups a block (--attention-forward=wgmma128:
/// 2, 128 queries) share each key tile's copies: a tile comes from L2 once
/// for 128 queries rather than 64. At GPT-2's sizes the one-warpgroup
/// kernel's copies move 428 MB from L2 a launch, 3.7 TB/s at its 116.5 µs
/// on an H200.
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          int kGroups = 1, typename TO>
__device__ void attentionForwardWgmma(const bf16 *q, const bf16 *k,
                                      const bf16 *v, TO *out, float *lse,
                                      float scale) {
  static_assert(D == 32 || D == 64, "wgmma n is 32 or 64 here");
  static_assert(kGroups == 1 || kGroups == 2, "64 or 128 queries a block");
  static_assert(T % (64 * kGroups) == 0, "whole blocks of queries");
  using namespace mma;
  constexpr int kThreads = 128 * kGroups;
  // q keeps its own tile, and its A fragments are loaded on the first key
  // tile and held, zeroed before the loop. Loaded once before the loop
  // and held, ptxas 13.0 gave the probabilities' A fragments the same
  // registers at D=64, so from the second key tile on wgmma multiplied k
  // by the last tile's probabilities instead of q (an H100 saw it, 78e8693;
  // they were then loaded again each tile: 4 ldmatrix.x4 a warp and 8 KB
  // of shared-memory reads a tile). Defined on every path, as here, the
  // SASS keeps them (wgmmaHoldRows).
  __shared__ wg::CoreTile<D> sQ[kGroups];
  __shared__ wg::OperandTile<D> sK[2], sV[2];
  const BlockWork work = blockWork();
  const i64 h = work.head;
  constexpr i64 kQ = LQ::kRowStride;
  // The block's queries from blockRow0 on, this warpgroup's from i0.
  const int blockRow0 = (T / (64 * kGroups) - 1 - work.rank) * 64 * kGroups;
  const int group = threadIdx.x / 128, i0 = blockRow0 + 64 * group;
  const int warp = threadIdx.x / 32 % 4, g = threadIdx.x % 32 / 4;

  // q joins the first key tile's group (committed by loadKeyTileAsync) and
  // is read after the loop's first wait and barrier.
#pragma unroll
  for (int t = 0; t < kGroups; ++t)
    sQ[t].template loadAsync<kThreads>(q + LQ::head(h), kQ, blockRow0 + 64 * t);

  float acc[D / 8][4];
  zero(acc);
  OnlineSoftmax rows;
  const float scaleLog2 = scale * log2e();
  // The block walks the key tiles its last warpgroup needs; with the
  // causal mask the others sit out the tiles wholly in their future.
  const int keyEnd = kCausal ? blockRow0 + 64 * kGroups : S;
  loadKeyTileAsync<LK, kThreads>(sK[0], sV[0], k, v, h, 0);
  u32 qa[D / 16][4] = {};
  for (int j0 = 0, buf = 0; j0 < keyEnd; j0 += 64, buf ^= 1) {
    prefetchNextKeyTile<LK, kThreads>(sK, sV, k, v, h, j0, keyEnd, buf);
    fenceProxyAsync(); // this thread's copies, to wgmma's reads
    __syncthreads();   // and every other thread's
    // (uniform in each warpgroup, and the barriers stay outside)
    if (kGroups == 1 || !kCausal || j0 <= i0) {
      if (j0 == 0)
        wgmmaHoldRows(qa, sQ[group]);
      float s[8][4];
      wgmmaFence(s, qa);
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        wgmmaBf16<false>(s, qa[kc], sK[buf].keysAlongN(kc), kc > 0);
      wgmmaCommit();
      wgmmaWait<0>();
      wgmmaFenceOperands(s);

      rows.tile<D>(s, acc, scaleLog2, kCausal && j0 == i0, warp * 16 + g);
      u32 pa[4][4]; // the probabilities as A fragments, keys as K
#pragma unroll
      for (int kc = 0; kc < 4; ++kc)
        accToA(pa[kc], s, kc);
      wgmmaFence(acc, pa);
#pragma unroll
      for (int kc = 0; kc < 4; ++kc)
        wgmmaBf16<true>(acc, pa[kc], sV[buf].keysAlongK(kc));
      wgmmaCommit();
      wgmmaWait<0>();
      wgmmaFenceOperands(acc);
    }
    __syncthreads(); // done with this buffer before it is refilled
  }
  rows.finish<D, T, LO>(out, lse, h, i0 + warp * 16, acc);
}

/// attentionForwardWgmmaKeys128's shared memory (dynamic: 73 KB at D =
/// 64, and 1 KB to align it): q, and two buffers of a 128-key step's k and
/// v, each as two 64-key tiles.
template <int D> struct WgmmaKeys128Shared {
  wg::CoreTile<D> q;
  wg::OperandTile<D> k[2][2], v[2][2];
};

/// attentionForwardWgmma taking the keys 128 at a time
/// (--attention-forward=wgmma-k128, S a multiple of 128), as cuDNN's
/// forward tiles them (64 x 128 x 64 on an H200): each step's scores are
/// two 64-key batches committed together, one softmax over the 128 (one
/// max and sum reduction, one rescale of acc), and the output product one
/// batch of 8: half the waits, barriers and softmax rounds a key of the
/// 64-key kernel, for 32 more registers of scores (3 blocks an SM, where
/// the 64-key kernel runs 4). A causal block's last step may hold only
/// its diagonal tile: the second tile's scores are then -inf (its products
/// still run: 8 of a block's wgmma, once). Not the wgmma forward's bits
/// (the maxima move per 128 keys), the same function of the scores.
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TO>
__device__ void attentionForwardWgmmaKeys128(const bf16 *q, const bf16 *k,
                                             const bf16 *v, TO *out,
                                             float *lse, float scale) {
  static_assert(D == 32 || D == 64, "wgmma n is 32 or 64 here");
  static_assert(S % 128 == 0 && T % 64 == 0, "whole steps of keys");
  using namespace mma;
  WgmmaKeys128Shared<D> &sm = wg::dynamicSharedAs<WgmmaKeys128Shared<D>>();
  const BlockWork work = blockWork();
  const i64 h = work.head;
  constexpr i64 kQ = LQ::kRowStride;
  const int i0 = (T / 64 - 1 - work.rank) * 64;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  const int keyEnd = kCausal ? i0 + 64 : S;
  // The steps' copies walk down k's rows, v's beside them (wg::WalkedRows:
  // given a step's first row, ptxas worked out each chunk's address again
  // every step, 64-bit multiplies included). The cursor rests on a step's
  // second tile.
  wg::WalkedRows<wg::OperandTile<D>, 128> keys(k + LK::head(h), LK::kRowStride,
                                               0);
  const i64 vBytes = keys.twinBytes(k, v);
  // The step at the cursor's copies, both tiles (S is a multiple of 128,
  // so the second exists even past a causal block's keyEnd): one group.
  auto loadStep = [&](int buf) {
    keys.load(sm.k[buf][0]);
    keys.loadTwin(sm.v[buf][0], vBytes);
    keys.step(64);
    keys.load(sm.k[buf][1]);
    keys.loadTwin(sm.v[buf][1], vBytes);
    commitCopies();
  };
  // q joins the first step's group.
  sm.q.template loadAsync<128>(q + LQ::head(h), kQ, i0);
  loadStep(0);
  float acc[D / 8][4];
  zero(acc);
  OnlineSoftmax rows;
  const float scaleLog2 = scale * log2e();
  u32 qa[D / 16][4] = {}; // held from the first step on (wgmmaHoldRows)
  for (int j0 = 0, buf = 0; j0 < keyEnd; j0 += 128, buf ^= 1) {
    if (j0 + 128 < keyEnd) {
      keys.step(64);
      loadStep(buf ^ 1);
      waitCopies<1>(); // this step's copies, not the next one's
    } else {
      waitCopies<0>();
    }
    fenceProxyAsync(); // this thread's copies, to wgmma's reads
    __syncthreads();   // and every other thread's
    if (j0 == 0)
      wgmmaHoldRows(qa, sm.q);
    // (Both products always: a product under a branch made ptxas inject a
    // warpgroup.arrive, C7519. Where the second tile lies wholly past a
    // causal block's keys, its scores become -inf below and its
    // probabilities 0, times real, finite v.)
    const bool both = j0 + 64 < keyEnd; // (uniform in the block)
    float s[16][4]; // keys j0 + 8nt.. : the first tile's, then the second's
    float(&s0)[8][4] = *reinterpret_cast<float(*)[8][4]>(&s[0]);
    float(&s1)[8][4] = *reinterpret_cast<float(*)[8][4]>(&s[8]);
    wgmmaFence(s0, qa, s1, qa);
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
      wgmmaBf16<false>(s0, qa[kc], sm.k[buf][0].keysAlongN(kc), kc > 0);
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
      wgmmaBf16<false>(s1, qa[kc], sm.k[buf][1].keysAlongN(kc), kc > 0);
    wgmmaCommit();
    wgmmaWait<0>();
    wgmmaFenceOperands(s);
    // The diagonal: the first tile (then there is no second) or the second.
    const int row = warp * 16 + g;
    if (kCausal && !both) {
      maskFuture<false>(s0, row, GPTC_NEG_INF);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        s1[nt][0] = s1[nt][1] = s1[nt][2] = s1[nt][3] = GPTC_NEG_INF;
    } else if (kCausal && j0 + 64 == i0) {
      maskFuture<false>(s1, row, GPTC_NEG_INF);
    }
    float corrLo, corrHi;
    if (rows.probabilities(s, scaleLog2, false, row, corrLo, corrHi))
      rows.rescale<D>(acc, corrLo, corrHi);
    u32 pa[8][4]; // the probabilities as A fragments, keys as K
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      accToA(pa[kc], s0, kc);
      accToA(pa[4 + kc], s1, kc);
    }
    wgmmaFence(acc, pa);
#pragma unroll
    for (int kc = 0; kc < 8; ++kc)
      wgmmaBf16<true>(acc, pa[kc], sm.v[buf][kc / 4].keysAlongK(kc % 4));
    wgmmaCommit();
    wgmmaWait<0>();
    wgmmaFenceOperands(acc);
    __syncthreads(); // done with this buffer before it is refilled
  }
  rows.finish<D, T, LO>(out, lse, h, i0 + warp * 16, acc);
}

/// attentionForwardWgmma with FlashAttention-3's overlap within a
/// warpgroup (--attention-forward=wgmma-overlap): key tile t's scores are
/// one commit group and tile t - 1's output product (acc += P·V) the next,
/// so the softmax of tile t runs while that product is in flight; acc is
/// rescaled once it lands. The same operations in the same order as
/// attentionForwardWgmma: the same bits. Tile t's copies are started one
/// tile ahead, and while they fill, tile t - 1's V is still being read:
/// three V buffers (48 KB of shared memory at D = 64, against 40), one
/// barrier a tile (against two).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TO>
__device__ void attentionForwardWgmmaOverlap(const bf16 *q, const bf16 *k,
                                             const bf16 *v, TO *out,
                                             float *lse, float scale) {
  static_assert(D == 32 || D == 64, "wgmma n is 32 or 64 here");
  using namespace mma;
  // q's A fragments are loaded with the first tile and held (the loop's
  // SASS keeps their registers: see attentionForwardWgmma).
  __shared__ wg::CoreTile<D> sQ;
  __shared__ wg::OperandTile<D> sK[2], sV[3];
  const BlockWork work = blockWork();
  const i64 h = work.head;
  constexpr i64 kQ = LQ::kRowStride;
  const int i0 = (T / 64 - 1 - work.rank) * 64, warp = threadIdx.x / 32;
  const int g = threadIdx.x % 32 / 4;

  sQ.template loadAsync<128>(q + LQ::head(h), kQ, i0);
  float acc[D / 8][4];
  zero(acc);
  OnlineSoftmax rows;
  const float scaleLog2 = scale * log2e();
  const int keyEnd = kCausal ? i0 + 64 : S;
  // The key tiles' copies walk down k's rows, v's beside them.
  wg::WalkedRows<wg::OperandTile<D>, 128> keys(k + LK::head(h), LK::kRowStride,
                                               0);
  const i64 vBytes = keys.twinBytes(k, v);
  keys.load(sK[0]);
  keys.loadTwin(sV[0], vBytes);
  commitCopies();
  // Tile j0's copies landed (the only ones in flight) and are seen by
  // wgmma; then the next tile's start. Before the barrier every thread
  // waited for the last tile's scores and for the output product before
  // it: the buffers those read are the ones the next copies take.
  auto nextTile = [&](int j0, int kb, int vb) {
    waitCopies<0>();
    fenceProxyAsync();
    __syncthreads();
    if (j0 + 64 < keyEnd) {
      keys.step(64);
      keys.load(sK[kb ^ 1]);
      keys.loadTwin(sV[vb == 2 ? 0 : vb + 1], vBytes);
      commitCopies();
    }
  };
  // q's A fragments (loaded with the first tile, held), and the scores of
  // the key tile in sK[kb] started, as the first of this batch's commit
  // groups.
  u32 qa[D / 16][4];
  auto scores = [&](float (&s)[8][4], int kb) {
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
      wgmmaBf16<false>(s, qa[kc], sK[kb].keysAlongN(kc), kc > 0);
    wgmmaCommit();
  };
  // The first tile alone (acc is zero: nothing to rescale), so that the
  // loop's batches have no branch: one between wgmma.fence and a wgmma
  // makes ptxas add a warpgroup.arrive (C7519).
  float s[8][4];
  nextTile(0, 0, 0);
  wgmmaHoldRows(qa, sQ);
  wgmmaFence(s, qa);
  scores(s, 0);
  wgmmaWait<0>();
  wgmmaFenceOperands(s);
  float corrLo, corrHi;
  rows.probabilities(s, scaleLog2, kCausal && i0 == 0, warp * 16 + g, corrLo,
                     corrHi);
  u32 pa[4][4]; // the last tile's probabilities: A of its output product
#pragma unroll
  for (int kc = 0; kc < 4; ++kc)
    accToA(pa[kc], s, kc);
  int vLast = 0; // the last tile's V buffer
  for (int j0 = 64, kb = 1, vb = 1; j0 < keyEnd; j0 += 64) {
    nextTile(j0, kb, vb);
    wgmmaFence(s, qa, acc, pa);
    scores(s, kb);
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      wgmmaBf16<true>(acc, pa[kc], sV[vLast].keysAlongK(kc));
    wgmmaCommit();
    wgmmaWait<1>(); // the scores; the output product stays in flight
    wgmmaFenceOperands(s);
    const bool moved = rows.probabilities(s, scaleLog2, kCausal && j0 == i0,
                                          warp * 16 + g, corrLo, corrHi);
    // The last tile's output product lands after the softmax: ptxas puts a
    // wgmma.wait_group at the top of its basic block (nvdisasm), so the
    // wait opens the blocks after the branch on `moved`, not the softmax's.
    // With the wait in the softmax's block, ptxas had put it before the
    // maxima, and the product ran under nothing. (A second wait on the
    // rare moved tiles, for the rescale, which ptxas keeps a branch.)
    if (moved) {
      wgmmaWait<0, 1>();
      wgmmaFenceOperands(acc);
      rows.rescale<D>(acc, corrLo, corrHi);
    }
    wgmmaWait<0>();
    wgmmaFenceOperands(acc);
    wgmmaFenceOperands(pa);
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      accToA(pa[kc], s, kc);
    vLast = vb;
    kb ^= 1;
    vb = vb == 2 ? 0 : vb + 1;
  }
  wgmmaFence(acc, pa);
#pragma unroll
  for (int kc = 0; kc < 4; ++kc)
    wgmmaBf16<true>(acc, pa[kc], sV[vLast].keysAlongK(kc));
  wgmmaCommit();
  wgmmaWait<0>();
  wgmmaFenceOperands(acc);
  rows.finish<D, T, LO>(out, lse, h, i0 + warp * 16, acc);
}

/// Half `half` (32 queries) of query tile sQ, sDout (its row terms tileLse
/// and tileDot) for a wgmma backward block's 64 keys, warp w's 16w.. (their
/// k and v rows as A, kRows and vRows), as keyRowsOnQueries does it on
/// mma.sync:
///   Sᵀ = k·qᵀ and dPᵀ = v·doutᵀ (two commit groups of one batch: P is
///   computed while dPᵀ's products run), P and dS in registers (rows keys,
///   columns queries 32 half + 8nt + 2tq (+ 1) of the tile), dS handed to
///   withDs (the atomic kernel stores it for its dq product);
///   dv += Pᵀ·dout and dk += dSᵀ·q (Pᵀ and dSᵀ as A fragments straight from
///   the accumulators, dout and q read along K), one more group, in flight
///   on return.
/// The caller loads their fragments once a block and holds them
/// (KeptRows::hold), or has wgmma read them from shared memory (kShared):
/// loaded again for each half, as they were, they cost 16 ldmatrix.x4 a
/// warp and 32 KB of shared-memory reads a query tile, as much as the
/// tile's wgmma read as B. The first half's dv and dk land before the
/// second half's batch, or (kOverlap) with its Sᵀ.
template <int D, bool kOverlap, bool kShared, class WithDs>
__device__ __forceinline__ void
wgmmaKeysOnQueryHalf(float (&accK)[D / 8][4], float (&accV)[D / 8][4],
                     KeptRows<D, kShared> &kRows, KeptRows<D, kShared> &vRows,
                     const wg::OperandTile<D> &sQ,
                     const wg::OperandTile<D> &sDout,
                     const float *tileLse, const float *tileDot,
                     float scaleLog2, bool diagonal, int half,
                     WithDs &&withDs) {
  using namespace mma;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  const int tq = threadIdx.x % 4;
  if (half == 1 && !kOverlap) { // the first half's dv and dk
    wgmmaWait<0>();
    wgmmaFenceOperands(accV);
    wgmmaFenceOperands(accK);
  }
  // The half's lse terms, read before its products are issued: ptxas
  // keeps a load below a wgmma wait, and read after it, their shared-memory
  // latency (and the multiply) lay between Sᵀ landing and its
  // exponentials. (delta's are read after the wait, under the
  // exponentials: both before took up to 8 registers more, to 168.) A
  // thread's columns come in pairs (c, c + 1): each term is one 8-byte
  // load (the tiles' terms are 16-byte aligned), where ptxas made two.
  float lseLog2[4][2]; // -lse·log2(e)
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const float2 l = *reinterpret_cast<const float2 *>(tileLse + 32 * half +
                                                       nt * 8 + 2 * tq);
    lseLog2[nt][0] = -log2e() * l.x;
    lseLog2[nt][1] = -log2e() * l.y;
  }
  float p[4][4], ds[4][4]; // (the products' first steps start them)
  wgmmaFenceKept(p, kRows, ds, vRows);
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc)
    kRows.product(p, kc, sQ.keysAlongN(kc, 32 * half));
  wgmmaCommit();
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc)
    vRows.product(ds, kc, sDout.keysAlongN(kc, 32 * half));
  wgmmaCommit();
  wgmmaWait<1>(); // Sᵀ (with kOverlap, also the first half's dv and dk)
  wgmmaFenceOperands(p);
  if (half == 1 && kOverlap) {
    wgmmaFenceOperands(accV);
    wgmmaFenceOperands(accK);
  }
  float2 dot[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
    dot[nt] = *reinterpret_cast<const float2 *>(tileDot + 32 * half + nt * 8 +
                                                2 * tq);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      p[nt][e] = fastExp2(fmaf(p[nt][e], scaleLog2, lseLog2[nt][e & 1]));
  if (diagonal)
    maskFuture<true, 4>(p, warp * 16 + g, 0.0f, 4 * half);
  wgmmaWait<0>();
  wgmmaFenceOperands(ds);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      ds[nt][e] = p[nt][e] * (ds[nt][e] - (e & 1 ? dot[nt].y : dot[nt].x));
  withDs(ds);
  // Pᵀ and dSᵀ as A fragments, this half's queries as K.
  u32 pa[2][4], dsa[2][4];
#pragma unroll
  for (int kc = 0; kc < 2; ++kc) {
    accToA(pa[kc], p, kc);
    accToA(dsa[kc], ds, kc);
  }
  wgmmaFence(accV, pa, accK, dsa);
#pragma unroll
  for (int kc = 0; kc < 2; ++kc)
    wgmmaBf16<true>(accV, pa[kc], sDout.keysAlongK(2 * half + kc));
#pragma unroll
  for (int kc = 0; kc < 2; ++kc)
    wgmmaBf16<true>(accK, dsa[kc], sQ.keysAlongK(2 * half + kc));
  wgmmaCommit();
}

/// The shared memory of attentionBackwardWgmma, dynamic (58 KB at D = 64,
/// and 1 KB to align it: wg::dynamicSharedAs): the query tiles it walks
/// (q, dout and their row terms) double-buffered, the block's k and v, all
/// as wgmma reads them, and the tile's dSᵀ (rows keys) for the dq
/// product's A fragments, which ldmatrix.trans reads.
template <int D> struct WgmmaBackwardShared {
  wg::OperandTile<D> q[2], dout[2], k, v;
  mma::Tile<64> ds;
  alignas(16) float lse[2][64], dot[2][64]; // cp.async destinations
};

/// With kBulk (--attention-backward=wgmma-bulk): also 8 KB where a query
/// tile's dq share (columns 0..31) waits for its bulk reduction; at D = 64
/// columns 32..63 wait in the dSᵀ tile, free by then (stageDqShare).
template <int D> struct WgmmaBulkBackwardShared : WgmmaBackwardShared<D> {
  alignas(16) float dqStage[2048];
};
template <int D, bool kBulk> struct WgmmaBackwardSharedOf {
  using type = WgmmaBackwardShared<D>;
};
template <int D> struct WgmmaBackwardSharedOf<D, true> {
  using type = WgmmaBulkBackwardShared<D>;
};

/// Where a warpgroup's dq accumulator element (thread t's fragment nt,
/// element e) lies in a query tile's 64 x D float32 sums under
/// --attention-backward=wgmma-bulk: 8 KB parts of 32 columns, each as four
/// n-tiles of 128 threads' four floats. Each thread's four are one 16-byte
/// access, and a warp's 32 are 512 consecutive bytes: shared memory at the
/// fewest wavefronts, and one bulk reduction a part. (The sums are the
/// kernel's own scratch; only its last blocks read them.)
__device__ __forceinline__ int bulkDqIndex(int t, int nt) {
  return (nt / 4) * 2048 + ((nt % 4) * 128 + t) * 4;
}

/// Stages this thread's dq share for the bulk reductions: part 0 in
/// `stage`, part 1 (D = 64) in `second`.
template <int D>
__device__ __forceinline__ void stageDqShare(float *stage, float *second,
                                             const float (&acc)[D / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    const int at = bulkDqIndex(int(threadIdx.x), nt);
    storeShared4(nt < 4 ? stage + at : second + (at - 2048), acc[nt]);
  }
}

/// attentionBackwardWgmma<kBulk>'s share of a query tile's dq (its sums
/// at `tileSum`): staged (stageDqShare) once every warp has read dSᵀ, whose
/// tile takes half of it, then handed to the TMA unit by thread 0 in two
/// groups, the part in dSᵀ's tile first: the next tile writes dSᵀ soon
/// after its first barrier, before which thread 0 waits for that group
/// alone (bulkWaitRead<1>), and the stage only here, after a tile's work.
///
/// With `turns` (--attention-backward=wgmma-ordered), the block first waits
/// until `turn` blocks have counted their shares of these sums in there
/// (countDqShare; `reached`: countReached's, earlier in the tile): the
/// adds to each sum then come in one order every run.
template <int D, class Shared>
__device__ __forceinline__ void
addDqShareInBulk(Shared &sm, float *tileSum, const float (&dqAcc)[D / 8][4],
                 const unsigned *turns = nullptr, unsigned turn = 0,
                 bool reached = false) {
  if (threadIdx.x == 0)
    bulkWaitRead<0>(); // the last tile's part in the stage read
  __syncthreads();     // and every warp's dSᵀ reads done: both are free
  stageDqShare<D>(sm.dqStage, reinterpret_cast<float *>(sm.ds.data), dqAcc);
  fenceProxyAsync(); // to the bulk reductions' reads
  __syncthreads();
  if (turns)
    waitForCount(turns, turn, reached); // (every warp: see waitForCount)
  if (threadIdx.x == 0) {
    if (turns) { // their sums, before this thread's adds
      __threadfence();
      fenceProxyAsyncGlobal();
    }
    if (D == 64) {
      bulkReduceAdd(tileSum + 2048, sharedAddress(sm.ds.data), 8192);
      bulkCommit();
    }
    bulkReduceAdd(tileSum, sharedAddress(sm.dqStage), 8192);
    bulkCommit();
  }
}

/// wgmma-ordered's count of a tile's dq share, by the thread that handed
/// it to the TMA unit (addDqShareInBulk): once its bulk reductions have
/// added it, the next block in the sums' order may add its own.
__device__ __forceinline__ void countDqShare(unsigned *turns) {
  bulkWait<0>();
  fenceProxyAsyncGlobal(); // the sums, before the count that says so
  __threadfence();
  atomicAdd(turns, 1u);
}

/// countDqShare of a block's last share, after its loop: past a barrier,
/// so that every warp has seen its turn come before the count moves on
/// (a warp still polling would find the count past its turn, which the
/// device's wait allows and the emulation, whose counts stop at the turns
/// waited for, reports).
__device__ __forceinline__ void countLastDqShare(unsigned *turns) {
  __syncthreads();
  if (threadIdx.x == 0 && turns)
    countDqShare(turns);
}

/// attentionBackwardWgmma<kBulk>'s last block for a query tile: the sums
/// (bulkDqIndex's order; kCopies of them, 64 x D floats apart, added in
/// that order) read at L2 by the threads whose fragments they are,
/// dq = scale · them stored as dk and dv are (rows row0 + 16 warp..), and
/// the sums zeroed for the next launch.
template <int D, i64 kQ, int kCopies, typename TDQ>
__device__ __noinline__ void
writeQueryTileDqFromShares(TDQ *dq, i64 row0, float *dqSum, float scale) {
  float acc[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
    load4AtL2(dqSum + bulkDqIndex(int(threadIdx.x), nt), acc[nt]);
#pragma unroll
  for (int c = 1; c < kCopies; ++c)
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      float more[4];
      load4AtL2(dqSum + c * 64 * D + bulkDqIndex(int(threadIdx.x), nt), more);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[nt][e] += more[e];
    }
  const float zeros[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int c = 0; c < kCopies; ++c)
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      store4(dqSum + c * 64 * D + bulkDqIndex(int(threadIdx.x), nt), zeros);
  mma::storeAcc<D, kQ>(dq, row0 + threadIdx.x / 32 * 16, acc, scale, scale);
}

/// attentionBackwardAtomic with every product on warpgroup MMA: one block
/// (one warpgroup) a key tile of 64, warp w's keys 16w..; q's and dout's
/// tiles are wgmma's B, read from shared memory. A query tile in halves of
/// 32 queries (as the mma.sync kernels take it: the whole tile's scores
/// and dP on top of both accumulators would not fit 168 registers), each
/// wgmmaKeysOnQueryHalf (Sᵀ and dPᵀ, P and dS, dv and dk), which also
/// stores dSᵀ to shared memory; then dq's share over the block's keys,
/// dS·k, with dS's A fragments by ldmatrix.trans of dSᵀ, added to dqSum
/// with atomics, and the last block of a query tile writes its dq (as the
/// atomic kernel does). The second half's dv and dk land with the dq
/// product, under the barrier that makes dSᵀ whole. At 3 blocks an SM
/// there are not the registers to overlap more (docs/cuda-kernels.md).
/// kOverlap (at 2 blocks an SM) keeps the first half's in flight through
/// the second half's Sᵀ and dPᵀ too, landing with Sᵀ.
///
/// kBulk (--attention-backward=wgmma-bulk; not with kOverlap) adds each
/// tile's dq share by two bulk reductions (FlashAttention-3's way) rather
/// than 1,024 16-byte ones from the threads: the share goes to shared
/// memory (stageDqShare), and one thread hands it to the TMA unit, which
/// sums it at L2 while the block goes on; that thread waits for the reads
/// of the part in dSᵀ's tile at the next tile's first barrier and for the
/// other's at the next share, and for the sums before the block counts
/// itself in at the query tiles. Two barriers a tile more.
///
/// kOrdered (--attention-backward=wgmma-ordered, with kBulk) adds the
/// shares in one order every run, so that dq has the same bits: a query
/// tile's sums come in two copies, key tile n adding to copy n % 2 once
/// the key tile before it there (n - 2) has counted its share in at
/// `turns` (a count a tile and copy), and the last block sums the copies
/// in order. The blocks walk their query tiles from the last down, so
/// that a head's blocks reach a tile together, each after the one before
/// it in rank order, which the GPU starts first (bench/
/// attention_order_model.py prices the waits: a few percent). Thread 0
/// waits for its share's reductions to land and counts the share after
/// the next tile's first half, when they have long since landed: waiting
/// right after issuing them would hold the block for an L2 round trip a
/// tile.
///
/// Two measurement hooks, which gptc never defines: bench/gpu/prepare.sh
/// recompiles this kernel's dump with GPTC_PROBE_NO_DQ_SUM (dq's product
/// kept, nothing added to the sums) and GPTC_PROBE_NO_DQ (neither: the
/// dk/dv work alone), so that attention_bench prices the reductions and
/// the product apart (their dq is wrong, and not checked).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          bool kOverlap, bool kBulk, bool kOrdered, typename TDQ, typename TDK,
          typename TDV>
__device__ void
attentionBackwardWgmma(const bf16 *q, const bf16 *k, const bf16 *v,
                       const float *lse, const bf16 *dout, const float *delta,
                       TDQ *dq, TDK *dk, TDV *dv, float scale, float *dqSum,
                       unsigned *arrivals, unsigned *turns) {
  static_assert(D == 32 || D == 64, "wgmma n is 32 or 64 here");
  static_assert(!(kOverlap && kBulk), "one or the other");
  static_assert(kBulk || !kOrdered, "ordered sums are bulk sums");
  constexpr int kCopies = kOrdered ? 2 : 1; // of dq's sums
  using namespace mma;
  using Shared = typename WgmmaBackwardSharedOf<D, kBulk>::type;
  Shared &sm = wg::dynamicSharedAs<Shared>();
  __shared__ u32 lastFor[T / 64]; // this block writes query tile t's dq
  const BlockWork work = blockWork();
  const i64 h = work.head;
  const int warp = threadIdx.x / 32;
  const int g = threadIdx.x % 32 / 4, tq = threadIdx.x % 4;
  backwardToHead<T, LQ, LK, LO>(h, q, k, v, lse, dout, delta, dq, dk, dv);
  dqSum += h * T * D * kCopies;
  arrivals += h * (T / 64);
  if constexpr (kOrdered)
    turns += h * (T / 64) * kCopies;
  constexpr i64 kQ = LQ::kRowStride, kK = LK::kRowStride;
  const float scaleLog2 = scale * log2e();
  const int j0 = work.rank * 64;
  const int first = kCausal ? j0 : 0;
  // The query tiles from `first` up, or (kOrdered) from the last down to it.
  const int start = kOrdered ? T - 64 : first;
  constexpr int kStep = kOrdered ? -64 : 64;
  const int copy = work.rank % kCopies;      // of the sums this block adds to
  const unsigned turn = work.rank / kCopies; // blocks before it there
  unsigned *counted = nullptr; // (kOrdered) the count of the share in flight
  // k, v and the first query tile: one group.
  sm.k.template loadAsync<128>(k, kK, j0);
  sm.v.template loadAsync<128>(v, kK, j0);
  WalkedQueryTiles<D, LQ, LO> queries(q, dout, start);
  queries.load(sm.q[0], sm.dout[0], sm.lse[0], sm.dot[0], lse, delta, start);
  commitCopies();
  float accK[D / 8][4], accV[D / 8][4];
  zero(accK);
  zero(accV);
  // k's and v's A fragments: with kOverlap (2 blocks an SM) held from the
  // first tile on; at 3 blocks an SM loaded again each half, for held,
  // they took 168 registers, spilled 24 bytes and ptxas serialized every
  // wgmma (C7512). Zeroed first: see wgmmaHoldRows.
  KeptRows<D, false> kRows{sm.k}, vRows{sm.v};
  // Two barriers a tile. The first makes the tile's copies whole (and
  // visible to wgmma), and frees dSᵀ and the last tile's buffers: every
  // thread has waited for the last tile's products, which read them, so
  // the next tile's copies start after it. The second makes dSᵀ whole.
  for (int i0 = start, buf = 0; kOrdered ? i0 >= first : i0 < T;
       i0 += kStep, buf ^= 1) {
    waitCopies<0>();   // this tile's copies, the only ones in flight
    fenceProxyAsync(); // to wgmma's reads
    if (kBulk && threadIdx.x == 0)
      bulkWaitRead<1>(); // the last tile's part in dSᵀ's tile read
    __syncthreads();   // and every other thread's
    if (kOverlap && i0 == first) { // k and v came with the first tile's group
      kRows.hold();
      vRows.hold();
    }
    if (kOrdered ? i0 + kStep >= first : i0 + kStep < T) {
      queries.step(kStep);
      queries.load(sm.q[buf ^ 1], sm.dout[buf ^ 1], sm.lse[buf ^ 1],
                   sm.dot[buf ^ 1], lse, delta, i0 + kStep);
      commitCopies();
    }
    // (kOrdered) whether the count this tile's share waits for is there,
    // first asked with the last tile's count: where the block before it is
    // long done, the wait then costs no round trip.
    bool reached = false;
    const wg::OperandTile<D> &sQ = sm.q[buf], &sDout = sm.dout[buf];
    const float *tileLse = sm.lse[buf], *tileDot = sm.dot[buf];
    const bool diagonal = kCausal && i0 == j0;
    // dSᵀ's rows of this thread, for the dq product.
    unsigned short *lo = sm.ds.data + (warp * 16 + g) * Tile<64>::kStride;
    unsigned short *hi = lo + 8 * Tile<64>::kStride;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (!kOverlap) { // (the first half's dv and dk in flight under these)
        kRows.hold();
        vRows.hold();
      }
      if (kOrdered && half == 1) {
        if (threadIdx.x == 0 && counted)
          countDqShare(counted); // the last tile's
        reached = countReached(turns + i0 / 64 * kCopies + copy, turn);
      }
      wgmmaKeysOnQueryHalf<D, kOverlap>(
          accK, accV, kRows, vRows, sQ, sDout, tileLse, tileDot, scaleLog2,
          diagonal, half, [&](const float (&ds)[4][4]) {
            // dSᵀ to shared memory as bf16.
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              const int c = 32 * half + nt * 8 + 2 * tq;
              *reinterpret_cast<u32 *>(lo + c) = packBf16(ds[nt][0], ds[nt][1]);
              *reinterpret_cast<u32 *>(hi + c) = packBf16(ds[nt][2], ds[nt][3]);
            }
          });
    }
    // (the second half's dv and dk land with dq's product)
    float dqAcc[D / 8][4];
#if !defined(GPTC_PROBE_NO_DQ)
    __syncthreads(); // dSᵀ is whole
    // dq's share: rows queries 16 warp + g (+ 8) of the tile, columns d,
    // over the block's keys. dS's A fragment of keys [16kc, +16) is the
    // transpose of dSᵀ's block, read in blockB's order so that the four
    // matrices arrive as a0, a1, a2, a3.
    u32 dsT[4][4];
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      loadMatricesTransposed(dsT[kc], sm.ds.blockB(kc * 16, warp * 16));
    wgmmaFence(dqAcc, dsT);
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      wgmmaBf16<true>(dqAcc, dsT[kc], sm.k.keysAlongK(kc), kc > 0);
    wgmmaCommit();
#else
    zero(dqAcc);
#endif
    wgmmaWait<0>(); // and the second half's dv and dk
    wgmmaFenceOperands(dqAcc);
    wgmmaFenceOperands(accV);
    wgmmaFenceOperands(accK);
    if constexpr (kOrdered) {
      counted = turns + i0 / 64 * kCopies + copy;
      addDqShareInBulk<D>(sm, dqSum + (i0 / 64 * kCopies + copy) * 64 * D,
                          dqAcc, counted, turn, reached);
      continue;
    } else if constexpr (kBulk) {
      addDqShareInBulk<D>(sm, dqSum + i0 * D, dqAcc);
      continue;
    }
    // Lanes tq and tq ^ 1 swap halves so that each holds four consecutive
    // d of one row (the even lane row g, the odd g + 8): one 16-byte
    // reduction instead of two 8-byte ones.
    const bool odd = tq & 1;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const float a = __shfl_xor_sync(0xffffffffu,
                                      odd ? dqAcc[nt][0] : dqAcc[nt][2], 1);
      const float b = __shfl_xor_sync(0xffffffffu,
                                      odd ? dqAcc[nt][1] : dqAcc[nt][3], 1);
      float x[4];
      x[0] = odd ? a : dqAcc[nt][0];
      x[1] = odd ? b : dqAcc[nt][1];
      x[2] = odd ? dqAcc[nt][2] : a;
      x[3] = odd ? dqAcc[nt][3] : b;
      const int row = i0 + warp * 16 + g + (odd ? 8 : 0);
      const int d = nt * 8 + 2 * tq - (odd ? 2 : 0);
#if defined(GPTC_PROBE_NO_DQ_SUM) || defined(GPTC_PROBE_NO_DQ)
      if (x[0] == 1.0e38f) // never: the product stays, the sums go
#endif
        reduceAddGlobal4(dqSum + row * D + d, x);
    }
  }
  storeAcc<D, kK>(dk, j0 + warp * 16, accK, scale, scale);
  storeAcc<D, kK>(dv, j0 + warp * 16, accV, 1.0f, 1.0f);

  if constexpr (kOrdered) {
    countLastDqShare(counted); // before the arrivals below
  } else if (kBulk && threadIdx.x == 0) {
    bulkWait<0>(); // every dq share summed, before the count says so
    fenceProxyAsyncGlobal();
  }
  arriveAtQueryTiles<T, S, kCausal, 64>(arrivals, lastFor, first / 64);
  for (int t = first / 64; t < T / 64; ++t)
    if (lastFor[t]) { // the same for the whole block
      if constexpr (kBulk) {
        fenceProxyAsyncGlobal(); // the other blocks' bulk sums, read
        writeQueryTileDqFromShares<D, kQ, kCopies>(
            dq, t * 64, dqSum + t * kCopies * 64 * D, scale);
        if (kOrdered && int(threadIdx.x) < kCopies) // every count is in
          turns[t * kCopies + threadIdx.x] = 0;
      } else {
        writeQueryTileDq<D, kQ, 128>(dq + t * 64 * kQ, dqSum + t * 64 * D,
                                     scale);
      }
    }
}

/// The shared memory of attentionBackwardWgmmaSplit, dynamic (49 KB at
/// D = 64, and 1 KB to align it): the two tiles a block keeps (a dq
/// block's q and dout, a dk/dv block's k and v), the two it walks,
/// double-buffered (k and v; q and dout), all as wgmma reads them, and the
/// row terms (a dq block's own in [0], a dk/dv block's walked query
/// tiles').
template <int D> struct WgmmaSplitShared {
  wg::OperandTile<D> kept[2], walked[2][2];
  alignas(16) float lse[2][64], dot[2][64]; // cp.async destinations
};

/// attentionBackwardWgmmaSplit's dq block: query tile i0's
/// dq = scale · Σ_keys dS·k, dS = P ∘ (dout·vᵀ − rowDot), walking the key
/// tiles (the causal ones up to the diagonal). Rows queries (warp w's
/// 16w..), a key tile in halves of 32 keys: S = q·kᵀ and dP = dout·vᵀ
/// (two groups: P is computed while dP's products run), then dq += dS·k
/// with dS's A fragments straight from the accumulators; q's and dout's A
/// fragments are held through the loop (wgmmaHoldRows). The first half's
/// dq product lands with the second half's S.
template <int D, int S, bool kCausal, class LQ, class LK, class LO,
          bool kShared, typename TDQ>
__device__ __forceinline__ void
wgmmaQueryTileDq(WgmmaSplitShared<D> &sm, const bf16 *q, const bf16 *k,
                 const bf16 *v, const float *lse, const bf16 *dout,
                 const float *delta, TDQ *dq, float scale, int i0) {
  using namespace mma;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  constexpr i64 kQ = LQ::kRowStride, kK = LK::kRowStride;
  const float scaleLog2 = scale * log2e();
  const wg::OperandTile<D> &sQ = sm.kept[0], &sDout = sm.kept[1];
  // This tile's q, dout and row terms, and the first key tile: one group.
  loadQueryTileAsync<LQ, LO, 128>(sm.kept[0], sm.kept[1], sm.lse[0], sm.dot[0],
                                  q, dout, lse, delta, i0);
  // The key tiles' copies walk down k's rows, v's beside them.
  wg::WalkedRows<wg::OperandTile<D>, 128> keys(k, kK, 0);
  const i64 vBytes = keys.twinBytes(k, v);
  keys.load(sm.walked[0][0]);
  keys.loadTwin(sm.walked[0][1], vBytes);
  commitCopies();
  const int rLo = warp * 16 + g, rHi = rLo + 8; // rows within the tile
  float dqAcc[D / 8][4];
  zero(dqAcc);
  // Held from the first key tile on, or read from shared memory.
  KeptRows<D, kShared> qRows{sQ}, dRows{sDout};
  const int keyEnd = kCausal ? i0 + 64 : S;
  // What a row's scores in log2 units are offset by, and the rows' delta:
  // read once, with the first key tile (the loop's barriers and asm kept
  // ptxas from hoisting them: 2 multiplies and 4 loads a trip).
  float lseLo = 0.0f, lseHi = 0.0f, dotLo = 0.0f, dotHi = 0.0f;
  // One barrier a key tile: it makes the tile's copies whole (and visible
  // to wgmma), and frees the last tile's buffers, whose products every
  // thread has waited for; the next tile's copies start after it.
  for (int j0 = 0, buf = 0; j0 < keyEnd; j0 += 64, buf ^= 1) {
    waitCopies<0>();   // this tile's copies, the only ones in flight
    fenceProxyAsync(); // to wgmma's reads
    __syncthreads();   // and every other thread's
    if (j0 == 0) {     // q, dout and their terms came with the first key tile
      qRows.hold();
      dRows.hold();
      lseLo = -log2e() * sm.lse[0][rLo];
      lseHi = -log2e() * sm.lse[0][rHi];
      dotLo = sm.dot[0][rLo];
      dotHi = sm.dot[0][rHi];
    }
    if (j0 + 64 < keyEnd) {
      keys.step(64);
      keys.load(sm.walked[buf ^ 1][0]);
      keys.loadTwin(sm.walked[buf ^ 1][1], vBytes);
      commitCopies();
    }
    const wg::OperandTile<D> &sK = sm.walked[buf][0], &sV = sm.walked[buf][1];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // Rows queries (16 warp + g, + 8), columns keys 32 half + 8nt + 2tq
      // (+ 1) of the tile.
      float s[4][4], dp[4][4]; // (the products' first steps start them)
      wgmmaFenceKept(s, qRows, dp, dRows);
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        qRows.product(s, kc, sK.keysAlongN(kc, 32 * half));
      wgmmaCommit();
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        dRows.product(dp, kc, sV.keysAlongN(kc, 32 * half));
      wgmmaCommit();
      wgmmaWait<1>(); // S (and the first half's dq product)
      wgmmaFenceOperands(s);
      if (half == 1)
        wgmmaFenceOperands(dqAcc);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] = fastExp2(fmaf(s[nt][e], scaleLog2, e < 2 ? lseLo : lseHi));
      if (kCausal && j0 == i0)
        maskFuture<false, 4>(s, rLo, 0.0f, 4 * half);
      wgmmaWait<0>();
      wgmmaFenceOperands(dp);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] *= dp[nt][e] - (e < 2 ? dotLo : dotHi);
      // dS as A fragments, this half's keys as K.
      u32 dsa[2][4];
#pragma unroll
      for (int kc = 0; kc < 2; ++kc)
        accToA(dsa[kc], s, kc);
      wgmmaFence(dqAcc, dsa);
#pragma unroll
      for (int kc = 0; kc < 2; ++kc)
        wgmmaBf16<true>(dqAcc, dsa[kc], sK.keysAlongK(2 * half + kc));
      wgmmaCommit();
    }
    wgmmaWait<0>(); // the second half's dq product, before the barrier
    wgmmaFenceOperands(dqAcc);
  }
  storeAcc<D, kQ>(dq, i0 + warp * 16, dqAcc, scale, scale);
}

/// A wgmma-ds dk/dv block's count at a query tile's `ready`, once every
/// thread's stores of its dSᵀ are fenced (seen by the dq block that
/// waits for the count).
__device__ __forceinline__ void countStoredTile(unsigned *ready) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    atomicAdd(ready, 1u);
}

/// attentionBackwardWgmmaSplit's dk/dv block: key tile j0's
/// dv = Σ_queries Pᵀ·dout and dk = scale · Σ_queries dSᵀ·q, walking the
/// query tiles (the causal ones from the diagonal on), as
/// attentionBackwardWgmma does without its dq share: rows keys (warp w's
/// 16w..), a query tile in halves of 32 (wgmmaKeysOnQueryHalf: Sᵀ and dPᵀ
/// then dv and dk, k's and v's fragments held). The first half's dv and
/// dk land before the second half's batch, the second half's before the
/// next tile's barrier. (Left in flight through the second half's Sᵀ and dPᵀ, as
/// wgmma-overlap does, they want 158 registers, and ptxas then serializes
/// every wgmma of the kernel: C7512.)
///
/// kStoreDs (attentionBackwardWgmmaStoredDs): each query tile's dSᵀ also
/// goes to global memory as bf16, tile `tileOf(i0 / 64)` of dsT (rows
/// keys, 64 queries each), and once every thread's stores are fenced the
/// block counts itself in at ready[i0 / 64].
template <int D, int T, bool kCausal, class LQ, class LK, class LO,
          bool kStoreDs = false, bool kShared = false, typename TDK,
          typename TDV, class TileOf = int>
__device__ __forceinline__ void
wgmmaKeyTileDkDv(WgmmaSplitShared<D> &sm, const bf16 *q, const bf16 *k,
                 const bf16 *v, const float *lse, const bf16 *dout,
                 const float *delta, TDK *dk, TDV *dv, float scale, int j0,
                 u32 *dsT = nullptr, unsigned *ready = nullptr,
                 TileOf tileOf = 0) {
  using namespace mma;
  const int warp = threadIdx.x / 32;
  constexpr i64 kK = LK::kRowStride;
  const float scaleLog2 = scale * log2e();
  const wg::OperandTile<D> &sK = sm.kept[0], &sV = sm.kept[1];
  const int first = kCausal ? j0 : 0;
  // The query tiles in order; with kStoreDs the last first, so that the
  // dq blocks, which start from the last query tile, find its dSᵀ stored
  // once every dk/dv block has taken one tile (in order, the last tile's
  // waited for the longest dk/dv block to end: 448 µs a launch on an H200
  // at GPT-2's shapes, against wgmma-split's 320).
  constexpr int kStep = kStoreDs ? -64 : 64;
  const int begin = kStoreDs ? T - 64 : first;
  const int end = kStoreDs ? first - 64 : T;
  // This tile's k and v, and the first query tile: one group.
  sm.kept[0].template loadAsync<128>(k, kK, j0);
  sm.kept[1].template loadAsync<128>(v, kK, j0);
  WalkedQueryTiles<D, LQ, LO> queries(q, dout, begin);
  queries.load(sm.walked[0][0], sm.walked[0][1], sm.lse[0], sm.dot[0], lse,
               delta, begin);
  commitCopies();
  float accK[D / 8][4], accV[D / 8][4];
  zero(accK);
  zero(accV);
  // Held from the first tile on, or read from shared memory.
  KeptRows<D, kShared> kRows{sK}, vRows{sV};
  // One barrier a query tile, as in wgmmaQueryTileDq.
  for (int i0 = begin, buf = 0; i0 != end; i0 += kStep, buf ^= 1) {
    waitCopies<0>();
    fenceProxyAsync();
    __syncthreads();
    if (i0 == begin) { // k and v came with the first tile's group
      kRows.hold();
      vRows.hold();
    }
    if (i0 + kStep != end) {
      queries.step(kStep);
      queries.load(sm.walked[buf ^ 1][0], sm.walked[buf ^ 1][1],
                   sm.lse[buf ^ 1], sm.dot[buf ^ 1], lse, delta, i0 + kStep);
      commitCopies();
    }
    const wg::OperandTile<D> &sQ = sm.walked[buf][0], &sDout = sm.walked[buf][1];
    const float *tileLse = sm.lse[buf], *tileDot = sm.dot[buf];
    const bool diagonal = kCausal && i0 == j0;
    // (kStoreDs) this thread's rows of the tile's stored dSᵀ, as bf16
    // pairs: rows 16 warp + g and + 8, 32 pairs a row.
    [[maybe_unused]] u32 *lo = nullptr;
    if constexpr (kStoreDs)
      lo = dsT + tileOf(i0 / 64) * 2048 +
           (warp * 16 + threadIdx.x % 32 / 4) * 32;
#pragma unroll
    for (int half = 0; half < 2; ++half)
      wgmmaKeysOnQueryHalf<D, false>(
          accK, accV, kRows, vRows, sQ, sDout, tileLse, tileDot, scaleLog2,
          diagonal, half, [&](const float (&ds)[4][4]) {
            if constexpr (kStoreDs) {
#pragma unroll
              for (int nt = 0; nt < 4; ++nt) {
                // The pair's column: queries 32 half + 8 nt + 2 tq.
                const int c = 16 * half + 4 * nt + threadIdx.x % 4;
                lo[c] = packBf16(ds[nt][0], ds[nt][1]);
                lo[8 * 32 + c] = packBf16(ds[nt][2], ds[nt][3]);
              }
            }
          });
    wgmmaWait<0>(); // the second half's dv and dk, before the barrier
    wgmmaFenceOperands(accV);
    wgmmaFenceOperands(accK);
    if constexpr (kStoreDs)
      countStoredTile(ready + i0 / 64);
  }
  storeAcc<D, kK>(dk, j0 + warp * 16, accK, scale, scale);
  storeAcc<D, kK>(dv, j0 + warp * 16, accV, 1.0f, 1.0f);
}

/// The shared memory of attentionBackwardWgmmaStoredDs's dq blocks (its
/// dk/dv blocks' is WgmmaSplitShared's), double-buffered: each key tile's
/// k as wgmma's B, and its stored dSᵀ (rows keys), which ldmatrix.trans
/// reads as dS's A fragments.
template <int D> struct WgmmaStoredDsShared {
  wg::OperandTile<D> k[2];
  mma::Tile<64> ds[2];
};

/// A wgmma-ds dq block's wait until `count` dk/dv blocks counted in at
/// `ready` (countStoredTile): their dSᵀ stores are then seen by the
/// block's copies (cp.async.cg reads at L2).
__device__ __forceinline__ void waitForStoredTiles(const unsigned *ready,
                                                   int count) {
  if (threadIdx.x < 32) {
    waitForCount(ready, unsigned(count), countReached(ready, unsigned(count)));
    __threadfence();
  }
  __syncthreads();
}

/// attentionBackwardWgmmaStoredDs's dq block: query tile i0's
/// dq = scale · Σ_keys dS·k from the dSᵀ tiles the dk/dv blocks stored
/// (`tiles`: the tile of key tile 0 on, `keyTiles` of them in a row), key
/// tile by key tile in order: one product a tile pair, where
/// wgmmaQueryTileDq computes S and dP again for three. Waits until all
/// keyTiles dk/dv blocks counted themselves in at *ready, which it then
/// leaves 0 for the next launch (it is the count's only reader).
template <int D, class LQ, class LK, typename TDQ>
__device__ __forceinline__ void
wgmmaQueryTileDqFromDs(WgmmaStoredDsShared<D> &sm, const bf16 *k,
                       const u32 *tiles, int keyTiles, unsigned *ready,
                       TDQ *dq, float scale, int i0) {
  using namespace mma;
  const int warp = threadIdx.x / 32;
  constexpr i64 kQ = LQ::kRowStride, kK = LK::kRowStride;
  waitForStoredTiles(ready, keyTiles);
  auto load = [&](int j, int buf) {
    sm.k[buf].template loadAsync<128>(k, kK, j * 64);
    sm.ds[buf].template loadAsync<128>(
        reinterpret_cast<const bf16 *>(tiles + i64(j) * 2048), 64, 0);
    commitCopies();
  };
  load(0, 0);
  float dqAcc[D / 8][4];
  zero(dqAcc);
  // One barrier a key tile, as in wgmmaQueryTileDq.
  for (int j = 0, buf = 0; j < keyTiles; ++j, buf ^= 1) {
    waitCopies<0>();
    fenceProxyAsync();
    __syncthreads();
    if (j + 1 < keyTiles)
      load(j + 1, buf ^ 1);
    // dS's A fragment of keys [16kc, +16): dSᵀ's block transposed, read in
    // blockB's order (attentionBackwardWgmma's dq share).
    u32 dsa[4][4];
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      loadMatricesTransposed(dsa[kc], sm.ds[buf].blockB(kc * 16, warp * 16));
    wgmmaFence(dqAcc, dsa);
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      wgmmaBf16<true>(dqAcc, dsa[kc], sm.k[buf].keysAlongK(kc));
    wgmmaCommit();
    wgmmaWait<0>(); // before the barrier frees this buffer
    wgmmaFenceOperands(dqAcc);
  }
  storeAcc<D, kQ>(dq, i0 + warp * 16, dqAcc, scale, scale);
  if (threadIdx.x == 0)
    *ready = 0;
}

/// The deterministic backward with five products a tile pair
/// (--attention-backward=wgmma-ds): wgmma-split's dk/dv blocks also store
/// each tile pair's dSᵀ (bf16, 8 KB at D=64) in dsT ([heads, tiles,
/// 64x64], the causal tiles of query tile i from i(i+1)/2 on, key tile
/// order), and the dq blocks sum dS·k from those instead of computing S
/// and dP again (wgmmaQueryTileDqFromDs): no float32 atomics, each result
/// summed by one block in a fixed order. A dq block waits for the dk/dv
/// blocks of its query tile, so the grid's ranks put every dk/dv block
/// (longest first: key tile 0) before the dq blocks (longest first: the
/// last query tile): blocks start in about blockIdx order, x fastest, so
/// once a dq block runs, every dk/dv block of its group of heads has
/// started, and those wait for nothing. ready ([heads, T/64]) counts the
/// dk/dv blocks done with each query tile.
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TDQ, typename TDK, typename TDV>
__device__ void attentionBackwardWgmmaStoredDs(
    const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
    const bf16 *dout, const float *delta, TDQ *dq, TDK *dk, TDV *dv,
    float scale, u32 *dsT, unsigned *ready) {
  static_assert(D == 32 || D == 64, "wgmma n is 32 or 64 here");
  static_assert(!kCausal || T == S, "causal tiles are square");
  constexpr int kQueryTiles = T / 64, kKeyTiles = S / 64;
  constexpr i64 kTiles = kCausal ? i64(kQueryTiles) * (kQueryTiles + 1) / 2
                                 : i64(kQueryTiles) * kKeyTiles;
  const BlockWork work = blockWork();
  backwardToHead<T, LQ, LK, LO>(work.head, q, k, v, lse, dout, delta, dq, dk,
                                dv);
  dsT += i64(work.head) * kTiles * 2048;
  ready += i64(work.head) * kQueryTiles;
  // Query tile i's first stored tile (key tile 0's).
  auto tileOf = [](int i) {
    return kCausal ? i64(i) * (i + 1) / 2 : i64(i) * kKeyTiles;
  };
  if (work.rank < unsigned(kKeyTiles)) {
    WgmmaSplitShared<D> &sm = wg::dynamicSharedAs<WgmmaSplitShared<D>>();
    const int j = int(work.rank);
    constexpr bool kStoreDs = true;
    wgmmaKeyTileDkDv<D, T, kCausal, LQ, LK, LO, kStoreDs>(
        sm, q, k, v, lse, dout, delta, dk, dv, scale, j * 64, dsT, ready,
        [&](int i) { return tileOf(i) + j; });
  } else {
    WgmmaStoredDsShared<D> &sm =
        wg::dynamicSharedAs<WgmmaStoredDsShared<D>>();
    const int i = kQueryTiles - 1 - int(work.rank - kKeyTiles);
    wgmmaQueryTileDqFromDs<D, LQ, LK>(sm, k, dsT + tileOf(i) * 2048,
                                      kCausal ? i + 1 : kKeyTiles, ready + i,
                                      dq, scale, i * 64);
  }
}

/// attentionBackwardMma's split (deterministic: no atomics, each result
/// written by the one block that sums it) with every product a warpgroup
/// MMA (--attention-backward=wgmma-split): the same grid and block order,
/// a dq block per query tile and a dk/dv block per key tile, each one
/// warpgroup. Seven products a tile pair, as the split kernel computes,
/// against the atomic kernels' five and their float32 reductions.
/// kShared (--attention-backward=wgmma-split-ss): every block's kept rows
/// (q and dout, k and v) read by wgmma from shared memory rather than held
/// as fragments: 126 registers rather than 158 at D = 64, so 4 blocks an
/// SM rather than 3, for 3 KB of shared-memory reads a product rather
/// than 1.
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          bool kShared = false, typename TDQ, typename TDK, typename TDV>
__device__ void attentionBackwardWgmmaSplit(const bf16 *q, const bf16 *k,
                                            const bf16 *v, const float *lse,
                                            const bf16 *dout,
                                            const float *delta, TDQ *dq,
                                            TDK *dk, TDV *dv, float scale) {
  static_assert(D == 32 || D == 64, "wgmma n is 32 or 64 here");
  WgmmaSplitShared<D> &sm = wg::dynamicSharedAs<WgmmaSplitShared<D>>();
  constexpr int kQueryBlocks = T / 64;
  // As attentionBackwardMma: where T == S a head's ranks alternate, dq of
  // query tile T/64 - 1 - r/2 (even r), dk/dv of key tile r/2 (odd r).
  const BlockWork work = blockWork();
  const bool dqBlock =
      T == S ? work.rank % 2 == 0 : work.rank < kQueryBlocks;
  const int tile = T == S             ? work.rank / 2
                   : dqBlock ? work.rank
                             : work.rank - kQueryBlocks;
  // Measurement hooks gptc never defines (bench/gpu/prepare.sh's probes):
  // one kind of block alone, to time how the launch divides between them.
#if defined(GPTC_PROBE_DQ_BLOCKS_ONLY)
  if (!dqBlock)
    return;
#elif defined(GPTC_PROBE_DKDV_BLOCKS_ONLY)
  if (dqBlock)
    return;
#endif
  backwardToHead<T, LQ, LK, LO>(work.head, q, k, v, lse, dout, delta, dq, dk,
                                dv);
  if (dqBlock)
    wgmmaQueryTileDq<D, S, kCausal, LQ, LK, LO, kShared>(
        sm, q, k, v, lse, dout, delta, dq, scale,
        (kQueryBlocks - 1 - tile) * 64);
  else
    wgmmaKeyTileDkDv<D, T, kCausal, LQ, LK, LO, false, kShared>(
        sm, q, k, v, lse, dout, delta, dk, dv, scale, tile * 64);
}
#endif // GPTC_WGMMA

/// The tensor-core forward the target has, emitted for
/// --attention-forward=wgmma (and wgmma-overlap, kOverlap; wgmma128,
/// kGroups 2): warpgroup MMA on sm_90a for D of 32 or 64, else mma.sync
/// (with 4 kGroups warps a block; same results up to float32 summation
/// order).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          bool kOverlap = false, int kGroups = 1, typename TO>
__device__ __forceinline__ void
attentionForwardTensorCores(const bf16 *q, const bf16 *k, const bf16 *v,
                            TO *out, float *lse, float scale) {
#if GPTC_WGMMA
  if constexpr ((D == 32 || D == 64) && kOverlap)
    attentionForwardWgmmaOverlap<D, T, S, kCausal, LQ, LK, LO>(q, k, v, out,
                                                               lse, scale);
  else if constexpr (D == 32 || D == 64)
    attentionForwardWgmma<D, T, S, kCausal, LQ, LK, LO, kGroups>(
        q, k, v, out, lse, scale);
  else
#endif
    attentionForwardMma<D, T, S, kCausal, LQ, LK, LO, 4 * kGroups>(
        q, k, v, out, lse, scale);
}

/// The forward emitted for --attention-forward=wgmma-k128: 128 keys a step
/// on sm_90a for D of 32 or 64, else the mma.sync forward (4 warps, 64
/// queries a block: the same grid).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TO>
__device__ __forceinline__ void
attentionForwardKeys128TensorCores(const bf16 *q, const bf16 *k,
                                   const bf16 *v, TO *out, float *lse,
                                   float scale) {
#if GPTC_WGMMA
  if constexpr ((D == 32 || D == 64) && S % 128 == 0)
    attentionForwardWgmmaKeys128<D, T, S, kCausal, LQ, LK, LO>(q, k, v, out,
                                                               lse, scale);
  else
#endif
    attentionForwardMma<D, T, S, kCausal, LQ, LK, LO, 4>(q, k, v, out, lse,
                                                         scale);
}

/// The deterministic backward the target has, emitted for
/// --attention-backward=wgmma-split (and wgmma-split-ss, kShared):
/// warpgroup MMA on sm_90a for D of 32 or 64, else the split mma.sync
/// backward (the same grid; the same results up to float32 summation
/// order).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          bool kShared = false, typename TDQ, typename TDK, typename TDV>
__device__ __forceinline__ void attentionBackwardSplitTensorCores(
    const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
    const bf16 *dout, const float *delta, TDQ *dq, TDK *dk, TDV *dv,
    float scale) {
#if GPTC_WGMMA
  if constexpr (D == 32 || D == 64)
    attentionBackwardWgmmaSplit<D, T, S, kCausal, LQ, LK, LO, kShared>(
        q, k, v, lse, dout, delta, dq, dk, dv, scale);
  else
#endif
    attentionBackwardMma<D, T, S, kCausal, LQ, LK, LO>(
        q, k, v, lse, dout, delta, dq, dk, dv, scale);
}

/// The stored-dS backward the target has, emitted for
/// --attention-backward=wgmma-ds: warpgroup MMA on sm_90a for D of 32 or
/// 64, else the split mma.sync backward (the same grid, its ranks' roles
/// its own; dsT and ready unused).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TDQ, typename TDK, typename TDV>
__device__ __forceinline__ void attentionBackwardStoredDsTensorCores(
    const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
    const bf16 *dout, const float *delta, TDQ *dq, TDK *dk, TDV *dv,
    float scale, u32 *dsT, unsigned *ready) {
#if GPTC_WGMMA
  if constexpr (D == 32 || D == 64)
    attentionBackwardWgmmaStoredDs<D, T, S, kCausal, LQ, LK, LO>(
        q, k, v, lse, dout, delta, dq, dk, dv, scale, dsT, ready);
  else
#endif
    attentionBackwardMma<D, T, S, kCausal, LQ, LK, LO>(
        q, k, v, lse, dout, delta, dq, dk, dv, scale);
}

/// The backward the target has, emitted for --attention-backward=wgmma
/// (and wgmma-overlap, kOverlap; wgmma-bulk, kBulk; wgmma-ordered, kBulk
/// and kOrdered, with `turns`): warpgroup MMA on sm_90a for D of 32 or 64,
/// else the mma.sync atomic backward (the same dqSum and arrivals; dq's
/// sums in another order, and in no fixed one).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          bool kOverlap = false, bool kBulk = false, bool kOrdered = false,
          typename TDQ, typename TDK, typename TDV>
__device__ __forceinline__ void attentionBackwardTensorCores(
    const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
    const bf16 *dout, const float *delta, TDQ *dq, TDK *dk, TDV *dv,
    float scale, float *dqSum, unsigned *arrivals, unsigned *turns = nullptr) {
#if GPTC_WGMMA
  if constexpr (D == 32 || D == 64)
    attentionBackwardWgmma<D, T, S, kCausal, LQ, LK, LO, kOverlap, kBulk,
                           kOrdered>(q, k, v, lse, dout, delta, dq, dk, dv,
                                     scale, dqSum, arrivals, turns);
  else
#endif
    attentionBackwardAtomic<D, T, S, kCausal, LQ, LK, LO>(
        q, k, v, lse, dout, delta, dq, dk, dv, scale, dqSum, arrivals);
}
