//===- embedding.cuh - row gather and its deterministic scatter-add -------===//
//
// embeddingForward copies table rows; an id outside [0, V) (the CPU
// executor's error) gives a zero row here, since a kernel cannot throw.
//
// embeddingBackward: block (g, s) owns table rows g, g + G, g + 2G, ... (G
// groups of up to R rows) and the 256-column slice s of them (each thread
// two columns), summed in shared memory (float32). It scans every id in
// position order, 512 a round (4 per thread, copied into shared memory 3
// rounds ahead), and adds its slice of the dy row of each id it owns, then
// writes its slice once. Each table element is summed by one thread in
// position order, so the result is deterministic without atomics or a
// sort. Rows strided over the groups and slices of columns, because
// frequent tokens have neighbouring ids (GPT-2's " the", " of", " to",
// " a" and " in" are among 257..287) and a frequent token's hits
// (hundreds to a thousand rows a batch) are what the blocks that own them
// wait for: this way each such token has its own blocks, C/256 of them
// side by side, each with 16 rows of loads in flight a thread. The ids
// (B·T int32) stay in L2 across blocks. With an addend (float32, the tied
// lm_head's gradient) an element is written as addend + sum, the bits of
// the sum and an add after it; with `old` (out's own bytes, each element
// read by the thread that writes it: the sum so far under gradient
// accumulation, or the tied lm_head's gradient that its GEMM wrote there)
// as old + that, one more add. With `old` and no addend, rows no id hit
// keep their bytes: of GPT-2's 50,257 rows a batch of 16,384 positions of
// Brown hits 3,327 to 4,002 (five batches), and the kernel reads and
// writes those alone.
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

/// Ids of the positions [at, at + 4), one at a time (embeddingBackward's
/// ids that are not 16-byte aligned, or not 4 whole a thread): -1 past the
/// end (no row owns it).
template <i64 kPositions>
__device__ __forceinline__ void loadChunkIds(const int *ids, i64 at,
                                             int (&id)[4]) {
  for (int k = 0; k < 4; ++k)
    id[k] = at + k < kPositions ? ids[at + k] : -1;
}

/// Columns a thread of embeddingBackward owns: 2, so that a bf16 dy pair
/// is one 4-byte load (8 for float32); a block's 128 threads take a slice.
constexpr int kEmbeddingGradThreads = 128, kEmbeddingGradSlice = 256;

/// dy[at], dy[at + 1] (columns c, c + 1 of a row): one access when C is
/// even (the pair is then aligned, as rows start at multiples of C), and
/// the second 0 past the row's end.
template <int C, typename TD>
__device__ __forceinline__ void loadPair(const TD *dy, int at, int c,
                                         float (&g)[2]) {
  if constexpr (C % 2 == 0) {
    load2(dy + at, g);
  } else {
    g[0] = toFloat(dy[at]);
    g[1] = c + 1 < C ? toFloat(dy[at + 1]) : 0.0f;
  }
}

/// Whether `id` is a row of `group` (of kGroups, rows strided over them):
/// 0 <= id < kV and id % kGroups == group, without a branch. Below 2^16
/// ids and groups (and above 1 group, whose ceiling is 2^32), id / kGroups
/// is the high word of id · ceil(2^32 / kGroups) (the product's error, id ·
/// (that ceiling - 2^32 / kGroups), is under 2^16 <= 2^32 / kGroups): two
/// instructions for the remainder, where the compiler's `%` took about
/// seventeen an id, most of the scan's.
template <int kV, int kGroups>
__device__ __forceinline__ bool ownsRow(int id, int group) {
  if constexpr (kV <= 65536 && kGroups > 1 && kGroups < 65536) {
    constexpr unsigned kMagic =
        unsigned((0x100000000ull + unsigned(kGroups) - 1) / unsigned(kGroups));
    // (An id outside [0, kV) gives some remainder; the first test fails.)
    const unsigned u = unsigned(id), q = __umulhi(u, kMagic);
    return (u < unsigned(kV)) & (int(u - q * unsigned(kGroups)) == group);
  } else {
    return (unsigned(id) < unsigned(kV)) & (id % kGroups == group);
  }
}

