//===- types.cuh - element types, conversions, vector and shared access --===//
//
// Generated kernels are self-contained (NVRTC gets no include path), so the
// 16-bit float types are ours: a bf16 or f16 is its bit pattern, converted
// with PTX cvt (round to nearest even, as the CPU executor's Precision.cpp).
// All arithmetic is float32; a buffer's dtype only decides how it is loaded
// and stored. Everything with inline PTX lives here (unittests replace this
// file to run generated kernels on the host).
//
//===----------------------------------------------------------------------===//

typedef long long i64;
typedef unsigned int u32;

// Warpgroup MMA (wgmma) exists on sm_90a, where NVRTC defines
// __CUDA_ARCH_FEAT_SM90_ALL; kernels that use it fall back to mma.sync
// elsewhere. (The host emulation defines GPTC_WGMMA itself.)
#if !defined(GPTC_WGMMA)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GPTC_WGMMA 1
#else
#define GPTC_WGMMA 0
#endif
#endif

/// Programmatic dependent launch (sm_90 on): the first statement of every
/// gptc kernel. It waits until the kernels before it in its stream have
/// finished and their writes are visible (griddepcontrol.wait), then lets
/// the next kernel start launching (launch_dependents), whose blocks take
/// the SMs this one's leave and wait here in turn. The runtime launches
/// with the programmatic-serialization attribute (GPTC_PDL), so the gap
/// between two kernels, the next one's launch, is spent under this one;
/// launched without it, the wait returns at once. Before any access, in
/// every block: a kernel whose blocks all left without waiting would
/// count as finished before its predecessor, and the one after it would
/// read too early.
__device__ __forceinline__ void awaitPriorKernels() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n"
               "griddepcontrol.launch_dependents;\n" ::
                   : "memory");
#endif
}

struct bf16 { unsigned short bits; };
struct f16 { unsigned short bits; };

__device__ __forceinline__ float toFloat(float x) { return x; }
__device__ __forceinline__ float toFloat(int x) { return float(x); }
__device__ __forceinline__ float toFloat(bf16 x) {
  return __uint_as_float(u32(x.bits) << 16);
}
__device__ __forceinline__ float toFloat(f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}

/// fromFloat<T>(x): x rounded to T (nearest even; f16 overflows to inf).
template <typename T> __device__ __forceinline__ T fromFloat(float x);
template <> __device__ __forceinline__ float fromFloat<float>(float x) {
  return x;
}
template <> __device__ __forceinline__ int fromFloat<int>(float x) {
  return int(x);
}
template <> __device__ __forceinline__ bf16 fromFloat<bf16>(float x) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}
template <> __device__ __forceinline__ f16 fromFloat<f16>(float x) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}

/// Two floats rounded to bf16 and packed, `lo` in the low half (the layout
/// of an mma operand register).
__device__ __forceinline__ u32 packBf16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/// The larger of each pair of bf16 in a and b, two elements an instruction
/// (max.bf16x2, sm_80+); a NaN loses to a number, as in fmaxf.
__device__ __forceinline__ u32 maxBf16x2(u32 a, u32 b) {
  u32 r;
  asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
/// 16- and 8-byte global stores in PTX, for store4: written as a C++ float4
/// or uint2 assignment, the compiler may split them into 4-byte stores (it
/// does where the pointer comes out of the multi-tensor kernels' switch):
/// four times the store instructions, each writing part of 16 sectors.
/// store8 keeps its assignments: they stay whole in the loss kernel, where
/// these stores would spill at sm_80 under its 64-register bound.
__device__ __forceinline__ void storeGlobal128(void *p, u32 a, u32 b, u32 c,
                                               u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(
                   __cvta_generic_to_global(p)),
               "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}
__device__ __forceinline__ void storeGlobal64(void *p, u32 a, u32 b) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(
                   __cvta_generic_to_global(p)),
               "r"(a), "r"(b)
               : "memory");
}

/// Asks for the 128-byte line at p in L2 (prefetch.global.L2), not waiting
/// for it: for a later load, where a warp has nothing to do meanwhile.
__device__ __forceinline__ void prefetchL2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(__cvta_generic_to_global(p)));
}

