//===- embedding.cuh - row gather and its deterministic scatter-add -------===//
//
// embeddingForward copies table rows; an id outside [0, V) (the CPU
// executor's error) gives a zero row here, since a kernel cannot throw.
//
// embeddingBackward*: block b owns the table rows [b·R, (b+1)·R): it scans
// every id in position order, 512 a round (4 per thread), and adds the dy
// row of each id it owns. Each table row is summed by one block in
// position order, so the result is deterministic without atomics on the
// sums or a sort. The ids (B·T int32) stay in L2 across blocks.
// InShared sums in shared memory and writes its rows once (any result
// type); InPlace (float32 results) sums in the result itself, so its
// blocks own many more rows and the scan is done far fewer times (GPT-2's
// wte gradient: 393 blocks, was 6288). With an addend (float32, the tied
// lm_head's gradient) a row is written as addend + sum, the bits of the
// sum and an add after it.
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

/// One round of the id scan: ids [base, base + 512), 4 a thread, `next`
/// holding them (loaded a round ahead). Collects the positions whose id is
/// in [first, last) into `hits` in position order, each as local row ·
/// kRound + position in the round, and returns how many; 0 (after one
/// barrier) when the round has none, which is most rounds. Ends with a
/// barrier after `hits` is written. blockDim.x == 128.
template <i64 kPositions>
__device__ __forceinline__ int collectRoundHits(const int *ids, i64 base,
                                                bool aligned, int first,
                                                int last, int (&next)[4],
                                                int *hits, int *warpCounts) {
  constexpr int kPerThread = 4, kRound = 128 * kPerThread;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
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
    return 0;
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
      hits[offset++] = (id[k] - first) * kRound + threadIdx.x * kPerThread + k;
  __syncthreads();
  return numHits;
}

/// Narrow results: the block's rows summed in shared memory (float32), then
/// written once. blockDim.x == 128.
template <int C, i64 kPositions, int kV, int kRowsPerBlock, typename TD,
          typename TO>
__device__ void embeddingBackwardInShared(const TD *dy, const int *ids,
                                          TO *out,
                                          const float *addend = nullptr) {
  constexpr int kRound = 512;
  const int first = blockIdx.x * kRowsPerBlock;
  const int last = min(first + kRowsPerBlock, kV);
  __shared__ float acc[kRowsPerBlock * C];
  __shared__ int hits[kRound]; // local row · kRound + position in the round
  __shared__ int warpCounts[4];
  for (int i = threadIdx.x; i < kRowsPerBlock * C; i += blockDim.x)
    acc[i] = 0.0f;
  const bool aligned = reinterpret_cast<unsigned long long>(ids) % 16 == 0;
  int next[4];
  loadChunkIds<kPositions>(ids, i64(threadIdx.x) * 4, aligned, next);
  for (i64 base = 0; base < kPositions; base += kRound) {
    int numHits = collectRoundHits<kPositions>(ids, base, aligned, first,
                                               last, next, hits, warpCounts);
    // Threads own columns, so each acc element is updated by one thread in
    // hit order.
    for (int h = 0; h < numHits; ++h) {
      i64 pos = base + hits[h] % kRound;
      float *row = acc + (hits[h] / kRound) * C;
      for (int c = threadIdx.x; c < C; c += blockDim.x)
        row[c] += toFloat(dy[pos * C + c]);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < (last - first) * C; i += blockDim.x) {
    i64 at = i64(first) * C + i;
    out[at] = fromFloat<TO>(addend ? __fadd_rn(addend[at], acc[i]) : acc[i]);
  }
}

/// Float32 results: the rows are summed where they end up, so a block can
/// own many (kRowsPerBlock; shared memory holds only the hit lists) and
/// far fewer blocks scan the ids. Threads own columns in every row, so
/// each element is still updated by one thread in position order: a row's
/// first hit writes it, later ones add, and the addend comes last (the
/// same bits as embeddingBackwardInShared). Rows with no hit get the
/// addend or 0. blockDim.x == 128.
template <int C, i64 kPositions, int kV, int kRowsPerBlock, typename TD>
__device__ void embeddingBackwardInPlace(const TD *dy, const int *ids,
                                         float *out,
                                         const float *addend = nullptr) {
  constexpr int kRound = 512;
  const int first = blockIdx.x * kRowsPerBlock;
  const int last = min(first + kRowsPerBlock, kV);
  __shared__ int hits[kRound]; // local row · kRound + position in the round
  __shared__ int warpCounts[4];
  // ints, not bools: the host race checker watches 2-byte granules.
  __shared__ int written[kRowsPerBlock];
  __shared__ int overwrite[kRound]; // per hit: its row's first, so write
  for (int r = threadIdx.x; r < kRowsPerBlock; r += blockDim.x)
    written[r] = false;
  const bool aligned = reinterpret_cast<unsigned long long>(ids) % 16 == 0;
  int next[4];
  loadChunkIds<kPositions>(ids, i64(threadIdx.x) * 4, aligned, next);
  for (i64 base = 0; base < kPositions; base += kRound) {
    int numHits = collectRoundHits<kPositions>(ids, base, aligned, first,
                                               last, next, hits, warpCounts);
    if (numHits == 0)
      continue;
    // Which hit writes its row: one thread walks the round's hits in order
    // (a few a round; 512 at most).
    if (threadIdx.x == 0)
      for (int h = 0; h < numHits; ++h) {
        int r = hits[h] / kRound;
        overwrite[h] = !written[r];
        written[r] = true;
      }
    __syncthreads();
    for (int h = 0; h < numHits; ++h) {
      i64 pos = base + hits[h] % kRound;
      float *row = out + i64(first + hits[h] / kRound) * C;
      const bool write = overwrite[h];
      for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float g = toFloat(dy[pos * C + c]);
        row[c] = write ? g : row[c] + g;
      }
    }
  }
  // written[] was last written before a round's barrier, and each thread
  // reads back only its own columns of out: no barrier needed here.
  for (int r = 0; r < last - first; ++r) {
    i64 at = i64(first + r) * C;
    const bool hit = written[r];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float sum = hit ? out[at + c] : 0.0f;
      out[at + c] = addend ? __fadd_rn(addend[at + c], sum) : sum;
    }
  }
}
