//===- attention_wgmma.cuh - flash attention tiles for wgmma --------------===//
//
// Hopper's warpgroup MMA (types.cuh: wgmmaBf16 and its fences) reads B,
// and A where no registers hold it, from shared memory through
// descriptors. Here: tiles laid out as it reads them (8 x 8 core matrices,
// or rows of 128 bytes swizzled), the cursors that copy a walked tile's
// rows into them, and the A fragments a kernel holds through its loop.
// Empty but on sm_90a (GPTC_WGMMA).
//
//===----------------------------------------------------------------------===//

#if GPTC_WGMMA
namespace wg {

/// A 64 x D bf16 tile in shared memory as wgmma reads it without swizzling:
/// 8 x 8 core matrices of 128 contiguous bytes (8 rows of 16), the one of
/// rows [8rb, 8rb+8) and columns [8cb, 8cb+8) at (rb·D/8 + cb)·128 bytes.
/// Read as a K-major B (keys are N, the D columns K): LBO 128 bytes, SBO
/// D/8·128. Read as an N-major B (keys are K, the columns N): LBO D/8·128,
/// SBO 128.
template <int D> struct CoreTile {
  static constexpr u32 kRowGroupBytes = D / 8 * 128;
  alignas(128) unsigned short data[64 * D];

  /// Chunk c of 16 bytes is row 8·(c / D) + c % 8, columns 8·(c / 8 % (D/8))
  /// on, and lands at byte 16c: the 8 lanes of a quarter warp fill one core
  /// matrix (no bank conflict) and a warp reads 64 contiguous bytes of 8 rows.
  static __device__ __forceinline__ void chunk(int c, int &row, int &col) {
    row = 8 * (c / D) + c % 8;
    col = 8 * (c / 8 % (D / 8));
  }
  /// Starts the copies of rows [row0, row0 + 64) of D bf16 elements,
  /// `stride` apart from `src` on (HeadRows), 16 bytes a thread with
  /// cp.async: in flight until the caller commits and waits for them.
  /// kThreads is the block's size (blockDim.x). A thread's chunks are
  /// kThreads apart (a multiple of D): the same columns, rows 8 · kThreads
  /// / D apart, so the unrolled copies' addresses differ by constants
  /// (kUnrolled as in mma::Tile::loadAsync).
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsync(const bf16 *src, i64 stride,
                                            i64 row0) {
    loadAsyncFrom<kThreads, kUnrolled>(
        src + row0 * stride + threadChunkOffset(stride), stride);
  }
  /// Where this thread's first chunk of a tile starts, in elements from
  /// the tile's first row (WalkedRows keeps it through a loop).
  static __device__ __forceinline__ i64 threadChunkOffset(i64 stride) {
    int r, col;
    chunk(threadIdx.x, r, col);
    return r * stride + col;
  }
  /// loadAsync from this thread's first chunk `from` on.
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsyncFrom(const bf16 *from, i64 stride) {
    constexpr int kChunks = 64 * D / 8, kRowStep = 8 * kThreads / D;
    static_assert(kThreads % D == 0, "a thread's chunks share columns");
    const u32 to = sharedAddress(data) + 16 * threadIdx.x;
#pragma unroll(kUnrolled ? 8 : 1)
    for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i)
      if (kChunks % kThreads == 0 || threadIdx.x + i * kThreads < kChunks)
        copyAsync16(to + 16 * i * kThreads, from + i * kRowStep * stride);
  }
  /// This lane's row address for loadMatrices of the 16 x 16 block at (r0,
  /// c0), matrices in mma::Tile::block's order (an A fragment).
  __device__ __forceinline__ u32 block(int r0, int c0) const {
    const int lane = threadIdx.x % 32, m = lane / 8;
    const int r = r0 + 8 * (m % 2) + lane % 8, c = c0 + 8 * (m / 2);
    return sharedAddress(data) + (r / 8) * kRowGroupBytes + (c / 8) * 128 +
           (r % 8) * 16;
  }
  /// B = this tileᵀ (keys along N), columns [16kc, 16kc+16) as K, rows
  /// from n0 (a multiple of 8) on as N.
  __device__ __forceinline__ unsigned long long keysAlongN(int kc,
                                                           int n0 = 0) const {
    return wgmmaDescriptorPlus(
        wgmmaDescriptor(sharedAddress(data), 128, kRowGroupBytes),
        n0 / 8 * kRowGroupBytes + kc * 256);
  }
  /// B = this tile (keys along K), rows [16kc, 16kc+16).
  __device__ __forceinline__ unsigned long long keysAlongK(int kc) const {
    return wgmmaDescriptorPlus(
        wgmmaDescriptor(sharedAddress(data), kRowGroupBytes, 128),
        kc * 2 * kRowGroupBytes);
  }
  /// A = this tile, its 64 rows as M and columns [16kc, 16kc+16) as K: a
  /// K-major A is laid out as a K-major B, so keysAlongN's descriptor.
  __device__ __forceinline__ unsigned long long rowsAlongM(int kc) const {
    return keysAlongN(kc);
  }
};

