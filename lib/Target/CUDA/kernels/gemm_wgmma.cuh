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
// walks 128 x 256 tiles and leaves each tile's results to the TMA unit's
// bulk copies, which write them under the next tile's products. Each is
// one more way GEMM tuning times at load (rt::GemmFallback::WgmmaBiasGelu,
// WgmmaGeluGrad and their WgmmaWide* twins), kept only where it is faster
// and computes what cuBLASLt's way does.
//
// A block of two warpgroups takes a 128 x 128 tile of the result (or 128
// x 256: gemm::Wide), each warpgroup 64 rows of it as one m64n128k16
// (m64n256k16) accumulator, 64 (128) floats a thread. a ([m, k],
// row-major) and b ([k, n] row-major, an N-major B; or [n, k], a K-major
// one) come 64 columns of k at a time through kStages buffers of wg::
// SwizzledTiles, copied by every thread with cp.async kStages - 1 steps
// ahead of the products, which read them from shared memory (no A
// fragments); one step's products stay in flight while the block waits
// for the next step's copies. m is a multiple of 128, n of the block's
// columns, k of 64; every pointer 16-byte aligned. The tiles walk n
// fastest: a block's 128 rows of a stay in L2 for the blocks beside it,
// and b (GPT-2's 4.7 MB) for all.
//
//===----------------------------------------------------------------------===//

#if GPTC_WGMMA
namespace gemm {

constexpr int kRows = 128, kDepth = 64, kThreads = 256;

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
using Wide = Tiles<4, 4>;

} // namespace gemm

/// The dynamic shared memory a block asks for: the stages and the 1,024
/// bytes dynamicSharedAs may skip to align them.
template <class T> constexpr unsigned gemmWgmmaSharedBytes() {
  return sizeof(T) + 1024 - 16;
}
constexpr unsigned kGemmWgmmaSharedBytes = gemmWgmmaSharedBytes<gemm::Narrow>(),
                   kGemmWgmmaWideSharedBytes =
                       gemmWgmmaSharedBytes<gemm::Wide>();

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
  // Starts the copies of depth tile `dt` into stage s (not committed).
  auto load = [&](int dt, int s) {
    const i64 k0 = i64(dt) * kDepth;
    for (int h = 0; h < 2; ++h)
      t.stage[s].a[h].template loadAsync<kThreads>(a + k0, k, row0 + 64 * h);
    for (int h = 0; h < kColTiles; ++h) {
      if (kKMajorB) // b's rows col0 + 64h.., columns k0..
        t.stage[s].b[h].template loadAsync<kThreads>(b + k0, k, col0 + 64 * h);
      else // b's rows k0.., columns col0 + 64h..
        t.stage[s].b[h].template loadAsync<kThreads>(b + col0 + 64 * h, n, k0);
    }
  };
  // B's descriptor for the tile's columns at k16 step kc: the b tiles lie
  // back to back, 8 KB apart. K-major, they are 64·kColTiles rows of 128
  // bytes (8-row groups 1,024 bytes apart, keysAlongN's SBO); N-major,
  // kColTiles swizzle atoms of 64 columns, the leading byte offset from
  // one to the next 8 KB (the PTX ISA's canonical MN-major layout;
  // keysAlongK's 16 is unused within one atom).
  auto bTiles = [&](const Stage &st, int kc) {
    return kKMajorB ? st.b[0].keysAlongN(kc)
                    : wgmmaDescriptorPlus(
                          wgmmaDescriptor(sharedAddress(st.b[0].data),
                                          sizeof st.b[0], 1024, true),
                          kc * 2048);
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
      wgmmaBf16<!kKMajorB>(d, st.a[group].rowsAlongM(kc), bTiles(st, kc),
                           dt > 0 || kc > 0);
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
      float o[Epilogue::kOutputs][2];
      epilogue(at, col, {d[j][2 * half], d[j][2 * half + 1]}, o);
#pragma unroll
      for (int i = 0; i < Epilogue::kOutputs; ++i)
        store2(out[i] + at, o[i]);
    }
}

