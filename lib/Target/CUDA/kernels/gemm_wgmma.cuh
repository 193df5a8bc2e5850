//===- gemm_wgmma.cuh - gptc's own GEMM on warpgroup MMA, GELU fused ------===//
//
// GPT-2's c_fc GEMMs with GELU fused: the forward's pre = a·b + bias and
// out = GELU(pre), the backward's out = gelu'(pre) · (a·bᵀ), all bf16. In
// the thirtieth session's H200 profile cuBLASLt's GELU_AUX_BIAS took the
// forward 159.5 µs a call and its DGELU the backward 162.5, where c_proj's
// plain GEMMs of the same FLOPs took 102.7 and 107.1: cuBLASLt's epilogue
// runs after the product, reading and writing while the SM's tensor cores
// idle. Here one block an SM walks the result's tiles, warp-specialized:
// one thread has the copy engine (TMA) bring a and b into a ring of
// stages, and two warpgroups multiply, in one of two block shapes. Each is one
// more way GEMM tuning times at load (rt::GemmFallback::WgmmaBiasGelu,
// WgmmaGeluGrad and their WgmmaWide* twins), kept only where it is faster and
// computes what cuBLASLt's way does. The same blocks with no epilogue
// (WgmmaPlain: the plain GEMMs with a transposed b) or the bias alone
// (WgmmaBias: the forward's other projections) are ways too, so that tuning
// also says what the products cost with a light epilogue.
//
// - Taking turns (128 x 128 tiles, gemm::Turns): each multiplying
//   warpgroup takes every other tile whole, as two m64n128k16
//   accumulators (128 floats a thread), and the two take turns at the
//   tensor cores: one's products start once the other's are all issued,
//   so that each one's epilogue runs under the other's products (CUTLASS's
//   "ping-pong"). 6 stages of 32 KB.
// - Sharing (128 x 256 tiles, gemm::Wide): both take each tile, 64 rows
//   each as one m64n256k16 accumulator (128 floats a thread), and run its
//   epilogue together while the copier fills the stages for the next
//   tile: a quarter fewer bytes from L2 a FLOP (85 FLOP a byte against
//   64), the epilogue in series with the products. 4 stages of 48 KB.
// - In pairs (gemm::Paired): the wide blocks in clusters of two, which
//   take the two 128-row halves of a 256 x 256 tile and share its b: each
//   block's copier brings half of b's stage into both blocks' shared
//   memory by one multicast copy (tensorCopy2dMulticast), so b is read
//   from L2 once a pair. At GPT-2's c_fc (16384 x 3072 x 768) the wide
//   blocks read a 12 times and b 128 times, 0.91 GB from L2 a GEMM; in
//   pairs b 64 times, 0.60 GB (cuBLASLt's fastest kernels there run in
//   clusters of two too). A stage is filled again once both blocks'
//   multipliers are done with it: each block's `drained` barrier gathers
//   its own, and its copier passes that on to both blocks' `empty`.
//
// Why warp-specialized: Nsight Compute on the forty-seventh session's
// blocks (H200), where every thread copied and multiplied, found the
// 128-column ones (two blocks an SM) waiting on their copies and the
// epilogue's loads, and the 256-column ones at 8 warps an SM, the tensor
// pipe 40% busy, each tile's first copies and its epilogue in series
// with its products. The stages change hands through mbarriers, `full`
// once a stage's copies landed, `empty` once its products are done; only
// the multipliers wait for products.
//
// Why the copy engine: the cp.async copier before it (the fifty-first
// session's, untimed) spent a warpgroup's 128 threads issuing 24 16-byte
// copies each a stage and computing their swizzled addresses, and waited
// for its own copies a stage late before it could hand one over. A tensor
// copy is one instruction a box: it swizzles as it writes, and completes
// the stage's barrier itself as its bytes land (CUTLASS's warp-specialized
// GEMMs are built the same way).
//
// m is a multiple of 128, n of the tile's columns, k of 64; every pointer
// 16-byte aligned. The tiles walk n fastest: a block's 128 rows of a stay
// in L2 for the blocks beside it, and b (GPT-2's 4.7 MB) for all.
//
//===----------------------------------------------------------------------===//

#if GPTC_WGMMA
namespace gemm {

constexpr int kRows = 128, kDepth = 64;
/// A warpgroup that copies, two that multiply.
enum : int { kCopiers = 128, kMultipliers = 256 };

/// One stage's operands: a's two 64-row halves, and b's kColTiles tiles of
/// 64 columns (K rows and N columns N-major, N rows and K columns K-major),
/// each 64 x 64, back to back.
template <int kColTiles> struct Stage {
  wg::SwizzledTile<64> a[2], b[kColTiles];
};
/// A block's shared memory: kStages stages of a 128 x 64·kColTiles tile;
/// each multiplying warp's results of 16 rows by 32 columns as floats,
/// staged so that its lanes store 4 adjacent ones (a row's 32 columns 40
/// floats apart, so that a warp's writes of 2 meet each bank once a
/// half-warp); the stages' barriers, and with kTurns the multipliers'
/// turns (`turn[g]`: warpgroup g may start its next tile's products).
/// kBlocks: the blocks of a cluster, which share b's tiles (1 or 2); with
/// 2, `drained[s]`: this block's multipliers are done with stage s.
template <int kColTiles, int kStages, bool kTurns, int kBlocks = 1>
struct Specialized {
  /// (The parameters, for the functions that take a Shape.)
  static constexpr int kColumnTiles = kColTiles, kRing = kStages,
                       kCluster = kBlocks;
  static constexpr bool kTakesTurns = kTurns;
  static_assert(kBlocks == 1 || (kBlocks == 2 && kColTiles % 2 == 0),
                "pairs split b's tiles in halves");
  /// A multiplying warpgroup's accumulators: 2 of 64 rows taking turns,
  /// else one (its half of the tile).
  static constexpr int kAccumulators = kTurns ? 2 : 1;
  Stage<kColTiles> stage[kStages];
  float staged[8][16][40];
  unsigned long long full[kStages], empty[kStages], turn[2], drained[kStages];
};
/// The block shapes, each timed at load, in the same 213 KB.
using Turns = Specialized<2, 6, true>;
using Wide = Specialized<4, 4, false>;
using Paired = Specialized<4, 4, false, 2>;

/// A block's walk over the result's tiles: tile t at rows
/// 128·(kCluster·(t / colTiles) + rank), columns 64·kColTiles·(t %
/// colTiles), where rank is the block's in its cluster (blockIdx.x %
/// kCluster: clusters lie along x); a cluster's blocks take tile
/// blockIdx.x / kCluster, then every gridDim.x / kCluster-th after it.
template <class Shape> struct TileWalk {
  int colTiles, tiles, first, stride, rank;
  __device__ __forceinline__ TileWalk(i64 m, i64 n)
      : colTiles(int(n / (64 * Shape::kColumnTiles))),
        tiles(int(m / (kRows * Shape::kCluster)) * colTiles),
        first(int(blockIdx.x) / Shape::kCluster),
        stride(int(gridDim.x) / Shape::kCluster),
        rank(int(blockIdx.x) % Shape::kCluster) {}
  __device__ __forceinline__ i64 row0(int tile) const {
    return (i64(tile / colTiles) * Shape::kCluster + rank) * kRows;
  }
  __device__ __forceinline__ i64 col0(int tile) const {
    return i64(tile % colTiles) * 64 * Shape::kColumnTiles;
  }
};

} // namespace gemm