/// A 64 x 64 bf16 tile as CUTLASS and FlashAttention-3 lay one out for
/// wgmma: rows of 128 bytes (64 elements), the 16-byte chunk q of row r
/// at chunk q ^ (r % 8) (SWIZZLE_128B), 1,024-byte aligned. On an H200
/// the wgmma forward with k and v in these took 119.9 µs at GPT-2's sizes,
/// 213.9 with both in CoreTiles (155.0 with k alone swizzled), though the
/// tensor cores alone read either layout as fast (docs/benchmarks.md,
/// twenty-seventh session).
template <int D> struct SwizzledTile {
  static_assert(D == 64, "rows of 128 bytes");
  alignas(1024) unsigned short data[64 * D];

  /// Starts the copies of rows [row0, row0 + 64), `stride` apart from
  /// `src` on, 16 bytes a thread with cp.async (8 threads a row): in
  /// flight until the caller commits and waits for them. kThreads is the
  /// block's size.
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsync(const bf16 *src, i64 stride,
                                            i64 row0) {
    loadAsyncFrom<kThreads>(src + row0 * stride + threadChunkOffset(stride),
                            stride);
  }
  /// Where this thread's first chunk of a tile starts, in elements from
  /// the tile's first row (WalkedRows keeps it through a loop).
  static __device__ __forceinline__ i64 threadChunkOffset(i64 stride) {
    return threadIdx.x / 8 * stride + threadIdx.x % 8 * 8;
  }
  /// loadAsync from this thread's first chunk `from` on.
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsyncFrom(const bf16 *from, i64 stride) {
    constexpr int kChunks = 64 * D / 8;
    static_assert(kChunks % kThreads == 0, "whole rounds");
    const int r = threadIdx.x / 8, q = threadIdx.x % 8;
    const u32 to = sharedAddress(data) + r * 128 + ((q ^ (r % 8)) * 16);
    // A thread's rows are kThreads / 8 apart, a multiple of 8: the same
    // swizzle, addresses a constant apart.
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i)
      copyAsync16(to + i * (kThreads / 8) * 128,
                  from + i * (kThreads / 8) * stride);
  }
  /// This lane's row address for loadMatrices of the 16 x 16 block at (r0,
  /// c0), as CoreTile::block: a matrix's 8 rows hold its columns in 8
  /// different chunks, so its reads meet no bank twice.
  __device__ __forceinline__ u32 block(int r0, int c0) const {
    const int lane = threadIdx.x % 32, m = lane / 8;
    const int r = r0 + 8 * (m % 2) + lane % 8, c = c0 + 8 * (m / 2);
    return sharedAddress(data) + r * 128 + ((c / 8) ^ (r % 8)) * 16;
  }
  /// B = this tileᵀ (keys along N), columns [16kc, 16kc+16) as K and rows
  /// from n0 (a multiple of 8, so the swizzle is unchanged) on as N: the
  /// start 32 bytes a k16 step into the rows, 1,024 bytes a group of 8.
  __device__ __forceinline__ unsigned long long keysAlongN(int kc,
                                                           int n0 = 0) const {
    return wgmmaDescriptorPlus(
        wgmmaDescriptor(sharedAddress(data), 16, 1024, true),
        n0 * 128 + kc * 32);
  }
  /// B = this tile (keys along K, N-major), rows [16kc, 16kc+16): one
  /// swizzle atom spans the 64 columns.
  __device__ __forceinline__ unsigned long long keysAlongK(int kc) const {
    return wgmmaDescriptorPlus(
        wgmmaDescriptor(sharedAddress(data), 16, 1024, true), kc * 2048);
  }
  /// A = this tile, its 64 rows as M and columns [16kc, 16kc+16) as K (as
  /// CoreTile::rowsAlongM).
  __device__ __forceinline__ unsigned long long rowsAlongM(int kc) const {
    return keysAlongN(kc);
  }
};

