//===- cross_entropy.cuh - softmax cross-entropy, with its gradient -------===//
//
// One block per row of logits ([positions, V], the vocabulary padded to V;
// columns from kClasses on take no part). A row's max and sum of exp come
// from one online pass, combined across the block. The loss is the mean over the
// positions whose target is not kIgnore; the per-row terms go to scratch
// memory and the last block adds them in double in a fixed order (the CPU
// executor sums in row order). A target outside [0, kClasses) that is not ignored (the CPU
// executor's error) makes the loss NaN.
//
// crossEntropyWithGrad also writes dlogits = (softmax - onehot) · dloss / N
// from a second read of the row; padded columns and ignored rows get 0. With
// kStash (2-byte logits, the row in V·2 bytes of dynamic shared memory: GPT-
// 2's 100,608) the whole row is copied there at once with cp.async, and both
// passes read it from there, rather than the second hoping that the row is
// still in L2 after the other blocks' rows went through (two blocks an SM
// on 132 SMs hold 26 MiB of rows). Both passes give a thread the chunks it
// copied, so a thread reads back only what it wrote: no barrier. dlogits
// may be the logits' own buffer (the lowering writes it in place when
// nothing reads the logits afterwards): every read of the row happens
// before the barriers that end blockMaxSum, except the second pass's,
// where each thread reads the very chunks it then overwrites.
//
// The row is read in chunks of kVec consecutive elements (8 when V is a
// multiple of 8: one 16-byte load of bf16, two of float32), each thread
// kUnroll chunks at a time, all loads issued before any is used. A
// bandwidth-bound kernel needs bytes in flight: one 2-byte load at a time
// per thread, as a plain loop compiles (the online update depends on the
// previous element), keeps about a quarter of an H100's DRAM busy.
//
// With kMaxFirst (bf16 logits, the row stashed) the passes over the stash
// are three, each with one job an element: the row's max (two elements an
// instruction, max.bf16x2 on the packed pairs), then the sum of exp against
// it (one fma, one ex2, one add), then the gradient, whose 1/sum and scale
// sit in the exponent's offset, so that an element costs one fma and one
// ex2 before its rounding; the target's element is written again, less
// the scale, by the thread that wrote its chunk. The online form (one pass
// for the max and sum, rescaled each round, and a gradient pass that
// multiplies by 1/sum and the scale and tests each column against the
// target) compiles to about 1.7 times the instructions an element; ncu
// found it using 70% of its issue slots on an H200 (docs/benchmarks.md,
// thirtieth session). Both are compiled; the runtime times them at load
// (the "maxfirst" variant).
//
// Each element's exponential is one fma and one ex2.approx (fastExp2, in
// log2 units): expf's dozen instructions, twice per element (the sum, then
// the gradient), would make the kernel issue-bound near its bandwidth. It
// is within a few ulp of expf, far inside a bf16 gradient's rounding and
// the fp32 checks' 1e-4.
//
//===----------------------------------------------------------------------===//

constexpr int kCrossEntropyUnroll = 4;

/// kVec consecutive elements of `p` as floats (kVec 8: p 16-byte aligned).
template <int kVec, typename T>
__device__ __forceinline__ void loadChunk(const T *p, float (&x)[kVec]) {
  if constexpr (kVec == 8) {
    load8(p, x);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      x[i] = toFloat(p[i]);
  }
}
template <int kVec, typename T>
__device__ __forceinline__ void storeChunk(T *p, const float (&x)[kVec]) {
  if constexpr (kVec == 8) {
    store8(p, x);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      p[i] = fromFloat<T>(x[i]);
  }
}

/// One round of a thread: chunks first, first + blockDim.x, ... (kUnroll of
/// them, those below kChunks), all loads issued before any is used.
template <int kChunks, int kVec, typename T>
__device__ __forceinline__ void
loadRound(const T *row, int first, float (&x)[kCrossEntropyUnroll][kVec]) {
#pragma unroll
  for (int u = 0; u < kCrossEntropyUnroll; ++u) {
    int chunk = first + u * blockDim.x;
    if (chunk < kChunks)
      loadChunk<kVec>(row + i64(chunk) * kVec, x[u]);
  }
}

