//===- attention_backward_wgmma_split.cuh - deterministic wgmma backward --===//
//
// The deterministic backwards on warpgroup MMA (sm_90a, D of 32 or 64):
// attentionBackwardWgmmaSplit, attentionBackwardMma's split grid (dq
// blocks and dk/dv blocks, each recomputing the probabilities), and
// attentionBackwardWgmmaStoredDs, whose dk/dv blocks store dSᵀ for the dq
// blocks' one product. attentionBackwardSplitTensorCores and
// attentionBackwardStoredDsTensorCores, at the end, are what the emitter
// calls: these on sm_90a, attentionBackwardMma elsewhere.
//
//===----------------------------------------------------------------------===//

#if GPTC_WGMMA
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
/// fragments are held through the loop (wgmmaHoldRows). Both halves' S
/// and dP are issued at the top of a key tile; the first half's dq
/// product lands with the second half's dP.
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
    // Rows queries (16 warp + g, + 8), columns keys 32 half + 8nt + 2tq
    // (+ 1) of the tile. Both halves' S and dP are issued first (four
    // groups: S0, dP0, S1, dP1), so that the second half's products run
    // under the first half's exponentials: a half's chain (its products,
    // their wait, P, dS, the dq product) no longer starts after the last.
    float s[2][4][4], dp[2][4][4]; // (the products' first steps start them)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      wgmmaFenceKept(s[half], qRows, dp[half], dRows);
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        qRows.product(s[half], kc, sK.keysAlongN(kc, 32 * half));
      wgmmaCommit();
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        dRows.product(dp[half], kc, sV.keysAlongN(kc, 32 * half));
      wgmmaCommit();
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // S0 (dP0, S1 and dP1 in flight); S1 (dP1 and dq0 in flight).
      if (half == 0)
        wgmmaWait<3>();
      else
        wgmmaWait<2>();
      wgmmaFenceOperands(s[half]);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[half][nt][e] =
              fastExp2(fmaf(s[half][nt][e], scaleLog2, e < 2 ? lseLo : lseHi));
      if (kCausal && j0 == i0)
        maskFuture<false, 4>(s[half], rLo, 0.0f, 4 * half);
      // dP0 (S1 and dP1 in flight); dP1 and the first half's dq product,
      // long since issued, so that the second's may start dqAcc.
      if (half == 0) {
        wgmmaWait<2>();
      } else {
        wgmmaWait<0>();
        wgmmaFenceOperands(dqAcc);
      }
      wgmmaFenceOperands(dp[half]);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[half][nt][e] *= dp[half][nt][e] - (e < 2 ? dotLo : dotHi);
      // dS as A fragments, this half's keys as K.
      u32 dsa[2][4];
#pragma unroll
      for (int kc = 0; kc < 2; ++kc)
        accToA(dsa[kc], s[half], kc);
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
/// next tile's barrier. (Left in flight through the second half's Sᵀ and dPᵀ,
/// as wgmma-overlap does, they want 158 registers, and ptxas then serializes
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
    const wg::OperandTile<D> &sQ = sm.walked[buf][0],
                             &sDout = sm.walked[buf][1];
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
          diagonal, half, [&](const float(&ds)[4][4]) {
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
                       const u32 *tiles, int keyTiles, unsigned *ready, TDQ *dq,
                       float scale, int i0) {
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
__device__ void
attentionBackwardWgmmaStoredDs(const bf16 *q, const bf16 *k, const bf16 *v,
                               const float *lse, const bf16 *dout,
                               const float *delta, TDQ *dq, TDK *dk, TDV *dv,
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
    WgmmaStoredDsShared<D> &sm = wg::dynamicSharedAs<WgmmaStoredDsShared<D>>();
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
  const bool dqBlock = T == S ? work.rank % 2 == 0 : work.rank < kQueryBlocks;
  const int tile = T == S    ? work.rank / 2
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

/// The deterministic backward the target has, emitted for
/// --attention-backward=wgmma-split (and wgmma-split-ss, kShared):
/// warpgroup MMA on sm_90a for D of 32 or 64, else the split mma.sync
/// backward (the same grid; the same results up to float32 summation
/// order).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          bool kShared = false, typename TDQ, typename TDK, typename TDV>
__device__ __forceinline__ void
attentionBackwardSplitTensorCores(const bf16 *q, const bf16 *k, const bf16 *v,
                                  const float *lse, const bf16 *dout,
                                  const float *delta, TDQ *dq, TDK *dk, TDV *dv,
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