/// The dynamic shared memory a block asks for: the stages and the 1,024
/// bytes dynamicSharedAs may skip to align them.
template <class T> constexpr unsigned gemmWgmmaSharedBytes() {
  return sizeof(T) + 1024 - 16;
}
constexpr unsigned kGemmWgmmaSharedBytes = gemmWgmmaSharedBytes<gemm::Turns>(),
                   kGemmWgmmaWideSharedBytes =
                       gemmWgmmaSharedBytes<gemm::Wide>(),
                   kGemmWgmmaPairedSharedBytes =
                       gemmWgmmaSharedBytes<gemm::Paired>();

/// B's descriptor for a stage's columns at k16 step kc: the b tiles lie
/// back to back, 8 KB apart. K-major, they are 64·kColTiles rows of 128
/// bytes (8-row groups 1,024 bytes apart, keysAlongN's SBO); N-major,
/// kColTiles swizzle atoms of 64 columns, the leading byte offset from one
/// to the next 8 KB (the PTX ISA's canonical MN-major layout; keysAlongK's
/// 16 is unused within one atom).
template <bool kKMajorB, int kColTiles>
__device__ __forceinline__ unsigned long long
gemmBTiles(const gemm::Stage<kColTiles> &st, int kc) {
  return kKMajorB
             ? st.b[0].keysAlongN(kc)
             : wgmmaDescriptorPlus(wgmmaDescriptor(sharedAddress(st.b[0].data),
                                                   sizeof st.b[0], 1024, true),
                                   kc * 2048);
}

/// Fills stage `st` with depth tile `dt` of the 128 x 64·kColTiles tile at
/// (row0, col0), by the copy engine: one thread arrives at the stage's
/// `full` barrier expecting the stage's bytes, and asks for a's 128 rows
/// in one box (kMMajorA: a [k, m], its 128 columns in two boxes of 64 x
/// 64, one a half) and b's columns in one (K-major: 64·kColTiles rows of
/// b) or kColTiles (N-major: 64 x 64 each); the barrier's phase completes
/// once they landed, swizzled as wgmma reads them (the maps' 128-byte
/// swizzle).
/// In a pair (kCluster 2), the block of rank `rank` asks for half of b's
/// (K-major: its 32·kColTiles rows, the map's box; N-major: kColTiles / 2
/// boxes) into both blocks' stage, whose `full` barriers count them.
template <bool kKMajorB, int kCluster, bool kMMajorA = false, int kColTiles>
__device__ __forceinline__ void
gemmLoadStage(gemm::Stage<kColTiles> &st, unsigned long long *full,
              const TensorMap *a, const TensorMap *b, int row0, int col0,
              int dt, int rank) {
  static_assert(sizeof st == (2 + kColTiles) * 8192, "tiles back to back");
  const int k0 = dt * gemm::kDepth;
  mbarrierArriveExpectTx(full, sizeof st);
  if constexpr (kMMajorA) // a's rows k0.., columns row0 + 64h..
#pragma unroll
    for (int h = 0; h < 2; ++h)
      tensorCopy2d(sharedAddress(st.a[h].data), a, row0 + 64 * h, k0, full);
  else
    tensorCopy2d(sharedAddress(st.a[0].data), a, k0, row0, full);
  if constexpr (kCluster == 1) {
    if (kKMajorB) // b's rows col0.., columns k0..
      tensorCopy2d(sharedAddress(st.b[0].data), b, k0, col0, full);
    else // b's rows k0.., columns col0 + 64h..
#pragma unroll
      for (int h = 0; h < kColTiles; ++h)
        tensorCopy2d(sharedAddress(st.b[h].data), b, col0 + 64 * h, k0, full);
  } else {
    constexpr int kHalf = kColTiles / 2;
    const unsigned short both = 3;
    if (kKMajorB)
      tensorCopy2dMulticast(sharedAddress(st.b[kHalf * rank].data), b, k0,
                            col0 + 64 * kHalf * rank, full, both);
    else
#pragma unroll
      for (int h = kHalf * rank; h < kHalf * (rank + 1); ++h)
        tensorCopy2dMulticast(sharedAddress(st.b[h].data), b, col0 + 64 * h, k0,
                              full, both);
  }
}

