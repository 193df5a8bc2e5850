//===- gemm_wgmma.cuh - gptc's own GEMM on warpgroup MMA, GELU fused ------===//
//
// GPT-2's c_fc GEMMs with GELU fused: the forward's pre = a·b + bias and
// out = GELU(pre), the backward's out = gelu'(pre) · (a·bᵀ), all bf16. In
// the thirtieth session's H200 profile cuBLASLt's GELU_AUX_BIAS took the
// forward 159.5 µs a call and its DGELU the backward 162.5, where c_proj's
// plain GEMMs of the same FLOPs took 102.7 and 107.1: cuBLASLt's epilogue
// runs after the product, reading and writing while the SM's tensor cores
// idle. Here either two blocks share an SM, so that one block's epilogue
// runs under the other's products (128 x 128 tiles), or one block an SM
// walks 128 x 256 tiles, warp-specialized: a warpgroup copies the next
// tile's operands while two others run this tile's epilogue. Each is one
// more way GEMM tuning times at load (rt::GemmFallback::WgmmaBiasGelu,
// WgmmaGeluGrad and their WgmmaWide* twins), kept only where it is faster
// and computes what cuBLASLt's way does. The same blocks with no
// epilogue (WgmmaPlain: the plain GEMMs with a transposed b) or the bias
// alone (WgmmaBias: the forward's other projections) are ways too, so
// that tuning also says what the products cost with a light epilogue.
//
// The narrow blocks: two warpgroups take a 128 x 128 tile of the result,
// each 64 rows of it as one m64n128k16 accumulator, 64 floats a thread.
// a ([m, k], row-major) and b ([k, n] row-major, an N-major B; or [n, k],
// a K-major one) come 64 columns of k at a time through kStages buffers
// of wg::SwizzledTiles, copied by every thread with cp.async kStages - 1
// steps ahead of the products, which read them from shared memory (no A
// fragments); one step's products stay in flight while the block waits
// for the next step's copies. The wide blocks (gemmWgmmaWide): the same
// stages, 4 of 128 x 256, filled by a warpgroup of their own, and two
// m64n256k16 accumulators of 128 floats a thread; the stages change hands
// through mbarriers. Why: Nsight Compute on the earlier wide blocks
// (forty-seventh session, H200), where every thread copied and
// multiplied, found 8 warps an SM, the tensor pipe 40% busy, and each
// tile's first copies and its epilogue in series with its products.
//
// m is a multiple of 128, n of the block's columns, k of 64; every
// pointer 16-byte aligned. The tiles walk n fastest: a block's 128 rows
// of a stay in L2 for the blocks beside it, and b (GPT-2's 4.7 MB) for
// all.
//
//===----------------------------------------------------------------------===//

#if GPTC_WGMMA
namespace gemm {

constexpr int kRows = 128, kDepth = 64, kThreads = 256;
/// The wide blocks' threads: a warpgroup that copies, two that multiply
/// (the narrow blocks' two). (Enumerators: the narrow blocks' source has
/// no use for them, and no warning.)
enum : int { kCopiers = 128, kMultipliers = kThreads };

/// One stage's operands: a's two 64-row halves, and b's kColTiles tiles of
/// 64 columns (K rows and N columns N-major, N rows and K columns K-major),
/// each 64 x 64, back to back.
template <int kColTiles> struct Stage {
  wg::SwizzledTile<64> a[2], b[kColTiles];
};
template <int kColTiles, int kStages> struct Tiles {
  Stage<kColTiles> stage[kStages];
};
/// The two block shapes, both timed at load: 128 x 128 through 3 stages
/// (96 KB: 2 blocks an SM, one's epilogue under the other's products), or
/// 128 x 256 through 4 (192 KB, 1 block an SM, which walks the tiles: a
/// quarter fewer bytes from L2 a FLOP, 85 FLOP a byte against 64).
using Narrow = Tiles<2, 3>;
constexpr int kWideStages = 4;
/// The wide blocks' shared memory: the stages; each multiplying warp's
/// results of 16 rows by 32 columns as floats, staged so that its lanes
/// store 4 adjacent ones (a row's 32 columns 40 floats apart, so that a
/// warp's writes of 2 meet each bank once a half-warp); and the stages'
/// barriers.
struct Specialized {
  Stage<4> stage[kWideStages];
  float staged[8][16][40];
  unsigned long long full[kWideStages], empty[kWideStages];
};

} // namespace gemm

