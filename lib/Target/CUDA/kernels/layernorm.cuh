//===- layernorm.cuh - layernorm forward and backward ---------------------===//
//
// One warp per row of C elements, the row held in registers, float32
// statistics in two passes (mean, then the squared deviations), as
// lib/Executor/NormKernels.cpp does in double. A lane takes chunks of 4
// consecutive elements when C is a multiple of 4 (one 16-byte float32 or
// 8-byte bf16 access each), else single elements. The fused layernorm
// computes its row with a generated prologue instead of loading it, and
// the fused gradient hands dx to a generated epilogue; both take a chunk
// at a time.
//
// The backward's dgamma/dbeta sum over every row: each warp sums its rows
// in a fixed order in its own shared memory, the block adds its warps' in
// warp order, the last block of each group of kGroup blocks adds the
// group's in block order, and the last group the groups' in group order.
// The result does not depend on scheduling (no float atomics), and no
// block reads more than kGroup or gridDim.x / kGroup partials. A fused
// gradient's epilogue may add column sums of its own (an output
// projection's bias gradient) to the same rounds, after dbeta's.
//
//===----------------------------------------------------------------------===//

/// A row of C elements across a warp: lane `lane` holds kChunks chunks of
/// kW consecutive elements, chunk j from column column(j, lane); chunks at
/// or past C are zeros.
template <int C> struct RowLayout {
  static constexpr int kW = C % 4 == 0 ? 4 : 1;
  static constexpr int kChunks = (C + 32 * kW - 1) / (32 * kW);
  static __device__ __forceinline__ int column(int j, int lane) {
    return j * 32 * kW + lane * kW;
  }
};
template <int C>
using RowChunks = float[RowLayout<C>::kChunks][RowLayout<C>::kW];

template <int C, typename TX>
__device__ __forceinline__ void loadRow(const TX *row, RowChunks<C> &v) {
  using L = RowLayout<C>;
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < L::kChunks; ++j) {
    int c = L::column(j, lane);
    if (c < C)
      loadW<L::kW>(row + c, v[j]);
    else
      for (int e = 0; e < L::kW; ++e)
        v[j][e] = 0.0f;
  }
}

/// mean and 1/sqrt(var + eps) of a row in registers.
template <int C>
__device__ __forceinline__ void rowStats(const RowChunks<C> &v, float eps,
                                         float &mean, float &rstd) {
  using L = RowLayout<C>;
  int lane = threadIdx.x % 32;
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < L::kChunks; ++j)
    for (int e = 0; e < L::kW; ++e)
      s += v[j][e];
  mean = warpSum(s) / float(C);
  float q = 0.0f;
#pragma unroll
  for (int j = 0; j < L::kChunks; ++j)
    if (L::column(j, lane) < C)
      for (int e = 0; e < L::kW; ++e) {
        float d = v[j][e] - mean;
        q += d * d;
      }
  rstd = 1.0f / sqrtf(warpSum(q) / float(C) + eps);
}

/// out = (x - mean) · rstd · gamma + beta for the row in registers.
template <int C, typename TG, typename TB, typename TO>
__device__ __forceinline__ void normaliseRow(const RowChunks<C> &v,
                                             const TG *gamma, const TB *beta,
                                             TO *out, float eps) {
  using L = RowLayout<C>;
  float mean, rstd;
  rowStats<C>(v, eps, mean, rstd);
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < L::kChunks; ++j) {
    int c = L::column(j, lane);
    if (c >= C)
      continue;
    float g[L::kW], b[L::kW], y[L::kW];
    loadW<L::kW>(gamma + c, g);
    loadW<L::kW>(beta + c, b);
    for (int e = 0; e < L::kW; ++e)
      y[e] = (v[j][e] - mean) * rstd * g[e] + b[e];
    storeW<L::kW>(out + c, y);
  }
}

/// out = (x - mean) · rstd · gamma + beta; blockDim.x / 32 rows per block.
template <int C, i64 kRows, typename TX, typename TG, typename TB, typename TO>
__device__ void layernormForward(const TX *x, const TG *gamma, const TB *beta,
                                 TO *out, float eps) {
  i64 row = i64(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= kRows)
    return;
  RowChunks<C> v;
  loadRow<C>(x + row * C, v);
  normaliseRow<C>(v, gamma, beta, out + row * C, eps);
}

/// gpt.fused_layernorm: layernormForward of the row that a generated
/// prologue computes. `prologue(i, v)` evaluates the fused body at the
/// RowLayout<C>::kW elements from flat index i of the [rows, C] iteration
/// space, writes the body's other values and leaves the float32 values to
/// normalise in v, which then stay in registers: one pass over the
/// operands instead of a write and a read of x.
template <int C, i64 kRows, typename Prologue, typename TG, typename TB,
          typename TO>
