//===- attention_backward_mma.cuh - attention backward on mma.sync --------===//
//
// attentionBackwardMma reads out only through delta (Σ dout·out a row,
// attention.cuh's attentionRowDot) and is deterministic without atomics: a
// grid of T/64 "dq" blocks (one query tile each, walking the key tiles)
// and S/64 "dk/dv" blocks (one key tile each, walking the query tiles);
// both recompute the probabilities from lse. A query tile's lse and delta
// arrive by cp.async with its q and dout tiles, one tile ahead: the loop of
// a dk/dv block issues no plain global load, and waits at one barrier a
// tile. Opt-in, attentionBackwardAtomic is FlashAttention-2's backward
// instead: the dk/dv blocks alone, each adding its share of dq with
// atomics, the last block of a query tile writing its dq.
//
//===----------------------------------------------------------------------===//

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
loadQueryTileAsync(QTile &sQ, QTile &sDout, float *sLse, float *sDot,
                   const bf16 *q, const bf16 *dout, const float *lse,
                   const float *delta, int i0) {
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
__device__ __forceinline__ void keyRowsOnQueries(
    float (&ds)[N][4], float (&accK)[D / 8][4], float (&accV)[D / 8][4],
    const u32 (&ka)[D / 16][4], const u32 (&va)[D / 16][4],
    const mma::Tile<D> &q, const mma::Tile<D> &dout, const float *tileLse,
    const float *tileDot, float scaleLog2, bool diagonal, int keyRow, int n0) {
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
  const bool dqBlock = T == S ? work.rank % 2 == 0 : work.rank < kQueryBlocks;
  const int tile = T == S    ? work.rank / 2
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
    const float lseLo = -log2e() * sLse[0][rLo],
                lseHi = -log2e() * sLse[0][rHi];
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
      loadQueryTileAsync<LQ, LO, 32 * kWarps, false>(
          sm.q[buf ^ 1], sm.dout[buf ^ 1], sm.lse[buf ^ 1], sm.dot[buf ^ 1], q,
          dout, lse, delta, i0 + 64);
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
    const bool diagonal = kCausal && (kKeyTiles == 1 ? i0 == j0 : keyRow >= 0);
    if (!kCausal || kKeyTiles == 1 || keyRow < 64) {
      // Half a query tile at a time: the whole tile's scores and dS on
      // top of the fragments and both accumulators spill.
#pragma unroll
      for (int n0 = 0; n0 < 8; n0 += 4) {
        float ds[4][4];
        keyRowsOnQueries<D, 4>(ds, accK, accV, ka, va, sm.q[buf], sm.dout[buf],
                               tileLse, tileDot, scaleLog2, diagonal, keyRow,
                               n0);
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
        loadMatricesTransposed(kta,
                               sm.k[kc / 4].blockB(kc % 4 * 16, rowBlock * 16));
#pragma unroll
        for (int np = 0; np < kPart / 2; ++np) {
          loadMatricesTransposed(
              f, sm.ds[buf][kc / 4].block(kc % 4 * 16,
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
      writeQueryTileDq<D, kQ, 32 * kWarps>(dq + t * 64 * kQ, dqSum + t * 64 * D,
                                           scale);
}