/// The dynamic shared memory a block asks for: the stages and the 1,024
/// bytes dynamicSharedAs may skip to align them.
template <class T> constexpr unsigned gemmWgmmaSharedBytes() {
  return sizeof(T) + 1024 - 16;
}
constexpr unsigned kGemmWgmmaSharedBytes = gemmWgmmaSharedBytes<gemm::Narrow>(),
                   kGemmWgmmaWideSharedBytes =
                       gemmWgmmaSharedBytes<gemm::Specialized>();

/// B's descriptor for a stage's columns at k16 step kc: the b tiles lie
/// back to back, 8 KB apart. K-major, they are 64·kColTiles rows of 128
/// bytes (8-row groups 1,024 bytes apart, keysAlongN's SBO); N-major,
/// kColTiles swizzle atoms of 64 columns, the leading byte offset from one
/// to the next 8 KB (the PTX ISA's canonical MN-major layout; keysAlongK's
/// 16 is unused within one atom).
template <bool kKMajorB, int kColTiles>
__device__ __forceinline__ unsigned long long
gemmBTiles(const gemm::Stage<kColTiles> &st, int kc) {
  return kKMajorB
             ? st.b[0].keysAlongN(kc)
             : wgmmaDescriptorPlus(wgmmaDescriptor(sharedAddress(st.b[0].data),
                                                   sizeof st.b[0], 1024, true),
                                   kc * 2048);
}

/// Starts the copies of depth tile `dt` of the 128 x 64·kColTiles tile at
/// (row0, col0) into stage `st`, by kCopiers threads (not committed).
template <bool kKMajorB, int kCopiers, int kColTiles>
__device__ __forceinline__ void
gemmLoadStage(gemm::Stage<kColTiles> &st, const bf16 *a, const bf16 *b, i64 n,
              i64 k, i64 row0, i64 col0, int dt) {
  const i64 k0 = i64(dt) * gemm::kDepth;
  for (int h = 0; h < 2; ++h)
    st.a[h].template loadAsync<kCopiers>(a + k0, k, row0 + 64 * h);
  for (int h = 0; h < kColTiles; ++h) {
    if (kKMajorB) // b's rows col0 + 64h.., columns k0..
      st.b[h].template loadAsync<kCopiers>(b + k0, k, col0 + 64 * h);
    else // b's rows k0.., columns col0 + 64h..
      st.b[h].template loadAsync<kCopiers>(b + col0 + 64 * h, n, k0);
  }
}