/// Before the copier fills stage `st` again (its fill'th fill, past the
/// first lap): the stage's products are done, in both blocks of a pair.
/// Alone, the multipliers arrive at `empty`. In a pair they arrive at
/// `drained`; once they are in, lane 0 passes that on to `empty` in both
/// blocks, whose phase completes with both blocks' passes.
template <class Shape>
__device__ __forceinline__ void gemmAwaitEmptyStage(Shape &s, int st, int fill,
                                                    int lane, int rank) {
  const unsigned parity = (fill / Shape::kRing - 1) & 1;
  if constexpr (Shape::kCluster == 1) {
    mbarrierWait(&s.empty[st], parity);
  } else {
    mbarrierWait(&s.drained[st], parity);
    if (lane == 0) {
      const u32 empty = sharedAddress(&s.empty[st]);
      mbarrierArriveRemote(clusterSharedAddress(empty, rank));
      mbarrierArriveRemote(clusterSharedAddress(empty, 1 - rank));
    }
    mbarrierWaitCluster(&s.empty[st], parity);
  }
}
/// The multipliers are done with stage `st`: `empty`, or in a pair
/// `drained` (gemmAwaitEmptyStage).
template <class Shape>
__device__ __forceinline__ void gemmReleaseStage(Shape &s, int st) {
  mbarrierArrive(Shape::kCluster == 1 ? &s.empty[st] : &s.drained[st]);
}

/// The copier (the block's first warp; the rest of its warpgroup has
/// nothing to do): fills the stages in turn, the block's tiles one after
/// another, a stage again once its products are done (`empty`); its first
/// lane asks for the copies, which hand the stage over (`full`) as they
/// land. Where the epilogue reads a matrix (GELU's derivative: the
/// pre-activation, which the forward wrote long before, out of L2), the
/// warp asks for the tile's rows of it into L2 as the tile's copies
/// start: a tile's products ahead of the epilogue that reads them.
template <bool kKMajorB, class Shape, class Epilogue>
__device__ __forceinline__ void
gemmCopyStages(Shape &s, const TensorMap *a, const TensorMap *b, i64 n, i64 k,
               const gemm::TileWalk<Shape> &walk, const Epilogue &epilogue) {
  using namespace gemm;
  constexpr int kStages = Shape::kRing;
  const int depthTiles = int(k / kDepth), lane = threadIdx.x % 32;
  if (threadIdx.x >= 32)
    return;
  if (lane == 0) {
    tensorMapAcquire(a);
    tensorMapAcquire(b);
  }
  int fill = 0; // the stages filled so far
  for (int tile = walk.first; tile < walk.tiles; tile += walk.stride) {
    const int row0 = int(walk.row0(tile)), col0 = int(walk.col0(tile));
    if constexpr (Epilogue::kOperandRows) // 128 rows, lines of 128 bytes
#pragma unroll
      for (int r = lane; r < kRows; r += 32)
#pragma unroll
        for (int line = 0; line < Shape::kColumnTiles; ++line)
          prefetchL2(epilogue.operand((row0 + r) * n + col0 + 64 * line,
                                      col0 + 64 * line));
    for (int dt = 0; dt < depthTiles; ++dt, ++fill) {
      const int st = fill % kStages;
      if (fill >= kStages) // its last fill's products are done
        gemmAwaitEmptyStage(s, st, fill, lane, walk.rank);
      if (lane == 0)
        gemmLoadStage<kKMajorB, Shape::kCluster>(s.stage[st], &s.full[st], a, b,
                                                 row0, col0, dt, walk.rank);
    }
  }
}

/// Taking turns: warpgroup `group` waits before the products of the
/// block's tile i (its every other) until the other issued all of tile
/// i - 1's (the other's arrival after its tile (i - 1): phase (i - 1) / 2
/// of turn[group]), and then lets the other on (gemmPassTurn).
template <class Shape>
__device__ __forceinline__ void gemmAwaitTurn(Shape &s, int group, int i) {
  if (i > 0)
    mbarrierWait(&s.turn[group], ((i - 1) / 2) & 1);
}
template <class Shape>
__device__ __forceinline__ void gemmPassTurn(Shape &s, int group) {
  mbarrierArrive(&s.turn[1 - group]);
}

/// A multiplying warpgroup's products of one run of stages (a tile, or a
/// stream-K segment): `steps` stages from its fill'th fill on, each once
/// full, into its accumulators d (kAccs, fenced together), issue(stage,
/// kc, accumulate) the k16 step kc's wgmma into each. One step's products
/// stay in flight; a stage is released once they are done; taking turns,
/// the other warpgroup goes on once the run's last products are issued.
/// Returns with them all in d.
template <class Shape, int kAccs, int kN, class Issue>
__device__ __forceinline__ void
gemmMultiplyRun(Shape &s, float (&d)[kAccs][kN][4], int fill, int steps,
                int group, const Issue &issue) {
  using namespace gemm;
  constexpr int kStages = Shape::kRing;
  for (int j = 0; j < steps; ++j, ++fill) {
    const int st = fill % kStages;
    mbarrierWait(&s.full[st], (fill / kStages) & 1);
    if constexpr (kAccs == 2)
      wgmmaFence(d[0], d[1]);
    else
      wgmmaFence(d[0]);
#pragma unroll
    for (int kc = 0; kc < kDepth / 16; ++kc)
      issue(s.stage[st], kc, j > 0 || kc > 0);
    wgmmaCommit();
    if constexpr (Shape::kTakesTurns)
      if (j + 1 == steps)
        gemmPassTurn(s, group);
    wgmmaWait<1>(); // this warpgroup's products of the fill before
    if (j > 0)
      gemmReleaseStage(s, (fill - 1) % kStages);
  }
  wgmmaWait<0>();
#pragma unroll
  for (int acc = 0; acc < kAccs; ++acc)
    wgmmaFenceOperands(d[acc]);
  gemmReleaseStage(s, (fill - 1) % kStages);
}