/// One past the last element of the round that starts at chunk `first`.
template <int kVec> __device__ __forceinline__ int roundEnd(int first) {
  return (first + (kCrossEntropyUnroll - 1) * int(blockDim.x) + 1) * kVec;
}

struct MaxSum {
  float max, sum;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  float m = fmaxf(a.max, b.max);
  if (m == -__int_as_float(0x7f800000))
    return {m, 0.0f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

/// The max of the loaded chunks' elements below kN, and their sum of exp
/// against it. kChecked: some element may lie at kN or beyond (the row's
/// last chunks); otherwise none is tested.
template <int kN, int kVec, bool kChecked>
__device__ __forceinline__ MaxSum
loadedMaxSum(const float (&x)[kCrossEntropyUnroll][kVec], int first) {
  auto inside = [&](int u, int e) {
    return !kChecked || (first + u * int(blockDim.x)) * kVec + e < kN;
  };
  float m = -__int_as_float(0x7f800000);
#pragma unroll
  for (int u = 0; u < kCrossEntropyUnroll; ++u)
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      if (inside(u, e))
        m = fmaxf(m, x[u][e]);
  float sum = 0.0f;
  const float offset = -m * log2e();
#pragma unroll
  for (int u = 0; u < kCrossEntropyUnroll; ++u)
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      if (inside(u, e))
        sum += fastExp2(fmaf(x[u][e], log2e(), offset));
  return {m, sum};
}

/// The max of row[0, kN) and the sum of exp(row[i] - max) over the block;
/// the row is read in chunks of kVec (kVec divides the row's length). Each
/// round's loaded elements are combined once (two exps per
/// kUnroll · kVec elements). kStashChunks > 0: the first kStashChunks
/// chunks (the whole row, padding included) are copied into `stash` with
/// cp.async, every chunk of a thread at once, and read from there: the
/// whole row in flight, one DRAM round trip a row, where rounds of kUnroll
/// loads a thread took three at GPT-2's 50,304 (12 or 13 chunks a thread
/// of 512), the block idle between them. Each thread reads back only the
/// chunks it copied: no barrier.
template <int kN, int kVec, int kStashChunks = 0, typename T>
__device__ MaxSum blockMaxSum(const T *row, T *stash = nullptr) {
  __shared__ MaxSum warps[32];
  constexpr int kChunks =
      kStashChunks > 0 ? kStashChunks : (kN + kVec - 1) / kVec;
  if constexpr (kStashChunks > 0) {
    static_assert(kVec * sizeof(T) == 16, "16-byte chunks");
    for (int chunk = threadIdx.x; chunk < kChunks; chunk += blockDim.x)
      copyAsync16(sharedAddress(stash + chunk * kVec), row + i64(chunk) * kVec);
    commitCopies();
    waitCopies<0>();
  }
  MaxSum ms{-__int_as_float(0x7f800000), 0.0f};
  for (int first = threadIdx.x; first < kChunks;
       first += kCrossEntropyUnroll * blockDim.x) {
    float x[kCrossEntropyUnroll][kVec];
    loadRound<kChunks>(kStashChunks > 0 ? stash : row, first, x);
    bool whole = roundEnd<kVec>(first) <= kN;
    ms = combine(ms, whole ? loadedMaxSum<kN, kVec, false>(x, first)
                           : loadedMaxSum<kN, kVec, true>(x, first));
  }
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, ms.max, o),
                 __shfl_xor_sync(0xffffffffu, ms.sum, o)};
    ms = combine(ms, other);
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0)
    warps[threadIdx.x / 32] = ms;
  __syncthreads();
  ms = warps[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w)
    ms = combine(ms, warps[w]);
  return ms;
}

/// How many targets are not ignored (with an ignore_index, every block
/// counts them: B·T int32 from L2).
template <i64 kRows, i64 kIgnore, bool kHasIgnore>
__device__ float countedRows(const int *targets) {
  if (!kHasIgnore)
    return float(kRows);
  __shared__ float scratch[32];
  float n = 0.0f;
  for (i64 r = threadIdx.x; r < kRows; r += blockDim.x)
    n += !(kHasIgnore && targets[r] == kIgnore);
  return blockSum(n, scratch);
}