/// The product a·b of the 128 x 64·kColTiles tile at (row0, col0) into
/// d, this warpgroup's 64 rows, every product landed: a [m, k] by b [k,
/// n] row-major (an N-major B), or with kKMajorB b [n, k] (a K-major B,
/// read transposed). The stages' copies and products are done when it
/// returns, but the other warpgroup's may still read the last stage.
template <bool kKMajorB, int kColTiles, int kStages>
__device__ __forceinline__ void
gemmWgmmaTile(gemm::Tiles<kColTiles, kStages> &t, const bf16 *a, const bf16 *b,
              i64 n, i64 k, i64 row0, i64 col0, float (&d)[8 * kColTiles][4]) {
  using namespace gemm;
  using Stage = gemm::Stage<kColTiles>;
  const int depthTiles = int(k / kDepth);
  auto load = [&](int dt, int s) {
    gemmLoadStage<kKMajorB, kThreads>(t.stage[s], a, b, n, k, row0, col0, dt);
  };
  for (int s = 0; s + 1 < kStages; ++s) {
    if (s < depthTiles)
      load(s, s);
    commitCopies(); // (empty past the end: the waits count groups)
  }
  const int group = threadIdx.x / 128; // this warpgroup's 64 rows
  for (int dt = 0; dt < depthTiles; ++dt) {
    const int s = dt % kStages;
    waitCopies<kStages - 2>(); // depth tile dt's copies, this thread's
    fenceProxyAsync();
    __syncthreads(); // every thread's copies of dt landed
    // dt's products queue behind dt - 1's, which may still run (the same
    // accumulators and shape: the ISA orders them), so the tensor cores
    // need not wait for this loop's barriers and copies.
    const Stage &st = t.stage[s];
    wgmmaFence(d);
#pragma unroll
    for (int kc = 0; kc < kDepth / 16; ++kc)
      wgmmaBf16<!kKMajorB>(d, st.a[group].rowsAlongM(kc),
                           gemmBTiles<kKMajorB>(st, kc), dt > 0 || kc > 0);
    wgmmaCommit();
    wgmmaWait<1>(); // this warpgroup's products of dt - 1
    // Both warpgroups' products of dt - 1 are done with its stage, which
    // depth tile dt + kStages - 1 fills.
    __syncthreads();
    if (dt + kStages - 1 < depthTiles)
      load(dt + kStages - 1, (dt + kStages - 1) % kStages);
    commitCopies();
  }
  wgmmaWait<0>();
  wgmmaFenceOperands(d);
}

/// Where this thread's accumulators d[j][2h], d[j][2h + 1] lie in its
/// warpgroup's 64 rows of a tile: row (of the tile's 128) and column (of
/// its own), for each 8-column step j and half h. Warp w holds rows 16w +
/// lane/4 and 8 below, columns 8j + 2(lane % 4) and one more.
__device__ __forceinline__ int gemmTileRow(int half) {
  return 64 * (threadIdx.x / 128) + 16 * (threadIdx.x / 32 % 4) +
         threadIdx.x % 32 / 4 + 8 * half;
}
__device__ __forceinline__ int gemmTileColumn(int j) {
  return 8 * j + 2 * (threadIdx.x % 4);
}

/// gptc's wgmma GEMM with `Epilogue` (GemmBiasGelu, GemmGeluGrad): out[i]
/// = the epilogue's output i of the product a·b (see gemmWgmmaTile) and,
/// where it reads one, its operand at the same element, all [m, n] bf16.
/// 128 x 128 blocks, one tile each: grid (n / 128, m / 128), blockDim.x ==
/// 256; each thread stores its two adjacent results of a row at a time.
template <bool kKMajorB, class Epilogue>
__device__ __forceinline__ void
gemmWgmmaNarrow(const bf16 *a, const bf16 *b,
                bf16 *const (&out)[Epilogue::kOutputs], i64 n, i64 k,
                const Epilogue &epilogue) {
  auto &t = wg::dynamicSharedAs<gemm::Narrow>();
  const i64 row0 = i64(blockIdx.y) * gemm::kRows, col0 = i64(blockIdx.x) * 128;
  float d[16][4];
  gemmWgmmaTile<kKMajorB>(t, a, b, n, k, row0, col0, d);
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const i64 col = col0 + gemmTileColumn(j),
                at = (row0 + gemmTileRow(half)) * n + col;
      const float p[2] = {d[j][2 * half], d[j][2 * half + 1]};
      float x[2] = {}, o[Epilogue::kOutputs][2];
      if constexpr (Epilogue::kReadsOperand)
        load2(epilogue.operand(at, col), x);
      epilogue.apply(p, x, o);
#pragma unroll
      for (int i = 0; i < Epilogue::kOutputs; ++i)
        store2(out[i] + at, o[i]);
    }
}

