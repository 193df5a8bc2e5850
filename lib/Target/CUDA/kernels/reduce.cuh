//===- reduce.cuh - gpt.reduce_sum down to a broadcastable shape ----------===//
//
// The K result elements each sum R input elements; `Index::offset(k, r)`
// (generated per launch) is the input offset of the r-th term of result k.
// A block is kKT x (256 / kKT) threads: kKT consecutive results (kKT = 32
// when the innermost input dimension is kept, so warps read contiguously;
// 256, a result a thread, when there are many results of few terms; 1
// otherwise) times a strip of terms. With kVec > 1 each of the kKT threads
// takes kVec adjacent results, one 16-byte load a term (8 bf16 or 4
// floats: a warp reads 512 bytes of a row, where 2-byte loads read 64;
// c_attn's q bias gradient, 16,384 rows of 768 in place, took 17.8 µs a
// call on an H200 that way, 29% of its DRAM floor). blockIdx.y splits the
// terms into kSplits slices; with several slices each block writes a
// partial and the last block of a column adds them in slice order. Every
// sum is float32 in a fixed order: deterministic. attentionBiasGrad is
// two such sums (dq's in place, dout's) and a third of zeros, one launch.
//
//===----------------------------------------------------------------------===//

/// The kVec elements at p as floats: one load (kVec 1), or one 16-byte
/// access (kVec 4 of 4-byte elements, 8 of 2-byte ones).
template <int kVec, typename T>
__device__ __forceinline__ void loadTerms(const T *p, float (&x)[kVec]) {
  if constexpr (kVec == 1)
    x[0] = toFloat(*p);
  else if constexpr (kVec == 4)
    load4(p, x);
  else
    load8(p, x);
}

/// The kKT · kVec results from column block `column` (reduceSum's
/// blockIdx.x), blockIdx.y's slice of their terms, through the block's
/// `tile`; with several slices, partials [kSplits, K] and counters (a
/// column block each) as reduceSum's.
template <typename Index, i64 K, i64 R, int kKT, int kSplits, int kVec,
          typename TI, typename TO>
__device__ __forceinline__ void
reduceSumColumns(const TI *in, TO *out, float *partials, unsigned *counters,
                 int column, float (&tile)[kVec][256]) {
  static_assert(K % kVec == 0, "whole vectors of results");
  constexpr int kRT = 256 / kKT;
  const int kt = threadIdx.x % kKT, rt = threadIdx.x / kKT;
  const i64 k = (i64(column) * kKT + kt) * kVec; // this thread's first
  float s[kVec] = {};
  if (k < K) {
#pragma unroll 8
    for (i64 r = i64(blockIdx.y) * kRT + rt; r < R; r += i64(kRT) * kSplits) {
      float x[kVec];
      loadTerms(in + Index::offset(k, r), x);
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        s[e] += x[e];
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e)
    tile[e][threadIdx.x] = s[e];
  __syncthreads();
  for (int half = kRT / 2; half > 0; half /= 2) {
    if (rt < half)
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        tile[e][threadIdx.x] += tile[e][threadIdx.x + half * kKT];
    __syncthreads();
  }
  if (kSplits == 1) {
    if (rt == 0 && k < K)
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out[k + e] = fromFloat<TO>(tile[e][kt]);
    return;
  }
  if (rt == 0 && k < K)
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      partials[i64(blockIdx.y) * K + k + e] = tile[e][kt];
  if (!lastBlockToArrive(counters + column, kSplits))
    return;
  if (rt == 0 && k < K)
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      float total = 0.0f;
      for (int y = 0; y < kSplits; ++y)
        total += __ldcg(partials + i64(y) * K + k + e);
      out[k + e] = fromFloat<TO>(total);
    }
}

template <typename Index, i64 K, i64 R, int kKT, int kSplits, int kVec,
          typename TI, typename TO>
__device__ void reduceSum(const TI *in, TO *out, float *partials,
                          unsigned *counters) {
  __shared__ float tile[kVec][256];
  reduceSumColumns<Index, K, R, kKT, kSplits, kVec>(in, out, partials, counters,
                                                    blockIdx.x, tile);
}

/// Term r of result k: row r's element k, rows kStride apart (dq: the
/// first third of each row of dqkv; dout: whole rows).
template <i64 kStride> struct RowsOf {
  static __device__ __forceinline__ i64 offset(i64 k, i64 r) {
    return r * kStride + k;
  }
};

/// gpt.attention_bias_grad: out [3C] = dq's column sums (the first C of
/// each of dqkv's R rows of 3C), zeros, dout's ([R, C]) column sums.
/// blockIdx.x: kColumns column blocks of dq's sums, as many of dout's,
/// then one that writes the zeros; blockIdx.y splits the terms as in
/// reduceSum (partials [2, kSplits, C], counters [2, kColumns]). Each sum
/// is reduceSum's, in its fixed order.
template <i64 C, i64 R, int kSplits, int kVec, typename TQ, typename TD,
          typename TO>
__device__ void attentionBiasGrad(const TQ *dqkv, const TD *dout, TO *out,
                                  float *partials, unsigned *counters) {
  constexpr int kColumns = int((C + 32 * kVec - 1) / (32 * kVec));
  __shared__ float tile[kVec][256]; // (one for both sums' blocks)
  const int x = blockIdx.x;
  if (x < kColumns) {
    reduceSumColumns<RowsOf<3 * C>, C, R, 32, kSplits, kVec>(
        dqkv, out, partials, counters, x, tile);
  } else if (x < 2 * kColumns) {
    reduceSumColumns<RowsOf<C>, C, R, 32, kSplits, kVec>(
        dout, out + 2 * C, partials ? partials + kSplits * C : nullptr,
        counters ? counters + kColumns : nullptr, x - kColumns, tile);
  } else if (blockIdx.y == 0) {
    for (i64 k = threadIdx.x; k < C; k += blockDim.x)
      out[C + k] = fromFloat<TO>(0.0f);
  }
}
