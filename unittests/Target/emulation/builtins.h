//===- builtins.h - CUDA built-ins and types.cuh on the host --------------===//
//
// Part of the host emulation that HostKernels.cpp puts in front of the
// kernels it compiles for the CPU, joined by its emulation() in the order
// threads.h, builtins.h, wgmma.h, mbarrier.h, tma.h. Not a header to
// include: each part uses what the ones before it define.
//
// threadIdx and the other indices, warp shuffles and votes, atomics, and
// what types.cuh gives the kernels on a GPU: bf16, the vector loads and
// stores, mma.m16n8k16, ldmatrix and cp.async, each as the PTX ISA
// defines it, with the race checker's hooks.
//
//===----------------------------------------------------------------------===//

// The built-in indices as values, read by uninstrumented code: the
// kernels read them all the time, and the race checker need not see it.
EMU_UNCHECKED inline Dim3 threadIndexValue() {
  return emu::threads[emu::current].index;
}
EMU_UNCHECKED inline Dim3 blockIndexValue() { return blockIndex; }
EMU_UNCHECKED inline Dim3 gridSizeValue() { return gridSize; }
EMU_UNCHECKED inline Dim3 blockSizeValue() { return blockSize; }
#define threadIdx (threadIndexValue())
#define blockIdx (blockIndexValue())
#define gridDim (gridSizeValue())
#define blockDim (blockSizeValue())
inline void __syncthreads() { emu::wait(emu::AtBarrier); }
/// A warp-wide operation: what a lane wrote before it, the others read
/// after it.
inline void __syncwarp(unsigned = 0xffffffffu) {
  emu::wait(emu::AtWarpBarrier);
}
inline void __threadfence() {}
inline int __syncthreads_or(int p) {
  int me = emu::current;
  long long call = emu::threads[me].orCalls++;
  long long *slots = emu::orSlots[call & 1];
  slots[me] = call << 1 | (p != 0);
  emu::wait(emu::AtBarrier);
  const int first = emu::cta * emu::ctaThreads;
  for (int t = first; t < first + emu::ctaThreads; ++t)
    if (slots[t] == (call << 1 | 1))
      return 1;
  return 0;
}
inline float __shfl_xor_sync(unsigned, float v, int mask) {
  int me = emu::current;
  emu::floatSlots[me] = v;
  emu::wait(emu::AtWarpBarrier);
  float r = emu::floatSlots[(me & ~31) | ((me & 31) ^ mask)];
  emu::wait(emu::AtWarpBarrier);
  return r;
}
/// The same for 32-bit words, their bits as they are.
inline unsigned __shfl_xor_sync(unsigned, unsigned v, int mask) {
  int me = emu::current;
  std::memcpy(&emu::floatSlots[me], &v, 4);
  emu::wait(emu::AtWarpBarrier);
  unsigned r;
  std::memcpy(&r, &emu::floatSlots[(me & ~31) | ((me & 31) ^ mask)], 4);
  emu::wait(emu::AtWarpBarrier);
  return r;
}
/// Every lane gets lane `src`'s word.
inline unsigned __shfl_sync(unsigned, unsigned v, int src) {
  int me = emu::current;
  std::memcpy(&emu::floatSlots[me], &v, 4);
  emu::wait(emu::AtWarpBarrier);
  unsigned r;
  std::memcpy(&r, &emu::floatSlots[(me & ~31) | (src & 31)], 4);
  emu::wait(emu::AtWarpBarrier);
  return r;
}
/// Lane l gets lane l - delta's word; lanes below delta keep their own.
inline unsigned __shfl_up_sync(unsigned, unsigned v, unsigned delta) {
  int me = emu::current;
  std::memcpy(&emu::floatSlots[me], &v, 4);
  emu::wait(emu::AtWarpBarrier);
  unsigned r = v;
  if (unsigned(me & 31) >= delta)
    std::memcpy(&r, &emu::floatSlots[me - int(delta)], 4);
  emu::wait(emu::AtWarpBarrier);
  return r;
}
inline unsigned __ballot_sync(unsigned, bool p) {
  int me = emu::current, first = me & ~31;
  emu::intSlots[me] = p;
  emu::wait(emu::AtWarpBarrier);
  unsigned r = 0;
  for (int l = 0; l < 32 && first + l < int(emu::threads.size()); ++l)
    if (emu::threads[first + l].state != emu::Done && emu::intSlots[first + l])
      r |= 1u << l;
  emu::wait(emu::AtWarpBarrier);
  return r;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned atomicAdd(unsigned *p, unsigned v) {
  unsigned o = *p;
  *p += v;
  return o;
}
inline void reduceAddGlobal(float *p, float v) { *p += v; }
inline void reduceAddGlobal4(float *p, const float (&v)[4]) {
  if (reinterpret_cast<unsigned long long>(p) % 16) {
    std::fprintf(stderr, "misaligned 16-byte global reduction\n");
    std::abort();
  }
  for (int e = 0; e < 4; ++e)
    p[e] += v[e];
}
template <typename T> inline T __ldcg(const T *p) { return *p; }
inline int min(int a, int b) { return a < b ? a : b; }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline float __uint_as_float(unsigned i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, 8);
  return d;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }

