//===- HostKernels.cpp - generated CUDA kernels compiled for the CPU ------===//

#include "HostKernels.h"

#include "gptc/Target/CUDA/EmitCUDA.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace gptc::test {

namespace {

/// The CUDA built-ins the kernels use, on the host, and types.cuh's
/// replacement. Each block runs its threads as coroutines (ucontext):
/// __syncthreads and the warp operations switch to a scheduler that resumes
/// the threads once all live threads of the block (or warp) arrived, so
/// barriers, shuffles and shared memory behave as on a GPU.
const char *kShim = R"(
#include <algorithm>
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ucontext.h>
#include <unordered_map>
#include <vector>
typedef long long i64;
typedef unsigned int u32;
struct Dim3 { unsigned x = 1, y = 1, z = 1; };
static Dim3 blockIdx, gridDim, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __constant__ static
#define __shared__ static
#define __launch_bounds__(...)

namespace emu {
enum State { Running, AtBarrier, AtWarpBarrier, Done };
struct Thread {
  Dim3 index;
  State state = Running;
  long long orCalls = 0; ///< __syncthreads_or calls so far
};
static std::vector<Thread> threads;
static int current;
static void (*body)();
static float floatSlots[1024];
static int intSlots[1024];
/// __syncthreads_or's predicates tagged with the call's index: call n's are
/// read after its barrier, while a thread may already have written call
/// n + 1's (the bank alternates); a thread that left early has no tag.
static long long orSlots[2][1024];

/// One coroutine per thread slot, made once and reused by every block: a
/// thread that finished waits at the top of its loop for the next block.
/// On x86-64 a switch saves the callee-saved registers and the stack
/// pointer and nothing else (swapcontext also makes a signal-mask system
/// call, and a block of the attention switches a million times);
/// elsewhere, ucontext.
constexpr size_t kStackBytes = 256 * 1024;
struct Coroutine {
  std::unique_ptr<char[]> stack{new char[kStackBytes]};
  void *sp = nullptr;
  ucontext_t context;
};
static std::vector<std::unique_ptr<Coroutine>> coroutines;
static void *schedulerSp;
static ucontext_t scheduler;

#if defined(__x86_64__)
extern "C" void gptcEmuSwitch(void **save, void *load);
asm(".text\n.globl gptcEmuSwitch\n.hidden gptcEmuSwitch\n"
    ".type gptcEmuSwitch, @function\ngptcEmuSwitch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n"
    "  pushq %r14\n  pushq %r15\n  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n"
    "  popq %rbp\n  ret\n");
#endif

static void yield() {
#if defined(__x86_64__)
  gptcEmuSwitch(&coroutines[current]->sp, schedulerSp);
#else
  swapcontext(&coroutines[current]->context, &scheduler);
#endif
}
static void resume(int t) {
  current = t;
#if defined(__x86_64__)
  gptcEmuSwitch(&schedulerSp, coroutines[t]->sp);
#else
  swapcontext(&scheduler, &coroutines[t]->context);
#endif
}
static void loop() {
  for (;;) {
    body();
    threads[current].state = Done;
    yield();
  }
}
static std::unique_ptr<Coroutine> newCoroutine() {
  auto c = std::make_unique<Coroutine>();
#if defined(__x86_64__)
  // What gptcEmuSwitch pops: six registers, then loop() as the return
  // address, entered with the stack as a call leaves it (16n + 8).
  char *top = c->stack.get() + kStackBytes;
  top -= reinterpret_cast<unsigned long long>(top) % 16;
  void **sp = reinterpret_cast<void **>(top);
  *--sp = nullptr;
  *--sp = reinterpret_cast<void *>(&loop);
  for (int i = 0; i < 6; ++i)
    *--sp = nullptr;
  c->sp = sp;
#else
  getcontext(&c->context);
  c->context.uc_stack.ss_sp = c->stack.get();
  c->context.uc_stack.ss_size = kStackBytes;
  c->context.uc_link = nullptr;
  makecontext(&c->context, loop, 0);
#endif
  return c;
}

static void wait(State s) {
  threads[current].state = s;
  yield();
}

/// Shared-memory race checking for the 16-byte accesses of the inline-PTX
/// helpers (vector stores, cp.async, ldmatrix rows; plain C++ accesses are
/// not seen). Time is counted in barrier intervals of the block. A 16-byte
/// chunk another thread wrote is readable from the interval after its
/// write, and after the writer waited for it when it came by cp.async; a
/// chunk another warp read may not be written in the same interval. The
/// emulation runs threads one after another, so without this a missing
/// __syncthreads would pass here and fail, now and then, on a GPU.
namespace race {
struct Chunk {
  int writer = -1, writeEpoch = -1, visibleFrom = 0;
  bool pending = false; // a cp.async its writer has not waited for
  int readerWarp = -1, readEpoch = -1;
  bool manyWarps = false;
};
static std::unordered_map<unsigned long long, Chunk> chunks;
static int epoch;
struct Copies {
  int committed = 0;
  std::vector<std::pair<unsigned long long, int>> pending; // chunk, group
};
static std::vector<Copies> copies;
static int count;
static char first[512];

static void report(const char *what, unsigned long long key, const Chunk &c) {
  if (count++ == 0)
    std::snprintf(first, sizeof(first),
                  "shared-memory race in block (%u, %u, %u): thread %d %s "
                  "the 16 bytes at %#llx, last written by thread %d",
                  blockIdx.x, blockIdx.y, blockIdx.z, current, what, key * 16,
                  c.writer);
}
static void reset(int n) {
  chunks.clear();
  epoch = 0;
  copies.assign(n, Copies());
}
static void write(const void *at, bool async) {
  unsigned long long key = reinterpret_cast<unsigned long long>(at) / 16;
  Chunk &c = chunks[key];
  if (c.readEpoch == epoch && (c.manyWarps || c.readerWarp != current / 32))
    report("writes, in the barrier interval another warp reads,", key, c);
  else if (c.writer >= 0 && c.writer != current && c.writeEpoch == epoch)
    report("writes, in the barrier interval another thread writes,", key, c);
  c.writer = current;
  c.writeEpoch = epoch;
  c.pending = async;
  c.visibleFrom = epoch + 1;
  if (async)
    copies[current].pending.push_back({key, copies[current].committed});
}
static void commit() { ++copies[current].committed; }
/// All but the newest `newest` committed groups of this thread are done.
static void waitFor(int newest) {
  Copies &cp = copies[current];
  int done = cp.committed - newest;
  std::vector<std::pair<unsigned long long, int>> left;
  for (auto [key, group] : cp.pending) {
    if (group >= done) {
      left.push_back({key, group});
      continue;
    }
    Chunk &c = chunks[key];
    if (c.writer == current && c.pending) {
      c.pending = false;
      c.visibleFrom = epoch + 1;
    }
  }
  cp.pending = left;
}
static void read(const void *at) {
  unsigned long long key = reinterpret_cast<unsigned long long>(at) / 16;
  auto it = chunks.find(key);
  if (it == chunks.end()) {
    Chunk none;
    report("reads, never written,", key, none);
    return;
  }
  Chunk &c = it->second;
  if (c.pending)
    report("reads a cp.async its writer has not waited for:", key, c);
  else if (epoch < c.visibleFrom && c.writer / 32 != current / 32)
    report("reads, in the barrier interval another warp writes,", key, c);
  if (c.readEpoch != epoch) {
    c.readEpoch = epoch;
    c.readerWarp = current / 32;
    c.manyWarps = false;
  } else if (c.readerWarp != current / 32) {
    c.manyWarps = true;
  }
}
} // namespace race
/// Releases threads waiting at a barrier that every live thread reached.
static bool release(int first, int count, State s) {
  bool any = false;
  for (int t = first; t < first + count; ++t) {
    if (threads[t].state == Running) return false;
    any |= threads[t].state == s;
  }
  if (!any) return false;
  for (int t = first; t < first + count; ++t)
    if (threads[t].state == s) threads[t].state = Running;
  return true;
}
static void runBlock(int n) {
  threads.assign(n, Thread());
  std::memset(orSlots, 0, sizeof orSlots);
  race::reset(n);
  while (int(coroutines.size()) < n)
    coroutines.push_back(newCoroutine());
  for (int t = 0; t < n; ++t)
    threads[t].index.x = t;
  for (;;) {
    for (int t = 0; t < n; ++t)
      if (threads[t].state == Running)
        resume(t);
    bool progress = false;
    for (int w = 0; w < n; w += 32)
      progress |= release(w, std::min(32, n - w), AtWarpBarrier);
    if (release(0, n, AtBarrier)) {
      ++race::epoch;
      progress = true;
    }
    if (progress) continue;
    for (int t = 0; t < n; ++t)
      if (threads[t].state != Done) {
        std::fprintf(stderr, "emulated block deadlocked\n");
        std::abort();
      }
    return;
  }
}
} // namespace emu

#define threadIdx (emu::threads[emu::current].index)
inline void __syncthreads() { emu::wait(emu::AtBarrier); }
inline void __threadfence() {}
inline int __syncthreads_or(int p) {
  int me = emu::current;
  long long call = emu::threads[me].orCalls++;
  long long *slots = emu::orSlots[call & 1];
  slots[me] = call << 1 | (p != 0);
  emu::wait(emu::AtBarrier);
  for (size_t t = 0; t < emu::threads.size(); ++t)
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
inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p += v; return o; }
template <typename T> inline T __ldcg(const T *p) { return *p; }
inline int min(int a, int b) { return a < b ? a : b; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }

// types.cuh
struct bf16 { unsigned short bits; };
struct f16 { unsigned short bits; };
inline float toFloat(float x) { return x; }
inline float toFloat(int x) { return float(x); }
inline float toFloat(bf16 x) { return __uint_as_float(u32(x.bits) << 16); }
template <typename T> T fromFloat(float x);
template <> inline float fromFloat<float>(float x) { return x; }
template <> inline int fromFloat<int>(float x) { return int(x); }
template <> inline bf16 fromFloat<bf16>(float x) {
  u32 u; std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return bf16{(unsigned short)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{(unsigned short)(u >> 16)};
}
template <typename T> inline void load4(const T *p, float (&x)[4]) {
  for (int i = 0; i < 4; ++i) x[i] = toFloat(p[i]);
}
template <typename T> inline void store4(T *p, const float (&x)[4]) {
  for (int i = 0; i < 4; ++i) p[i] = fromFloat<T>(x[i]);
}
/// 16-byte global accesses must be 16-byte aligned on the GPU; here a
/// misaligned one aborts.
inline void globalAligned16(const void *p) {
  if (reinterpret_cast<unsigned long long>(p) % 16) {
    std::fprintf(stderr, "misaligned 16-byte global access\n");
    std::abort();
  }
}
inline float fastExp2(float x) { return std::exp2(x); }
inline void loadIds4(const int *p, int (&x)[4]) {
  globalAligned16(p);
  for (int i = 0; i < 4; ++i) x[i] = p[i];
}
template <typename T> inline void load8(const T *p, float (&x)[8]) {
  globalAligned16(p);
  for (int i = 0; i < 8; ++i) x[i] = toFloat(p[i]);
}
template <typename T> inline void store8(T *p, const float (&x)[8]) {
  globalAligned16(p);
  for (int i = 0; i < 8; ++i) p[i] = fromFloat<T>(x[i]);
}

struct uint4 { u32 x, y, z, w; };
inline u32 packBf16(float lo, float hi) {
  return u32(fromFloat<bf16>(lo).bits) | u32(fromFloat<bf16>(hi).bits) << 16;
}
// Shared memory: 32-bit offsets from a symbol of this library.
static char sharedBase[16];
inline u32 sharedAddress(const void *p) {
  return u32(static_cast<const char *>(p) - sharedBase);
}
inline char *sharedPointer(u32 a) { return sharedBase + (long long)(int)a; }
/// 16-byte shared accesses (vector stores, cp.async, ldmatrix rows) must be
/// 16-byte aligned on the GPU; here a misaligned one aborts.
inline char *aligned16(u32 a) {
  char *p = sharedPointer(a);
  if (reinterpret_cast<unsigned long long>(p) % 16) {
    std::fprintf(stderr, "misaligned 16-byte shared access\n");
    std::abort();
  }
  return p;
}
inline void storeShared128(u32 a, uint4 v) {
  emu::race::write(aligned16(a), false);
  std::memcpy(sharedPointer(a), &v, 16);
}
/// ldmatrix.x4 (.trans): a warp-wide collective. Every lane deposits its
/// row address; lane l then takes row l/4, columns 2(l%4) and 2(l%4)+1 of
/// each 8x8 matrix m (rows from lanes 8m..8m+7), or, transposed, rows
/// 2(l%4) and 2(l%4)+1 of column l/4.
static u32 matrixRows[1024];
inline void ldmatrix(u32 (&r)[4], u32 a, bool transposed) {
  int me = emu::current, first = me & ~31, lane = me & 31;
  matrixRows[me] = a;
  emu::race::read(aligned16(a));
  emu::wait(emu::AtWarpBarrier);
  for (int m = 0; m < 4; ++m) {
    auto at = [&](int row, int col) {
      unsigned short v;
      std::memcpy(&v, sharedPointer(matrixRows[first + 8 * m + row] + 2 * col), 2);
      return u32(v);
    };
    int g = lane / 4, t = lane % 4;
    r[m] = transposed ? at(2 * t, g) | at(2 * t + 1, g) << 16
                      : at(g, 2 * t) | at(g, 2 * t + 1) << 16;
  }
  emu::wait(emu::AtWarpBarrier);
}
inline void loadMatrices(u32 (&r)[4], u32 a) { ldmatrix(r, a, false); }
inline void loadMatricesTransposed(u32 (&r)[4], u32 a) { ldmatrix(r, a, true); }
// cp.async lands at once here; the race check tracks when it may be read.
inline void copyAsync16(u32 a, const void *g) {
  emu::race::write(aligned16(a), true);
  std::memcpy(sharedPointer(a), g, 16);
}
inline void commitCopies() { emu::race::commit(); }
template <int N> inline void waitCopies() { emu::race::waitFor(N); }

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
inline float half(u32 reg, int h) {
  return toFloat(bf16{(unsigned short)(h ? reg >> 16 : reg & 0xffffu)});
}
inline void mmaBf16m16n8k16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  int me = emu::current, first = me & ~31, lane = me & 31;
  for (int i = 0; i < 4; ++i) fragA[me][i] = a[i];
  fragB[me][0] = b0;
  fragB[me][1] = b1;
  emu::wait(emu::AtWarpBarrier);
  for (int i = 0; i < 4; ++i) {
    int r = lane / 4 + 8 * (i / 2), n = 2 * (lane % 4) + i % 2;
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) {
      float av = half(fragA[first + (r % 8) * 4 + (k % 8) / 2][r / 8 + 2 * (k / 8)], k % 2);
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
  template <typename T> operator T *() const { return reinterpret_cast<T *>(v); }
  operator i64() const { return i64(v); }
};
)";

std::string dims(const uint32_t (&d)[3]) {
  return std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " +
         std::to_string(d[2]);
}

} // namespace

