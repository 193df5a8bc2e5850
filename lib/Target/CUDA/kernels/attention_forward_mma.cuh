//===- attention_forward_mma.cuh - attention forward on mma.sync ----------===//
//
// attentionForwardMma: a block's query rows against 64-key tiles, K and V
// double-buffered through cp.async, the online softmax between the two
// products (attention_mma.cuh); and attentionForwardMmaPipelined, which
// computes the next tile's scores under this one's softmax. (The wgmma
// forwards, attention_forward_wgmma.cuh, walk their key tiles with a
// cursor, wg::WalkedRows, rather than these helpers.)
//
//===----------------------------------------------------------------------===//

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
__device__ __forceinline__ void
prefetchNextKeyTile(Tile (&sK)[2], Tile (&sV)[2], const bf16 *k, const bf16 *v,
                    i64 h, int j0, int keyEnd, int buf) {
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
__device__ void attentionForwardMma(const bf16 *q, const bf16 *k, const bf16 *v,
                                    TO *out, float *lse, float scale) {
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
                                             const bf16 *v, TO *out, float *lse,
                                             float scale) {
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
  auto tile = [&](int j, float(&s)[8][4], float(&next)[8][4]) {
    waitCopies<0>(); // k of tile j + 1, v of tile j
    __syncthreads(); // every thread's, and every warp done with j - 1
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