// types.cuh
struct bf16 {
  unsigned short bits;
};
struct f16 {
  unsigned short bits;
};
inline float toFloat(float x) { return x; }
inline float toFloat(int x) { return float(x); }
inline float toFloat(bf16 x) { return __uint_as_float(u32(x.bits) << 16); }
template <typename T> T fromFloat(float x);
template <> inline float fromFloat<float>(float x) { return x; }
template <> inline int fromFloat<int>(float x) { return int(x); }
template <> inline bf16 fromFloat<bf16>(float x) {
  u32 u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x))
    return bf16{(unsigned short)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{(unsigned short)(u >> 16)};
}
template <typename T> inline void load4(const T *p, float (&x)[4]) {
  for (int i = 0; i < 4; ++i)
    x[i] = toFloat(p[i]);
}
template <typename T> inline void store4(T *p, const float (&x)[4]) {
  for (int i = 0; i < 4; ++i)
    p[i] = fromFloat<T>(x[i]);
}
/// 16-byte global (and shared) accesses must be 16-byte aligned on the
/// GPU; here a misaligned one aborts. Shared arrays are declared 16-byte
/// aligned here, as the GPU aligns them.
inline void globalAligned16(const void *p, const char *space = "global") {
  if (reinterpret_cast<unsigned long long>(p) % 16) {
    std::fprintf(stderr, "misaligned 16-byte %s access\n", space);
    std::abort();
  }
}
/// 2-element accesses (8-byte f32, 4-byte bf16) must be aligned to them.
template <typename T> inline void load2(const T *p, float (&x)[2]) {
  if (reinterpret_cast<unsigned long long>(p) % (2 * sizeof(T))) {
    std::fprintf(stderr, "misaligned %d-byte global access\n",
                 int(2 * sizeof(T)));
    std::abort();
  }
  for (int i = 0; i < 2; ++i)
    x[i] = toFloat(p[i]);
}
inline void store2(float *p, const float (&x)[2]) {
  if (reinterpret_cast<unsigned long long>(p) % 8) {
    std::fprintf(stderr, "misaligned 8-byte global access\n");
    std::abort();
  }
  p[0] = x[0], p[1] = x[1];
}
template <typename T> inline void store2(T *p, const float (&x)[2]) {
  if (reinterpret_cast<unsigned long long>(p) % (2 * sizeof(T))) {
    std::fprintf(stderr, "misaligned %d-byte global access\n",
                 int(2 * sizeof(T)));
    std::abort();
  }
  for (int i = 0; i < 2; ++i)
    p[i] = fromFloat<T>(x[i]);
}
inline void load4AtL2(const float *p, float (&x)[4]) {
  globalAligned16(p);
  for (int i = 0; i < 4; ++i)
    x[i] = p[i];
}
inline void loadShared4(const float *p, float (&x)[4]) {
  globalAligned16(p, "shared");
  for (int i = 0; i < 4; ++i)
    x[i] = p[i];
}
inline void storeShared4(float *p, const float (&x)[4]) {
  globalAligned16(p, "shared");
  for (int i = 0; i < 4; ++i)
    p[i] = x[i];
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return unsigned((unsigned long long)a * b >> 32);
}
inline float fastExp2(float x) { return std::exp2(x); }
inline float fastRcp(float x) { return 1.0f / x; }
inline void loadIds4(const int *p, int (&x)[4]) {
  globalAligned16(p);
  for (int i = 0; i < 4; ++i)
    x[i] = p[i];
}
template <typename T> inline void load8(const T *p, float (&x)[8]) {
  globalAligned16(p);
  for (int i = 0; i < 8; ++i)
    x[i] = toFloat(p[i]);
}
template <typename T> inline void store8(T *p, const float (&x)[8]) {
  globalAligned16(p);
  for (int i = 0; i < 8; ++i)
    p[i] = fromFloat<T>(x[i]);
}
inline void storeGlobal128(void *p, u32 a, u32 b, u32 c, u32 d) {
  globalAligned16(p);
  u32 *w = static_cast<u32 *>(p);
  w[0] = a, w[1] = b, w[2] = c, w[3] = d;
}