/// The tiles the wgmma kernels read as B (the forwards' k and v, every
/// operand tile of the backwards): swizzled where D is 64, core matrices
/// where it is 32 (rows of 64 bytes).
template <int D> struct OperandTileOf { using type = CoreTile<D>; };
template <> struct OperandTileOf<64> { using type = SwizzledTile<64>; };
template <int D> using OperandTile = typename OperandTileOf<D>::type;

/// A thread's copies of the 64-row tiles a loop walks down one operand:
/// its first chunk's address, worked out once and stepped a tile at a
/// time, and the same rows of a twin operand (v beside k) a fixed distance
/// on. Given a tile's first row, ptxas computed (row0 + r)·stride + col
/// again every trip, in 64 bits: 15 to 20 instructions a trip of the
/// wgmma-overlap forward's and wgmma-split's dk/dv loops (nvdisasm).
template <class Tile, int kThreads> struct WalkedRows {
  const bf16 *from; // this thread's first chunk of the tile at the cursor
  i64 stride;
  __device__ __forceinline__ WalkedRows(const bf16 *src, i64 stride, i64 row0)
      : from(src + row0 * stride + Tile::threadChunkOffset(stride)),
        stride(stride) {}
  /// The cursor `rows` rows on (back, if negative).
  __device__ __forceinline__ void step(int rows) { from += rows * stride; }
  /// Starts the copies of the tile at the cursor into t (not committed).
  __device__ __forceinline__ void load(Tile &t) const {
    t.template loadAsyncFrom<kThreads>(from, stride);
  }
  /// Starts the copies of the twin's tile, `bytes` (twinBytes) after this
  /// operand's, into t.
  __device__ __forceinline__ void loadTwin(Tile &t, i64 bytes) const {
    t.template loadAsyncFrom<kThreads>(
        reinterpret_cast<const bf16 *>(
            reinterpret_cast<unsigned long long>(from) + bytes),
        stride);
  }
  /// The distance from operand a to its twin b, in bytes (as integers:
  /// they may be different buffers).
  static __device__ __forceinline__ i64 twinBytes(const bf16 *a,
                                                  const bf16 *b) {
    return i64(reinterpret_cast<unsigned long long>(b) -
               reinterpret_cast<unsigned long long>(a));
  }
};

/// The block's dynamic shared memory as a T, from its first alignof(T)
/// boundary on: it is only 16-byte aligned, and a swizzled tile's pattern
/// follows the address bits. Its launches ask for alignof(T) - 16 bytes
/// more than sizeof(T) (EmitAttention.cpp). The pointer is the array's
/// plus a pad, so the compiler still knows it for shared memory: rounded
/// as an integer it did not, and the kernels' plain reads of their row
/// terms were generic loads (LD, not LDS: 28 in wgmma-split-ss).
template <class T> __device__ __forceinline__ T &dynamicSharedAs() {
  extern __shared__ uint4 gptcDynamicShared[];
  char *base = reinterpret_cast<char *>(gptcDynamicShared);
  const unsigned long long pad =
      (0 - reinterpret_cast<unsigned long long>(base)) & (alignof(T) - 1);
  return *reinterpret_cast<T *>(base + pad);
}

} // namespace wg

