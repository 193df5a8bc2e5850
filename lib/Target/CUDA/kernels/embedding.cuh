//===- embedding.cuh - row gather and its deterministic scatter-add -------===//
//
// embeddingForward copies table rows; an id outside [0, V) (the CPU
// executor's error) gives a zero row here, since a kernel cannot throw.
//
// embeddingBackward: block b owns the table rows [b·R, (b+1)·R) and sums
// them in shared memory (float32): it scans every id in position order and
// adds the dy row of each id it owns, then writes its rows once. Each table
// row is summed by one block in position order, so the result is
// deterministic without atomics or a sort. The ids (B·T int32) stay in L2
// across blocks. With an addend (float32, the tied lm_head's gradient) a
// row is written as addend + sum, the bits of the sum and an add after it.
//
//===----------------------------------------------------------------------===//

template <int C, i64 kPositions, int kV, typename TT, typename TO>
__device__ void embeddingForward(const TT *table, const int *ids, TO *out) {
  i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= kPositions * C)
    return;
  i64 p = i / C;
  int c = int(i % C);
  int id = ids[p];
  out[i] = fromFloat<TO>(id >= 0 && id < kV ? toFloat(table[i64(id) * C + c])
                                            : 0.0f);
}

/// blockDim.x == 128.
template <int C, i64 kPositions, int kV, int kRowsPerBlock, typename TD,
          typename TO>
__device__ void embeddingBackward(const TD *dy, const int *ids, TO *out,
                                  const float *addend = nullptr) {
  const int first = blockIdx.x * kRowsPerBlock;
  const int last = min(first + kRowsPerBlock, kV);
  __shared__ float acc[kRowsPerBlock * C];
  __shared__ int hits[128];
  __shared__ int warpCounts[4];
  for (int i = threadIdx.x; i < kRowsPerBlock * C; i += blockDim.x)
    acc[i] = 0.0f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (i64 base = 0; base < kPositions; base += blockDim.x) {
    i64 p = base + threadIdx.x;
    int id = p < kPositions ? ids[p] : -1;
    bool mine = id >= first && id < last;
    // Compact this chunk's hits, keeping position order.
    unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0)
      warpCounts[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, numHits = 0;
    for (int w = 0; w < 4; ++w) {
      offset += w < warp ? warpCounts[w] : 0;
      numHits += warpCounts[w];
    }
    if (mine)
      hits[offset + __popc(ballot & ((1u << lane) - 1u))] = threadIdx.x;
    __syncthreads();
    // Threads own columns, so each acc element is updated by one thread in
    // hit order.
    for (int h = 0; h < numHits; ++h) {
      i64 pos = base + hits[h];
      float *row = acc + (ids[pos] - first) * C;
      for (int c = threadIdx.x; c < C; c += blockDim.x)
        row[c] += toFloat(dy[pos * C + c]);
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < (last - first) * C; i += blockDim.x) {
    i64 at = i64(first) * C + i;
    out[at] = fromFloat<TO>(addend ? __fadd_rn(addend[at], acc[i]) : acc[i]);
  }
}