/// Writes row `row`'s loss term (0 when ignored) to losses[row] and, in
/// the last of the `blocks` blocks that write a term, the mean to *loss.
/// kThreads: the most threads a block (its shared sums: 16 bytes each).
template <i64 kRows, i64 kIgnore, bool kHasIgnore, int kThreads = 512>
__device__ void finishLoss(const int *targets, float *loss, double *losses,
                           unsigned *counter, double term, i64 row,
                           unsigned blocks) {
  if (threadIdx.x == 0)
    losses[row] = term;
  if (!lastBlockToArrive(counter, blocks))
    return;
  // Each thread sums a fixed stride of rows, then a fixed tree: the same
  // order every run.
  __shared__ double totals[kThreads]; // blockDim.x: 128 or 512, or less
  __shared__ i64 counts[kThreads];
  double total = 0.0;
  i64 counted = 0;
  for (i64 r = threadIdx.x; r < kRows; r += blockDim.x) {
    total += __ldcg(losses + r);
    counted += !(kHasIgnore && targets[r] == kIgnore);
  }
  totals[threadIdx.x] = total;
  counts[threadIdx.x] = counted;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) {
      totals[threadIdx.x] += totals[threadIdx.x + half];
      counts[threadIdx.x] += counts[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    *loss = float(totals[0] / double(counts[0]));
}

template <int V, int kClasses, i64 kRows, i64 kIgnore, bool kHasIgnore,
          int kVec, typename TL>
__device__ void crossEntropy(const TL *logits, const int *targets, float *loss,
                             double *losses, unsigned *counter) {
  const i64 row = blockIdx.x;
  const int target = targets[row];
  double term = 0.0;
  if (!(kHasIgnore && target == kIgnore)) {
    MaxSum ms = blockMaxSum<kClasses, kVec>(logits + row * V);
    term = target >= 0 && target < kClasses
               ? double(logf(ms.sum)) + ms.max -
                     toFloat(logits[row * V + target])
               : __longlong_as_double(0x7ff8000000000000ll);
  }
  finishLoss<kRows, kIgnore, kHasIgnore>(targets, loss, losses, counter, term,
                                         row, gridDim.x);
}

/// The loaded chunks' dlogits, in place, and their stores. kChecked: some
/// chunk may lie beyond the row, or an element at kClasses or beyond.
template <int V, int kClasses, int kVec, bool kChecked, typename TG>
__device__ __forceinline__ void
storeGradients(float (&v)[kCrossEntropyUnroll][kVec], int first, TG *g,
               MaxSum ms, float inverseSum, int target, float scale) {
  const float offset = -ms.max * log2e();
#pragma unroll
  for (int u = 0; u < kCrossEntropyUnroll; ++u) {
    int chunk = first + u * blockDim.x;
    if (kChecked && chunk >= V / kVec)
      continue;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      int c = chunk * kVec + e;
      float p =
          fastExp2(fmaf(v[u][e], log2e(), offset)) * inverseSum;
      v[u][e] = (p - (c == target ? 1.0f : 0.0f)) * scale;
      if (kChecked && c >= kClasses)
        v[u][e] = 0.0f;
    }
    storeChunk<kVec>(g + i64(chunk) * kVec, v[u]);
  }
}

/// dlogits of one row: (exp(x - max) / sum - onehot) · scale, 0 from
/// kClasses on; every thread kUnroll chunks of kVec at a time.
template <int V, int kClasses, int kVec, typename TL, typename TG>
__device__ void rowGradient(const TL *x, TG *g, MaxSum ms, int target,
                            float scale) { // x: the row, or its stash
  constexpr int kChunks = V / kVec;
  const float inverseSum = 1.0f / ms.sum;
  for (int first = threadIdx.x; first < kChunks;
       first += kCrossEntropyUnroll * blockDim.x) {
    float v[kCrossEntropyUnroll][kVec];
    loadRound<kChunks>(x, first, v);
    bool whole = roundEnd<kVec>(first) <= kClasses;
    if (whole)
      storeGradients<V, kClasses, kVec, false>(v, first, g, ms, inverseSum,
                                               target, scale);
    else
      storeGradients<V, kClasses, kVec, true>(v, first, g, ms, inverseSum,
                                              target, scale);
  }
}

