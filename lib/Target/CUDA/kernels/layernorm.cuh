//===- layernorm.cuh - layernorm forward and backward ---------------------===//
//
// One warp per row of C elements, the row held in registers (C/32 per
// lane), float32 statistics in two passes (mean, then the squared
// deviations), as lib/Executor/NormKernels.cpp does in double. The fused
// layernorm computes its row with a generated prologue instead of loading it.
//
// The backward's dgamma/dbeta sum over every row: each block sums its rows
// in a fixed order into a partial in module scratch memory, and the last
// block to finish adds the partials in block order, so the result does not
// depend on scheduling (no float atomics).
//
//===----------------------------------------------------------------------===//

template <int C> struct RowRegs {
  static constexpr int kPerLane = (C + 31) / 32;
};

template <int C, typename TX>
__device__ __forceinline__ void loadRow(const TX *row, float (&v)[RowRegs<C>::kPerLane]) {
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < RowRegs<C>::kPerLane; ++i) {
    int c = lane + 32 * i;
    v[i] = c < C ? toFloat(row[c]) : 0.0f;
  }
}

/// mean and 1/sqrt(var + eps) of a row in registers.
template <int C>
__device__ __forceinline__ void rowStats(const float (&v)[RowRegs<C>::kPerLane],
                                         float eps, float &mean, float &rstd) {
  int lane = threadIdx.x % 32;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < RowRegs<C>::kPerLane; ++i)
    s += v[i];
  mean = warpSum(s) / float(C);
  float q = 0.0f;
#pragma unroll
  for (int i = 0; i < RowRegs<C>::kPerLane; ++i) {
    float d = lane + 32 * i < C ? v[i] - mean : 0.0f;
    q += d * d;
  }
  rstd = 1.0f / sqrtf(warpSum(q) / float(C) + eps);
}

/// out = (x - mean) · rstd · gamma + beta for the row in registers.
template <int C, typename TG, typename TB, typename TO>
__device__ __forceinline__ void normaliseRow(const float (&v)[RowRegs<C>::kPerLane],
                                             const TG *gamma, const TB *beta,
                                             TO *out, float eps) {
  float mean, rstd;
  rowStats<C>(v, eps, mean, rstd);
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < RowRegs<C>::kPerLane; ++i) {
    int c = lane + 32 * i;
    if (c < C)
      out[c] = fromFloat<TO>((v[i] - mean) * rstd * toFloat(gamma[c]) +
                             toFloat(beta[c]));
  }
}

/// out = (x - mean) · rstd · gamma + beta; blockDim.x / 32 rows per block.
template <int C, i64 kRows, typename TX, typename TG, typename TB, typename TO>
__device__ void layernormForward(const TX *x, const TG *gamma, const TB *beta,
                                 TO *out, float eps) {
  i64 row = i64(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= kRows)
    return;
  float v[RowRegs<C>::kPerLane];
  loadRow<C>(x + row * C, v);
  normaliseRow<C>(v, gamma, beta, out + row * C, eps);
}

/// gpt.fused_layernorm: layernormForward of the row that a generated
/// prologue computes. `prologue(i)` evaluates the fused body at flat index
/// i of the [rows, C] iteration space, writes the body's other values and
/// returns the float32 value to normalise, which then stays in registers:
/// one pass over the operands instead of a write and a read of x.
template <int C, i64 kRows, typename Prologue, typename TG, typename TB,
          typename TO>
__device__ void layernormPrologueForward(const Prologue &prologue,
                                         const TG *gamma, const TB *beta,
                                         TO *out, float eps) {
  i64 row = i64(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= kRows)
    return;
  int lane = threadIdx.x % 32;
  float v[RowRegs<C>::kPerLane];
#pragma unroll
  for (int i = 0; i < RowRegs<C>::kPerLane; ++i) {
    int c = lane + 32 * i;
    v[i] = c < C ? prologue(row * C + c) : 0.0f;
  }
  normaliseRow<C>(v, gamma, beta, out + row * C, eps);
}

/// Stores dx at flat index i: layernorm_grad's plain dx.
template <typename T> struct StoreDx {
  T *dx;
  __device__ __forceinline__ void operator()(i64 i, float v) const {
    dx[i] = fromFloat<T>(v);
  }
};

