//===- embedding.cuh - row gather and its deterministic scatter-add -------===//
//
// embeddingForward copies table rows; an id outside [0, V) (the CPU
// executor's error) gives a zero row here, since a kernel cannot throw.
//
// embeddingBackward, for ids that sortIds' keys cannot hold (the sorted
// form below is what the lowering gives every other embedding gradient):
// block (g, s) owns table rows g, g + G, g + 2G, ... (G
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

/// Table element at, at + 1 (columns c, c + 1 of a row; c + 1 only where
/// it is in the row) from this thread's float32 sums: (old +) (addend +)
/// sum, each add one float32 rounding. Both as one 8-byte access where they
/// are (float32, C even).
template <int C, typename TO>
__device__ __forceinline__ void
writeTableColumns(TO *out, i64 at, int c, const float *sum, const float *addend,
                  const float *old) {
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
    const int cols = c + 1 < C ? 2 : 1;
    for (int e = 0; e < cols; ++e) {
      float v = addend ? __fadd_rn(addend[at + e], sum[e]) : sum[e];
      out[at + e] = fromFloat<TO>(old ? __fadd_rn(old[at + e], v) : v);
    }
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
  const bool inPlace = old && !addend;
#pragma unroll 8
  for (int r = 0; r < rows; ++r) {
    if (inPlace && !(rowsHit >> r & 1u))
      continue;
    writeTableColumns<C>(out, i64(group + r * kGroups) * C + c, c,
                         acc + r * kEmbeddingGradSlice + slot, addend, old);
  }
}

//===----------------------------------------------------------------------===//
// The sorted form: the ids grouped by row once, each row summed from its hits
//===----------------------------------------------------------------------===//
//
// embeddingBackward's blocks each scan every id: at GPT-2's 16,384
// positions and 50,257 rows, 4,713 blocks scan 77 M ids, and the kernel
// took 214 µs on an H200 (35% of its floor; forty-seventh session). Here
// sortIds sorts the ids once (keys id · 2^kPosBits + position, ascending:
// each row's positions together and in order), in one block beside the
// forward (gpt-plan-streams' side stream), and embeddingBackwardSorted
// reads dy's rows of the hits alone.
//
// sortIds: one block of 1,024 threads, each holding kE consecutive keys in
// registers; an LSD radix sort over the id's bits, 4 a pass (GPT-2's 16 in
// 4 passes), each pass stable (a digit's keys keep their order): a
// thread's counts of each digit, their prefix sums in digit-major order
// (each thread sums 16 of the 16 x 1,024 counts, then a scan across the
// block), and each thread's keys scattered in order to their places in
// shared memory, whence each thread reloads its kE. An id outside [0, kV)
// sorts last as kV and is written as key -1: no row takes it (the CPU
// executor's error; a kernel cannot throw).
//
// embeddingBackwardSorted: block (w, s) takes window w of kSortedWindow
// sorted keys and the 256-column slice s, loads the dy slices of all of
// them at once (one load each in flight, 32 a thread), and adds each run of
// one row in order. A run wholly inside the window is the row's sum,
// written as embeddingBackward writes it (old + (addend + sum)). A row
// whose hits cross windows (GPT-2's frequent tokens: hundreds of hits)
// has a piece in each: each piece goes to scratch, and the last block of
// the row's windows to arrive adds them in window order and writes the
// row. So every row's sum is in a fixed order (position order within a
// window, windows in order), without atomics on the sums. Each window has
// at most two pieces that need this: the run at its start, from a row
// that began before it (slot 0, a whole-window middle piece too), and the
// run at its end that continues after it (slot 1, the row's first piece).
// Where rows no id hits are written too (not the in-place form, GPT-2's
// wte in grads, but the addend form, grads_accumulate's: every row addend
// + sum), kDense blocks of kDenseRows rows follow the windows, each row's
// hit looked up in the keys by binary search, a row a thread.

/// sortIds' block: 1,024 threads; 16 digits a pass (4 bits of the id).
constexpr int kSortIdsThreads = 1024, kSortIdsDigits = 16;

/// The bits n takes: 16 for 50,257, 0 for 0.
constexpr int bitWidth(unsigned long long n) {
  return n ? 1 + bitWidth(n >> 1) : 0;
}

