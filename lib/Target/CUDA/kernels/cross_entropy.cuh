//===- cross_entropy.cuh - softmax cross-entropy, with its gradient -------===//
//
// One block per row of logits ([positions, V], the vocabulary padded to V;
// columns from kClasses on take no part). A row's max and sum of exp come
// from one online pass (each thread rescales its running sum when its max
// grows), combined across the block. The loss is the mean over the
// positions whose target is not kIgnore; the per-row terms go to scratch
// memory and the last block adds them in double in a fixed order (the CPU
// executor sums in row order). A target outside [0, kClasses) that is not ignored (the CPU
// executor's error) makes the loss NaN.
//
// crossEntropyWithGrad also writes dlogits = (softmax - onehot) · dloss / N
// from a second read of the row (it is still in L2); padded columns and
// ignored rows get 0.
//
//===----------------------------------------------------------------------===//

struct MaxSum {
  float max, sum;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  float m = fmaxf(a.max, b.max);
  if (m == -__int_as_float(0x7f800000))
    return {m, 0.0f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

/// The max of row[0, n) and the sum of exp(row[i] - max) over the block.
template <int kN, typename T>
__device__ MaxSum blockMaxSum(const T *row) {
  __shared__ MaxSum warps[32];
  MaxSum ms{-__int_as_float(0x7f800000), 0.0f};
  for (int c = threadIdx.x; c < kN; c += blockDim.x) {
    float x = toFloat(row[c]);
    if (x > ms.max) {
      ms.sum = ms.sum * expf(ms.max - x) + 1.0f;
      ms.max = x;
    } else {
      ms.sum += expf(x - ms.max);
    }
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

/// Writes this row's loss term (0 when ignored) to losses[row] and, in the
/// last block, the mean to *loss.
template <i64 kRows, i64 kIgnore, bool kHasIgnore>
__device__ void finishLoss(const int *targets, float *loss, double *losses,
                           unsigned *counter, double term) {
  if (threadIdx.x == 0)
    losses[blockIdx.x] = term;
  if (!lastBlockToArrive(counter, gridDim.x))
    return;
  // Each thread sums a fixed stride of rows, then a fixed tree: the same
  // order every run.
  __shared__ double totals[512]; // blockDim.x: 128 or 512
  __shared__ i64 counts[512];
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
          typename TL>
__device__ void crossEntropy(const TL *logits, const int *targets, float *loss,
                             double *losses, unsigned *counter) {
  const i64 row = blockIdx.x;
  const int target = targets[row];
  double term = 0.0;
  if (!(kHasIgnore && target == kIgnore)) {
    MaxSum ms = blockMaxSum<kClasses>(logits + row * V);
    term = target >= 0 && target < kClasses
               ? double(logf(ms.sum)) + ms.max -
                     toFloat(logits[row * V + target])
               : __longlong_as_double(0x7ff8000000000000ll);
  }
  finishLoss<kRows, kIgnore, kHasIgnore>(targets, loss, losses, counter, term);
}

template <int V, int kClasses, i64 kRows, i64 kIgnore, bool kHasIgnore,
          typename TL, typename TG>
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
    for (int c = threadIdx.x; c < V; c += blockDim.x)
      g[c] = fromFloat<TG>(0.0f);
  } else {
    MaxSum ms = blockMaxSum<kClasses>(x);
    const float scale = *dloss / countedRows<kRows, kIgnore, kHasIgnore>(targets);
    for (int c = threadIdx.x; c < V; c += blockDim.x) {
      float d = 0.0f;
      if (c < kClasses)
        d = (expf(toFloat(x[c]) - ms.max) / ms.sum - (c == target ? 1.0f : 0.0f)) *
            scale;
      g[c] = fromFloat<TG>(d);
    }
    term = target >= 0 && target < kClasses
               ? double(logf(ms.sum)) + ms.max - toFloat(x[target])
               : __longlong_as_double(0x7ff8000000000000ll);
  }
  finishLoss<kRows, kIgnore, kHasIgnore>(targets, loss, losses, counter, term);
}