/// The multipliers (the block's second and third warpgroups): each stage's
/// products once it is full, released once they are done (one step later:
/// one step's products stay in flight); then the epilogue, each warp 32
/// columns of its 16 rows of an accumulator at a time, staged as floats so
/// that each lane takes 4 adjacent results (8 bytes of each output, 64 of
/// a row a quarter-warp), its operand loaded a step ahead. Sharing
/// (gemm::Wide), warpgroup g takes rows 64g.. of every tile; taking turns
/// (gemm::Turns), all rows of every other tile of the block's, g's first:
/// g waits for its turn before a tile's first products, and gives the
/// other its turn once its last stage is full and its products issued (so
/// the other, which then waits for stages filled after those, never waits
/// on a barrier's phase of a lap before).
template <bool kKMajorB, class Shape, class Epilogue>
__device__ __forceinline__ void
gemmMultiplyStages(Shape &s, bf16 *const (&out)[Epilogue::kOutputs], i64 n,
                   i64 k, const gemm::TileWalk<Shape> &walk,
                   const Epilogue &epilogue) {
  using namespace gemm;
  constexpr int kCols = 64 * Shape::kColumnTiles, kAccs = Shape::kAccumulators,
                kTurns = Shape::kTakesTurns;
  // An accumulator's 32-column steps of the epilogue, and all of them.
  constexpr int kSteps = kCols / 32, kAllSteps = kAccs * kSteps;
  const int depthTiles = int(k / kDepth);
  const int group = (threadIdx.x - kCopiers) / 128,
            warp = (threadIdx.x - kCopiers) / 32, lane = threadIdx.x % 32;
  float(&staged)[16][40] = s.staged[warp];
  // The block's tiles this warpgroup takes: every one, or every other.
  const int first = kTurns ? group : 0, stride = kTurns ? 2 : 1;
  for (int i = first; walk.first + i * walk.stride < walk.tiles; i += stride) {
    const int tile = walk.first + i * walk.stride;
    const i64 row0 = walk.row0(tile), col0 = walk.col0(tile);
    if constexpr (kTurns)
      gemmAwaitTurn(s, group, i);
    float d[kAccs][8 * Shape::kColumnTiles][4];
    gemmMultiplyRun(
        s, d, i * depthTiles, depthTiles, group,
        [&](const Stage<Shape::kColumnTiles> &stage, int kc, bool accumulate) {
#pragma unroll
          for (int acc = 0; acc < kAccs; ++acc)
            wgmmaBf16<!kKMajorB>(d[acc],
                                 stage.a[kTurns ? acc : group].rowsAlongM(kc),
                                 gemmBTiles<kKMajorB>(stage, kc), accumulate);
        });
    // This warp's rows of accumulator acc: 16 from rowBase(acc). Lane's
    // element r of step c: row 4r + lane/8, column 32c + 4(lane % 8).
    auto rowBase = [&](int acc) {
      return row0 + 64 * (kTurns ? acc : group) + 16 * (warp % 4);
    };
    auto element = [&](int step, int r) {
      return (rowBase(step / kSteps) + 4 * r + lane / 8) * n + col0 +
             32 * (step % kSteps) + 4 * (lane % 8);
    };
    auto column = [&](int step) {
      return col0 + 32 * (step % kSteps) + 4 * (lane % 8);
    };
    uint2 operand[2][4] = {}; // this step's and the next's, as loaded
    if constexpr (Epilogue::kReadsOperand)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        operand[0][r] = loadPacked4(epilogue.operand(element(0, r), column(0)));
#pragma unroll
    for (int step = 0; step < kAllSteps; ++step) {
      const int acc = step / kSteps, c = step % kSteps;
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float v[2] = {d[acc][4 * c + j][2 * half],
                              d[acc][4 * c + j][2 * half + 1]};
          store2(&staged[lane / 4 + 8 * half][8 * j + 2 * (lane % 4)], v);
        }
      __syncwarp();
      if (Epilogue::kReadsOperand && step + 1 < kAllSteps)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          operand[(step + 1) % 2][r] = loadPacked4(
              epilogue.operand(element(step + 1, r), column(step + 1)));
      float sums[4] = {}; // of output 0's columns, over this lane's rows
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float p[4], x[4] = {}, o[Epilogue::kOutputs][4];
        load4(&staged[4 * r + lane / 8][4 * (lane % 8)], p);
        if constexpr (Epilogue::kReadsOperand)
          unpack4<bf16>(operand[step % 2][r], x);
        epilogue.apply(p, x, o);
#pragma unroll
        for (int e = 0; e < Epilogue::kOutputs; ++e)
          store4(out[e] + element(step, r), o[e]);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          sums[e] += o[0][e];
      }
      if constexpr (Epilogue::kColumnPartials) {
        // The warp's 16 rows: lanes l, l ^ 8, l ^ 16, l ^ 24 share columns.
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sums[e] += __shfl_xor_sync(0xffffffffu, sums[e], 8);
          sums[e] += __shfl_xor_sync(0xffffffffu, sums[e], 16);
        }
        if (lane < 8)
          store4(epilogue.partials + rowBase(acc) / 16 * n + column(step),
                 sums);
      }
      __syncwarp(); // the staged results read before the next are written
    }
  }
}

/// The barriers initialised, for all of the block's threads: in a pair,
/// both blocks' (the other block's copies and arrivals reach them).
template <class Shape> __device__ __forceinline__ void gemmBarriersReady() {
  if constexpr (Shape::kCluster > 1)
    clusterSync();
  else
    __syncthreads();
}

