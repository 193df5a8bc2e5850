//===- gemm_wgmma.cuh - gptc's own GEMM on warpgroup MMA, GELU fused ------===//
//
// GPT-2's c_fc forward, pre = a·b + bias and out = GELU(pre), both bf16:
// cuBLASLt's GELU_AUX_BIAS epilogue took it to 146 µs a call on an H200
// where its BIAS epilogue alone took about 110 and PyTorch's bias GEMM
// 83 (docs/benchmarks.md, twenty-fourth and twenty-seventh sessions):
// cuBLASLt writes its two results after the product, the SM's tensor
// cores idle meanwhile. Here two blocks share an SM, so one block's
// stores run under the other's products. One more way GEMM tuning times
// at load (rt::GemmFallback::WgmmaBiasGelu); it is kept only where it
// is faster and computes what cuBLASLt does.
//
// A block of two warpgroups takes a 128 x 128 tile of the result, each
// warpgroup 64 rows of it as two m64n64k16 accumulators (64 floats a
// thread). a ([m, k], row-major) and b ([k, n], row-major: an N-major B)
// come 64 columns of k at a time through kStages buffers of wg::
// SwizzledTiles, copied by every thread with cp.async two tiles ahead of
// the products, which read them from shared memory (no A fragments). m
// and n are multiples of 128, k of 64; every pointer 16-byte aligned. The
// tiles walk n fastest: a block's 128 rows of a stay in L2 for the blocks
// beside it, and b (GPT-2's 4.7 MB) for all.
//
//===----------------------------------------------------------------------===//

#if GPTC_WGMMA
namespace gemm {

constexpr int kRows = 128, kCols = 128, kDepth = 64, kStages = 3;
constexpr int kThreads = 256;

/// One stage's operands: a's two 64-row halves, b's two 64-column halves
/// (K rows, N columns), each 64 x 64.
struct Stage {
  wg::SwizzledTile<64> a[2], b[2];
};
struct Tiles {
  Stage stage[kStages];
};

} // namespace gemm

/// The dynamic shared memory a block asks for: the stages and the 1,024
/// bytes dynamicSharedAs may skip to align them.
constexpr unsigned kGemmWgmmaSharedBytes = sizeof(gemm::Tiles) + 1024 - 16;

/// pre = a·b + bias, out = GELU(pre) (fallbackGelu of the float32 sum, as
/// cuBLASLt's GELU_AUX_BIAS takes it before rounding), both [m, n] bf16;
/// bias [n] bf16. grid (n / 128, m / 128), blockDim.x == 256.
__device__ void gemmWgmmaBiasGelu(const bf16 *a, const bf16 *b,
                                  const bf16 *bias, bf16 *out, bf16 *pre, i64 m,
                                  i64 n, i64 k) {
  using namespace gemm;
  Tiles &t = wg::dynamicSharedAs<Tiles>();
  const i64 row0 = i64(blockIdx.y) * kRows, col0 = i64(blockIdx.x) * kCols;
  const int depthTiles = int(k / kDepth);
  // Starts the copies of depth tile `d` into stage s (not committed).
  auto load = [&](int d, int s) {
    const i64 k0 = i64(d) * kDepth;
    for (int h = 0; h < 2; ++h) {
      t.stage[s].a[h].loadAsync<kThreads>(a + k0, k, row0 + 64 * h);
      t.stage[s].b[h].loadAsync<kThreads>(b + col0 + 64 * h, n, k0);
    }
  };
  for (int s = 0; s + 1 < kStages; ++s) {
    if (s < depthTiles)
      load(s, s);
    commitCopies(); // (empty past the end: the waits count groups)
  }
  const int group = threadIdx.x / 128; // this warpgroup's 64 rows
  float d[2][8][4];
  for (int dt = 0; dt < depthTiles; ++dt) {
    const int s = dt % kStages;
    waitCopies<kStages - 2>(); // depth tile dt's copies, this thread's
    fenceProxyAsync();
    // Every thread's copies of dt landed, and every product of dt - 1
    // (each thread waited for its warpgroup's) is done with its stage,
    // which the next copies fill.
    __syncthreads();
    if (dt + kStages - 1 < depthTiles)
      load(dt + kStages - 1, (dt + kStages - 1) % kStages);
    commitCopies();
    const Stage &st = t.stage[s];
    wgmmaFence(d[0], d[1]);
#pragma unroll
    for (int kc = 0; kc < kDepth / 16; ++kc) {
      const unsigned long long x = st.a[group].rowsAlongM(kc);
      wgmmaBf16<true>(d[0], x, st.b[0].keysAlongK(kc), dt > 0 || kc > 0);
      wgmmaBf16<true>(d[1], x, st.b[1].keysAlongK(kc), dt > 0 || kc > 0);
    }
    wgmmaCommit();
    wgmmaWait<0>();
    wgmmaFenceOperands(d[0]);
    wgmmaFenceOperands(d[1]);
  }
  // Warp w of the warpgroup holds its rows 16w + lane/4 and 8 below, each
  // 8-column step j of a half at columns 2(lane % 4) and one more.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
  const i64 row = row0 + 64 * group + 16 * warp + lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const i64 col = col0 + 64 * h + 8 * j + 2 * (lane % 4);
      float bs[2];
      load2(bias + col, bs);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const i64 at = (row + 8 * half) * n + col;
        const float v[2] = {d[h][j][2 * half] + bs[0],
                            d[h][j][2 * half + 1] + bs[1]};
        const float g[2] = {fallbackGelu(v[0]), fallbackGelu(v[1])};
        store2(pre + at, v);
        store2(out + at, g);
      }
    }
}
#endif // GPTC_WGMMA
