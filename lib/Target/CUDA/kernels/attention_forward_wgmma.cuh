//===- attention_forward_wgmma.cuh - attention forward on wgmma -----------===//
//
// attentionForwardMma's work with both products on warpgroup MMA (sm_90a,
// D of 32 or 64): attentionForwardWgmma (64 or 128 queries a block, q
// held in registers or read from shared memory),
// attentionForwardWgmmaKeys128 (128 keys a step) and
// attentionForwardWgmmaOverlap (a tile's softmax under the next tile's
// scores). attentionForwardTensorCores and
// attentionForwardKeys128TensorCores, at the end, are what the emitter
// calls: these on sm_90a, attentionForwardMma elsewhere.
//
//===----------------------------------------------------------------------===//

#if GPTC_WGMMA
/// attentionForwardMma with both products on warpgroup MMA: each 4 warps
/// are one warpgroup, of 64 queries, and each product is one batch of D/16
/// (scores) or 4 (output) wgmma instructions on the 64 rows, B read from
/// shared memory directly (no ldmatrix). q, the probabilities and the
/// softmax stay as in attentionForwardMma, in the same fragment layout. D
/// is 32 or 64. kGroups warpgroups a block (--attention-forward=wgmma128:
/// 2, 128 queries) share each key tile's copies: a tile comes from L2 once
/// for 128 queries rather than 64. At GPT-2's sizes the one-warpgroup
/// kernel's copies move 428 MB from L2 a launch, 3.7 TB/s at its 116.5 µs
/// on an H200. kSharedQuery (--attention-forward=wgmma-ss): the scores'
/// wgmma reads q from its tile in shared memory rather than from held
/// fragments, 16 registers fewer (90 at D = 64, nvcc 13.0), so 5 blocks an
/// SM where 4 fit: ncu saw the 4-block kernels' schedulers with a warp
/// ready on 40% of cycles (docs/benchmarks.md, thirtieth session).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          int kGroups = 1, bool kSharedQuery = false, typename TO>
__device__ void attentionForwardWgmma(const bf16 *q, const bf16 *k,
                                      const bf16 *v, TO *out, float *lse,
                                      float scale) {
  static_assert(D == 32 || D == 64, "wgmma n is 32 or 64 here");
  static_assert(kGroups == 1 || kGroups == 2, "64 or 128 queries a block");
  static_assert(T % (64 * kGroups) == 0, "whole blocks of queries");
  using namespace mma;
  constexpr int kThreads = 128 * kGroups;
  // q keeps its own tile, and (unless kSharedQuery) its A fragments are
  // loaded on the first key tile and held, zeroed before the loop. Loaded once
  // before the loop and held, ptxas 13.0 gave the probabilities' A fragments
  // the same registers at D=64, so from the second key tile on wgmma multiplied
  // k by the last tile's probabilities instead of q (an H100 saw it, 78e8693;
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

  // q joins the first key tile's group and is read after the loop's first
  // wait and barrier.
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
  // The key tiles' copies walk down k's rows, v's beside them (as the
  // overlap forward's: given each tile's first row, ptxas worked out every
  // chunk's address again, 64-bit multiplies included).
  wg::WalkedRows<wg::OperandTile<D>, kThreads> keys(k + LK::head(h),
                                                    LK::kRowStride, 0);
  const i64 vBytes = keys.twinBytes(k, v);
  keys.load(sK[0]);
  keys.loadTwin(sV[0], vBytes);
  commitCopies();
  // (One warpgroup's tile by a constant index: read from shared memory,
  // its descriptors are then made in uniform registers, not moved there.)
  KeptRows<D, kSharedQuery, wg::CoreTile<D>> qRows{
      sQ[kGroups == 1 ? 0 : group]};
  for (int j0 = 0, buf = 0; j0 < keyEnd; j0 += 64, buf ^= 1) {
    if (j0 + 64 < keyEnd) { // the next tile into the other buffer
      keys.step(64);
      keys.load(sK[buf ^ 1]);
      keys.loadTwin(sV[buf ^ 1], vBytes);
      commitCopies();
      waitCopies<1>(); // this tile's copies, not the next one's
    } else {
      waitCopies<0>();
    }
    fenceProxyAsync(); // this thread's copies, to wgmma's reads
    __syncthreads();   // and every other thread's
    // (uniform in each warpgroup, and the barriers stay outside)
    if (kGroups == 1 || !kCausal || j0 <= i0) {
      if (j0 == 0)
        qRows.hold();
      float s[8][4];
      wgmmaFenceKept(s, qRows);
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        qRows.product(s, kc, sK[buf].keysAlongN(kc));
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
                                             const bf16 *v, TO *out, float *lse,
                                             float scale) {
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
                                             const bf16 *v, TO *out, float *lse,
                                             float scale) {
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
  auto scores = [&](float(&s)[8][4], int kb) {
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
#endif // GPTC_WGMMA

/// The tensor-core forward the target has, emitted for
/// --attention-forward=wgmma (and wgmma-overlap, kOverlap; wgmma128,
/// kGroups 2; wgmma-ss, kSharedQuery): warpgroup MMA on sm_90a for D of 32
/// or 64, else mma.sync (with 4 kGroups warps a block; same results up to
/// float32 summation order).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          bool kOverlap = false, int kGroups = 1, bool kSharedQuery = false,
          typename TO>
__device__ __forceinline__ void
attentionForwardTensorCores(const bf16 *q, const bf16 *k, const bf16 *v,
                            TO *out, float *lse, float scale) {
#if GPTC_WGMMA
  if constexpr ((D == 32 || D == 64) && kOverlap)
    attentionForwardWgmmaOverlap<D, T, S, kCausal, LQ, LK, LO>(q, k, v, out,
                                                               lse, scale);
  else if constexpr (D == 32 || D == 64)
    attentionForwardWgmma<D, T, S, kCausal, LQ, LK, LO, kGroups, kSharedQuery>(
        q, k, v, out, lse, scale);
  else
#endif
    attentionForwardMma<D, T, S, kCausal, LQ, LK, LO, 4 * kGroups>(q, k, v, out,
                                                                   lse, scale);
}

/// The forward emitted for --attention-forward=wgmma-k128: 128 keys a step
/// on sm_90a for D of 32 or 64, else the mma.sync forward (4 warps, 64
/// queries a block: the same grid).
template <int D, int T, int S, bool kCausal, class LQ, class LK, class LO,
          typename TO>
__device__ __forceinline__ void
attentionForwardKeys128TensorCores(const bf16 *q, const bf16 *k, const bf16 *v,
                                   TO *out, float *lse, float scale) {
#if GPTC_WGMMA
  if constexpr ((D == 32 || D == 64) && S % 128 == 0)
    attentionForwardWgmmaKeys128<D, T, S, kCausal, LQ, LK, LO>(q, k, v, out,
                                                               lse, scale);
  else
#endif
    attentionForwardMma<D, T, S, kCausal, LQ, LK, LO, 4>(q, k, v, out, lse,
                                                         scale);
}