/// gptc's wgmma GEMM with `Epilogue` (GemmBiasGelu, GemmGeluGrad, ...) in
/// block shape `Shape`: out[i] = the epilogue's output i of the product
/// a·b, [m, n] bf16, a [m, k] and b [k, n] row-major (an N-major B), or
/// with kKMajorB b [n, k] (a K-major one, read transposed). a and b are
/// read through their tensor maps (rt::wgmmaOperandMaps: 2-D, the
/// 128-byte swizzle, boxes of a's 128 rows and of b's tile columns). One
/// block an SM walks the tiles (tile r · n/C + c at rows 128r, columns
/// Cc, C the shape's columns; grid ≤ the tiles, blockDim.x == 384): the
/// first warp copies (gemmCopyStages), the second and third warpgroups
/// multiply and run the epilogue (gemmMultiplyStages).
template <bool kKMajorB, class Shape, class Epilogue>
__device__ __forceinline__ void
gemmWgmmaWalk(const TensorMap *a, const TensorMap *b,
              bf16 *const (&out)[Epilogue::kOutputs], i64 m, i64 n, i64 k,
              const Epilogue &epilogue) {
  using namespace gemm;
  auto &s = wg::dynamicSharedAs<Shape>();
  const TileWalk<Shape> walk(m, n);
  constexpr bool kPaired = Shape::kCluster > 1;
  if (threadIdx.x == 0) {
    for (int i = 0; i < Shape::kRing; ++i) {
      mbarrierInit(&s.full[i], 1);
      // In a pair, `empty` counts the two blocks' copiers' passes.
      mbarrierInit(&s.empty[i], kPaired              ? 2
                                : Shape::kTakesTurns ? 128
                                                     : kMultipliers);
      mbarrierInit(&s.drained[i], kMultipliers);
    }
    for (int g = 0; g < 2; ++g)
      mbarrierInit(&s.turn[g], 128);
    if (kPaired)
      fenceMbarrierInit();
  }
  gemmBarriersReady<Shape>();
  if (threadIdx.x < kCopiers) {
    lowerRegisters<40>();
    gemmCopyStages<kKMajorB>(s, a, b, n, k, walk, epilogue);
  } else {
    raiseRegisters<232>();
    gemmMultiplyStages<kKMajorB>(s, out, n, k, walk, epilogue);
  }
  // A block leaves once the other is done with its shared memory: the
  // other's copies into it land before its multipliers finish, but an
  // arrival at its `empty` may still be on its way (CUTLASS's producers
  // wait out their last stages for the same reason).
  if constexpr (kPaired)
    clusterSync();
}
/// An entry point's block shape, kBlocks: 128 x 128 tiles taken in turns
/// (gemm::kTurnsBlocks), 128 x 256 shared (kWideBlocks), or those in
/// pairs sharing b (kPairedBlocks, launched in clusters of two).
namespace gemm {
enum : int { kTurnsBlocks = 0, kWideBlocks = 1, kPairedBlocks = 2 };
}
template <int kBlocks> struct GemmShapeOf { using type = gemm::Turns; };
template <> struct GemmShapeOf<gemm::kWideBlocks> { using type = gemm::Wide; };
template <> struct GemmShapeOf<gemm::kPairedBlocks> {
  using type = gemm::Paired;
};
template <int kBlocks> using GemmShape = typename GemmShapeOf<kBlocks>::type;

/// The epilogues: each reads one bf16 operand at the result's elements
/// (kReadsOperand; `operand`: the bias at the column, or a matrix of the
/// result's shape, which the copier prefetches into L2 a tile ahead:
/// kOperandRows) and makes its outputs from the float32 product p and the
/// operand x, W adjacent elements at a time (`apply`). With
/// kColumnPartials, output 0's column sums over each 16 rows go to
/// `partials` too, [m / 16, n] float32.
///
/// The bias [n] at the result's column, the operand of GemmBiasGelu and
/// GemmBias.
struct BiasOperand {
  static constexpr bool kReadsOperand = true, kOperandRows = false,
                        kColumnPartials = false;
  const bf16 *bias;
  __device__ __forceinline__ const bf16 *operand(i64, i64 col) const {
    return bias + col;
  }
};

/// GELU's: out[0] = GELU(pre), out[1] = pre = the product + bias
/// (fallbackGelu of the float32 sum, as cuBLASLt's GELU_AUX_BIAS takes it
/// before rounding); bias [n].
struct GemmBiasGelu : BiasOperand {
  static constexpr int kOutputs = 2;
  template <int W>
  __device__ __forceinline__ void
  apply(const float (&p)[W], const float (&x)[W], float (&o)[2][W]) const {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      o[1][i] = p[i] + x[i];
      o[0][i] = fallbackGelu(o[1][i]);
    }
  }
};
/// GELU's derivative's: out[0] = gelu'(pre) · the product
/// (fallbackGeluGrad of the float32 product, as cuBLASLt's DGELU takes
/// it); pre [m, n].
struct GemmGeluGrad {
  static constexpr int kOutputs = 1;
  static constexpr bool kReadsOperand = true, kOperandRows = true,
                        kColumnPartials = false;
  const bf16 *pre;
  __device__ __forceinline__ const bf16 *operand(i64 at, i64) const {
    return pre + at;
  }
  template <int W>
  __device__ __forceinline__ void
  apply(const float (&p)[W], const float (&x)[W], float (&o)[1][W]) const {
#pragma unroll
    for (int i = 0; i < W; ++i)
      o[0][i] = fallbackGeluGrad(x[i], p[i]);
  }
};

/// GELU's derivative's with its bias gradient's partial sums: the column
/// sums of out[0] (of the float32 values, before they are rounded, as the
/// CPU executor's sum takes them) over each 16 rows, for ColumnSums to add
/// in order. cuBLASLt's DGELU_BGRAD took 477 µs on an H100 where DGELU
/// took 159 (docs/pipeline.md); here the sums are a few shuffles a step.
struct GemmGeluGradBias : GemmGeluGrad {
  static constexpr bool kColumnPartials = true;
  float *partials;
};

/// No epilogue: out[0] = the product, rounded (GemmPlain's kernels are
/// ways to plain GEMMs, so that tuning times the blocks' products alone
/// against cuBLASLt's on the same shapes).
struct GemmPlain {
  static constexpr int kOutputs = 1;
  static constexpr bool kReadsOperand = false, kOperandRows = false,
                        kColumnPartials = false;
  __device__ __forceinline__ const bf16 *operand(i64, i64) const {
    return nullptr;
  }
  template <int W>
  __device__ __forceinline__ void apply(const float (&p)[W], const float (&)[W],
                                        float (&o)[1][W]) const {
#pragma unroll
    for (int i = 0; i < W; ++i)
      o[0][i] = p[i];
  }
};

/// The bias alone: out[0] = the product + bias (the float32 sum rounded
/// once, as cuBLASLt's BIAS epilogue takes it); bias [n].
struct GemmBias : BiasOperand {
  static constexpr int kOutputs = 1;
  template <int W>
  __device__ __forceinline__ void
  apply(const float (&p)[W], const float (&x)[W], float (&o)[1][W]) const {
#pragma unroll
    for (int i = 0; i < W; ++i)
      o[0][i] = p[i] + x[i];
  }
};

/// pre = a·b + bias, out = GELU(pre), both [m, n] bf16; bias [n] bf16; b
/// [k, n]. kBlocks: the block shape (GemmShape).
template <int kBlocks>
__device__ void gemmWgmmaBiasGelu(const TensorMap *a, const TensorMap *b,
                                  const bf16 *bias, bf16 *out, bf16 *pre, i64 m,
                                  i64 n, i64 k) {
  bf16 *const results[2] = {out, pre};
  gemmWgmmaWalk<false, GemmShape<kBlocks>>(a, b, results, m, n, k,
                                           GemmBiasGelu{{bias}});
}