__device__ void layernormPrologueForward(const Prologue &prologue,
                                         const TG *gamma, const TB *beta,
                                         TO *out, float eps) {
  using L = RowLayout<C>;
  i64 row = i64(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= kRows)
    return;
  int lane = threadIdx.x % 32;
  RowChunks<C> v;
#pragma unroll
  for (int j = 0; j < L::kChunks; ++j) {
    int c = L::column(j, lane);
    if (c < C)
      prologue(row * C + c, v[j]);
    else
      for (int e = 0; e < L::kW; ++e)
        v[j][e] = 0.0f;
  }
  normaliseRow<C>(v, gamma, beta, out + row * C, eps);
}

/// Stores dx's chunk at flat index i: layernorm_grad's plain dx. An
/// epilogue (struct Epilogue) has the same members; kColumnSums > 0 of it
/// add values into the warp's column sums, `sums` at the chunk's column
/// (sum k at sums + k·C), which storeColumnSums writes once summed.
template <typename T> struct StoreDx {
  static constexpr int kColumnSums = 0;
  T *dx;
  template <int kW>
  __device__ __forceinline__ void operator()(i64 i, const float (&v)[kW],
                                             float *) const {
    storeW<kW>(dx + i, v);
  }
  template <int kW>
  __device__ __forceinline__ void storeColumnSums(int, const float (&)[kW]) const {}
};

/// With xhat = (x - mean)·rstd and d = dy·gamma:
///   dx = rstd · (d - mean(d) - xhat · mean(d·xhat)),
///   dgamma = Σ_rows dy·xhat, dbeta = Σ_rows dy.
/// Dynamic shared memory: blockDim.x / 32 · S·C floats, S = 2 + the
/// epilogue's column sums (kStaged: and kLayernormStageBytes a warp after
/// them). `partials` holds gridDim.x · S·C floats,
/// `groupPartials` ceil(gridDim.x / kGroup) · S·C, `counters`
/// ceil(gridDim.x / kGroup) + 1 zeroed unsigneds.
template <int C, i64 kRows, int kGroup, bool kStaged = false, typename TX,
          typename TG, typename TD, typename TDX, typename TDG, typename TDB>
__device__ void layernormBackward(const TX *x, const TG *gamma, const TD *dy,
                                  TDX *dx, TDG *dgamma, TDB *dbeta, float eps,
                                  float *partials, float *groupPartials,
                                  unsigned *counters);

/// A row's chunk of 4 elements that this lane copied into shared memory
/// (layernormBackwardWith's stage), as floats.
template <typename T>
__device__ __forceinline__ void loadStagedChunk(const T *p, float (&v)[4]) {
  if constexpr (sizeof(T) == 4)
    loadShared4(reinterpret_cast<const float *>(p), v);
  else
    unpack4<T>(*reinterpret_cast<const uint2 *>(p), v);
}

/// Starts the copy of a chunk of 4 elements (8 or 16 bytes) into shared
/// memory.
template <typename T>
__device__ __forceinline__ void copyChunkAsync(T *to, const T *from) {
  if constexpr (sizeof(T) == 4)
    copyAsync16(sharedAddress(to), from);
  else
    copyAsync8(sharedAddress(to), from);
}

/// Bytes of layernormBackwardWith's stage a warp (kStaged): a row of x,
/// then one of dy, each 16-byte aligned (EmitTemplates.cpp's
/// layernormGradStaging counts the same).
template <int C, typename T>
constexpr int kLayernormStageRowBytes = (C * int(sizeof(T)) + 15) / 16 * 16;
template <int C, typename TX, typename TD>
constexpr int kLayernormStageBytes =
    kLayernormStageRowBytes<C, TX> + kLayernormStageRowBytes<C, TD>;

/// layernormBackward with dx handed to `store(i, chunk, sums)` rather than
/// written: gpt.fused_layernorm_grad's generated epilogue (struct Epilogue)
/// computes its body from it, writes the body's values and adds the ones
/// it sums into `sums`.
///
/// kStaged (C a multiple of 4, x and dy of 2 or 4 bytes): each warp copies
/// its next row's x and dy into a stage of its own in the dynamic shared
/// memory, after the warp's sums (kLayernormStageBytes a warp), with
/// cp.async, once this row's first pass has read them: the next row's
/// round trip then runs under this row's second pass (the epilogue's own
/// loads among it), where a warp a row otherwise waited for two round
/// trips a row, one after another (ncu, thirtieth session: two thirds of
/// its warps' cycles waiting on a load, DRAM 67% busy). Each lane reads
/// back only the chunks it copied: no barrier.
template <int C, i64 kRows, int kGroup, bool kStaged = false, typename Store,
          typename TX, typename TG, typename TD, typename TDG, typename TDB>