/// The wide blocks' copier (their first warpgroup): fills the stages in
/// turn, tile after tile, a stage again once both multiplying warpgroups
/// released it (`empty`), and hands each over (`full`) once its copies
/// landed, which it waits for a fill later, so that two are in flight.
/// Where the epilogue reads a matrix (GELU's derivative: the
/// pre-activation, which the forward wrote long before, out of L2), it
/// asks for the tile's rows of it into L2 as the tile's copies start: a
/// tile's products ahead of the epilogue that reads them.
template <bool kKMajorB, class Epilogue>
__device__ __forceinline__ void
gemmCopyStages(gemm::Specialized &s, const bf16 *a, const bf16 *b, i64 n, i64 k,
               int tiles, int colTiles, const Epilogue &epilogue) {
  using namespace gemm;
  const int depthTiles = int(k / kDepth);
  int fill = 0; // the stages filled so far
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const i64 row0 = i64(tile / colTiles) * kRows,
              col0 = i64(tile % colTiles) * 256;
    if constexpr (Epilogue::kOperandRows) // 128 rows of 512 bytes, 4 lines
#pragma unroll
      for (int line = 0; line < 4; ++line)
        prefetchL2(epilogue.operand((row0 + threadIdx.x) * n + col0 + 64 * line,
                                    col0 + 64 * line));
    for (int dt = 0; dt < depthTiles; ++dt, ++fill) {
      const int st = fill % kWideStages;
      if (fill >= kWideStages) // its last fill's products are done
        mbarrierWait(&s.empty[st], (fill / kWideStages - 1) & 1);
      gemmLoadStage<kKMajorB, kCopiers>(s.stage[st], a, b, n, k, row0, col0,
                                        dt);
      commitCopies();
      if (fill > 0) { // the fill before this one landed: hand it over
        waitCopies<1>();
        fenceProxyAsync();
        mbarrierArrive(&s.full[(fill - 1) % kWideStages]);
      }
    }
  }
  if (fill > 0) {
    waitCopies<0>();
    fenceProxyAsync();
    mbarrierArrive(&s.full[(fill - 1) % kWideStages]);
  }
}