/// out = gelu'(pre) · (a·bᵀ), [m, n] bf16; b [n, k], read transposed (the
/// c_proj weight a c_fc backward reads). kBlocks as above.
template <int kBlocks>
__device__ void gemmWgmmaGeluGrad(const TensorMap *a, const TensorMap *b,
                                  const bf16 *pre, bf16 *out, i64 m, i64 n,
                                  i64 k) {
  bf16 *const results[1] = {out};
  gemmWgmmaWalk<true, GemmShape<kBlocks>>(a, b, results, m, n, k,
                                          GemmGeluGrad{pre});
}

/// The same with the bias gradient's partial sums (GemmGeluGradBias):
/// partials [m / 16, n] float32. kBlocks as above.
template <int kBlocks>
__device__ void gemmWgmmaGeluGradBias(const TensorMap *a, const TensorMap *b,
                                      const bf16 *pre, bf16 *out,
                                      float *partials, i64 m, i64 n, i64 k) {
  bf16 *const results[1] = {out};
  gemmWgmmaWalk<true, GemmShape<kBlocks>>(a, b, results, m, n, k,
                                          GemmGeluGradBias{{pre}, partials});
}
/// out = a·bᵀ, [m, n] bf16; b [n, k], read transposed (K-major, as the
/// backward's input gradients and the lm_head read their weights).
/// kBlocks as above.
template <int kBlocks>
__device__ void gemmWgmmaPlain(const TensorMap *a, const TensorMap *b,
                               bf16 *out, i64 m, i64 n, i64 k) {
  bf16 *const results[1] = {out};
  gemmWgmmaWalk<true, GemmShape<kBlocks>>(a, b, results, m, n, k, GemmPlain{});
}
/// out = a·b + bias, [m, n] bf16; bias [n]; b [k, n] (N-major, as the
/// forward's projections read their weights). kBlocks as above.
template <int kBlocks>
__device__ void gemmWgmmaBias(const TensorMap *a, const TensorMap *b,
                              const bf16 *bias, bf16 *out, i64 m, i64 n,
                              i64 k) {
  bf16 *const results[1] = {out};
  gemmWgmmaWalk<false, GemmShape<kBlocks>>(a, b, results, m, n, k,
                                           GemmBias{{bias}});
}
/// Weight gradients, stream-K. A linear layer's weight gradient is
/// out[m, n] = aᵀ·b (+ out, accumulating micro-batches) in float32, a [k,
/// m] and b [k, n] bf16 (the layer's input and its output's gradient, both
/// as they lie: a read M-major, b N-major), over the batch's tokens: k =
/// 16,384 at GPT-2's B = 16, and few tiles (c_attn's 768 x 2304: 108 of 128
/// x 128; c_proj's 768 x 768: 36), fewer than an H100's 132 SMs or a wave
/// and a bit of them. Tiled whole, such a GEMM leaves SMs idle for its one
/// long wave (cuBLASLt's ran at 36 to 62% of their floor in the thirtieth
/// session's H200 profile). Here the tiles' depth steps, tile after tile
/// (StreamWalk's order), are one row of iterations cut into gridDim.x
/// nearly equal spans, one a block (CUTLASS's "stream-K"): every SM has
/// the same work, and a tile whose steps two or three blocks share is
/// summed from their partial products. In any of three block shapes:
/// taking turns (128 x 128 tiles, gemm::Turns), the two multiplying
/// warpgroups take a block's segments (its span's runs within one tile)
/// in turns, as gemm::Turns takes tiles; sharing (128 x 256, gemm::Wide),
/// both take each segment, 64 rows each, a quarter fewer bytes from L2 a
/// FLOP; in pairs (gemm::Paired), the wide blocks in clusters of two walk
/// one span of 256 x 256 tiles together, each block 128 of the rows, and
/// share b's stages by multicast copies: half the wide blocks' bytes of b.
///
/// A segment that is a whole tile stores it. One that is part of a tile
/// stores its float32 products in the block's partial slot (a tile of
/// floats: slot 0 for the block's first segment, 1 for its last; a block's
/// other segments are whole), and each warp counts its rows in at the
/// tile's counter for them; the warp that counts last (no block waits for
/// another, so no block can wait for one that has no SM) sums the tile's
/// slots in block order, its own read back too, and stores the sum: the
/// same bits whichever block comes last. It leaves the counter at 0 for the
/// next launch.
namespace gemm {
/// The spans' owners are the blocks, or the pairs (clusters of two along
/// x), whose tiles have 256 rows: pair p is blocks 2p and 2p + 1, each
/// 128 rows of every tile (its rank's).
/// (In 32 bits, iterations · owners below 2^31, which the runtime checks:
/// GPT-2's lm_head, the largest, has 393 · 6 · 256 iterations at B = 16,
/// times 132 blocks. A 64-bit division is a call, and the multipliers
/// spilled their 128 accumulators around it.)
template <class Shape> struct StreamWalk {
  /// A tile's rows and columns.
  static constexpr int kTileRows = kRows * Shape::kCluster,
                       kCols = 64 * Shape::kColumnTiles;
  int iterations, depth, rowTiles, colTiles, blocks, me, rank;
  __device__ __forceinline__ StreamWalk(i64 m, i64 n, i64 k)
      : iterations(int(m / kTileRows * (n / kCols) * (k / kDepth))),
        depth(int(k / kDepth)), rowTiles(int(m / kTileRows)),
        colTiles(int(n / kCols)), blocks(int(gridDim.x) / Shape::kCluster),
        me(int(blockIdx.x) / Shape::kCluster),
        rank(int(blockIdx.x) % Shape::kCluster) {}
  /// Owner b's first iteration (b = blocks: the end).
  __device__ __forceinline__ int start(int b) const {
    return b * iterations / blocks;
  }
  /// The owner whose span holds iteration `it`.
  __device__ __forceinline__ int blockOf(int it) const {
    return ((it + 1) * blocks - 1) / iterations;
  }
  /// Tile t's rows and columns: the tiles walk the dimension with more of
  /// them fastest. An LRU model of a 50 MiB L2, each block a stage a time
  /// unit (bench/stream_k_l2_model.py), then finds the operands read from
  /// DRAM about once at B = 16 in 128 x 128 tiles: c_attn's 96 MiB,
  /// c_proj's 120, the lm_head's 1,596; walking the other dimension
  /// fastest, 504, 624 and 12,576.
  /// (This block's 128 of them.)
  __device__ __forceinline__ i64 row0(int tile) const {
    return (i64(rowTiles > colTiles ? tile % rowTiles : tile / colTiles) *
                Shape::kCluster +
            rank) *
           kRows;
  }
  __device__ __forceinline__ i64 col0(int tile) const {
    return i64(rowTiles > colTiles ? tile / rowTiles : tile % colTiles) * kCols;
  }
};
/// A partial slot's floats (a block's 128 rows of a tile), and the warps
/// that count in at a block's rows of a tile: a warpgroup's 4 taking
/// turns, both warpgroups' 8 sharing.
template <class Shape>
constexpr int kSlotFloats = kRows *StreamWalk<Shape>::kCols;
template <class Shape>
constexpr int kCountingWarps = Shape::kTakesTurns ? 4 : 8;
} // namespace gemm