struct uint4 {
  u32 x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
inline u32 packBf16(float lo, float hi) {
  return u32(fromFloat<bf16>(lo).bits) | u32(fromFloat<bf16>(hi).bits) << 16;
}
/// max.bf16x2: per half, a NaN loses to a number (both NaN: the canonical
/// NaN); the larger's bits otherwise.
inline u32 maxBf16x2(u32 a, u32 b) {
  u32 r = 0;
  for (int h = 0; h < 2; ++h) {
    const u32 x = (a >> (16 * h)) & 0xffffu, y = (b >> (16 * h)) & 0xffffu;
    const float fx = __uint_as_float(x << 16), fy = __uint_as_float(y << 16);
    const u32 m = std::isnan(fx) && std::isnan(fy) ? 0x7fffu
                  : std::isnan(fx)                 ? y
                  : std::isnan(fy)                 ? x
                  : fx >= fy                       ? x
                                                   : y;
    r |= m << (16 * h);
  }
  return r;
}
struct alignas(8) uint2 {
  u32 x, y;
};
/// A hint to the memory system: nothing to do here.
inline void prefetchL2(const void *) {}
/// Kernels run one after another here: nothing to wait for.
inline void awaitPriorKernels() {}
/// An 8-byte access of four 2-byte elements: aligned to 8 on the GPU.
template <typename T> inline uint2 loadPacked4(const T *p) {
  static_assert(sizeof(T) == 2, "four 2-byte elements");
  if (reinterpret_cast<unsigned long long>(p) % 8) {
    std::fprintf(stderr, "misaligned 8-byte global access\n");
    std::abort();
  }
  // (element by element, so that the race checker sees the reads)
  return {u32(p[0].bits) | u32(p[1].bits) << 16, u32(p[2].bits) | u32(p[3].bits)
                                                                      << 16};
}
template <typename T> inline void unpack4(uint2 w, float (&x)[4]) {
  const u32 v[2] = {w.x, w.y};
  for (int i = 0; i < 2; ++i) {
    x[2 * i] = toFloat(T{(unsigned short)(v[i] & 0xffffu)});
    x[2 * i + 1] = toFloat(T{(unsigned short)(v[i] >> 16)});
  }
}
template <typename T> inline void unpack8(uint4 w, float (&x)[8]) {
  const u32 v[4] = {w.x, w.y, w.z, w.w};
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = toFloat(T{(unsigned short)(v[i] & 0xffffu)});
    x[2 * i + 1] = toFloat(T{(unsigned short)(v[i] >> 16)});
  }
}
// Shared memory: 32-bit offsets from a symbol of this library.
static char sharedBase[16];
inline u32 sharedAddress(const void *p) {
  return u32(static_cast<const char *>(p) - sharedBase);
}
inline char *sharedPointer(u32 a) { return sharedBase + (long long)(int)a; }

