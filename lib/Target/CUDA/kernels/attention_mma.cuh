//===- attention_mma.cuh - flash attention pieces on mma.sync -------------===//
//
// bf16 q/k/v, T and S multiples of 64, D a multiple of 16 up to 64
// (GPT-2's 64): FlashAttention-2 on mma.sync.m16n8k16 tensor cores. A
// block of 4 warps takes 64 rows, a warp 16; tiles of 64 keys (or queries)
// go through shared memory; scores, probabilities and accumulators stay in
// registers (float32), and a tile's probabilities are rounded to bf16 to
// feed the next product, as FlashAttention does. The softmax works in log2
// units (a score times scale · log2 e, one fma with the row's offset), so
// that each exponential is one ex2.approx (fastExp2, within a few ulp)
// rather than expf's dozen instructions: per score, the softmax's
// arithmetic is what bounds these kernels next to the mma.sync products.
// The causal mask is applied on the diagonal tile only; the others have no
// later key. The warpgroup-MMA kernels keep these fragment layouts, so they
// share the softmax and the stores.
//
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
  /// columns c % (D/8) · 8 on. A thread's chunks are kThreads apart, where
  /// that is a multiple of D/8 (every D but 48): the same columns, rows
  /// kThreads / (D/8) apart, so
  /// the unrolled copies' addresses differ by constants (sm_90a SASS: the
  /// forward's key tile is 8 consecutive LDGSTS; a loop over blockDim.x
  /// spent 22 instructions a copy on index arithmetic). !kUnrolled keeps
  /// a loop, for a kernel whose registers cannot spare the addresses (the
  /// atomic backward: unrolled, it spilled at its 168).
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsync(const bf16 *src, i64 stride,
                                            i64 row0) {
    constexpr int kChunks = 64 * D / 8;
    if constexpr (kThreads % (D / 8) != 0) {
      // (D = 48: 6 chunks a row, so a thread's chunks fall in different
      // columns and each works out its own place.)
      for (int c = threadIdx.x; c < kChunks; c += kThreads) {
        const int r = c / (D / 8), col = c % (D / 8) * 8;
        copyAsync16(sharedAddress(data) + 2 * (r * kStride + col),
                    src + (row0 + r) * stride + col);
      }
    } else {
      constexpr int kRowStep = kThreads / (D / 8);
      const int r = threadIdx.x / (D / 8), col = threadIdx.x % (D / 8) * 8;
      const u32 to = sharedAddress(data) + 2 * (r * kStride + col);
      const bf16 *from = src + (row0 + r) * stride + col;
#pragma unroll(kUnrolled ? 8 : 1)
      for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i)
        if (kChunks % kThreads == 0 || threadIdx.x + i * kThreads < kChunks)
          copyAsync16(to + 2 * i * kRowStep * kStride,
                      from + i * kRowStep * stride);
    }
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
  __device__ __forceinline__ bool
  probabilities(float (&s)[N][4], float scaleLog2, bool diagonal, int row,
                float &corrLo, float &corrHi) {
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
    storeAcc<D, LO::kRowStride, kWide>(out + LO::head(h), row0, acc, 1.0f / lLo,
                                       1.0f / lHi);
    if (threadIdx.x % 4 == 0) {
      constexpr float kLn2 = 0.6931471805599453f;
      const int rowLo = row0 + threadIdx.x % 32 / 4;
      lse[h * T + rowLo] = mLo * kLn2 + logf(lLo);
      lse[h * T + rowLo + 8] = mHi * kLn2 + logf(lHi);
    }
  }
};

} // namespace mma
