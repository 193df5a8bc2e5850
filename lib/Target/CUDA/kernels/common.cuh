//===- common.cuh - warp and block reductions -----------------------------===//
//
// Shared by the template kernels; built on the CUDA built-ins only.
//
//===----------------------------------------------------------------------===//

/// e^x = 2^(x · log2 e): the softmaxes (attention, the loss) exponentiate
/// with fastExp2 (types.cuh) in log2 units. A function, not a constant:
/// kernels that do not use it compile without an unused-variable warning.
__device__ __forceinline__ constexpr float log2e() {
  return 1.4426950408889634f;
}

__device__ __forceinline__ float warpSum(float x) {
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warpMax(float x) {
  for (int o = 16; o > 0; o >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

/// Each warp's `x` (lane 0's) into scratch[warp], between two barriers:
/// the first because scratch may still be read from a previous call, the
/// second so that every thread then reads every warp's.
__device__ __forceinline__ void warpsToScratch(float x, float *scratch) {
  __syncthreads();
  if (threadIdx.x % 32 == 0)
    scratch[threadIdx.x / 32] = x;
  __syncthreads();
}

/// The sum of `x` over the block, the same in every thread, in a fixed
/// order (deterministic). `scratch` holds 32 floats; blockDim.x % 32 == 0.
__device__ __forceinline__ float blockSum(float x, float *scratch) {
  warpsToScratch(warpSum(x), scratch);
  float total = 0.0f;
  for (int w = 0; w < int(blockDim.x / 32); ++w)
    total += scratch[w];
  return total;
}

/// The max of `x` over the block, the same in every thread; as blockSum.
__device__ __forceinline__ float blockMax(float x, float *scratch) {
  warpsToScratch(warpMax(x), scratch);
  float m = scratch[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w)
    m = fmaxf(m, scratch[w]);
  return m;
}

/// Whether this block is the last of `blocks` to arrive at `counter` (the
/// grid-wide reductions finish in that block). Resets the counter for the
/// next launch. Callers write their partial results before calling.
__device__ __forceinline__ bool lastBlockToArrive(unsigned *counter,
                                                  unsigned blocks) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned ticket = atomicAdd(counter, 1u);
    last = ticket == blocks - 1;
    if (last)
      *counter = 0;
  }
  __syncthreads();
  if (last)
    __threadfence();
  return last;
}

/// kW consecutive elements as one access: load4/store4 (16-byte float32,
/// 8-byte bf16) when kW is 4, the element itself when 1. p is aligned to
/// kW elements.
template <int kW, typename T>
__device__ __forceinline__ void loadW(const T *p, float (&x)[kW]) {
  if constexpr (kW == 4)
    load4(p, x);
  else
    for (int e = 0; e < kW; ++e)
      x[e] = toFloat(p[e]);
}
template <int kW, typename T>
__device__ __forceinline__ void storeW(T *p, const float (&x)[kW]) {
  if constexpr (kW == 4)
    store4(p, x);
  else
    for (int e = 0; e < kW; ++e)
      p[e] = fromFloat<T>(x[e]);
}
/// loadW of float32 at L2 (ld.global.cg): partial results other blocks
/// wrote in this launch.
template <int kW>
__device__ __forceinline__ void loadWAtL2(const float *p, float (&x)[kW]) {
  if constexpr (kW == 4)
    load4AtL2(p, x);
  else
    for (int e = 0; e < kW; ++e)
      x[e] = __ldcg(p + e);
}
/// kW consecutive float32 in shared memory, aligned to kW elements.
template <int kW>
__device__ __forceinline__ void loadSharedW(const float *p, float (&x)[kW]) {
  if constexpr (kW == 4)
    loadShared4(p, x);
  else
    for (int e = 0; e < kW; ++e)
      x[e] = p[e];
}
template <int kW>
__device__ __forceinline__ void storeSharedW(float *p, const float (&x)[kW]) {
  if constexpr (kW == 4)
    storeShared4(p, x);
  else
    for (int e = 0; e < kW; ++e)
      p[e] = x[e];
}

/// For each i < n (a multiple of kW), dst(i, s) with s[e] the sum over
/// b < count of src[b·n + i + e], added in b order (deterministic); the
/// block's threads take kW consecutive i at a time. src holds partial
/// sums that other blocks wrote in this launch.
template <int kW, typename Dst>
__device__ __forceinline__ void sumPartialsInOrder(const float *src,
                                                   unsigned count, int n,
                                                   const Dst &dst) {
  for (int i = threadIdx.x * kW; i < n; i += blockDim.x * kW) {
    float s[kW];
    for (int e = 0; e < kW; ++e)
      s[e] = 0.0f;
    // Unrolled so that several partials' loads are in flight.
#pragma unroll 8
    for (unsigned b = 0; b < count; ++b) {
      float t[kW];
      loadWAtL2<kW>(src + i64(b) * n + i, t);
      for (int e = 0; e < kW; ++e)
        s[e] += t[e];
    }
    dst(i, s);
  }
}