/// kMaxFirst's copy: chunks [first, last) of the row into `stash` (chunk c
/// at stash[c - first]), every chunk of a thread at once, committed as one
/// group. A thread later reads back only the chunks it copied.
__device__ __forceinline__ void stashChunks(const bf16 *row, uint4 *stash,
                                            int first, int last) {
  for (int chunk = first + threadIdx.x; chunk < last; chunk += blockDim.x)
    copyAsync16(sharedAddress(stash + (chunk - first)), row + i64(chunk) * 8);
  commitCopies();
}

/// kMaxFirst's first two passes over the stashed chunks [first, last) of a
/// row: the max of their classes over the block, then their sum of exp
/// against it ({-inf, 0} for chunks of padding alone). Chunks below kFull
/// hold classes only; chunk kFull, if kClasses is no multiple of 8, some.
template <int kClasses>
__device__ MaxSum stashedMaxThenSum(const uint4 *stash, int first, int last,
                                    float *scratch) {
  constexpr int kFull = kClasses / 8;
  const int full = min(last, kFull);
  const bool partialHere =
      kClasses % 8 != 0 && kFull >= first && kFull < last &&
      (kFull - first) % int(blockDim.x) == int(threadIdx.x);
  u32 pairs = 0xff80ff80u; // two -inf
#pragma unroll 4
  for (int chunk = first + threadIdx.x; chunk < full; chunk += blockDim.x) {
    const uint4 w = stash[chunk - first];
    pairs =
        maxBf16x2(pairs, maxBf16x2(maxBf16x2(w.x, w.y), maxBf16x2(w.z, w.w)));
  }
  float m =
      fmaxf(__uint_as_float(pairs << 16), __uint_as_float(pairs & 0xffff0000u));
  if (partialHere) {
    float x[8];
    unpack8<bf16>(stash[kFull - first], x);
#pragma unroll
    for (int e = 0; e < kClasses % 8; ++e)
      m = fmaxf(m, x[e]);
  }
  m = blockMax(m, scratch);
  if (m == -__int_as_float(0x7f800000)) // (no class: the same in all)
    return {m, 0.0f};
  const float offset = -m * log2e();
  float sum = 0.0f;
#pragma unroll 4
  for (int chunk = first + threadIdx.x; chunk < full; chunk += blockDim.x) {
    float x[8];
    unpack8<bf16>(stash[chunk - first], x);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      x[e] = fastExp2(fmaf(x[e], log2e(), offset));
    sum += ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]));
  }
  if (partialHere) {
    float x[8];
    unpack8<bf16>(stash[kFull - first], x);
#pragma unroll
    for (int e = 0; e < kClasses % 8; ++e)
      sum += fastExp2(fmaf(x[e], log2e(), offset));
  }
  return {m, blockSum(sum, scratch)};
}

/// kMaxFirst's gradient pass over the stashed chunks [first, last) (those
/// this thread copied): exp2(x·log2e + bias), bias = -max·log2e +
/// log2(|scale| / sum), is |scale|·softmax; negated where the scale is
/// (kNegate), 0 past the classes. The chunks of classes only go first, with
/// no test an element; then the last chunks, tested; then the thread that
/// wrote the target's chunk, if it is among them, writes the target's
/// element again, less the scale (the same operations on the same stashed
/// value, then the subtraction).
template <int V, int kClasses, bool kNegate, typename TG>
__device__ __forceinline__ void
stashedGradient(const uint4 *stash, TG *g, float bias, int target, float scale,
                int first = 0, int last = V / 8) {
  constexpr int kFull = kClasses / 8;
  auto scaledSoftmax = [&](float x) {
    const float p = fastExp2(fmaf(x, log2e(), bias));
    return kNegate ? -p : p;
  };
  const int full = min(last, kFull);
  int chunk = first + threadIdx.x;
#pragma unroll 4
  for (; chunk < full; chunk += blockDim.x) {
    float x[8];
    unpack8<bf16>(stash[chunk - first], x);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      x[e] = scaledSoftmax(x[e]);
    store8(g + chunk * 8, x);
  }
  for (; chunk < last; chunk += blockDim.x) { // the padding's columns
    float x[8];
    unpack8<bf16>(stash[chunk - first], x);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      x[e] = chunk * 8 + e < kClasses ? scaledSoftmax(x[e]) : 0.0f;
    store8(g + chunk * 8, x);
  }
  const int owner = target / 8; // the target's chunk
  if (target >= 0 && target < kClasses && owner >= first && owner < last &&
      (owner - first) % int(blockDim.x) == int(threadIdx.x)) {
    const bf16 *stashed = reinterpret_cast<const bf16 *>(stash);
    g[target] = fromFloat<TG>(
        scaledSoftmax(toFloat(stashed[target - first * 8])) - scale);
  }
}

