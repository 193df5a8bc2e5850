//===- reduce.cuh - gpt.reduce_sum down to a broadcastable shape ----------===//
//
// The K result elements each sum R input elements; `Index::offset(k, r)`
// (generated per launch) is the input offset of the r-th term of result k.
// A block is kKT x (256 / kKT) threads: kKT consecutive results (kKT = 32
// when the innermost input dimension is kept, so warps read contiguously;
// 256, a result a thread, when there are many results of few terms; 1
// otherwise) times a strip of terms. blockIdx.y splits the terms into
// kSplits slices; with several slices each block writes a partial and the
// last block of a column adds them in slice order. Every sum is float32 in
// a fixed order: deterministic.
//
//===----------------------------------------------------------------------===//

template <typename Index, i64 K, i64 R, int kKT, int kSplits, typename TI,
          typename TO>
__device__ void reduceSum(const TI *in, TO *out, float *partials,
                          unsigned *counters) {
  constexpr int kRT = 256 / kKT;
  __shared__ float tile[256];
  const int kt = threadIdx.x % kKT, rt = threadIdx.x / kKT;
  const i64 k = i64(blockIdx.x) * kKT + kt;
  float s = 0.0f;
  if (k < K) {
#pragma unroll 8
    for (i64 r = i64(blockIdx.y) * kRT + rt; r < R; r += i64(kRT) * kSplits)
      s += toFloat(in[Index::offset(k, r)]);
  }
  tile[threadIdx.x] = s;
  __syncthreads();
  for (int half = kRT / 2; half > 0; half /= 2) {
    if (rt < half)
      tile[threadIdx.x] += tile[threadIdx.x + half * kKT];
    __syncthreads();
  }
  if (kSplits == 1) {
    if (rt == 0 && k < K)
      out[k] = fromFloat<TO>(tile[kt]);
    return;
  }
  if (rt == 0 && k < K)
    partials[i64(blockIdx.y) * K + k] = tile[kt];
  if (!lastBlockToArrive(counters + blockIdx.x, kSplits))
    return;
  if (rt == 0 && k < K) {
    float total = 0.0f;
    for (int y = 0; y < kSplits; ++y)
      total += __ldcg(partials + i64(y) * K + k);
    out[k] = fromFloat<TO>(total);
  }
}