/// *p += x in global memory, at L2, with no result: red rather than the
/// atom an unused atomicAdd is written as in PTX.
__device__ __forceinline__ void reduceAddGlobal(float *p, float x) {
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(
                   __cvta_generic_to_global(p)),
               "f"(x)
               : "memory");
}
/// p[0..4) += x[0..4) as one 16-byte reduction on sm_90 (red.v4.f32: a
/// quarter of the L2 operations), four elsewhere; p is 16-byte aligned.
__device__ __forceinline__ void reduceAddGlobal4(float *p, const float (&x)[4]) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(
                   __cvta_generic_to_global(p)),
               "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3])
               : "memory");
#else
  for (int e = 0; e < 4; ++e)
    reduceAddGlobal(p + e, x[e]);
#endif
}

// Four consecutive elements as one 16-byte (f32, i32) or 8-byte (bf16,
// f16) access; the address is aligned (arena offsets are 256-aligned and
// the emitter only vectorises rows whose length is a multiple of 4).
__device__ __forceinline__ void load4(const float *p, float (&x)[4]) {
  float4 v = *reinterpret_cast<const float4 *>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void load4(const int *p, float (&x)[4]) {
  int4 v = *reinterpret_cast<const int4 *>(p);
  x[0] = float(v.x), x[1] = float(v.y), x[2] = float(v.z), x[3] = float(v.w);
}
/// Four 2-byte elements (bf16, f16) packed in 8 bytes as floats, in
/// order: what load4 loads, or bytes a kernel kept as loaded.
template <typename T>
__device__ __forceinline__ void unpack4(uint2 v, float (&x)[4]) {
  T e[4];
  e[0].bits = v.x & 0xffffu, e[1].bits = v.x >> 16;
  e[2].bits = v.y & 0xffffu, e[3].bits = v.y >> 16;
  for (int i = 0; i < 4; ++i)
    x[i] = toFloat(e[i]);
}
/// Four 2-byte elements as loaded, one 8-byte access (p 8-byte aligned).
template <typename T> __device__ __forceinline__ uint2 loadPacked4(const T *p) {
  return *reinterpret_cast<const uint2 *>(p);
}
template <typename T>
__device__ __forceinline__ void load4(const T *p, float (&x)[4]) {
  unpack4<T>(loadPacked4(p), x);
}
__device__ __forceinline__ void store4(float *p, const float (&x)[4]) {
  storeGlobal128(p, __float_as_uint(x[0]), __float_as_uint(x[1]),
                 __float_as_uint(x[2]), __float_as_uint(x[3]));
}
template <typename T>
__device__ __forceinline__ void store4(T *p, const float (&x)[4]) {
  uint2 v;
  v.x = u32(fromFloat<T>(x[0]).bits) | u32(fromFloat<T>(x[1]).bits) << 16;
  v.y = u32(fromFloat<T>(x[2]).bits) | u32(fromFloat<T>(x[3]).bits) << 16;
  storeGlobal64(p, v.x, v.y);
}

// Two consecutive elements as one 8-byte (f32) or 4-byte (bf16, f16)
// access; p is aligned to two elements.
__device__ __forceinline__ void load2(const float *p, float (&x)[2]) {
  float2 v = *reinterpret_cast<const float2 *>(p);
  x[0] = v.x, x[1] = v.y;
}
template <typename T>
__device__ __forceinline__ void load2(const T *p, float (&x)[2]) {
  u32 v = *reinterpret_cast<const u32 *>(p);
  T lo, hi;
  lo.bits = v & 0xffffu, hi.bits = v >> 16;
  x[0] = toFloat(lo), x[1] = toFloat(hi);
}
__device__ __forceinline__ void store2(float *p, const float (&x)[2]) {
  *reinterpret_cast<float2 *>(p) = make_float2(x[0], x[1]);
}
template <typename T>
__device__ __forceinline__ void store2(T *p, const float (&x)[2]) {
  *reinterpret_cast<u32 *>(p) =
      u32(fromFloat<T>(x[0]).bits) | u32(fromFloat<T>(x[1]).bits) << 16;
}

/// Four float32 at L2 (ld.global.cg.v4): partial sums other blocks wrote
/// in this launch; p is 16-byte aligned.
__device__ __forceinline__ void load4AtL2(const float *p, float (&x)[4]) {
  float4 v = __ldcg(reinterpret_cast<const float4 *>(p));
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
/// Four float32 in shared memory as one 16-byte access (a warp's 32 such
/// accesses take the minimum four wavefronts); p is 16-byte aligned.
__device__ __forceinline__ void loadShared4(const float *p, float (&x)[4]) {
  float4 v = *reinterpret_cast<const float4 *>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void storeShared4(float *p, const float (&x)[4]) {
  *reinterpret_cast<float4 *>(p) = make_float4(x[0], x[1], x[2], x[3]);
}

/// 2^x on the special-function unit: ex2.approx.ftz, within a few ulp,
/// results below 2^-126 flush to 0 (-inf gives 0). For softmax terms that
/// are rounded to bf16 next.
__device__ __forceinline__ float fastExp2(float x) {
#if defined(GPTC_PROBE_NO_EXP)
  // A measurement hook gptc never defines (bench/gpu/prepare.sh's probes):
  // two fmas in place of the special-function unit, positive for every x
  // and wrong, so that a kernel's time without its exponentials shows.
  return fmaf(x, fmaf(x, 0.2402f, 0.6931f), 1.0f);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// 1/x on the special-function unit: rcp.approx.ftz, within an ulp or so;
/// 1/inf is 0.
__device__ __forceinline__ float fastRcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Four consecutive int32 ids as one 16-byte access; p is 16-byte aligned.
__device__ __forceinline__ void loadIds4(const int *p, int (&x)[4]) {
  int4 v = *reinterpret_cast<const int4 *>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}

// Eight consecutive elements as one 16-byte access (bf16, f16) or two
// (f32); the address is 16-byte aligned (the caller's rows are a multiple
// of 8 elements long).
__device__ __forceinline__ void load8(const float *p, float (&x)[8]) {
  float4 a = reinterpret_cast<const float4 *>(p)[0];
  float4 b = reinterpret_cast<const float4 *>(p)[1];
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
  x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
/// The 8 elements of a 16-byte chunk of T (bf16, f16) as floats, in memory
/// order: what load8 loads, or bytes a kernel kept as loaded.
template <typename T>
__device__ __forceinline__ void unpack8(uint4 v, float (&x)[8]) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    T lo, hi;
    lo.bits = w[i] & 0xffffu, hi.bits = w[i] >> 16;
    x[2 * i] = toFloat(lo), x[2 * i + 1] = toFloat(hi);
  }
}
template <typename T>
__device__ __forceinline__ void load8(const T *p, float (&x)[8]) {
  unpack8<T>(*reinterpret_cast<const uint4 *>(p), x);
}
__device__ __forceinline__ void store8(float *p, const float (&x)[8]) {
  reinterpret_cast<float4 *>(p)[0] = make_float4(x[0], x[1], x[2], x[3]);
  reinterpret_cast<float4 *>(p)[1] = make_float4(x[4], x[5], x[6], x[7]);
}
template <typename T>
__device__ __forceinline__ void store8(T *p, const float (&x)[8]) {
  u32 w[4];
  for (int i = 0; i < 4; ++i)
    w[i] = u32(fromFloat<T>(x[2 * i]).bits) |
           u32(fromFloat<T>(x[2 * i + 1]).bits) << 16;
  *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

/// c += a · b for one 16x8x16 tile on the tensor cores: bf16 operands, float32
/// accumulators, fragments as PTX's mma.m16n8k16 lays them out.
__device__ __forceinline__ void mmaBf16m16n8k16(float (&c)[4], const u32 (&a)[4],
                                                u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared memory through 32-bit addresses: NVRTC, unlike nvcc, addresses
// shared memory with 64-bit generic pointers, which doubles the registers
// of the tiled kernels.
__device__ __forceinline__ u32 sharedAddress(const void *p) {
  return u32(__cvta_generic_to_shared(p));
}
/// Four 8x8 matrices of 16-bit elements from shared memory, one register
/// each (ldmatrix.x4): lanes 8m..8m+7 give the addresses of matrix m's rows
/// (16 bytes each, 16-byte aligned), and lane l receives row l/4, columns
/// 2(l%4) and 2(l%4)+1 of every matrix, the first in the low half: the
/// layout of mma's fragments.
__device__ __forceinline__ void loadMatrices(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
               "{%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
/// loadMatrices of the transposes: lane l receives rows 2(l%4) and
/// 2(l%4)+1 of column l/4.
__device__ __forceinline__ void loadMatricesTransposed(u32 (&r)[4],
                                                       u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
               "{%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
/// 16 bytes from global to shared memory without a register round trip
/// (sm_80 cp.async); complete after commitCopies() and waitCopies<N>().
__device__ __forceinline__ void copyAsync16(u32 address, const void *global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address),
               "l"(global)
               : "memory");
}
/// 8 bytes the same way (cp.async.ca: L1-allocating, as PTX requires of a
/// copy under 16 bytes); `address` 8-byte aligned.
__device__ __forceinline__ void copyAsync8(u32 address, const void *global) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(address),
               "l"(global)
               : "memory");
}
__device__ __forceinline__ void commitCopies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/// Waits until at most N committed groups are still in flight.
template <int N> __device__ __forceinline__ void waitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#if __CUDA_ARCH__ >= 900
/// Thread block clusters (sm_90 on, not only sm_90a): the blocks of a
/// cluster (launched with the cluster-dimension attribute) run at once on
/// neighbouring SMs and reach each other's shared memory. clusterSync:
/// every thread of the cluster's blocks arrives and waits; what each did
/// before, all see after (release, acquire). clusterSharedAddress: the
/// address of shared address `a` in the cluster's block of rank `rank`
/// (%cluster_ctarank).
__device__ __forceinline__ void clusterSync() {
  asm volatile("barrier.cluster.arrive.release;\n"
               "barrier.cluster.wait.acquire;\n" ::
                   : "memory");
}
__device__ __forceinline__ u32 clusterSharedAddress(u32 a, u32 rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(r)
               : "r"(a), "r"(rank));
  return r;
}
/// st.shared::cluster: `v` into the shared memory at `a`, a
/// clusterSharedAddress (this block's or another's of the cluster).
__device__ __forceinline__ void storeSharedCluster(u32 a, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(a), "f"(v)
               : "memory");
}
#endif // __CUDA_ARCH__ >= 900

#if GPTC_WGMMA
// Hopper's warpgroup MMA (sm_90a): the 4 warps of a 128-thread warpgroup
// multiply a 64 x 16 A, from registers (each warp's 16 rows laid out as
// mma.m16n8k16's A fragment), by a 16 x N B that the instruction reads
// from shared memory itself, through a descriptor. D is float32, each
// warp's 16 rows laid out as N/8 mma.m16n8k16 C fragments. Asynchronous:
// wgmmaFence(d, a) before a batch, then wgmmaCommit() (a batch may be
// several commit groups) and wgmmaWait<N>(), which leaves the N newest
// groups in flight, then wgmmaFenceOperands(d) for the registers of those
// it landed; until then no other instruction may read or write a group's
// accumulators or A fragments. Shared memory written by the threads
// (st.shared, cp.async) is seen by wgmma after fenceProxyAsync() and a
// barrier.

/// The descriptor of a B in shared memory. Without swizzling: 8 x 8 core
/// matrices (8 rows of 16 bytes, 128 contiguous bytes); `lbo` bytes from
/// one core matrix to the next along K, `sbo` along N. With swizzle128
/// (layout type 1, SWIZZLE_128B): rows of 128 bytes, the 16-byte chunk q
/// of row r at q ^ (r % 8) within each 1,024-byte-aligned group of 8 rows,
/// `sbo` bytes from one group to the next (wg::SwizzledTile).
__device__ __forceinline__ unsigned long long
wgmmaDescriptor(u32 address, u32 lbo, u32 sbo, bool swizzle128 = false) {
  return (unsigned long long)((address & 0x3ffff) >> 4) |
         (unsigned long long)(lbo >> 4) << 16 |
         (unsigned long long)(sbo >> 4) << 32 |
         (unsigned long long)swizzle128 << 62;
}
/// The descriptor `bytes` (a multiple of 16) past `d`'s start, in the same
/// layout: the start field (address / 16, 14 bits: shared addresses are
/// under 256 KB) takes the sum without a carry. A tile's operand steps
/// then cost ptxas about one uniform add each, where a descriptor made
/// again for each address took five (the mask, the shift, the or and two
/// moves; nvdisasm of the wgmma kernels). As a 64-bit add rather than one
/// on the low word, ptxas also stopped moving the high word into place
/// again for each wgmma (wgmma-split's dq loop trip 355 -> 332).
__device__ __forceinline__ unsigned long long
wgmmaDescriptorPlus(unsigned long long d, u32 bytes) {
  return d + (bytes >> 4);
}
__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/// Waits until at most N committed wgmma groups are in flight. kCopy only
/// tells two waits apart (a PTX comment): the compiler would merge two
/// identical ones that open both sides of a branch into one before it.
template <int N, int kCopy = 0> __device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0; // %1\n" ::"n"(N), "n"(kCopy)
               : "memory");
}
/// One register the compiler must treat as read and written here.
__device__ __forceinline__ void pinRegister(float &x) {
  asm volatile("" : "+f"(x)::"memory");
}
__device__ __forceinline__ void pinRegister(u32 &x) {
  asm volatile("" : "+r"(x)::"memory");
}
/// Keeps the compiler from moving accesses to `d` (accumulators or A
/// fragments) across this point: after wgmmaWait, past the wgmma
/// instructions still writing them; in wgmmaFence, ahead of the fence.
template <int N, typename T>
__device__ __forceinline__ void wgmmaFenceOperands(T (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      pinRegister(d[i][e]);
}
/// wgmma.fence before a batch that accumulates into `d` with A fragments
/// `a`. The hardware reads registers written before the fence, so the
/// operand fences pin every write to them (zeroing, rescaling, packing)
/// ahead of it: without them the compiler moved the zeroing of the scores
/// past the fence in the PTX (test/cuda/wgmma-fences.test).
template <int N, int K>
__device__ __forceinline__ void wgmmaFence(float (&d)[N][4], u32 (&a)[K][4]) {
  wgmmaFenceOperands(d);
  wgmmaFenceOperands(a);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
/// The same before a batch of two products: into d with A fragments a, and
/// into d2 with a2.
template <int N, int K, int N2, int K2>
__device__ __forceinline__ void wgmmaFence(float (&d)[N][4], u32 (&a)[K][4],
                                           float (&d2)[N2][4],
                                           u32 (&a2)[K2][4]) {
  wgmmaFenceOperands(d2);
  wgmmaFenceOperands(a2);
  wgmmaFence(d, a);
}
/// wgmma.fence before a batch into d whose A is read from shared memory
/// (no A fragments).
template <int N> __device__ __forceinline__ void wgmmaFence(float (&d)[N][4]) {
  wgmmaFenceOperands(d);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
/// The same before a batch of two products whose A is read from shared
/// memory: into d, and into d2.
template <int N, int N2>
__device__ __forceinline__ void wgmmaFence(float (&d)[N][4],
                                           float (&d2)[N2][4]) {
  wgmmaFenceOperands(d2);
  wgmmaFenceOperands(d);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
/// This thread's shared-memory writes become visible to wgmma's reads
/// (the async proxy) once a barrier follows.
__device__ __forceinline__ void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/// Shared-memory barriers (mbarrier), for warps that hand work to each
/// other while the block runs on: mbarrierInit(count) by one thread, then
/// a __syncthreads; each phase completes once `count` threads arrived,
/// and a waiter names the phase by its parity (the first 0, the second 1,
/// the third 0 again, ...). An arrival releases what its thread wrote
/// before it (wait for a cp.async first), a wait that returns acquires it.
__device__ __forceinline__ void mbarrierInit(unsigned long long *bar,
                                             u32 count) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sharedAddress(bar)),
      "r"(count)
      : "memory");
}
__device__ __forceinline__ void mbarrierArrive(unsigned long long *bar) {
  asm volatile(
      "mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(sharedAddress(bar))
      : "memory");
}
__device__ __forceinline__ void mbarrierWait(unsigned long long *bar,
                                             u32 parity) {
  for (u32 done = 0; !done;)
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(sharedAddress(bar)), "r"(parity)
                 : "memory");
}
/// setmaxnreg: a warpgroup that needs few registers (a producer of
/// copies) gives them back, so that the others may take more; every
/// thread of the warpgroup executes it.
template <int N> __device__ __forceinline__ void raiseRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void lowerRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
/// Hopper's bulk copies (the TMA unit, no tensor map): global[0, bytes/4)
/// += the floats at `shared` (cp.reduce.async.bulk .add.f32: the sum is
/// done at L2, element by element, as red.global.add does it), both
/// 16-byte aligned, bytes a multiple of 16. The threads' writes to the
/// source are seen after fenceProxyAsync() and a barrier. Asynchronous:
/// bulkCommit() closes a group, bulkWaitRead<N>() waits until at most N
/// groups may still read their sources (which may then be written again,
/// after a barrier for other threads), bulkWait<N>() until at most N have
/// not written their results; a thread waits for all before it ends.
__device__ __forceinline__ void bulkReduceAdd(float *global, u32 shared,
                                              u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 "
               "[%0], [%1], %2;\n" ::"l"(__cvta_generic_to_global(global)),
               "r"(shared), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulkCommit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void bulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void bulkWait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
/// What bulk copies this thread waited for wrote to global memory is
/// ordered before its later accesses (a release to other blocks: then
/// __threadfence and a flag).
__device__ __forceinline__ void fenceProxyAsyncGlobal() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/// Hopper's tensor copies (TMA, cp.async.bulk.tensor): a box of a 2-D
/// global tensor, described by a tensor map the host encoded
/// (cuTensorMapEncodeTiled; CUtensorMap's 128 opaque bytes), lands in
/// shared memory by the copy engine, not the threads, and completes bytes
/// of an mbarrier's transaction count. gptc's maps lie in global memory,
/// written by a host copy before the launch: a thread acquires one
/// (tensorMapAcquire) before its first copy through it.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};
__device__ __forceinline__ void tensorMapAcquire(const TensorMap *map) {
  asm volatile(
      "fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(map)
      : "memory");
}
/// One arrival at *bar that also expects `bytes` more of copies in its
/// current phase: the phase completes once its arrivals are in and that
/// many bytes landed.
__device__ __forceinline__ void mbarrierArriveExpectTx(unsigned long long *bar,
                                                       u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   sharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
/// The box at element (x, y) of `map` (x along the rows, y the row) into
/// shared memory at `to` (1,024-byte aligned for the 128-byte swizzle),
/// its bytes counted at *bar.
__device__ __forceinline__ void tensorCopy2d(u32 to, const TensorMap *map,
                                             int x, int y,
                                             unsigned long long *bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile"
      ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(to),
      "l"(map), "r"(x), "r"(y), "r"(sharedAddress(bar))
      : "memory");
}

/// Orders this thread's mbarrierInits before the cluster's other blocks'
/// uses of those barriers (then clusterSync).
__device__ __forceinline__ void fenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// One arrival at the mbarrier at `bar`, a clusterSharedAddress (this
/// block's or another's), releasing at cluster scope what this thread
/// acquired and did before.
__device__ __forceinline__ void mbarrierArriveRemote(u32 bar) {
  asm volatile(
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(
          bar)
      : "memory");
}
/// mbarrierWait acquiring at cluster scope: what arrivals from the
/// cluster's other blocks released.
__device__ __forceinline__ void mbarrierWaitCluster(unsigned long long *bar,
                                                    u32 parity) {
  for (u32 done = 0; !done;)
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], "
        "%2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(sharedAddress(bar)), "r"(parity)
        : "memory");
}
/// tensorCopy2d into `to` of each block of the cluster whose rank's bit
/// `blocks` sets, its bytes counted at that block's mbarrier at bar's
/// address (one read of global memory, or L2, for all of them).
__device__ __forceinline__ void
tensorCopy2dMulticast(u32 to, const TensorMap *map, int x, int y,
                      unsigned long long *bar, unsigned short blocks) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
               ".mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
               "{%2, %3}], [%4], %5;\n" ::"r"(to),
               "l"(map), "r"(x), "r"(y), "r"(sharedAddress(bar)), "h"(blocks)
               : "memory");
}