HostKernels::HostKernels(const rt::Program &p) {
  std::string src = kShim;
  const std::string types = cuda::kernelTemplate("types.cuh");
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    std::string s = p.kernels[k].source;
    size_t at = s.find(types);
    if (at == std::string::npos) {
      error = "kernel " + p.kernels[k].name + " has no emitted source";
      return;
    }
    s.replace(at, types.size(), "");
    src += "namespace k" + std::to_string(k) + " {\n" + s + "}\n";
  }
  // The GEMM-epilogue fallbacks, which no launch names: call_NAME(args,
  // grid x, grid y) with 1-D blocks of 256 threads.
  src += "static const unsigned long long *fallbackArgs;\n";
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const std::string &name = p.kernels[k].name;
    if (int n = rt::gemmFallbackArgCount(name)) {
      src += "static void body_" + name + "() {\n  k" + std::to_string(k) +
             "::" + name + "(";
      for (int j = 0; j < n; ++j)
        src += (j ? ", " : "") + std::string("AnyArg{fallbackArgs[") +
               std::to_string(j) + "]}";
      src += ");\n}\n";
      src += "extern \"C\" void call_" + name +
             "(const unsigned long long *a, unsigned gx, unsigned gy) {\n"
             "  fallbackArgs = a;\n  emu::body = body_" + name + ";\n"
             "  gridDim = {gx, gy, 1};\n  blockDim = {256, 1, 1};\n"
             "  blockIdx.z = 0;\n"
             "  for (blockIdx.y = 0; blockIdx.y < gy; ++blockIdx.y)\n"
             "  for (blockIdx.x = 0; blockIdx.x < gx; ++blockIdx.x)\n"
             "    emu::runBlock(256);\n}\n";
    }
  }
  // Per launch: its body (the kernel call) and a runner over the blocks,
  // run_F_I for launch I of function F.
  src += "static void **args;\n";
  for (size_t f = 0; f < p.functions.size(); ++f)
    for (size_t i = 0; i < p.functions[f].launches.size(); ++i) {
      const rt::Launch &l = p.functions[f].launches[i];
      if (l.deviceKernel < 0)
        continue; // cuBLASLt
      size_t n = l.inputs.size() + l.outputs.size();
      std::string id = std::to_string(f) + "_" + std::to_string(i);
      src += "static void body_" + id + "() {\n  k" +
             std::to_string(l.deviceKernel) +
             "::" + p.kernels[l.deviceKernel].name + "(";
      for (size_t j = 0; j < n; ++j)
        src += (j ? ", " : "") + std::string("AnyPointer{args[") +
               std::to_string(j) + "]}";
      src += ");\n}\n";
      src += "extern \"C\" void run_" + id + "(void **a) {\n  args = a;\n"
             "  emu::body = body_" + id + ";\n"
             "  gridDim = {" + dims(l.grid) + "};\n"
             "  blockDim = {" + dims(l.block) + "};\n"
             "  for (blockIdx.z = 0; blockIdx.z < gridDim.z; ++blockIdx.z)\n"
             "  for (blockIdx.y = 0; blockIdx.y < gridDim.y; ++blockIdx.y)\n"
             "  for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x)\n"
             "    emu::runBlock(blockDim.x);\n}\n";
    }
  char tmpl[] = "/tmp/gptc-host-kernels-XXXXXX";
  if (!mkdtemp(tmpl)) {
    error = "cannot create a temporary directory";
    return;
  }
  dir = tmpl;
  std::ofstream(dir + "/kernels.cpp") << src;
  std::string cmd = std::string(GPTC_HOST_CXX) +
                    " -std=c++17 -O1 -ffp-contract=off -fPIC -shared -o " +
                    dir + "/kernels.so " + dir + "/kernels.cpp 2> " + dir +
                    "/errors.txt";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(dir + "/errors.txt");
    error = std::string(std::istreambuf_iterator<char>(in), {});
    return;
  }
  handle = dlopen((dir + "/kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    error = dlerror();
}

HostKernels::~HostKernels() {
  if (handle)
    dlclose(handle);
  if (!dir.empty())
    std::filesystem::remove_all(dir);
}

void *HostKernels::symbol(const std::string &name) const {
  void *fn = handle ? dlsym(handle, name.c_str()) : nullptr;
  if (!fn)
    throw std::runtime_error("no host kernel runner " + name);
  return fn;
}

void HostKernels::run(size_t function, size_t launch,
                      std::vector<void *> pointers) {
  auto fn = reinterpret_cast<void (*)(void **)>(symbol(
      "run_" + std::to_string(function) + "_" + std::to_string(launch)));
  fn(pointers.data());
  throwOnRaces();
}

void HostKernels::call(const std::string &name, std::vector<uint64_t> args,
                       unsigned gx, unsigned gy) {
  auto fn = reinterpret_cast<void (*)(const uint64_t *, unsigned, unsigned)>(
      symbol("call_" + name));
  fn(args.data(), gx, gy);
  throwOnRaces();
}

void HostKernels::throwOnRaces() {
  auto take = reinterpret_cast<int (*)(char *, int)>(symbol("gptcEmuTakeRaces"));
  char first[512];
  if (int n = take(first, sizeof(first)))
    throw std::runtime_error(std::string(first) + " (" + std::to_string(n) +
                             " race" + (n > 1 ? "s" : "") + " in all)");
}

rt::Program &emitForHost(rt::Program &p) {
  cuda::emitCUDA(p, "sm_80");
  return p;
}

namespace {

class HostKernelBackend : public rt::Backend {
public:
  std::string name() const override { return "host-compiled CUDA"; }

  void load(const rt::Program &p) override {
    p_ = &p;
    kernels_ = std::make_unique<HostKernels>(p);
    if (!kernels_->ok())
      throw rt::DeviceError("the kernels do not compile for the host: " +
                            kernels_->error.substr(0, 2000));
    size_t bytes = (size_t(p.arenaBytes) + 255) / 256 * 256;
    arena_.reset(static_cast<uint8_t *>(std::aligned_alloc(256, bytes ? bytes : 256)));
    std::memset(arena_.get(), 0, bytes);
    for (size_t i = 0; i < p.buffers.size(); ++i) {
      const rt::Buffer &b = p.buffers[i];
      if (b.role == rt::Role::Constant && b.viewOf < 0)
        std::memcpy(at(int(i)), b.init.data(), b.init.size());
    }
    gemms_ = rt::makeCpuBackend();
    gemms_->load(p);
  }

  void upload(int buffer, const void *host) override {
    std::memcpy(at(buffer), host, size_t(p_->buffers.at(buffer).bytes()));
  }
  void download(int buffer, void *host) override {
    std::memcpy(host, at(buffer), size_t(p_->buffers.at(buffer).bytes()));
  }

  void run(const rt::Function &f, size_t begin, size_t end) override {
    const size_t function = size_t(&f - p_->functions.data());
    for (size_t i = begin; i < end && i < f.launches.size(); ++i) {
      const rt::Launch &l = f.launches[i];
      if (l.deviceKernel >= 0) {
        std::vector<void *> pointers;
        for (int id : l.inputs)
          pointers.push_back(at(id));
        for (int id : l.outputs)
          pointers.push_back(at(id));
        try {
          kernels_->run(function, i, std::move(pointers));
        } catch (const std::runtime_error &e) {
          throw rt::DeviceError(f.name + " launch " + std::to_string(i) +
                                ": " + e.what());
        }
      } else if (rt::isGemm(l.kernel)) {
        for (int id : l.inputs)
          gemms_->upload(id, at(id));
        gemms_->run(f, i, i + 1);
        for (int id : l.outputs)
          gemms_->download(id, at(id));
      } else {
        throw rt::DeviceError(f.name + " launch " + std::to_string(i) + ": " +
                              l.kernel + " has no kernel");
      }
    }
  }

  void synchronize() override {}

private:
  uint8_t *at(int id) const {
    int base = id;
    while (p_->buffers.at(base).viewOf >= 0)
      base = p_->buffers[base].viewOf;
    return arena_.get() + p_->buffers[base].offset;
  }

  struct Free {
    void operator()(uint8_t *p) const { std::free(p); }
  };
  const rt::Program *p_ = nullptr;
  std::unique_ptr<HostKernels> kernels_;
  std::unique_ptr<uint8_t[], Free> arena_;
  std::unique_ptr<rt::Backend> gemms_;
};

} // namespace

std::unique_ptr<rt::Backend> makeHostKernelBackend() {
  return std::make_unique<HostKernelBackend>();
}

} // namespace gptc::test