/// The copier of a stream-K block: its span's iterations in order, each a
/// stage (gemmCopyStages' ring).
template <class Shape>
__device__ __forceinline__ void
gemmStreamCopyStages(Shape &s, const TensorMap *a, const TensorMap *b,
                     const gemm::StreamWalk<Shape> &walk) {
  using namespace gemm;
  if (threadIdx.x >= 32)
    return;
  const int lane = threadIdx.x % 32;
  if (lane == 0) {
    tensorMapAcquire(a);
    tensorMapAcquire(b);
  }
  const int first = walk.start(walk.me), end = walk.start(walk.me + 1);
  int fill = 0;
  for (int it = first; it < end; ++it, ++fill) {
    const int st = fill % Shape::kRing;
    if (fill >= Shape::kRing)
      gemmAwaitEmptyStage(s, st, fill, lane, walk.rank);
    if (lane == 0) {
      const int tile = it / walk.depth, dt = it % walk.depth;
      gemmLoadStage<false, Shape::kCluster, true>(
          s.stage[st], &s.full[st], a, b, int(walk.row0(tile)),
          int(walk.col0(tile)), dt, walk.rank);
    }
  }
}

/// The multipliers of a stream-K block. Taking turns, warpgroup g takes
/// the block's segments g, g + 2, ... (gemmAwaitTurn), each as two
/// m64n128k16 accumulators (acc: rows 64·acc on); sharing, both take
/// every segment, g's 64 rows from 64·g as one m64n256k16; A M-major from
/// the stage. Lane's element e of accumulator acc's 8-column group J: row
/// 64·acc (or 64·g) + 16·warp + lane/4 + 8·(e / 2), column 8J + 2·(lane
/// % 4) + e % 2 of the tile; each store is a float2, a warp's 8 rows of 32
/// bytes.
template <class Shape>
__device__ __forceinline__ void
gemmStreamMultiplyStages(Shape &s, const float *old, float *out,
                         float *partials, unsigned *counters, i64 n,
                         const gemm::StreamWalk<Shape> &walk) {
  using namespace gemm;
  constexpr bool kTurns = Shape::kTakesTurns;
  constexpr int kAccs = Shape::kAccumulators, kGroups = 8 * Shape::kColumnTiles,
                kCols = StreamWalk<Shape>::kCols, kSlot = kSlotFloats<Shape>;
  const int group = (threadIdx.x - kCopiers) / 128,
            warp = (threadIdx.x - kCopiers) / 32 % 4, lane = threadIdx.x % 32;
  // The warp's counter at a tile: its warpgroup's 4 counting in, or both's
  // (a pair's blocks each their own).
  const int counting =
      kCountingWarps<Shape> * walk.rank + (kTurns ? warp : 4 * group + warp);
  const int first = walk.start(walk.me), end = walk.start(walk.me + 1);
  // The tile offset of this lane's element pair (acc, J, h).
  // In a slot: this lane's first pair at `mine`, (acc, J, h) at a constant
  // from it (a pointer a pair, or one moved by a lane's offset each, spilled
  // some of the accumulators in ptxas).
  const int laneRow = (kTurns ? 0 : 64 * group) + 16 * warp + lane / 4,
            laneCol = 2 * (lane % 4);
  auto offset = [](int acc, int J, int h) {
    return (64 * acc + 8 * h) * kCols + 8 * J;
  };
  int i = 0; // the block's segments before this one
  for (int from = first; from < end; ++i) {
    const int tile = from / walk.depth, tileStart = tile * walk.depth,
              to = end < tileStart + walk.depth ? end : tileStart + walk.depth,
              segment = from;
    from = to;
    if constexpr (kTurns) {
      if (i % 2 != group)
        continue;
      gemmAwaitTurn(s, group, i);
    }
    float d[kAccs][kGroups][4];
    gemmMultiplyRun(
        s, d, segment - first, to - segment, group,
        [&](const Stage<Shape::kColumnTiles> &stage, int kc, bool accumulate) {
#pragma unroll
          for (int acc = 0; acc < kAccs; ++acc) {
            const wg::SwizzledTile<64> &a = stage.a[kTurns ? acc : group];
            wgmmaBf16<true, true>(
                d[acc],
                wgmmaDescriptorPlus(wgmmaDescriptor(sharedAddress(a.data),
                                                    sizeof a, 1024, true),
                                    kc * 2048),
                gemmBTiles<false>(stage, kc), accumulate);
          }
        });
    const i64 row0 = walk.row0(tile), col0 = walk.col0(tile);
    // Stores the tile's sum at (acc, J, h), or adds it to what `old` holds.
    auto store = [&](int acc, int J, int h, float(&v)[2]) {
      const i64 at =
          (row0 + laneRow + 64 * acc + 8 * h) * n + col0 + laneCol + 8 * J;
      if (old) {
        float was[2];
        load2(old + at, was);
        v[0] = was[0] + v[0];
        v[1] = was[1] + v[1];
      }
      store2(out + at, v);
    };
    if (segment == tileStart && to == tileStart + walk.depth) {
#pragma unroll
      for (int acc = 0; acc < kAccs; ++acc)
#pragma unroll
        for (int J = 0; J < kGroups; ++J)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float v[2] = {d[acc][J][2 * h], d[acc][J][2 * h + 1]};
            store(acc, J, h, v);
          }
      continue;
    }
    // Part of the tile: into this block's slot (its first segment's, or
    // its last's), counted in. (What the sum needs is worked out after
    // the products are stored: beside them, the divisions' registers
    // spilled some.)
    float *mine = partials + i64(2 * int(blockIdx.x) + (i > 0)) * kSlot +
                  laneRow * kCols + laneCol;
#pragma unroll
    for (int acc = 0; acc < kAccs; ++acc)
#pragma unroll
      for (int J = 0; J < kGroups; ++J)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float v[2] = {d[acc][J][2 * h], d[acc][J][2 * h + 1]};
          store2(mine + offset(acc, J, h), v);
        }
    __threadfence();
    __syncwarp();
    // The tile's owners: b0's segment is its last unless the tile starts
    // its span, the others' their first; each one's block of this rank.
    const int b0 = walk.blockOf(tileStart),
              b1 = walk.blockOf(tileStart + walk.depth - 1);
    auto slot = [&](int owner) {
      const int last = owner == b0 && tileStart > walk.start(owner);
      return partials +
             i64(2 * (owner * Shape::kCluster + walk.rank) + last) * kSlot +
             laneRow * kCols + laneCol;
    };
    unsigned *counter =
        counters + kCountingWarps<Shape> * Shape::kCluster * tile + counting;
    unsigned before = 0;
    if (lane == 0)
      before = atomicAdd(counter, 1u);
    if (__shfl_sync(0xffffffffu, before, 0) != unsigned(b1 - b0))
      continue; // a later segment's warp sums the tile
    __threadfence();
    // The slots in block order, kPairs of this lane's pairs at a time (a
    // part tile has two slots at least: the first two's loads in flight
    // together). The products are dead by now, but 8 pairs at a time
    // spilled.
    constexpr int kPairs = 4, kRoundsAnAcc = kGroups / kPairs,
                  kRounds = kAccs * kRoundsAnAcc;
    auto load = [&](const float *slot, int acc, int J, int h) {
      return __ldcg(reinterpret_cast<const float2 *>(slot + offset(acc, J, h)));
    };