/// Whether *count is at least n for the whole warp, from one volatile
/// load now: waitForCount's first poll, taken early so that its L2 round
/// trip runs under other work. (The vote here pins the load: peeked
/// alone, its value was loaded by ptxas just before the wait.)
__device__ __forceinline__ bool countReached(const unsigned *count,
                                             unsigned n) {
  return __all_sync(0xffffffffu,
                    *reinterpret_cast<const volatile unsigned *>(count) >= n);
}

/// Spins until *count is at least n (other blocks' atomicAdds, each after
/// a __threadfence), `reached` (countReached's, earlier) being the first
/// poll. A thread that then reads or adds to what the count publishes
/// orders that after it with __threadfence. Called by whole warps: one
/// load a warp a poll, and the vote keeps the loop's branch the same for
/// the whole warp (a branch on one thread's load in wgmma-ordered's tile
/// loop took ptxas's uniform registers from the whole loop: 635
/// instructions a trip became 734). The blocks it waits for must come
/// earlier in blockIdx order, which the GPU starts first: a block waiting
/// for one that has no SM yet would wait for ever. So it gives up after
/// 2^22 polls (seconds, where a wait lasts microseconds) with a trap,
/// which fails the launch with an error rather than hanging the program.
__device__ __forceinline__ void waitForCount(const unsigned *count, unsigned n,
                                             bool reached) {
  for (unsigned polls = 0; !reached; ++polls) {
    if (polls == (1u << 22))
      __trap();
    reached = countReached(count, n);
  }
}

