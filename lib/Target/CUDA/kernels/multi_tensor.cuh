//===- multi_tensor.cuh - the grid-wide sum of gpt.multi_tensor_reduce ----===//
//
// Each thread has summed its terms in double; the block adds its threads'
// sums in a fixed tree, writes the block's partial, and the last block to
// arrive adds all partials in block order (a strided slice per thread, then
// the same tree) and writes the float32 result. No float atomics: the
// result depends only on the grid, which is fixed per launch.
//
//===----------------------------------------------------------------------===//

/// The block's threads' `mine` added in a fixed tree through `tile`; the
/// sum is in tile[0] for every thread after the last barrier.
template <int kThreads>
__device__ __forceinline__ void blockTreeSum(double mine, double *tile) {
  tile[threadIdx.x] = mine;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half)
      tile[threadIdx.x] += tile[threadIdx.x + half];
    __syncthreads();
  }
}

template <int kThreads, typename TO>
__device__ void multiTensorSum(double mine, TO *out, double *partials,
                               unsigned *counter, unsigned blocks) {
  __shared__ double tile[kThreads];
  blockTreeSum<kThreads>(mine, tile);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = tile[0];
  if (!lastBlockToArrive(counter, blocks))
    return;
  double s = 0.0;
  for (unsigned b = threadIdx.x; b < blocks; b += kThreads)
    s += __ldcg(partials + b);
  blockTreeSum<kThreads>(s, tile);
  if (threadIdx.x == 0)
    out[0] = fromFloat<TO>(float(tile[0]));
}