/// sortIds' dynamic shared memory: the keys, and each thread's 16 digit
/// counts (then offsets) as 16-bit words.
template <i64 kPositions> constexpr unsigned sortIdsSharedBytes() {
  return unsigned((kPositions + kSortIdsThreads - 1) / kSortIdsThreads *
                      kSortIdsThreads * 4 +
                  kSortIdsDigits * kSortIdsThreads * 2);
}

/// The sum of x over lanes 0 .. lane of the warp (all 32 take part).
__device__ __forceinline__ unsigned warpInclusiveSum(unsigned x, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned below = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o)
      x += below;
  }
  return x;
}

/// keys[i] = the i-th smallest of ids[p] · 2^kPosBits + p over positions p
/// whose id is in [0, kV), then -1 for the rest. One block (blockDim.x ==
/// kSortIdsThreads), sortIdsSharedBytes<kPositions>() of dynamic shared
/// memory.
template <i64 kPositions, int kV, int kPosBits>
__device__ void sortIds(const int *ids, int *keys) {
  constexpr int kE = int((kPositions + kSortIdsThreads - 1) / kSortIdsThreads);
  constexpr int kPasses = (bitWidth(kV) + 3) / 4;
  static_assert(bitWidth(kV) + kPosBits <= 31, "keys of 31 bits");
  static_assert(kPositions <= (i64(1) << kPosBits), "positions fit");
  static_assert(kE * kSortIdsThreads <= 65536, "16-bit offsets");
  extern __shared__ uint4 gptcDynamicShared[];
  unsigned *sorted = reinterpret_cast<unsigned *>(gptcDynamicShared);
  unsigned short *counts =
      reinterpret_cast<unsigned short *>(sorted + kE * kSortIdsThreads);
  __shared__ unsigned warpSums[kSortIdsThreads / 32];
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  // This thread's keys: positions kE·t .. kE·t + kE - 1, in order.
  unsigned v[kE];
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const i64 p = i64(kE) * t + e;
    const int id = p < kPositions ? ids[p] : -1;
    v[e] = unsigned(id) < unsigned(kV) ? unsigned(id) << kPosBits | unsigned(p)
                                       : unsigned(kV) << kPosBits;
  }
  // Digit d's count of thread t at counts[d · 1024 + t]: read and written
  // by t alone, but in the prefix sums.
  unsigned short *mine = counts + t;
  for (int pass = 0; pass < kPasses; ++pass) {
    const int shift = kPosBits + 4 * pass;
#pragma unroll
    for (int d = 0; d < kSortIdsDigits; ++d)
      mine[d * kSortIdsThreads] = 0;
#pragma unroll
    for (int e = 0; e < kE; ++e)
      ++mine[(v[e] >> shift & 15u) * kSortIdsThreads];
    __syncthreads();
    // Exclusive prefix sums of the counts in digit-major order: thread t
    // sums entries 16t .. 16t + 15, then the block scans those sums.
    unsigned short *raked = counts + kSortIdsDigits * t;
    unsigned below[kSortIdsDigits], total = 0;
#pragma unroll
    for (int i = 0; i < kSortIdsDigits; ++i) {
      below[i] = total;
      total += raked[i];
    }
    const unsigned inclusive = warpInclusiveSum(total, lane);
    if (lane == 31)
      warpSums[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      const unsigned own = warpSums[lane];
      warpSums[lane] = warpInclusiveSum(own, lane) - own;
    }
    __syncthreads();
    const unsigned base = warpSums[warp] + inclusive - total;
#pragma unroll
    for (int i = 0; i < kSortIdsDigits; ++i)
      raked[i] = (unsigned short)(base + below[i]);
    __syncthreads();
    // Each key to its place, this thread's in order (stable).
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      unsigned short &at = mine[(v[e] >> shift & 15u) * kSortIdsThreads];
      // (Always below; but EveryBarrierIsNeeded runs the sort with each
      // barrier taken out, and a wrong count must not write past the keys.)
      if (at < kE * kSortIdsThreads)
        sorted[at] = v[e];
      ++at;
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kE; ++e)
      v[e] = sorted[kE * t + e];
  }
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    const i64 i = i64(kE) * t + e;
    if (i < kPositions)
      keys[i] = (v[e] >> kPosBits) < unsigned(kV) ? int(v[e]) : -1;
  }
}

/// The sorted keys an embeddingBackwardSorted block sums (all their dy
/// loads in flight together), and the rows a block of its dense part
/// writes.
constexpr int kSortedWindow = 32, kDenseRows = 128;

