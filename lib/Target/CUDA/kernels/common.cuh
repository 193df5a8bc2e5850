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

/// The sum of `x` over the block, the same in every thread, in a fixed
/// order (deterministic). `scratch` holds 32 floats; blockDim.x % 32 == 0.
__device__ __forceinline__ float blockSum(float x, float *scratch) {
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  x = warpSum(x);
  __syncthreads(); // scratch may still be read from a previous call
  if (lane == 0)
    scratch[warp] = x;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < int(blockDim.x / 32); ++w)
    total += scratch[w];
  return total;
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