/// The gradient pass, its sign (the scale's, the same for the whole block)
/// a template argument.
template <int V, int kClasses, typename TG>
__device__ __forceinline__ void
stashedGradientScaled(const uint4 *stash, TG *g, MaxSum ms, int target,
                      float scale, int first = 0, int last = V / 8) {
  // (log2 of each apart: scale / sum may leave float32's range.)
  const float bias = -ms.max * log2e() + (log2f(fabsf(scale)) - log2f(ms.sum));
  if (scale < 0.0f)
    stashedGradient<V, kClasses, true>(stash, g, bias, target, scale, first,
                                       last);
  else
    stashedGradient<V, kClasses, false>(stash, g, bias, target, scale, first,
                                        last);
}

template <int V, int kClasses, i64 kRows, i64 kIgnore, bool kHasIgnore,
          int kVec, bool kStash = false, bool kMaxFirst = false, typename TL,
          typename TG>
__device__ void crossEntropyWithGrad(const TL *logits, const int *targets,
                                     const float *dloss, float *loss,
                                     TG *dlogits, double *losses,
                                     unsigned *counter) {
  const i64 row = blockIdx.x;
  const int target = targets[row];
  const TL *x = logits + row * V;
  TG *g = dlogits + row * V;
  double term = 0.0;
  if (kHasIgnore && target == kIgnore) {
    const float zeros[kVec] = {};
    for (int chunk = threadIdx.x; chunk < V / kVec; chunk += blockDim.x)
      storeChunk<kVec>(g + i64(chunk) * kVec, zeros);
  } else {
    const bool valid = target >= 0 && target < kClasses;
    // Read before the row is overwritten (in place, another thread may
    // write this element): blockMaxSum's barriers order the read before
    // that. Kept in shared memory, not a register live across both passes
    // (at 64 registers that spills).
    __shared__ float targetLogit;
    if (threadIdx.x == 0)
      targetLogit = valid ? toFloat(x[target]) : 0.0f;
    extern __shared__ uint4 gptcDynamicShared[];
    TL *stash = kStash ? reinterpret_cast<TL *>(gptcDynamicShared) : nullptr;
    MaxSum ms;
    if constexpr (kMaxFirst) {
      static_assert(kStash && kVec == 8 && sizeof(TL) == 2, "bf16, stashed");
      __shared__ float scratch[32];
      stashChunks(x, gptcDynamicShared, 0, V / 8);
      waitCopies<0>();
      ms = stashedMaxThenSum<kClasses>(gptcDynamicShared, 0, V / 8, scratch);
    } else {
      ms = blockMaxSum<kClasses, kVec, kStash ? V / kVec : 0>(x, stash);
    }
    const float scale = *dloss / countedRows<kRows, kIgnore, kHasIgnore>(targets);
    if constexpr (kMaxFirst) {
      stashedGradientScaled<V, kClasses>(gptcDynamicShared, g, ms, target,
                                         scale);
    } else {
      rowGradient<V, kClasses, kVec>(kStash ? stash : x, g, ms, target, scale);
    }
    term = valid ? double(logf(ms.sum)) + ms.max - targetLogit
                 : __longlong_as_double(0x7ff8000000000000ll);
  }
  finishLoss<kRows, kIgnore, kHasIgnore>(targets, loss, losses, counter, term,
                                         row, gridDim.x);
}