// Thread block clusters: a cluster's blocks run together (emu::runCluster),
// each with its copy of the dynamic shared memory, rank r's `stride` bytes
// after rank 0's (HostKernels lays each kernel's out so: ctaShared).
namespace emu {
struct ClusterShared {
  const char *base = nullptr;
  size_t stride = 0;
};
constexpr int kMaxClusterShared = 256; // kernels of one library
static ClusterShared clusterShared[kMaxClusterShared];
static int clusterSharedCount;
/// The running block's rank, whose copy of `storage` (kMaxCtas copies,
/// `stride` bytes apart) is its dynamic shared memory; `storage` is kept
/// for clusterSharedAddress.
EMU_UNCHECKED inline int ctaShared(const void *storage, size_t stride) {
  const char *base = static_cast<const char *>(storage);
  for (int i = 0; i < clusterSharedCount; ++i)
    if (clusterShared[i].base == base)
      return cta;
  if (clusterSharedCount == kMaxClusterShared) {
    std::fprintf(stderr, "emulation: more than %d dynamic shared arrays\n",
                 kMaxClusterShared);
    std::abort();
  }
  clusterShared[clusterSharedCount++] = {base, stride};
  return cta;
}
} // namespace emu
/// barrier.cluster.arrive.release, then .wait.acquire: every thread of
/// the cluster's blocks arrives; what each did before, all see after.
inline void clusterSync() { emu::wait(emu::AtClusterBarrier); }
/// fence.mbarrier_init: nothing to order here (clusterSync orders all).
inline void fenceMbarrierInit() {}
/// mapa.shared::cluster: the address of the byte at `a` of this block's
/// dynamic shared memory in the cluster's block of rank `rank`. The
/// kernels' __shared__ statics have a copy a block too (HostKernels), but
/// none a fixed stride apart, so mapping one is reported.
EMU_UNCHECKED inline u32 clusterSharedAddress(u32 a, u32 rank) {
  const char *p = sharedPointer(a);
  for (int i = 0; i < emu::clusterSharedCount; ++i) {
    const emu::ClusterShared &c = emu::clusterShared[i];
    if (p >= c.base && p < c.base + emu::kMaxCtas * c.stride) {
      if (rank >= u32(emu::threads.size() / emu::ctaThreads))
        break;
      return sharedAddress(c.base + rank * c.stride + (p - c.base) % c.stride);
    }
  }
  emu::race::misuse("mapa of an address outside the dynamic shared memory, "
                    "or to a rank outside the cluster",
                    "cluster");
  return a;
}
namespace emu {
/// A thread's access, through a clusterSharedAddress, to shared memory at
/// `a` (`what`): reported where that is another block's before the
/// cluster's first barrier.cluster (that block may not have started).
EMU_UNCHECKED inline void expectStartedOwner(u32 a, const char *what) {
  const char *p = sharedPointer(a);
  for (int i = 0; i < clusterSharedCount; ++i) {
    const ClusterShared &c = clusterShared[i];
    if (p >= c.base && p < c.base + kMaxCtas * c.stride &&
        int((p - c.base) / c.stride) != cta && clusterBarriersPassed == 0)
      race::misuse(what, "cluster");
  }
}
} // namespace emu
/// st.shared::cluster.f32: `v` into the shared memory at `a`, a
/// clusterSharedAddress (this block's or another's of the cluster, which
/// must have started: after a barrier.cluster); seen by the race checker
/// as this thread's store there.
inline void storeSharedCluster(u32 a, float v) {
  emu::expectStartedOwner(a, "st.shared::cluster into another block's "
                             "shared memory before a barrier.cluster (it "
                             "may not have started)");
  *reinterpret_cast<float *>(sharedPointer(a)) = v;
}
/// 16-byte shared accesses (cp.async, ldmatrix rows) must be
/// 16-byte aligned on the GPU; here a misaligned one aborts.
inline char *aligned16(u32 a) {
  char *p = sharedPointer(a);
  if (reinterpret_cast<unsigned long long>(p) % 16) {
    std::fprintf(stderr, "misaligned 16-byte shared access\n");
    std::abort();
  }
  return p;
}
/// ldmatrix.x4 (.trans): a warp-wide collective. Every lane deposits its
/// row address; lane l then takes row l/4, columns 2(l%4) and 2(l%4)+1 of
/// each 8x8 matrix m (rows from lanes 8m..8m+7), or, transposed, rows
/// 2(l%4) and 2(l%4)+1 of column l/4.
static u32 matrixRows[1024];
/// Element (row, col) of the 8x8 matrix whose rows lanes first..first+7 named.
EMU_UNCHECKED inline u32 matrixElement(int first, int row, int col) {
  unsigned short v;
  std::memcpy(&v, sharedPointer(matrixRows[first + row] + 2 * col), 2);
  return u32(v);
}
EMU_UNCHECKED inline void ldmatrix(u32 (&r)[4], u32 a, bool transposed) {
  int me = emu::current, first = me & ~31, lane = me & 31;
  matrixRows[me] = a;
  emu::race::access(aligned16(a), 16, false);
  emu::wait(emu::AtWarpBarrier);
  for (int m = 0; m < 4; ++m) {
    int rows = first + 8 * m, g = lane / 4, t = lane % 4;
    r[m] = transposed ? matrixElement(rows, 2 * t, g) |
                            matrixElement(rows, 2 * t + 1, g) << 16
                      : matrixElement(rows, g, 2 * t) |
                            matrixElement(rows, g, 2 * t + 1) << 16;
  }
  emu::wait(emu::AtWarpBarrier);
}
inline void loadMatrices(u32 (&r)[4], u32 a) { ldmatrix(r, a, false); }
inline void loadMatricesTransposed(u32 (&r)[4], u32 a) { ldmatrix(r, a, true); }
// cp.async lands at once here; the race check tracks when it may be read.
EMU_UNCHECKED inline void copyAsync16(u32 a, const void *g) {
  emu::race::access(aligned16(a), 16, true, /*async=*/true);
  std::memcpy(sharedPointer(a), g, 16);
}
EMU_UNCHECKED inline void copyAsync8(u32 a, const void *g) {
  char *p = sharedPointer(a);
  if (reinterpret_cast<unsigned long long>(p) % 8) {
    std::fprintf(stderr, "misaligned 8-byte shared access\n");
    std::abort();
  }
  emu::race::access(p, 8, true, /*async=*/true);
  std::memcpy(p, g, 8);
}
inline void commitCopies() { emu::race::commit(); }
template <int N> inline void waitCopies() { emu::race::waitFor(N); }