/// The wide blocks' multipliers (their second and third warpgroups, 64
/// rows of a tile each): each stage's products once it is full, released
/// once they are done (one step later: one step's products stay in
/// flight); then the epilogue, each warp 32 columns of its 16 rows at a
/// time, staged as floats so that each lane takes 4 adjacent results (8
/// bytes of each output, 64 of a row a quarter-warp), its operand loaded
/// a step ahead.
template <bool kKMajorB, class Epilogue>
__device__ __forceinline__ void
gemmMultiplyStages(gemm::Specialized &s, bf16 *const (&out)[Epilogue::kOutputs],
                   i64 n, i64 k, int tiles, int colTiles,
                   const Epilogue &epilogue) {
  using namespace gemm;
  const int depthTiles = int(k / kDepth);
  const int group = (threadIdx.x - kCopiers) / 128,
            warp = (threadIdx.x - kCopiers) / 32, lane = threadIdx.x % 32;
  float(&staged)[16][40] = s.staged[warp];
  int fill = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const i64 row0 = i64(tile / colTiles) * kRows,
              col0 = i64(tile % colTiles) * 256;
    float d[32][4];
    for (int dt = 0; dt < depthTiles; ++dt, ++fill) {
      const int st = fill % kWideStages;
      mbarrierWait(&s.full[st], (fill / kWideStages) & 1);
      const Stage<4> &stage = s.stage[st];
      wgmmaFence(d);
#pragma unroll
      for (int kc = 0; kc < kDepth / 16; ++kc)
        wgmmaBf16<!kKMajorB>(d, stage.a[group].rowsAlongM(kc),
                             gemmBTiles<kKMajorB>(stage, kc), dt > 0 || kc > 0);
      wgmmaCommit();
      wgmmaWait<1>(); // this warpgroup's products of the fill before
      if (dt > 0)
        mbarrierArrive(&s.empty[(fill - 1) % kWideStages]);
    }
    wgmmaWait<0>();
    wgmmaFenceOperands(d);
    mbarrierArrive(&s.empty[(fill - 1) % kWideStages]);
    // This warp's rows of the tile: 16 from rowBase. Lane's element i of
    // step c: row 4i + lane/8, column 32c + 4(lane % 8) of them.
    const i64 rowBase = row0 + 64 * group + 16 * (warp % 4);
    auto element = [&](int c, int i) {
      return (rowBase + 4 * i + lane / 8) * n + col0 + 32 * c + 4 * (lane % 8);
    };
    auto column = [&](int c) { return col0 + 32 * c + 4 * (lane % 8); };
    uint2 operand[2][4] = {}; // this step's and the next's, as loaded
    if constexpr (Epilogue::kReadsOperand)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        operand[0][i] = loadPacked4(epilogue.operand(element(0, i), column(0)));
#pragma unroll
    for (int c = 0; c < 8; ++c) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float v[2] = {d[4 * c + j][2 * half],
                              d[4 * c + j][2 * half + 1]};
          store2(&staged[lane / 4 + 8 * half][8 * j + 2 * (lane % 4)], v);
        }
      __syncwarp();
      if (Epilogue::kReadsOperand && c + 1 < 8)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          operand[(c + 1) % 2][i] =
              loadPacked4(epilogue.operand(element(c + 1, i), column(c + 1)));
      float sums[4] = {}; // of output 0's columns, over this lane's rows
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float p[4], x[4] = {}, o[Epilogue::kOutputs][4];
        load4(&staged[4 * i + lane / 8][4 * (lane % 8)], p);
        if constexpr (Epilogue::kReadsOperand)
          unpack4<bf16>(operand[c % 2][i], x);
        epilogue.apply(p, x, o);
#pragma unroll
        for (int e = 0; e < Epilogue::kOutputs; ++e)
          store4(out[e] + element(c, i), o[e]);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          sums[e] += o[0][e];
      }
      if constexpr (Epilogue::kColumnPartials) {
        // The warp's 16 rows: lanes l, l ^ 8, l ^ 16, l ^ 24 share columns.
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sums[e] += __shfl_xor_sync(0xffffffffu, sums[e], 8);
          sums[e] += __shfl_xor_sync(0xffffffffu, sums[e], 16);
        }
        if (lane < 8)
          store4(epilogue.partials + rowBase / 16 * n + column(c), sums);
      }
      __syncwarp(); // the staged results read before the next are written
    }
  }
}

/// The same in 128 x 256 tiles, warp-specialized: one block an SM walks
/// them (tile r · n/256 + c at rows 128r, columns 256c; grid ≤ the tiles,
/// blockDim.x == 384). The first warpgroup copies a and b into the stages
/// (gemmCopyStages), the other two multiply, each 64 rows of the tile as
/// one m64n256k16 accumulator, and run the epilogue while the first fills
/// the stages for the next tile (gemmMultiplyStages). Only the copier
/// waits for copies, only the multipliers for products, and no barrier
/// stops the block: the stages change hands through mbarriers, `full`
/// once a stage's copies landed, `empty` once both warpgroups' products
/// read it.
template <bool kKMajorB, class Epilogue>
__device__ __forceinline__ void
gemmWgmmaWide(const bf16 *a, const bf16 *b,
              bf16 *const (&out)[Epilogue::kOutputs], i64 m, i64 n, i64 k,
              const Epilogue &epilogue) {
  using namespace gemm;
  auto &s = wg::dynamicSharedAs<Specialized>();
  const int colTiles = int(n / 256), tiles = int(m / kRows) * colTiles;
  if (threadIdx.x == 0)
    for (int i = 0; i < kWideStages; ++i) {
      mbarrierInit(&s.full[i], kCopiers);
      mbarrierInit(&s.empty[i], kMultipliers);
    }
  __syncthreads(); // the barriers initialised
  if (threadIdx.x < kCopiers) {
    lowerRegisters<40>();
    gemmCopyStages<kKMajorB>(s, a, b, n, k, tiles, colTiles, epilogue);
  } else {
    raiseRegisters<232>();
    gemmMultiplyStages<kKMajorB>(s, out, n, k, tiles, colTiles, epilogue);
  }
}