// An m64nNk16 wgmma's accumulators d[0, N/8)[0, 4) as asm operands ("+f",
// %0 on), and as the instruction's register list.
#define GPTC_WGMMA_D(d, i)                                                     \
  "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define GPTC_WGMMA_D_N32(d)                                                    \
  GPTC_WGMMA_D(d, 0), GPTC_WGMMA_D(d, 1), GPTC_WGMMA_D(d, 2), GPTC_WGMMA_D(d, 3)
#define GPTC_WGMMA_D_N64(d)                                                    \
  GPTC_WGMMA_D_N32(d), GPTC_WGMMA_D(d, 4), GPTC_WGMMA_D(d, 5),                 \
      GPTC_WGMMA_D(d, 6), GPTC_WGMMA_D(d, 7)
#define GPTC_WGMMA_D_N128(d)                                                   \
  GPTC_WGMMA_D_N64(d), GPTC_WGMMA_D(d, 8), GPTC_WGMMA_D(d, 9),                 \
      GPTC_WGMMA_D(d, 10), GPTC_WGMMA_D(d, 11), GPTC_WGMMA_D(d, 12),           \
      GPTC_WGMMA_D(d, 13), GPTC_WGMMA_D(d, 14), GPTC_WGMMA_D(d, 15)
#define GPTC_WGMMA_D_N256(d)                                                   \
  GPTC_WGMMA_D_N128(d), GPTC_WGMMA_D(d, 16), GPTC_WGMMA_D(d, 17),              \
      GPTC_WGMMA_D(d, 18), GPTC_WGMMA_D(d, 19), GPTC_WGMMA_D(d, 20),           \
      GPTC_WGMMA_D(d, 21), GPTC_WGMMA_D(d, 22), GPTC_WGMMA_D(d, 23),           \
      GPTC_WGMMA_D(d, 24), GPTC_WGMMA_D(d, 25), GPTC_WGMMA_D(d, 26),           \
      GPTC_WGMMA_D(d, 27), GPTC_WGMMA_D(d, 28), GPTC_WGMMA_D(d, 29),           \
      GPTC_WGMMA_D(d, 30), GPTC_WGMMA_D(d, 31)