#pragma unroll
    for (int q = 0; q < kRounds; ++q) {
      const int acc = q / kRoundsAnAcc, J0 = q % kRoundsAnAcc * kPairs;
      float sum[kPairs][2][2];
      const float *slot0 = slot(b0), *slot1 = slot(b0 + 1);
#pragma unroll
      for (int J = 0; J < kPairs; ++J)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float2 x = load(slot0, acc, J0 + J, h),
                       y = load(slot1, acc, J0 + J, h);
          sum[J][h][0] = x.x + y.x;
          sum[J][h][1] = x.y + y.y;
        }
      for (int block = b0 + 2; block <= b1; ++block) {
        const float *next = slot(block);
#pragma unroll
        for (int J = 0; J < kPairs; ++J)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float2 x = load(next, acc, J0 + J, h);
            sum[J][h][0] += x.x;
            sum[J][h][1] += x.y;
          }
      }
#pragma unroll
      for (int J = 0; J < kPairs; ++J)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          store(acc, J0 + J, h, sum[J][h]);
    }
    if (lane == 0)
      *counter = 0;
  }
}

/// out = aᵀ·b, or with `old` out = old + aᵀ·b (old may be out), [m, n]
/// float32; a [k, m] and b [k, n] bf16 through their tensor maps (boxes
/// of 64 x 64). kBlocks: the block shape, kTurnsBlocks (tiles of 128 x
/// 128), kWideBlocks (128 x 256) or kPairedBlocks (256 x 256, a cluster
/// of two along x, gridDim.x even). partials: 2 · gridDim.x slots of a
/// block's rows of a tile of floats; counters: kCountingWarps (4 or 8) a
/// block's rows of a tile, (m / 128) · (n / the tile's columns) of them, 0
/// before the launch and after it. m a multiple of the tile's rows, n of
/// its columns, k of 64; the owners (gridDim.x, or its pairs) at most the
/// iterations (the tiles times k / 64), blockDim.x == 384, the shape's
/// shared memory.
template <int kBlocks>
__device__ void gemmWgmmaWeightGrad(const TensorMap *a, const TensorMap *b,
                                    const float *old, float *out,
                                    float *partials, unsigned *counters, i64 m,
                                    i64 n, i64 k) {
  using namespace gemm;
  using Shape = GemmShape<kBlocks>;
  constexpr bool kPaired = Shape::kCluster > 1;
  auto &s = wg::dynamicSharedAs<Shape>();
  const StreamWalk<Shape> walk(m, n, k);
  if (threadIdx.x == 0) {
    for (int i = 0; i < Shape::kRing; ++i) {
      mbarrierInit(&s.full[i], 1);
      // In a pair, `empty` counts the two blocks' copiers' passes.
      mbarrierInit(&s.empty[i], kPaired              ? 2
                                : Shape::kTakesTurns ? 128
                                                     : kMultipliers);
      mbarrierInit(&s.drained[i], kMultipliers);
    }
    for (int g = 0; g < 2; ++g)
      mbarrierInit(&s.turn[g], 128);
    if (kPaired)
      fenceMbarrierInit();
  }
  gemmBarriersReady<Shape>();
  if (threadIdx.x < kCopiers) {
    lowerRegisters<40>();
    gemmStreamCopyStages(s, a, b, walk);
  } else {
    raiseRegisters<232>();
    gemmStreamMultiplyStages(s, old, out, partials, counters, n, walk);
  }
  // (As gemmWgmmaWalk's pairs: a block leaves once the other is done with
  // its shared memory.)
  if constexpr (kPaired)
    clusterSync();
}
#endif // GPTC_WGMMA