/// The epilogues: each reads one bf16 operand at the result's elements
/// (kReadsOperand; `operand`: the bias at the column, or a matrix of the
/// result's shape, which the wide blocks' copier prefetches into L2 a tile
/// ahead: kOperandRows) and makes its outputs from the float32 product p
/// and the operand x, W adjacent elements at a time (`apply`). With
/// kColumnPartials (the wide blocks alone), output 0's column sums over
/// each 16 rows go to `partials` too, [m / 16, n] float32.
///
/// The bias [n] at the result's column, the operand of GemmBiasGelu and
/// GemmBias.
struct BiasOperand {
  static constexpr bool kReadsOperand = true, kOperandRows = false,
                        kColumnPartials = false;
  const bf16 *bias;
  __device__ __forceinline__ const bf16 *operand(i64, i64 col) const {
    return bias + col;
  }
};

/// GELU's: out[0] = GELU(pre), out[1] = pre = the product + bias
/// (fallbackGelu of the float32 sum, as cuBLASLt's GELU_AUX_BIAS takes it
/// before rounding); bias [n].
struct GemmBiasGelu : BiasOperand {
  static constexpr int kOutputs = 2;
  template <int W>
  __device__ __forceinline__ void
  apply(const float (&p)[W], const float (&x)[W], float (&o)[2][W]) const {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      o[1][i] = p[i] + x[i];
      o[0][i] = fallbackGelu(o[1][i]);
    }
  }
};
/// GELU's derivative's: out[0] = gelu'(pre) · the product
/// (fallbackGeluGrad of the float32 product, as cuBLASLt's DGELU takes
/// it); pre [m, n].
struct GemmGeluGrad {
  static constexpr int kOutputs = 1;
  static constexpr bool kReadsOperand = true, kOperandRows = true,
                        kColumnPartials = false;
  const bf16 *pre;
  __device__ __forceinline__ const bf16 *operand(i64 at, i64) const {
    return pre + at;
  }
  template <int W>
  __device__ __forceinline__ void
  apply(const float (&p)[W], const float (&x)[W], float (&o)[1][W]) const {
#pragma unroll
    for (int i = 0; i < W; ++i)
      o[0][i] = fallbackGeluGrad(x[i], p[i]);
  }
};

/// GELU's derivative's with its bias gradient's partial sums: the column
/// sums of out[0] (of the float32 values, before they are rounded, as the
/// CPU executor's sum takes them) over each 16 rows, for ColumnSums to add
/// in order. cuBLASLt's DGELU_BGRAD took 477 µs on an H100 where DGELU
/// took 159 (docs/pipeline.md); here the sums are a few shuffles a step.
struct GemmGeluGradBias : GemmGeluGrad {
  static constexpr bool kColumnPartials = true;
  float *partials;
};

/// No epilogue: out[0] = the product, rounded (GemmPlain's kernels are
/// ways to plain GEMMs, so that tuning times the blocks' products alone
/// against cuBLASLt's on the same shapes).
struct GemmPlain {
  static constexpr int kOutputs = 1;
  static constexpr bool kReadsOperand = false, kOperandRows = false,
                        kColumnPartials = false;
  __device__ __forceinline__ const bf16 *operand(i64, i64) const {
    return nullptr;
  }
  template <int W>
  __device__ __forceinline__ void apply(const float (&p)[W], const float (&)[W],
                                        float (&o)[1][W]) const {
#pragma unroll
    for (int i = 0; i < W; ++i)
      o[0][i] = p[i];
  }
};