/// GCC's -fsanitize=thread instrumentation calls these for every load and
/// store of the kernels; the race checker takes those to shared memory.
#define EMU_HOOK extern "C" EMU_UNCHECKED __attribute__((visibility("hidden")))
#define EMU_ACCESS_HOOKS(n)                                                    \
  EMU_HOOK void __tsan_read##n(void *p) {                                      \
    if (emu::race::candidate(p))                                               \
      emu::race::access(p, n, false);                                          \
  }                                                                            \
  EMU_HOOK void __tsan_write##n(void *p) {                                     \
    if (emu::race::candidate(p))                                               \
      emu::race::access(p, n, true);                                           \
  }                                                                            \
  EMU_HOOK void __tsan_unaligned_read##n(void *p) {                            \
    if (emu::race::candidate(p))                                               \
      emu::race::access(p, n, false);                                          \
  }                                                                            \
  EMU_HOOK void __tsan_unaligned_write##n(void *p) {                           \
    if (emu::race::candidate(p))                                               \
      emu::race::access(p, n, true);                                           \
  }
EMU_ACCESS_HOOKS(1)
EMU_ACCESS_HOOKS(2)
EMU_ACCESS_HOOKS(4)
EMU_ACCESS_HOOKS(8)
EMU_ACCESS_HOOKS(16)
EMU_HOOK void __tsan_read_range(void *p, unsigned long n) {
  emu::race::access(p, n, false);
}
EMU_HOOK void __tsan_write_range(void *p, unsigned long n) {
  emu::race::access(p, n, true);
}
EMU_HOOK void __tsan_init() {}
EMU_HOOK void __tsan_func_entry(void *) {}
EMU_HOOK void __tsan_func_exit() {}

/// The races since the last call: their number, the first one's message.
extern "C" int gptcEmuTakeRaces(char *message, int size) {
  int n = emu::race::count;
  std::snprintf(message, size_t(size), "%s", emu::race::first);
  emu::race::count = 0;
  emu::race::first[0] = 0;
  return n;
}

/// mma.m16n8k16 as the PTX ISA defines its fragments (g = lane / 4,
/// t = lane % 4): A(r, k) is in lane (r % 8)·4 + (k % 8)/2, register
/// (r / 8) + 2·(k / 8), half k % 2; B(k, n) in lane n·4 + (k % 8)/2,
/// register k / 8, half k % 2; C(r, n) in lane (r % 8)·4 + n/2, register
/// 2·(r / 8) + n % 2. A warp-wide collective: every lane deposits its
/// fragments, then computes its own accumulators.
static u32 fragA[1024][4], fragB[1024][2];
EMU_UNCHECKED inline float half(u32 reg, int h) {
  return toFloat(bf16{(unsigned short)(h ? reg >> 16 : reg & 0xffffu)});
}
EMU_UNCHECKED inline void mmaBf16m16n8k16(float (&c)[4], const u32 (&a)[4],
                                          u32 b0, u32 b1) {
  int me = emu::current, first = me & ~31, lane = me & 31;
  for (int i = 0; i < 4; ++i)
    fragA[me][i] = a[i];
  fragB[me][0] = b0;
  fragB[me][1] = b1;
  emu::wait(emu::AtWarpBarrier);
  for (int i = 0; i < 4; ++i) {
    int r = lane / 4 + 8 * (i / 2), n = 2 * (lane % 4) + i % 2;
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) {
      float av = half(
          fragA[first + (r % 8) * 4 + (k % 8) / 2][r / 8 + 2 * (k / 8)], k % 2);
      float bv = half(fragB[first + n * 4 + (k % 8) / 2][k / 8], k % 2);
      sum += av * bv;
    }
    c[i] += sum;
  }
  emu::wait(emu::AtWarpBarrier);
}

/// Converts to whatever pointer type the kernel parameter has.
struct AnyPointer {
  void *p;
  template <typename T> operator T *() const { return static_cast<T *>(p); }
};
/// A pointer or an i64 size (the GEMM-epilogue fallbacks take both).
struct AnyArg {
  unsigned long long v;
  template <typename T> operator T *() const {
    return reinterpret_cast<T *>(v);
  }
  operator i64() const { return i64(v); }
};
