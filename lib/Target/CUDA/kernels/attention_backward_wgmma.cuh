//===- attention_backward_wgmma.cuh - attention backward on wgmma ---------===//
//
// What every wgmma backward (sm_90a, D of 32 or 64) shares: the query
// tiles a dk/dv loop walks (WalkedQueryTiles), the rows a block keeps as
// A (KeptRows), and wgmmaKeysOnQueryHalf, a key tile's work on half a query
// tile (Sᵀ, dPᵀ, P and dS, dv and dk). attentionBackwardWgmma is
// attentionBackwardAtomic's design on it: dk/dv blocks that add their
// share of dq across blocks, with atomics, by bulk reductions at L2
// (wgmma-bulk), or by those in a fixed order (wgmma-ordered).
// attentionBackwardTensorCores, at the end, is what the emitter calls:
// this on sm_90a, attentionBackwardAtomic elsewhere.
//
//===----------------------------------------------------------------------===//

#if GPTC_WGMMA
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
                     const wg::OperandTile<D> &sDout, const float *tileLse,
                     const float *tileDot, float scaleLog2, bool diagonal,
                     int half, WithDs &&withDs) {
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
      bulkWaitRead<1>();           // the last tile's part in dSᵀ's tile read
    __syncthreads();               // and every other thread's
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
          diagonal, half, [&](const float(&ds)[4][4]) {
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
      const float a =
          __shfl_xor_sync(0xffffffffu, odd ? dqAcc[nt][0] : dqAcc[nt][2], 1);
      const float b =
          __shfl_xor_sync(0xffffffffu, odd ? dqAcc[nt][1] : dqAcc[nt][3], 1);
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
#endif // GPTC_WGMMA

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