/// Loads the A fragments of this warp's 16 rows (16 warp.. of its
/// warpgroup) of tile `t`, columns 16kc.. as fragment kc, which a wgmma
/// kernel holds through its loop: a forward's q, a backward key tile
/// block's k and v, a query tile block's q and dout; loaded on the loop's
/// first tile, after its barrier. ptxas 13.0 once gave the probabilities'
/// A fragments the registers of the wgmma forward's held q (78e8693), so
/// each held array is zeroed before the loop (defined on every path; the
/// forward's q held without that came out mixed up again in an
/// experiment, with it not), and test/cuda/held_fragments.py reads the
/// SASS of each kernel that holds A fragments: no instruction in the loop
/// may write their registers but the first tile's LDSMs. A mix-up it did
/// not see would still fail the GPU job's --check-kernels runs and, for a
/// variant, the comparison at load.
template <int N, class Tile>
__device__ __forceinline__ void wgmmaHoldRows(u32 (&a)[N][4], const Tile &t) {
  const int warp = threadIdx.x / 32 % 4;
#pragma unroll
  for (int kc = 0; kc < N; ++kc)
    loadMatrices(a[kc], t.block(warp * 16, kc * 16));
}

/// The A operand of the products a wgmma block repeats through its loop,
/// rows of a tile it keeps (the forward's q; a backward dk/dv block's k or
/// v, a wgmma-split dq block's q or dout): fragments held in registers
/// from the loop's first tile on (hold: wgmmaHoldRows; zeroed first), or,
/// kShared (--attention-forward=wgmma-ss, --attention-backward=
/// wgmma-split-ss), read by each product from the tile in shared memory.
/// The backward's pair of them held takes 32 registers at D = 64, the
/// difference between wgmma-split's 3 blocks an SM and 4; the forward's q,
/// 16 of its 113 (4 blocks an SM), where 90 fit 5.
template <int D, bool kShared, class Tile = wg::OperandTile<D>>
struct KeptRows {
  const Tile &tile;
  u32 a[D / 16][4] = {};
  __device__ __forceinline__ void hold() { wgmmaHoldRows(a, tile); }
  /// d += these rows' columns [16kc, +16) · b; the first step (kc 0)
  /// starts d.
  template <int N>
  __device__ __forceinline__ void product(float (&d)[N][4], int kc,
                                          unsigned long long b) {
    wgmmaBf16<false>(d, a[kc], b, kc > 0);
  }
};
template <int D, class Tile> struct KeptRows<D, true, Tile> {
  const Tile &tile;
  __device__ __forceinline__ void hold() {}
  template <int N>
  __device__ __forceinline__ void product(float (&d)[N][4], int kc,
                                          unsigned long long b) {
    wgmmaBf16<false>(d, tile.rowsAlongM(kc), b, kc > 0);
  }
};
/// wgmmaFence before a batch of one product on kept rows x, into d.
template <int D, class Tile, int N>
__device__ __forceinline__ void wgmmaFenceKept(float (&d)[N][4],
                                               KeptRows<D, false, Tile> &x) {
  wgmmaFence(d, x.a);
}
template <int D, class Tile, int N>
__device__ __forceinline__ void wgmmaFenceKept(float (&d)[N][4],
                                               KeptRows<D, true, Tile> &) {
  wgmmaFence(d);
}
/// The same before a batch of two: into d with x's rows, into d2 with y's.
template <int D, class Tile, int N, int N2>
__device__ __forceinline__ void
wgmmaFenceKept(float (&d)[N][4], KeptRows<D, false, Tile> &x,
               float (&d2)[N2][4], KeptRows<D, false, Tile> &y) {
  wgmmaFence(d, x.a, d2, y.a);
}
template <int D, class Tile, int N, int N2>
__device__ __forceinline__ void
wgmmaFenceKept(float (&d)[N][4], KeptRows<D, true, Tile> &, float (&d2)[N2][4],
               KeptRows<D, true, Tile> &) {
  wgmmaFence(d, d2);
}
#endif // GPTC_WGMMA
