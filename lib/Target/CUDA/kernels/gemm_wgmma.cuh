//===- gemm_wgmma.cuh - gptc's own GEMM on warpgroup MMA, GELU fused ------===//
//
// GPT-2's c_fc GEMMs with GELU fused: the forward's pre = a·b + bias and
// out = GELU(pre), the backward's out = gelu'(pre) · (a·bᵀ), all bf16. In
// the thirtieth session's H200 profile cuBLASLt's GELU_AUX_BIAS took the
// forward 159.5 µs a call and its DGELU the backward 162.5, where c_proj's
// plain GEMMs of the same FLOPs took 102.7 and 107.1: cuBLASLt's epilogue
// runs after the product, reading and writing while the SM's tensor cores
// idle. Here two blocks share an SM, so one block's epilogue runs under
// the other's products. Each is one more way GEMM tuning times at load
// (rt::GemmFallback::WgmmaBiasGelu, WgmmaGeluGrad), kept only where it is
// faster and computes what cuBLASLt's way does.
//
// A block of two warpgroups takes a 128 x 128 tile of the result (or 128
// x 256: gemm::Wide), each warpgroup 64 rows of it as one m64n128k16
// (m64n256k16) accumulator, 64 (128) floats a thread. a ([m, k],
// row-major) and b ([k, n] row-major, an N-major B; or [n, k], a K-major
// one) come 64 columns of k at a time through kStages buffers of wg::
// SwizzledTiles, copied by every thread with cp.async kStages - 1 steps
// ahead of the products, which read them from shared memory (no A
// fragments); one step's products stay in flight while the block waits
// for the next step's copies. m is a multiple of 128, n of the block's columns,
// k of 64; every pointer 16-byte aligned. The tiles walk n fastest: a block's
// 128 rows of a stay in L2 for the blocks beside it, and b (GPT-2's 4.7 MB) for
// all.
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
/// 128 x 256 through 4 (192 KB, 1 block an SM: a third fewer bytes from L2
/// a FLOP, 85 FLOP a byte against 64).
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

/// The product a·b of the block's tile, [m, k] by [k, n], handed to
/// `epilogue(at, col, v)` two adjacent columns at a time: v the float32
/// sums at element `at` = row · n + col of the result and the next. b is
/// [k, n] row-major (an N-major B), or with kKMajorB [n, k] (a K-major B,
/// read transposed). grid (n / (64 · kColTiles), m / 128), blockDim.x ==
/// 256.
template <bool kKMajorB, int kColTiles, int kStages, class Epilogue>
__device__ __forceinline__ void gemmWgmma(const bf16 *a, const bf16 *b, i64 n,
                                          i64 k, const Epilogue &epilogue) {
  using namespace gemm;
  using Stage = gemm::Stage<kColTiles>;
  constexpr int kCols = 64 * kColTiles;
  auto &t = wg::dynamicSharedAs<Tiles<kColTiles, kStages>>();
  const i64 row0 = i64(blockIdx.y) * kRows, col0 = i64(blockIdx.x) * kCols;
  const int depthTiles = int(k / kDepth);
  // Starts the copies of depth tile `d` into stage s (not committed).
  auto load = [&](int d, int s) {
    const i64 k0 = i64(d) * kDepth;
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
  float d[kCols / 8][4];
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
  // Warp w of the warpgroup holds its rows 16w + lane/4 and 8 below, each
  // 8-column step j at columns 2(lane % 4) and one more.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
  const i64 row = row0 + 64 * group + 16 * warp + lane / 4;
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    const i64 col = col0 + 8 * j + 2 * (lane % 4);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float v[2] = {d[j][2 * half], d[j][2 * half + 1]};
      epilogue((row + 8 * half) * n + col, col, v);
    }
  }
}

/// pre = a·b + bias, out = GELU(pre) (fallbackGelu of the float32 sum, as
/// cuBLASLt's GELU_AUX_BIAS takes it before rounding), both [m, n] bf16;
/// bias [n] bf16; b [k, n]. kWide: blocks of 128 x 256.
template <bool kWide>
__device__ void gemmWgmmaBiasGelu(const bf16 *a, const bf16 *b,
                                  const bf16 *bias, bf16 *out, bf16 *pre, i64 m,
                                  i64 n, i64 k) {
  gemmWgmma<false, kWide ? 4 : 2, kWide ? 4 : 3>(
      a, b, n, k, [&](i64 at, i64 col, const float(&p)[2]) {
        float bs[2];
        load2(bias + col, bs);
        const float v[2] = {p[0] + bs[0], p[1] + bs[1]};
        const float g[2] = {fallbackGelu(v[0]), fallbackGelu(v[1])};
        store2(pre + at, v);
        store2(out + at, g);
      });
}

/// out = gelu'(pre) · (a·bᵀ) (fallbackGeluGrad of the float32 product, as
/// cuBLASLt's DGELU takes it), [m, n] bf16; b [n, k], read transposed (the
/// c_proj weight a c_fc backward reads). kWide: blocks of 128 x 256.
template <bool kWide>
__device__ void gemmWgmmaGeluGrad(const bf16 *a, const bf16 *b, const bf16 *pre,
                                  bf16 *out, i64 m, i64 n, i64 k) {
  gemmWgmma<true, kWide ? 4 : 2, kWide ? 4 : 3>(
      a, b, n, k, [&](i64 at, i64, const float(&p)[2]) {
        float x[2];
        load2(pre + at, x);
        const float g[2] = {fallbackGeluGrad(x[0], p[0]),
                            fallbackGeluGrad(x[1], p[1])};
        store2(out + at, g);
      });
}
#endif // GPTC_WGMMA