/// The bias alone: out[0] = the product + bias (the float32 sum rounded
/// once, as cuBLASLt's BIAS epilogue takes it); bias [n].
struct GemmBias : BiasOperand {
  static constexpr int kOutputs = 1;
  template <int W>
  __device__ __forceinline__ void
  apply(const float (&p)[W], const float (&x)[W], float (&o)[1][W]) const {
#pragma unroll
    for (int i = 0; i < W; ++i)
      o[0][i] = p[i] + x[i];
  }
};

/// pre = a·b + bias, out = GELU(pre), both [m, n] bf16; bias [n] bf16; b
/// [k, n]. kWide: 128 x 256 tiles, one block an SM (gemmWgmmaWide).
template <bool kWide>
__device__ void gemmWgmmaBiasGelu(const bf16 *a, const bf16 *b,
                                  const bf16 *bias, bf16 *out, bf16 *pre, i64 m,
                                  i64 n, i64 k) {
  bf16 *const results[2] = {out, pre};
  if constexpr (kWide)
    gemmWgmmaWide<false>(a, b, results, m, n, k, GemmBiasGelu{{bias}});
  else
    gemmWgmmaNarrow<false>(a, b, results, n, k, GemmBiasGelu{{bias}});
}

/// out = gelu'(pre) · (a·bᵀ), [m, n] bf16; b [n, k], read transposed (the
/// c_proj weight a c_fc backward reads). kWide as above.
template <bool kWide>
__device__ void gemmWgmmaGeluGrad(const bf16 *a, const bf16 *b, const bf16 *pre,
                                  bf16 *out, i64 m, i64 n, i64 k) {
  bf16 *const results[1] = {out};
  if constexpr (kWide)
    gemmWgmmaWide<true>(a, b, results, m, n, k, GemmGeluGrad{pre});
  else
    gemmWgmmaNarrow<true>(a, b, results, n, k, GemmGeluGrad{pre});
}

/// The same in the wide blocks, with the bias gradient's partial sums
/// (GemmGeluGradBias): partials [m / 16, n] float32.
__device__ void gemmWgmmaGeluGradBias(const bf16 *a, const bf16 *b,
                                      const bf16 *pre, bf16 *out,
                                      float *partials, i64 m, i64 n, i64 k) {
  bf16 *const results[1] = {out};
  gemmWgmmaWide<true>(a, b, results, m, n, k,
                      GemmGeluGradBias{{pre}, partials});
}
/// out = a·bᵀ, [m, n] bf16; b [n, k], read transposed (K-major, as the
/// backward's input gradients and the lm_head read their weights). kWide
/// as above.
template <bool kWide>
__device__ void gemmWgmmaPlain(const bf16 *a, const bf16 *b, bf16 *out, i64 m,
                               i64 n, i64 k) {
  bf16 *const results[1] = {out};
  if constexpr (kWide)
    gemmWgmmaWide<true>(a, b, results, m, n, k, GemmPlain{});
  else
    gemmWgmmaNarrow<true>(a, b, results, n, k, GemmPlain{});
}
/// out = a·b + bias, [m, n] bf16; bias [n]; b [k, n] (N-major, as the
/// forward's projections read their weights). kWide as above.
template <bool kWide>
__device__ void gemmWgmmaBias(const bf16 *a, const bf16 *b, const bf16 *bias,
                              bf16 *out, i64 m, i64 n, i64 k) {
  bf16 *const results[1] = {out};
  if constexpr (kWide)
    gemmWgmmaWide<false>(a, b, results, m, n, k, GemmBias{{bias}});
  else
    gemmWgmmaNarrow<false>(a, b, results, n, k, GemmBias{{bias}});
}
#endif // GPTC_WGMMA