#define GPTC_WGMMA_REGS_N32                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define GPTC_WGMMA_REGS_N64                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "    \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "     \
  "%30, %31}"
#define GPTC_WGMMA_REGS_N256                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "         \
  "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "     \
  "%29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "     \
  "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "     \
  "%57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, "     \
  "%71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, "     \
  "%85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, "     \
  "%99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, "          \
  "%110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, "         \
  "%121, %122, %123, %124, %125, %126, %127}"
#define GPTC_WGMMA_REGS_N128                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "    \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "     \
  "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "     \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "     \
  "%58, %59, %60, %61, %62, %63}"

// (The instructions' strings as PTX reads them.)
// clang-format off
/// d += a · b, m64nNk16 (N = 64 or 32); kTransB: b is N-major (its 16-byte
/// core-matrix rows run along N), else K-major. With accumulate false,
/// d = a · b: a product's first k16 step starts it, and d need not be
/// zeroed before (ptxas kept such zeroes as 16 to 32 moves a product).
/// (scale-d is a predicate: true, accumulate; false, d = a · b.)
template <bool kTransB>
__device__ __forceinline__ void wgmmaBf16(float (&d)[8][4], const u32 (&a)[4],
                                          unsigned long long b,
                                          bool accumulate = true) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               GPTC_WGMMA_REGS_N64 ", {%32, %33, %34, %35}, %36, p, 1, 1, "
               "%38;\n}\n"
               : GPTC_WGMMA_D_N64(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                 "r"(int(accumulate)), "n"(int(kTransB)));
}
template <bool kTransB>
__device__ __forceinline__ void wgmmaBf16(float (&d)[4][4], const u32 (&a)[4],
                                          unsigned long long b,
                                          bool accumulate = true) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
               GPTC_WGMMA_REGS_N32 ", {%16, %17, %18, %19}, %20, p, 1, 1, "
               "%22;\n}\n"
               : GPTC_WGMMA_D_N32(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                 "r"(int(accumulate)), "n"(int(kTransB)));
}
/// d += a · b, m64n64k16 (N = 64) or m64n32k16 with A read from shared
/// memory too, through a descriptor (K-major, not transposed:
/// wg::CoreTile::rowsAlongM, wg::SwizzledTile::rowsAlongM): no registers
/// hold it, and each product reads its 2 KB again.
template <bool kTransB>
__device__ __forceinline__ void
wgmmaBf16(float (&d)[8][4], unsigned long long a, unsigned long long b,
          bool accumulate = true) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               GPTC_WGMMA_REGS_N64 ", %32, %33, p, 1, 1, 0, %35;\n}\n"
               : GPTC_WGMMA_D_N64(d)
               : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kTransB)));
}
/// m64n256k16 with A from shared memory (gptc's wide GEMM blocks);
/// kTransA as for m64n128k16 below.
template <bool kTransB, bool kTransA = false>
__device__ __forceinline__ void
wgmmaBf16(float (&d)[32][4], unsigned long long a, unsigned long long b,
          bool accumulate = true) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
               GPTC_WGMMA_REGS_N256 ", %128, %129, p, 1, 1, %132, %131;\n}\n"
               : GPTC_WGMMA_D_N256(d)
               : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kTransB)),
                 "n"(int(kTransA)));
}
/// m64n128k16 with A from shared memory (gptc's GEMMs, gemm_wgmma.cuh):
/// A's 2 KB read once for 128 columns, where two m64n64k16 read it twice.
/// kTransA: A is M-major (its core-matrix rows run along M: a weight
/// gradient's xᵀ, read from x [k, m] as it lies), else K-major.
template <bool kTransB, bool kTransA = false>
__device__ __forceinline__ void
wgmmaBf16(float (&d)[16][4], unsigned long long a, unsigned long long b,
          bool accumulate = true) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
               GPTC_WGMMA_REGS_N128 ", %64, %65, p, 1, 1, %68, %67;\n}\n"
               : GPTC_WGMMA_D_N128(d)
               : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kTransB)),
                 "n"(int(kTransA)));
}
template <bool kTransB>
__device__ __forceinline__ void
wgmmaBf16(float (&d)[4][4], unsigned long long a, unsigned long long b,
          bool accumulate = true) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
               GPTC_WGMMA_REGS_N32 ", %16, %17, p, 1, 1, 0, %19;\n}\n"
               : GPTC_WGMMA_D_N32(d)
               : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kTransB)));
}
// clang-format on
#endif // GPTC_WGMMA