/// The first i in [0, n) with keys[i] >= target (keys ascending, then -1s,
/// which lie past every target), or n.
__device__ __forceinline__ int lowerBoundKey(const int *keys, int n,
                                             int target) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2, key = keys[mid];
    if (key >= 0 && key < target)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/// writeTableColumns of a zero sum, (old +) (addend + 0), for the rows
/// row0 .. row0 + kBatch - 1 below `left` that no id hits (hit[j] == 0):
/// their addend and old loads first, all in flight, then the stores (where
/// old is out itself the compiler could not move a row's loads above the
/// last row's store).
template <int C, int kBatch, typename TO>
__device__ __forceinline__ void
writeRowsNoIdHits(TO *out, int row0, int c, const int *hit, int left,
                  const float *addend, const float *old) {
  const float zero[2] = {0.0f, 0.0f};
  if constexpr (C % 2 == 0 && sizeof(TO) == 4) {
    float a[kBatch][2], o[kBatch][2];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      a[j][0] = a[j][1] = o[j][0] = o[j][1] = 0.0f;
      if (j < left && !hit[j]) {
        const i64 at = i64(row0 + j) * C + c;
        if (addend)
          load2(addend + at, a[j]);
        if (old)
          load2(old + at, o[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (j < left && !hit[j]) {
        float v[2];
        for (int e = 0; e < 2; ++e) {
          v[e] = addend ? __fadd_rn(a[j][e], 0.0f) : 0.0f;
          if (old)
            v[e] = __fadd_rn(o[j][e], v[e]);
        }
        store2(out + i64(row0 + j) * C + c, v);
      }
  } else {
    for (int j = 0; j < kBatch && j < left; ++j)
      if (!hit[j])
        writeTableColumns<C>(out, i64(row0 + j) * C + c, c, zero, addend, old);
  }
}

/// The float32 pair at p (columns c, c + 1 of a row; c + 1 only where it
/// is in the row), as one 8-byte access where C is even; `atL2` reads
/// what other blocks wrote in this launch (ld.global.cg).
template <int C>
__device__ __forceinline__ void storePiece(float *p, int c,
                                           const float (&x)[2]) {
  if constexpr (C % 2 == 0) {
    store2(p, x);
  } else {
    p[0] = x[0];
    if (c + 1 < C)
      p[1] = x[1];
  }
}
template <int C>
__device__ __forceinline__ void loadPieceAtL2(const float *p, int c,
                                              float (&x)[2]) {
  if constexpr (C % 2 == 0) {
    const float2 v = __ldcg(reinterpret_cast<const float2 *>(p));
    x[0] = v.x, x[1] = v.y;
  } else {
    x[0] = __ldcg(p);
    x[1] = c + 1 < C ? __ldcg(p + 1) : 0.0f;
  }
}

/// The table gradient from sortIds' keys (kPosBits as there): blockDim.x
/// == kEmbeddingGradThreads; grid (windows + (kDense ? ceil(kV /
/// kDenseRows) : 0)) · slices, slices fastest. kDense: rows no id hits are
/// written too, as (old +) (addend + 0); otherwise (old and no addend)
/// they keep their bytes. partials: windows · 2 · C floats, arrivals:
/// windows · slices counters, zero between launches (the kernel leaves
/// them so).
template <int C, i64 kPositions, int kV, int kPosBits, bool kDense, typename TD,
          typename TO>
__device__ void embeddingBackwardSorted(const TD *dy, const int *keys, TO *out,
                                        const float *addend, const float *old,
                                        float *partials, unsigned *arrivals) {
  constexpr int kW = kSortedWindow;
  constexpr int kSlices = (C + kEmbeddingGradSlice - 1) / kEmbeddingGradSlice;
  constexpr int kWindows = int((kPositions + kW - 1) / kW);
  static_assert(bitWidth(kV) + kPosBits <= 31, "keys of 31 bits");
  const int slice = blockIdx.x % kSlices, item = blockIdx.x / kSlices;
  const int c = slice * kEmbeddingGradSlice + 2 * threadIdx.x;
  const bool owns = c < C;
  auto idOf = [](int key) { return key >> kPosBits; };
  auto write = [&](int row, const float(&sum)[2]) {
    if (owns)
      writeTableColumns<C>(out, i64(row) * C + c, c, sum, addend, old);
  };
  if (kDense && item >= kWindows) {
    // Rows r0 .. r0 + kDenseRows - 1, row r0 + t's hit looked up by thread
    // t: one binary search's latency a block, for 128 rows of writes.
    static_assert(kDenseRows == kEmbeddingGradThreads, "a row a thread");
    __shared__ int hit[kDenseRows]; // (words: no two threads share one)
    const int r0 = (item - kWindows) * kDenseRows, r = r0 + threadIdx.x;
    int h = 0;
    if (r < kV) {
      const int at = lowerBoundKey(keys, int(kPositions), r << kPosBits);
      h = at < kPositions && keys[at] >= 0 && idOf(keys[at]) == r;
    }
    hit[threadIdx.x] = h;
    __syncthreads();
    if (owns)
      for (int j = 0; j < kDenseRows && r0 + j < kV; j += 8)
        writeRowsNoIdHits<C, 8>(out, r0 + j, c, hit + j, kV - (r0 + j), addend,
                                old);
    return;
  }
  // The key before the window, its kW keys, the key after it (-1 where
  // there is none).
  __shared__ int window[kW + 2];
  __shared__ int span[2]; // a piece's row's first and last windows
  const i64 i0 = i64(item) * kW;
  for (int j = threadIdx.x; j < kW + 2; j += blockDim.x) {
    const i64 i = i0 - 1 + j;
    window[j] = i >= 0 && i < kPositions ? keys[i] : -1;
  }
  __syncthreads();
  float g[kW][2];
#pragma unroll
  for (int j = 0; j < kW; ++j) {
    const int key = window[j + 1];
    g[j][0] = g[j][1] = 0.0f;
    if (owns && key >= 0)
      loadPair<C>(dy + c, (key & ((1 << kPosBits) - 1)) * C, c, g[j]);
  }
  // The window's runs in order: each ends where the next key's row differs.
  const bool fromBefore =
      window[0] >= 0 && window[1] >= 0 && idOf(window[0]) == idOf(window[1]);
  float s[2] = {0.0f, 0.0f}, first[2] = {0.0f, 0.0f};
  int start = 0;
  bool firstEnded = false; // a run from before the window ended in it
#pragma unroll
  for (int j = 0; j < kW; ++j) {
    const int key = window[j + 1], next = window[j + 2];
    if (key < 0)
      break;
    s[0] += g[j][0];
    s[1] += g[j][1];
    if (next < 0 || idOf(next) != idOf(key)) {
      if (start == 0 && fromBefore) {
        first[0] = s[0], first[1] = s[1];
        firstEnded = true;
      } else {
        write(idOf(key), s);
      }
      s[0] = s[1] = 0.0f;
      start = j + 1;
    }
  }
  // A piece of a row that crosses windows: to scratch, and the row's last
  // piece to arrive adds them all in window order (its first window's
  // slot 1, the others' slot 0).
  auto piece = [&](int row, int slot, const float(&sum)[2]) {
    if (owns)
      storePiece<C>(partials + (i64(item) * 2 + slot) * C + c, c, sum);
    if (threadIdx.x == 0) {
      const int from = lowerBoundKey(keys, int(kPositions), row << kPosBits);
      const int to =
          lowerBoundKey(keys, int(kPositions), (row + 1) << kPosBits);
      span[0] = from / kW;
      span[1] = (to - 1) / kW;
    }
    __syncthreads();
    const int w0 = span[0], w1 = span[1];
    if (lastBlockToArrive(arrivals + w0 * kSlices + slice,
                          unsigned(w1 - w0 + 1))) {
      float total[2] = {0.0f, 0.0f};
      for (int w = w0; w <= w1; ++w) {
        float p[2] = {0.0f, 0.0f};
        if (owns)
          loadPieceAtL2<C>(partials + (i64(w) * 2 + (w == w0)) * C + c, c, p);
        total[0] += p[0];
        total[1] += p[1];
      }
      write(row, total);
    }
  };
  if (firstEnded)
    piece(idOf(window[1]), 0, first);
  // The run still open at the window's end continues past it.
  const int last = window[kW], after = window[kW + 1];
  if (last >= 0 && after >= 0 && idOf(after) == idOf(last))
    piece(idOf(last), start == 0 && fromBefore ? 0 : 1, s);
}