__device__ void layernormBackwardWith(const TX *x, const TG *gamma,
                                      const TD *dy, const Store &store,
                                      TDG *dgamma, TDB *dbeta, float eps,
                                      float *partials, float *groupPartials,
                                      unsigned *counters) {
  using L = RowLayout<C>;
  constexpr int kW = L::kW;
  constexpr int kSums = 2 + Store::kColumnSums; // rows of C sums
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  // The warp's dgamma sums at [0, C), its dbeta sums at [C, 2C), the
  // epilogue's after them, in the row layout: each lane adds only its own
  // columns, so no barrier is needed until every row is done, and no
  // register holds them.
  extern __shared__ float warpSums[];
  float *sums = warpSums + warp * kSums * C;
#pragma unroll
  for (int j = 0; j < L::kChunks; ++j) {
    int c = L::column(j, lane);
    if (c < C)
      for (int k = 0; k < kSums; ++k)
        for (int e = 0; e < kW; ++e)
          sums[k * C + c + e] = 0.0f;
  }

  // Only xhat stays in registers; dy and gamma are read twice, the second
  // time from L1/L2, which keeps large C from spilling. 2-byte dy in
  // chunks of 4 is first read with x, before the row's statistics, and
  // kept as loaded (8 bytes a chunk): its round trip then overlaps x's,
  // where, read after the statistics' shuffles, it was a second one a row
  // (nvdisasm: GPT-2's fused layernorm gradient, still 128 registers, no
  // spill; ncu on an H200 had its warps waiting on loads two thirds of
  // their cycles, thirtieth session).
  // (Staged, 2-byte dy is read from the stage with x and kept the same
  // way: its second read, from global memory after the stage is taken by
  // the next row, made ptxas issue the second pass's loads a chunk at a
  // time at 128 registers.)
  constexpr bool kDyFirst = sizeof(TD) == 2 && kW == 4;
  static_assert(!kStaged || (kW == 4 && (sizeof(TX) == 2 || sizeof(TX) == 4) &&
                             (sizeof(TD) == 2 || sizeof(TD) == 4)),
                "staged rows: chunks of 4 elements of 2 or 4 bytes");
  // (Unused unless kStaged.)
  char *stage = reinterpret_cast<char *>(warpSums + warps * kSums * C) +
                warp * kLayernormStageBytes<C, TX, TD>;
  TX *stageX = reinterpret_cast<TX *>(stage);
  TD *stageDy = reinterpret_cast<TD *>(stage + kLayernormStageRowBytes<C, TX>);
  auto stageRow = [&](i64 r) {
#pragma unroll
    for (int j = 0; j < L::kChunks; ++j) {
      const int c = L::column(j, lane);
      if (c < C) {
        copyChunkAsync(stageX + c, x + r * C + c);
        copyChunkAsync(stageDy + c, dy + r * C + c);
      }
    }
    commitCopies();
  };
  const i64 firstRow = i64(blockIdx.x) * warps + warp;
  const i64 rowStride = i64(gridDim.x) * warps;
  if constexpr (kStaged)
    if (firstRow < kRows)
      stageRow(firstRow);
  for (i64 row = firstRow; row < kRows; row += rowStride) {
    const TD *dyRow = dy + row * C;
    [[maybe_unused]] uint2 dyChunks[kDyFirst ? L::kChunks : 1];
    if constexpr (kStaged)
      waitCopies<0>(); // this row's copies, the only ones in flight
    if constexpr (kDyFirst) {
#pragma unroll
      for (int j = 0; j < L::kChunks; ++j)
        if (L::column(j, lane) < C)
          dyChunks[j] = kStaged ? *reinterpret_cast<const uint2 *>(
                                      stageDy + L::column(j, lane))
                                : loadPacked4(dyRow + L::column(j, lane));
    }
    RowChunks<C> v;
    if constexpr (kStaged) {
#pragma unroll
      for (int j = 0; j < L::kChunks; ++j) {
        const int c = L::column(j, lane);
        if (c < C)
          loadStagedChunk(stageX + c, v[j]);
        else
          for (int e = 0; e < kW; ++e)
            v[j][e] = 0.0f;
      }
    } else {
      loadRow<C>(x + row * C, v);
    }
    float mean, rstd;
    rowStats<C>(v, eps, mean, rstd);
    float sumD = 0.0f, sumDX = 0.0f;
#pragma unroll
    for (int j = 0; j < L::kChunks; ++j) {
      int c = L::column(j, lane);
      if (c >= C)
        continue;
      float g[kW], gm[kW], sg[kW], sb[kW];
      if constexpr (kDyFirst)
        unpack4<TD>(dyChunks[j], g);
      else if constexpr (kStaged)
        loadStagedChunk(stageDy + c, g);
      else
        loadW<kW>(dyRow + c, g);
      loadW<kW>(gamma + c, gm);
      loadSharedW<kW>(sums + c, sg);
      loadSharedW<kW>(sums + C + c, sb);
      for (int e = 0; e < kW; ++e) {
        v[j][e] = (v[j][e] - mean) * rstd; // xhat
        float d = g[e] * gm[e];
        sg[e] += g[e] * v[j][e];
        sb[e] += g[e];
        sumD += d;
        sumDX += d * v[j][e];
      }
      storeSharedW<kW>(sums + c, sg);
      storeSharedW<kW>(sums + C + c, sb);
    }
    // The stage's values are in registers now (v, and the sums above):
    // the next row's copies may take its place.
    if constexpr (kStaged)
      if (row + rowStride < kRows)
        stageRow(row + rowStride);
    float meanD = warpSum(sumD) / float(C), meanDX = warpSum(sumDX) / float(C);
#pragma unroll
    for (int j = 0; j < L::kChunks; ++j) {
      int c = L::column(j, lane);
      if (c >= C)
        continue;
      float g[kW], gm[kW], out[kW];
      if constexpr (kDyFirst && kStaged) // (the stage holds the next row's)
        unpack4<TD>(dyChunks[j], g);
      else // (2-byte dy: ptxas takes the values loaded first)
        loadW<kW>(dyRow + c, g);
      loadW<kW>(gamma + c, gm);
      for (int e = 0; e < kW; ++e)
        out[e] = rstd * (g[e] * gm[e] - meanD - v[j][e] * meanDX);
      store(row * C + c, out, sums + 2 * C + c);
    }
  }

  // The block's partial: its warps' sums added in warp order.
  __syncthreads();
  float *mine = partials + i64(blockIdx.x) * kSums * C;
  for (int i = threadIdx.x * kW; i < kSums * C; i += blockDim.x * kW) {
    float s[kW], t[kW];
    loadSharedW<kW>(warpSums + i, s);
    for (int w = 1; w < warps; ++w) {
      loadSharedW<kW>(warpSums + w * kSums * C + i, t);
      for (int e = 0; e < kW; ++e)
        s[e] += t[e];
    }
    storeW<kW>(mine + i, s);
  }
  // The group's partial, then the whole sum.
  const unsigned group = blockIdx.x / kGroup;
  const unsigned groups = (gridDim.x + kGroup - 1) / kGroup;
  const unsigned first = group * kGroup;
  const unsigned inGroup = min(unsigned(kGroup), gridDim.x - first);
  if (!lastBlockToArrive(counters + group, inGroup))
    return;
  float *groupSum = groupPartials + i64(group) * kSums * C;
  sumPartialsInOrder<kW>(partials + i64(first) * kSums * C, inGroup, kSums * C,
                         [&](int i, const float (&s)[kW]) {
                           storeW<kW>(groupSum + i, s);
                         });
  if (!lastBlockToArrive(counters + groups, groups))
    return;
  // C is a multiple of kW: a chunk is all in one row of sums.
  sumPartialsInOrder<kW>(groupPartials, groups, kSums * C,
                         [&](int i, const float (&s)[kW]) {
                           if (i < C)
                             storeW<kW>(dgamma + i, s);
                           else if (i < 2 * C)
                             storeW<kW>(dbeta + (i - C), s);
                           else
                             store.storeColumnSums(i - 2 * C, s);
                         });
}

template <int C, i64 kRows, int kGroup, bool kStaged, typename TX, typename TG,
          typename TD, typename TDX, typename TDG, typename TDB>
__device__ void layernormBackward(const TX *x, const TG *gamma, const TD *dy,
                                  TDX *dx, TDG *dgamma, TDB *dbeta, float eps,
                                  float *partials, float *groupPartials,
                                  unsigned *counters) {
  layernormBackwardWith<C, kRows, kGroup, kStaged>(
      x, gamma, dy, StoreDx<TDX>{dx}, dgamma, dbeta, eps, partials,
      groupPartials, counters);
}