/// The same in 128 x 256 tiles, one block an SM walking them (tile r ·
/// n/256 + c at rows 128r, columns 256c; grid ≤ the tiles, blockDim.x ==
/// 256). A tile's results are staged in the stages' shared memory, rows of
/// 256 bf16 padded to 528 bytes (so that a warp's store meets each bank
/// once), and written by bulk copies (the TMA unit, one row of an output
/// a thread), which drain while the next tile's copies and products run.
/// The block waits for those copies to have read the rows before it fills
/// the stages again, and for them to have written before it ends.
template <bool kKMajorB, class Epilogue>
__device__ __forceinline__ void
gemmWgmmaWide(const bf16 *a, const bf16 *b,
              bf16 *const (&out)[Epilogue::kOutputs], i64 m, i64 n, i64 k,
              const Epilogue &epilogue) {
  constexpr int kPitch = 264; // bf16 a staged row
  static_assert(Epilogue::kOutputs * gemm::kRows * kPitch * 2 <=
                    sizeof(gemm::Wide),
                "the staged rows fit the stages");
  auto &t = wg::dynamicSharedAs<gemm::Wide>();
  auto *staged = reinterpret_cast<unsigned short *>(&t);
  const int colTiles = int(n / 256), tiles = int(m / gemm::kRows) * colTiles;
  // The bulk copy this thread issues: row r of output i.
  const int r = threadIdx.x % gemm::kRows, i = threadIdx.x / gemm::kRows;
  const bool copies = i < Epilogue::kOutputs;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const i64 row0 = i64(tile / colTiles) * gemm::kRows,
              col0 = i64(tile % colTiles) * 256;
    // The last tile's rows read out of the stages: they may be filled.
    bulkWaitRead<0>();
    __syncthreads();
    float d[32][4];
    gemmWgmmaTile<kKMajorB>(t, a, b, n, k, row0, col0, d);
    __syncthreads(); // both warpgroups' products done with the stages
#pragma unroll
    for (int j = 0; j < 32; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = gemmTileRow(half), col = gemmTileColumn(j);
        float o[Epilogue::kOutputs][2];
        epilogue((row0 + row) * n + col0 + col, col0 + col,
                 {d[j][2 * half], d[j][2 * half + 1]}, o);
#pragma unroll
        for (int e = 0; e < Epilogue::kOutputs; ++e) {
          u32 *to = reinterpret_cast<u32 *>(
              staged + (e * gemm::kRows + row) * kPitch + col);
          *to = u32(fromFloat<bf16>(o[e][0]).bits) |
                u32(fromFloat<bf16>(o[e][1]).bits) << 16;
        }
      }
    fenceProxyAsync();
    __syncthreads(); // every staged row written, seen by the bulk copies
    if (copies) {
      bf16 *to = out[0]; // (out[i] without indexing: no local memory)
#pragma unroll
      for (int e = 1; e < Epilogue::kOutputs; ++e)
        to = i == e ? out[e] : to;
      bulkStore(to + (row0 + r) * n + col0,
                sharedAddress(staged + (i * gemm::kRows + r) * kPitch), 512);
      bulkCommit();
    }
  }
  bulkWait<0>();
}

/// GELU's epilogue: out[0] = GELU(pre), out[1] = pre = the product + bias
/// (fallbackGelu of the float32 sum, as cuBLASLt's GELU_AUX_BIAS takes it
/// before rounding); bias [n].
struct GemmBiasGelu {
  static constexpr int kOutputs = 2;
  const bf16 *bias;
  __device__ __forceinline__ void operator()(i64, i64 col, const float (&p)[2],
                                             float (&o)[2][2]) const {
    float bs[2];
    load2(bias + col, bs);
    o[1][0] = p[0] + bs[0], o[1][1] = p[1] + bs[1];
    o[0][0] = fallbackGelu(o[1][0]), o[0][1] = fallbackGelu(o[1][1]);
  }
};
/// GELU's derivative's: out[0] = gelu'(pre) · the product
/// (fallbackGeluGrad of the float32 product, as cuBLASLt's DGELU takes
/// it); pre [m, n].
struct GemmGeluGrad {
  static constexpr int kOutputs = 1;
  const bf16 *pre;
  __device__ __forceinline__ void operator()(i64 at, i64, const float (&p)[2],
                                             float (&o)[1][2]) const {
    float x[2];
    load2(pre + at, x);
    o[0][0] = fallbackGeluGrad(x[0], p[0]),
    o[0][1] = fallbackGeluGrad(x[1], p[1]);
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
    gemmWgmmaWide<false>(a, b, results, m, n, k, GemmBiasGelu{bias});
  else
    gemmWgmmaNarrow<false>(a, b, results, n, k, GemmBiasGelu{bias});
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
#endif // GPTC_WGMMA
