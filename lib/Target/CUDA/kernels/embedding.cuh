//===- embedding.cuh - row gather and its deterministic scatter-add -------===//
//
// embeddingForward copies table rows; an id outside [0, V) (the CPU
// executor's error) gives a zero row here, since a kernel cannot throw.
//
// embeddingBackward: block b owns the table rows [b·R, (b+1)·R) and sums
// them in shared memory (float32): it scans every id in position order, 512
// a round (4 per thread), and adds the dy row of each id it owns, then
// writes its rows once. Each table
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

/// Ids of the positions [at, at + 4): -1 past the end (no row owns it).
/// One 16-byte load when the ids are 16-byte aligned and the 4 are whole.
template <i64 kPositions>
__device__ __forceinline__ void loadChunkIds(const int *ids, i64 at,
                                             bool aligned, int (&id)[4]) {
  if (kPositions % 4 == 0 && aligned) {
    if (at < kPositions)
      loadIds4(ids + at, id);
    else
      id[0] = id[1] = id[2] = id[3] = -1;
    return;
  }
  for (int k = 0; k < 4; ++k)
    id[k] = at + k < kPositions ? ids[at + k] : -1;
}

/// blockDim.x == 128.
template <int C, i64 kPositions, int kV, int kRowsPerBlock, typename TD,
          typename TO>
__device__ void embeddingBackward(const TD *dy, const int *ids, TO *out,
                                  const float *addend = nullptr) {
  // Each thread reads 4 consecutive ids a round, and the next round's are
  // loaded before this round's are compacted. Most rounds hold no id of
  // this block's rows (GPT-2: 8 of 50257), and those cost one barrier.
  constexpr int kPerThread = 4, kRound = 128 * kPerThread;
  // Columns a thread owns, and hits whose loads are in flight together
  // (at most 48 registers of them).
  constexpr int kCols = (C + 127) / 128;
  constexpr int kAhead = kCols >= 48 ? 1 : 48 / kCols < 8 ? 48 / kCols : 8;
  const int first = blockIdx.x * kRowsPerBlock;
  const int last = min(first + kRowsPerBlock, kV);
  __shared__ float acc[kRowsPerBlock * C];
  __shared__ int hits[kRound]; // local row · kRound + position in the round
  __shared__ int warpCounts[4];
  for (int i = threadIdx.x; i < kRowsPerBlock * C; i += blockDim.x)
    acc[i] = 0.0f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool aligned = reinterpret_cast<unsigned long long>(ids) % 16 == 0;
  int next[kPerThread];
  loadChunkIds<kPositions>(ids, i64(threadIdx.x) * kPerThread, aligned, next);
  for (i64 base = 0; base < kPositions; base += kRound) {
    int id[kPerThread];
    unsigned mine[kPerThread];
    bool any = false;
    for (int k = 0; k < kPerThread; ++k) {
      id[k] = next[k];
      mine[k] = id[k] >= first && id[k] < last;
      any |= mine[k];
    }
    loadChunkIds<kPositions>(ids, base + kRound + i64(threadIdx.x) * kPerThread,
                             aligned, next);
    // The barrier also ends the previous round's reads of hits.
    if (!__syncthreads_or(any))
      continue;
    // Compact this round's hits in position order: thread by thread, and
    // within a thread its 4 positions in order.
    int below = 0, inWarp = 0;
    for (int k = 0; k < kPerThread; ++k) {
      unsigned ballot = __ballot_sync(0xffffffffu, mine[k]);
      below += __popc(ballot & ((1u << lane) - 1u));
      inWarp += __popc(ballot);
    }
    if (lane == 0)
      warpCounts[warp] = inWarp;
    __syncthreads();
    int offset = below, numHits = 0;
    for (int w = 0; w < 4; ++w) {
      offset += w < warp ? warpCounts[w] : 0;
      numHits += warpCounts[w];
    }
    for (int k = 0; k < kPerThread; ++k)
      if (mine[k])
        hits[offset++] =
            (id[k] - first) * kRound + threadIdx.x * kPerThread + k;
    __syncthreads();
    // Threads own columns, so each acc element is updated by one thread in
    // hit order. A frequent token's block adds hundreds of rows in a row:
    // kAhead hits' dy loads are issued together, then added in order.
    for (int h0 = 0; h0 < numHits; h0 += kAhead) {
      float g[kAhead][kCols];
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (h0 + j < numHits) {
          const i64 pos = base + hits[h0 + j] % kRound;
#pragma unroll
          for (int k = 0; k < kCols; ++k) {
            const int c = threadIdx.x + 128 * k;
            g[j][k] = c < C ? toFloat(dy[pos * C + c]) : 0.0f;
          }
        }
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (h0 + j < numHits) {
          float *row = acc + (hits[h0 + j] / kRound) * C;
#pragma unroll
          for (int k = 0; k < kCols; ++k) {
            const int c = threadIdx.x + 128 * k;
            if (c < C)
              row[c] += g[j][k];
          }
        }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < (last - first) * C; i += blockDim.x) {
    i64 at = i64(first) * C + i;
    out[at] = fromFloat<TO>(addend ? __fadd_rn(addend[at], acc[i]) : acc[i]);
  }
}