/// blockDim.x == kEmbeddingGradThreads; grid ceil(kV / kRowsPerBlock) ·
/// ceil(C / kEmbeddingGradSlice), slices fastest, so that a row group's
/// slices run side by side. kPositions · C < 2^31 (the emitter checks).
template <int C, i64 kPositions, int kV, int kRowsPerBlock, typename TD,
          typename TO>
__device__ void embeddingBackward(const TD *dy, const int *ids, TO *out,
                                  const float *addend = nullptr,
                                  const float *old = nullptr) {
  constexpr int kPerThread = 4, kRound = kEmbeddingGradThreads * kPerThread;
  constexpr int kSlices = (C + kEmbeddingGradSlice - 1) / kEmbeddingGradSlice;
  // Id rounds loaded ahead, and hits whose dy loads are in flight together:
  // 16 keeps the kernel at 94 registers, 5 blocks an SM on sm_90a, enough
  // loads in flight for the addend's read and the write at full bandwidth
  // (at 32, 141 registers and 3 blocks; a frequent token's ~30 hits a
  // round then take one batch, not two).
  constexpr int kIdRounds = 3, kAhead = 16;
  constexpr int kGroups = (kV + kRowsPerBlock - 1) / kRowsPerBlock;
  // Row r is row r / kGroups of group r % kGroups.
  const int group = blockIdx.x / kSlices;
  const int rows = (kV - 1 - group) / kGroups + 1;
  // This thread's columns c, c + 1 (none past the row's end): the same
  // ones it zeroes, adds to and writes, so only the hits need barriers.
  const int slot = 2 * threadIdx.x;
  const int c = blockIdx.x % kSlices * kEmbeddingGradSlice + slot;
  const bool owns = c < C;
  const TD *dyc = dy + c;
  __shared__ float acc[kRowsPerBlock * kEmbeddingGradSlice];
  __shared__ int hits[kRound]; // local row · kRound + position in the round
  __shared__ int warpCounts[kEmbeddingGradThreads / 32];
  // The local rows some id hit: every thread that owns columns adds every
  // hit, so each knows them all.
  static_assert(kRowsPerBlock <= 32, "a bit a local row");
  unsigned rowsHit = 0;
  for (int r = 0; r < kRowsPerBlock; ++r)
    acc[r * kEmbeddingGradSlice + slot] =
        acc[r * kEmbeddingGradSlice + slot + 1] = 0.0f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Round `base` of the scan: this thread's ids of positions base + 4t ..
  // + 3 (-1 past the end), checked for rows of this block, the hits
  // compacted in position order and their dy slices added.
  auto round = [&](i64 base, const int(&id)[kPerThread]) {
    unsigned mine[kPerThread];
    bool any = false;
    for (int k = 0; k < kPerThread; ++k) {
      mine[k] = ownsRow<kV, kGroups>(id[k], group);
      any |= mine[k];
    }
    // The barrier also ends the previous round's reads of hits.
    if (!__syncthreads_or(any))
      return;
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
    for (int w = 0; w < kEmbeddingGradThreads / 32; ++w) {
      offset += w < warp ? warpCounts[w] : 0;
      numHits += warpCounts[w];
    }
    for (int k = 0; k < kPerThread; ++k)
      if (mine[k])
        hits[offset++] =
            id[k] / kGroups * kRound + threadIdx.x * kPerThread + k;
    __syncthreads();
    if (!owns)
      return;
    // kAhead hits' dy loads are issued together, then added in order.
    for (int h0 = 0; h0 < numHits; h0 += kAhead) {
      float g[kAhead][2];
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (h0 + j < numHits) {
          const int pos = int(base) + hits[h0 + j] % kRound;
          loadPair<C>(dyc, pos * C, c, g[j]);
        }
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (h0 + j < numHits) {
          const int row = hits[h0 + j] / kRound;
          float *a = acc + row * kEmbeddingGradSlice + slot;
          a[0] += g[j][0];
          a[1] += g[j][1];
          rowsHit |= 1u << row;
        }
    }
  };
  // The ids reach shared memory kIdRounds rounds ahead, by cp.async
  // (where they are 16-byte aligned, 4 whole a thread): a thread copies
  // its 4 of a round, reads them back itself and waits for its own copies
  // alone, so no barrier. (Held in registers, rounds ahead, ptxas moved
  // the buffers on at a round or at the loop's head, and each move waited
  // for the load just issued into the buffer it read: rounds waited for
  // L2 round trips, ncu's issue 56% and DRAM 25% of embedding_grad's 282
  // µs on an H200.) A round's slot is copied into again kIdRounds rounds
  // on, one round after it was read.
  const bool inRing = kPositions % kPerThread == 0 &&
                      reinterpret_cast<unsigned long long>(ids) % 16 == 0;
  // Slot `at` of the ring, thread t's 4 ids at ring[at · threads + t].
  __shared__ uint4 ring[(kIdRounds + 1) * kEmbeddingGradThreads];
  uint4 *mineInRing = ring + threadIdx.x;
  auto copyRound = [&](i64 base, int into) {
    if (base + kPerThread * threadIdx.x < kPositions)
      copyAsync16(sharedAddress(mineInRing + into * kEmbeddingGradThreads),
                  ids + base + kPerThread * threadIdx.x);
    commitCopies(); // (empty past the end: the waits count groups)
  };
  if (inRing)
    for (int a = 0; a < kIdRounds; ++a)
      copyRound(i64(a) * kRound, a);
  int at = 0; // the ring's slot of round `base`
  for (i64 base = 0; base < kPositions;
       base += kRound, at = at == kIdRounds ? 0 : at + 1) {
    int id[kPerThread];
    if (inRing) {
      waitCopies<kIdRounds - 1>(); // this round's, the oldest group
      if (base + kPerThread * threadIdx.x < kPositions) // (all 4, or none)
        loadIds4(reinterpret_cast<const int *>(mineInRing +
                                               at * kEmbeddingGradThreads),
                 id);
      else
        id[0] = id[1] = id[2] = id[3] = -1;
      copyRound(base + kIdRounds * kRound, at == 0 ? kIdRounds : at - 1);
    } else {
      loadChunkIds<kPositions>(ids, base + i64(threadIdx.x) * kPerThread, id);
    }
    round(base, id);
  }
  if (!owns)
    return;
  // Both columns as one 8-byte access where they are (float32, C even).
  const int cols = c + 1 < C ? 2 : 1;
  const bool inPlace = old && !addend;
#pragma unroll 8
  for (int r = 0; r < rows; ++r) {
    if (inPlace && !(rowsHit >> r & 1u))
      continue;
    const i64 at = i64(group + r * kGroups) * C + c;
    const float *sum = acc + r * kEmbeddingGradSlice + slot;
    if constexpr (C % 2 == 0 && sizeof(TO) == 4) {
      float v[2] = {sum[0], sum[1]};
      if (addend) {
        float a[2];
        load2(addend + at, a);
        v[0] = __fadd_rn(a[0], v[0]), v[1] = __fadd_rn(a[1], v[1]);
      }
      if (old) {
        float o[2];
        load2(old + at, o);
        v[0] = __fadd_rn(o[0], v[0]), v[1] = __fadd_rn(o[1], v[1]);
      }
      store2(out + at, v);
    } else {
      for (int e = 0; e < cols; ++e) {
        float v = addend ? __fadd_rn(addend[at + e], sum[e]) : sum[e];
        out[at + e] = fromFloat<TO>(old ? __fadd_rn(old[at + e], v) : v);
      }
    }
  }
}