/// With xhat = (x - mean)·rstd and d = dy·gamma:
///   dx = rstd · (d - mean(d) - xhat · mean(d·xhat)),
///   dgamma = Σ_rows dy·xhat, dbeta = Σ_rows dy.
/// `partials` holds gridDim.x · 2C floats, `counter` one zeroed unsigned.
template <int C, i64 kRows, typename TX, typename TG, typename TD,
          typename TDX, typename TDG, typename TDB>
__device__ void layernormBackward(const TX *x, const TG *gamma, const TD *dy,
                                  TDX *dx, TDG *dgamma, TDB *dbeta, float eps,
                                  float *partials, unsigned *counter);

/// layernormBackward with dx handed to `store(i, dx)` rather than written:
/// gpt.fused_layernorm_grad's generated epilogue (struct Epilogue) computes
/// its body from it and writes the body's values.
template <int C, i64 kRows, typename Store, typename TX, typename TG,
          typename TD, typename TDG, typename TDB>
__device__ void layernormBackwardWith(const TX *x, const TG *gamma,
                                      const TD *dy, const Store &store,
                                      TDG *dgamma, TDB *dbeta, float eps,
                                      float *partials, unsigned *counter) {
  constexpr int kPer = RowRegs<C>::kPerLane;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  float accG[kPer], accB[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    accG[i] = accB[i] = 0.0f;

  // Only x (then xhat) and the dgamma/dbeta sums stay in registers; dy and
  // gamma are read twice from L1/L2, which keeps large C from spilling.
  for (i64 row = i64(blockIdx.x) * warps + warp; row < kRows;
       row += i64(gridDim.x) * warps) {
    float v[kPer];
    loadRow<C>(x + row * C, v);
    float mean, rstd;
    rowStats<C>(v, eps, mean, rstd);
    const TD *dyRow = dy + row * C;
    float sumD = 0.0f, sumDX = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      int c = lane + 32 * i;
      v[i] = c < C ? (v[i] - mean) * rstd : 0.0f; // xhat
      float g = c < C ? toFloat(dyRow[c]) : 0.0f;
      float d = c < C ? g * toFloat(gamma[c]) : 0.0f;
      accG[i] += g * v[i];
      accB[i] += g;
      sumD += d;
      sumDX += d * v[i];
    }
    float meanD = warpSum(sumD) / float(C), meanDX = warpSum(sumDX) / float(C);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      int c = lane + 32 * i;
      if (c < C) {
        float d = toFloat(dyRow[c]) * toFloat(gamma[c]);
        store(row * C + c, rstd * (d - meanD - v[i] * meanDX));
      }
    }
  }

  // The block's partial: warps add theirs in warp order, in shared memory
  // (in global memory these 8 dependent passes were a large fixed cost of
  // every block), then it is copied out once.
  __shared__ float blockPartial[2 * C];
  for (int w = 0; w < warps; ++w) {
    if (w == warp) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        int c = lane + 32 * i;
        if (c < C) {
          blockPartial[c] = w == 0 ? accG[i] : blockPartial[c] + accG[i];
          blockPartial[C + c] = w == 0 ? accB[i] : blockPartial[C + c] + accB[i];
        }
      }
    }
    __syncthreads();
  }
  float *mine = partials + i64(blockIdx.x) * 2 * C;
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x)
    mine[c] = blockPartial[c];
  if (!lastBlockToArrive(counter, gridDim.x))
    return;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sg = 0.0f, sb = 0.0f;
    // In block order; unrolled so that several blocks' loads are in flight.
#pragma unroll 8
    for (unsigned b = 0; b < gridDim.x; ++b) {
      sg += __ldcg(partials + i64(b) * 2 * C + c);
      sb += __ldcg(partials + i64(b) * 2 * C + C + c);
    }
    dgamma[c] = fromFloat<TDG>(sg);
    dbeta[c] = fromFloat<TDB>(sb);
  }
}

template <int C, i64 kRows, typename TX, typename TG, typename TD,
          typename TDX, typename TDG, typename TDB>
__device__ void layernormBackward(const TX *x, const TG *gamma, const TD *dy,
                                  TDX *dx, TDG *dgamma, TDB *dbeta, float eps,
                                  float *partials, unsigned *counter) {
  layernormBackwardWith<C, kRows>(x, gamma, dy, StoreDx<TDX>{dx}, dgamma,
                                  dbeta, eps, partials, counter);
}