/// The cluster form (sm_90; bf16 logits and gradient, the row stashed, the
/// max-first passes): kCtas blocks a row, launched as clusters of kCtas
/// along x, block rank r of row i at blockIdx.x = kCtas·i + r. Each block
/// stashes its slice of the row (kSlice chunks, V·2 / kCtas bytes of
/// shared memory, not V·2), takes its slice's max and then its sum of exp
/// against that max, and hands the pair to every block of the cluster
/// (st.shared::cluster into slot r of each block's `pairs`); after a
/// barrier.cluster each block combines the kCtas pairs in rank order (the
/// same sum in every block, run to run) and writes its slice's gradient.
/// Why: the max-first kernel holds a whole row (100,608 bytes at GPT-2's
/// vocabulary) a block, so an SM runs two rows, each in three phases (its
/// copies land, its passes, its stores), and the SM's DRAM traffic stops
/// whenever both are in their passes; a slice a block lets an SM run the
/// phases of kCtas times as many blocks in the same shared memory. One
/// barrier.cluster comes early, under the copies in flight: no block
/// stores into another's shared memory before that one has started. The
/// block whose slice holds the target writes the row's loss term (rank 0
/// where the row is ignored, or its target is out of range), so kRows
/// blocks count themselves at the loss's counter.
template <int V, int kClasses, i64 kRows, i64 kIgnore, bool kHasIgnore,
          int kCtas, typename TG>
__device__ void
crossEntropyWithGradCluster(const bf16 *logits, const int *targets,
                            const float *dloss, float *loss, TG *dlogits,
                            double *losses, unsigned *counter) {
  constexpr int kChunks = V / 8;
  constexpr int kSlice = (kChunks + kCtas - 1) / kCtas;
  const i64 row = blockIdx.x / kCtas;
  const int rank = int(blockIdx.x % kCtas);
  // This block's chunks: [first, last) of the row's.
  const int first = rank * kSlice, last = min(first + kSlice, kChunks);
  const int target = targets[row];
  const bf16 *x = logits + row * V;
  TG *g = dlogits + row * V;
  extern __shared__ uint4 gptcDynamicShared[];
  // Chunk c of the row at stash[c - first], then the cluster's pairs.
  uint4 *stash = gptcDynamicShared;
  MaxSum *pairs = reinterpret_cast<MaxSum *>(gptcDynamicShared + kSlice);
  __shared__ float scratch[32];
  const bool valid = target >= 0 && target < kClasses;
  const bool ignored = kHasIgnore && target == kIgnore;
  double term = 0.0;
  if (ignored) { // (every block of the cluster: one row)
    const float zeros[8] = {};
    for (int chunk = first + threadIdx.x; chunk < last; chunk += blockDim.x)
      store8(g + chunk * 8, zeros);
  } else {
    stashChunks(x, stash, first, last);
    clusterSync(); // every block of the cluster has started
    waitCopies<0>();
    const MaxSum mine =
        stashedMaxThenSum<kClasses>(stash, first, last, scratch);
    // Thread b hands this block's pair to block b's slot `rank`.
    if (int(threadIdx.x) < kCtas) {
      const u32 slot =
          clusterSharedAddress(sharedAddress(&pairs[rank]), threadIdx.x);
      storeSharedCluster(slot, mine.max);
      storeSharedCluster(slot + 4, mine.sum);
    }
    clusterSync();
    MaxSum ms = pairs[0];
    for (int r = 1; r < kCtas; ++r)
      ms = combine(ms, pairs[r]);
    const float scale =
        *dloss / countedRows<kRows, kIgnore, kHasIgnore>(targets);
    stashedGradientScaled<V, kClasses>(stash, g, ms, target, scale, first,
                                       last);
    const int owner = target / 8; // the target's chunk
    if (!valid)
      term = __longlong_as_double(0x7ff8000000000000ll);
    else if (owner >= first && owner < last)
      term = double(logf(ms.sum)) + ms.max -
             toFloat(reinterpret_cast<const bf16 *>(stash)[target - first * 8]);
  }
  // One block a row writes its term: the target's, else rank 0.
  const int writer = valid && !ignored ? (target / 8) / kSlice : 0;
  if (rank != writer)
    return;
  // (Sums for 512 / kCtas threads: no shared memory an SM's blocks lack.)
  finishLoss<kRows, kIgnore, kHasIgnore, 512 / kCtas>(
      targets, loss, losses, counter, term, row, unsigned(kRows));
}
