//===- HostKernels.cpp - generated CUDA kernels compiled for the CPU ------===//

#include "HostKernels.h"

#include "gptc/Target/CUDA/EmitCUDA.h"

#include <algorithm>
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
#include <string>
#include <ucontext.h>
#include <vector>
typedef long long i64;
typedef unsigned int u32;
struct Dim3 { unsigned x = 1, y = 1, z = 1; };
/// What blockIdx, gridDim and blockDim read (the runners set them).
static Dim3 blockIndex, gridSize, blockSize;
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __restrict__
#define __constant__ static
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
/// Emulation code the race checker's instrumentation must not see.
#define EMU_UNCHECKED __attribute__((no_sanitize("thread")))

namespace emu {
enum State { Running, AtBarrier, AtWarpBarrier, AtWarpgroupBarrier, Done };
struct Thread {
  Dim3 index;
  State state = Running;
  long long orCalls = 0; ///< __syncthreads_or calls so far
  long long warpOps = 0; ///< warp-wide operations (shuffles, mma, ...) so far
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
static bool inThread; // a kernel thread runs (not the scheduler)
namespace race {
static const char *stackLo, *stackHi; // the running thread's stack
}
static void resume(int t) {
  current = t;
  race::stackLo = coroutines[t]->stack.get();
  race::stackHi = race::stackLo + kStackBytes;
  inThread = true;
#if defined(__x86_64__)
  gptcEmuSwitch(&schedulerSp, coroutines[t]->sp);
#else
  swapcontext(&scheduler, &coroutines[t]->context);
#endif
  inThread = false;
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
  if (s == AtWarpBarrier || s == AtWarpgroupBarrier) ++threads[current].warpOps;
  threads[current].state = s;
  yield();
}

/// Race checking within a block. Every access to a __shared__ variable, and
/// to a launch's buffers, is seen: the plain C++ ones through GCC's
/// -fsanitize=thread instrumentation (the __tsan_* hooks below; HostKernels
/// registers each __shared__ variable where it is declared and each buffer
/// when its launch starts), and the inline-PTX helpers' (vector stores,
/// cp.async, ldmatrix rows) through explicit calls. Memory is tracked in
/// 2-byte granules (bf16 elements), time in barrier intervals of the block.
/// A granule another thread wrote is readable from the interval after its
/// write, and after the writer waited for it when it came by cp.async;
/// within the interval, by another lane of the writer's warp once a
/// warp-wide operation (a shuffle, ballot, ldmatrix or mma) came between.
/// A granule another warp read may not be written in the same interval.
/// The emulation runs threads one after another, so without this a missing
/// __syncthreads would pass here and fail, now and then, on a GPU. (Blocks
/// run one after another and each starts afresh: what one block wrote and
/// another reads, through lastBlockToArrive, is not checked.)
///
/// The checker is called for every load and store of the kernels, so it
/// keeps to plain arrays: code it calls is instrumented too (and not
/// inlined into it), so std containers here would recurse and crawl.
namespace race {
struct Granule {
  long long block = -1;        // the block run this state belongs to
  long long writerWarpOps = 0; // the writer's warp-wide operations by then
  int writer = -1, writeEpoch = -1, visibleFrom = 0, readEpoch = -1;
  int readerWarp = -1;
  int writeSeq = 0; // the writer's writes by then, for fence.proxy.async
  // The last wgmma of each warpgroup that reads it as B (wgmmaOps): a
  // block has at most 2 that issue wgmma.
  int wgmmaOp[2] = {-1, -1};
  bool pending = false; // a cp.async its writer has not waited for
  bool manyWarps = false;
};
/// A wgmma's read of B, as the warpgroup's threads land it. The device
/// reads B at some time between the instruction and the wait_group that
/// retires it, and one warp's wait need not mean another's has returned:
/// B may be written again only in a barrier interval after every thread
/// of the warpgroup landed it. (Kept per granule as each warpgroup's last
/// reader: a warpgroup's products land in order. The wgmma kernels are one
/// or two warpgroups a block.)
struct WgmmaOp {
  int unlanded;    // threads of the warpgroup yet to land it
  int landedEpoch; // the last barrier interval one of them did
};
constexpr int kMaxWgmmaOps = 1 << 16; // a block's
static WgmmaOp wgmmaOps[kMaxWgmmaOps];
static int wgmmaOpCount;
/// A __shared__ variable, with its granules, or global memory a launch
/// writes (an output, or a kernel's __device__ scratch), whose granules a
/// block touches few of (by page). Inputs are not tracked: what no thread
/// writes cannot race (an input that is also an output is found by address).
struct Region {
  const char *begin, *end;
  char name[40];
  Granule *granules; // shared only
};
constexpr int kMaxRegions = 2048;
struct Regions {
  Region all[kMaxRegions];
  int size = 0;
  const char *lowest = nullptr, *highest = nullptr;
};
static Regions shared, outputs, scratch;
/// Memory known to hold no region: the gaps around the last accesses that
/// found none (inputs, mostly; kernels read several in turn), so that the
/// next ones there are turned away at once. Emptied when regions are added.
struct Gap {
  const char *lo = nullptr, *hi = nullptr;
};
constexpr int kGaps = 2;
static Gap gaps[kGaps];
static int nextGap;
/// Global granules, by 4 KB page: the pages this block touched, found by
/// page number (open addressing; a slot of an earlier block is free), each
/// holding its granules (stamped with their block, so reusing a page for
/// another block needs no clearing). Pages keep a block's accesses, which
/// run along rows, together in the cache.
constexpr int kPageGranules = 2048;
struct Page {
  Granule granules[kPageGranules];
};
struct PageSlot {
  unsigned long long number = 0;
  long long block = -1;
  Page *page = nullptr;
};
static PageSlot *slots;
static unsigned long long slotMask;
static int pagesUsed; // by this block: pool[0, pagesUsed)
static std::vector<Page *> pool;
static PageSlot *lastSlot;
static long long block; // serial number of the block run
static int epoch;
/// A thread's cp.async groups: committed so far, and granules in flight.
struct Pending {
  Granule *granule;
  int group;
};
struct Copies {
  int committed = 0;
  std::vector<Pending> pending;
};
static std::vector<Copies> copies;
/// Per thread: its writes so far, and how many of them a fence.proxy.async
/// made visible to wgmma (the async proxy).
static int writesSoFar[1024], fencedWrites[1024];
static int count;
static char first[512];
/// Set while the checker runs: what it calls must not recurse into it.
static bool busy;
struct Busy {
  bool was;
  EMU_UNCHECKED Busy() : was(busy) { busy = true; }
  EMU_UNCHECKED ~Busy() { busy = was; }
};

EMU_UNCHECKED static void add(Regions &rs, const char *p, size_t bytes,
                              const char *name, bool withGranules) {
  if (rs.size == kMaxRegions) {
    std::fprintf(stderr, "race checker: more than %d regions\n", kMaxRegions);
    std::abort();
  }
  // Kept in order of address, for find's binary search.
  int at = rs.size++;
  for (; at > 0 && rs.all[at - 1].begin > p; --at)
    rs.all[at] = rs.all[at - 1];
  Region &r = rs.all[at];
  for (Gap &gap : gaps)
    gap = Gap();
  r.begin = p;
  r.end = p + bytes;
  std::snprintf(r.name, sizeof(r.name), "%s", name);
  r.granules = withGranules ? new Granule[(bytes + 1) / 2] : nullptr;
  rs.lowest = rs.lowest && rs.lowest < p ? rs.lowest : p;
  rs.highest = rs.highest && rs.highest > r.end ? rs.highest : r.end;
}
/// The region of `rs` holding `p`: the last that begins at or before it
/// (regions do not overlap). If none, narrows [lo, hi) to the gap around
/// `p` between `rs`'s regions.
EMU_UNCHECKED static Region *find(Regions &rs, const char *p, const char *&lo,
                                  const char *&hi) {
  int first = 0, last = rs.size; // all[first - 1].begin <= p < all[last].begin
  while (first < last) {
    int mid = (first + last) / 2;
    if (rs.all[mid].begin <= p)
      first = mid + 1;
    else
      last = mid;
  }
  if (first > 0 && p < rs.all[first - 1].end) return &rs.all[first - 1];
  if (first > 0) lo = std::max(lo, rs.all[first - 1].end);
  if (first < rs.size) hi = std::min(hi, rs.all[first].begin);
  return nullptr;
}
/// A __shared__ variable, where it is declared (each time; the first counts).
EMU_UNCHECKED static void declare(const void *at, size_t bytes,
                                  const char *name) {
  Busy guard;
  const char *p = static_cast<const char *>(at);
  for (int i = 0; i < shared.size; ++i)
    if (shared.all[i].begin == p) return;
  add(shared, p, bytes, name, true);
}
/// A kernel's __device__ variable (module-scope scratch), when loaded.
EMU_UNCHECKED static void declareScratch(const void *at, size_t bytes,
                                         const char *name) {
  Busy guard;
  add(scratch, static_cast<const char *>(at), bytes, name, false);
}
/// The outputs of the launch about to run, in place of the last one's.
EMU_UNCHECKED static void launchOutputs(void *const *pointers,
                                        const long long *bytes, int n) {
  Busy guard;
  outputs.size = 0;
  outputs.lowest = outputs.highest = nullptr;
  for (int i = 0; i < n; ++i) {
    char name[24];
    std::snprintf(name, sizeof(name), "output %d", i);
    add(outputs, static_cast<const char *>(pointers[i]), size_t(bytes[i]),
        name, false);
  }
  // Outputs that overlap (views of one buffer) become one region.
  int kept = 0;
  for (int i = 1; i < outputs.size; ++i) {
    Region &last = outputs.all[kept];
    if (outputs.all[i].begin < last.end)
      last.end = std::max(last.end, outputs.all[i].end);
    else
      outputs.all[++kept] = outputs.all[i];
  }
  outputs.size = n ? kept + 1 : 0;
}
/// Page `number`'s slot; a new one gets `page`, or the pool's next.
EMU_UNCHECKED static PageSlot *pageSlot(unsigned long long number,
                                        Page *page = nullptr) {
  for (unsigned long long i = (number * 0x9e3779b97f4a7c15ull) >> 24 & slotMask;;
       i = (i + 1) & slotMask) {
    PageSlot &s = slots[i];
    if (s.block != block) {
      s.number = number;
      s.block = block;
      if (!page && pagesUsed == int(pool.size()))
        pool.push_back(new Page);
      s.page = page ? page : pool[pagesUsed++];
      return &s;
    }
    if (s.number == number) return &s;
  }
}
/// The granule of global memory at `p`, for this block.
EMU_UNCHECKED static Granule *touch(const char *p) {
  unsigned long long key = reinterpret_cast<unsigned long long>(p) / 2;
  unsigned long long number = key / kPageGranules;
  PageSlot *s = lastSlot;
  if (!s || s->block != block || s->number != number) {
    if (2 * (pagesUsed + 1) > int(slots ? slotMask + 1 : 0)) {
      // Grow: keep this block's pages.
      PageSlot *old = slots;
      unsigned long long oldSize = old ? slotMask + 1 : 0;
      slotMask = (oldSize ? 2 * oldSize : 1024) - 1;
      slots = new PageSlot[slotMask + 1];
      for (unsigned long long i = 0; i < oldSize; ++i)
        if (old[i].block == block)
          pageSlot(old[i].number, old[i].page);
      delete[] old;
    }
    s = lastSlot = pageSlot(number);
  }
  return &s->page->granules[key % kPageGranules];
}
/// The checker's memory, given back when the library is unloaded (each
/// HostKernels loads its own).
struct Release {
  EMU_UNCHECKED ~Release() {
    for (Page *page : pool)
      delete page;
    delete[] slots;
    for (int i = 0; i < shared.size; ++i)
      delete[] shared.all[i].granules;
  }
};
static Release release;
/// The granule at `p` and its region, if `p` is in shared memory or global
/// memory the launch writes; otherwise remembers the gap `p` is in.
EMU_UNCHECKED static Granule *find(const char *p, const Region **in) {
  const char *lo = nullptr, *hi = reinterpret_cast<const char *>(~0ull);
  Granule *g = nullptr;
  Region *r = find(shared, p, lo, hi);
  if (r) {
    g = &r->granules[size_t(p - r->begin) / 2];
  } else if ((r = find(outputs, p, lo, hi)) || (r = find(scratch, p, lo, hi))) {
    g = touch(p);
  } else {
    gaps[nextGap] = {lo, hi};
    nextGap = (nextGap + 1) % kGaps;
    return nullptr;
  }
  *in = r;
  if (g->block != block) {
    *g = Granule();
    g->block = block;
  }
  return g;
}
EMU_UNCHECKED static void report(const char *what, const char *p,
                                 const Region &r, const Granule &g) {
  if (count++ == 0) {
    int n = std::snprintf(
        first, sizeof(first),
        "%s race in block (%u, %u, %u): thread %d %s byte %lld of %s",
        r.granules ? "shared-memory" : "global-memory", blockIndex.x,
        blockIndex.y, blockIndex.z, current, what, (long long)(p - r.begin),
        r.name);
    if (g.writer >= 0 && n > 0 && n < int(sizeof(first)))
      std::snprintf(first + n, sizeof(first) - size_t(n),
                    ", last written by thread %d", g.writer);
  }
}
EMU_UNCHECKED static void reset(int n) {
  Busy guard;
  ++block;
  epoch = 0;
  pagesUsed = 0;
  copies.assign(n, Copies());
  std::fill(writesSoFar, writesSoFar + n, 0);
  std::fill(fencedWrites, fencedWrites + n, 0);
  wgmmaOpCount = 0;
}
/// A new wgmma of a warpgroup: its id in wgmmaOps.
EMU_UNCHECKED static int newWgmmaOp() {
  if (wgmmaOpCount == kMaxWgmmaOps) {
    std::fprintf(stderr, "race checker: more than %d wgmma in a block\n",
                 kMaxWgmmaOps);
    std::abort();
  }
  wgmmaOps[wgmmaOpCount] = {128, -1};
  return wgmmaOpCount++;
}
/// This thread's share of wgmma `id` landed.
EMU_UNCHECKED static void landWgmmaOp(int id) {
  --wgmmaOps[id].unlanded;
  wgmmaOps[id].landedEpoch = epoch;
}
/// A misuse of an instruction that is not a race (wgmma's rules, the bulk
/// copies'), reported the same way.
EMU_UNCHECKED static void misuse(const char *what,
                                 const char *instruction = "wgmma") {
  if (count++ == 0)
    std::snprintf(first, sizeof(first),
                  "%s misuse in block (%u, %u, %u): thread %d: %s",
                  instruction, blockIndex.x, blockIndex.y, blockIndex.z,
                  current, what);
}
/// fence.proxy.async: this thread's writes so far become visible to the
/// async proxy (wgmma, the bulk copies). A cp.async copy counts as written
/// when its writer waits for it (waitFor), so one still in flight is not
/// covered, and the writes after it are.
EMU_UNCHECKED static void fenceProxy() {
  Busy guard;
  fencedWrites[current] = writesSoFar[current];
}
EMU_UNCHECKED static void write(const char *p, const Region &r, Granule &g,
                                bool async) {
  const int warp = current / 32;
  const long long ops = threads[current].warpOps;
  bool unlanded = false;
  for (int op : g.wgmmaOp)
    unlanded |= op >= 0 && (wgmmaOps[op].unlanded > 0 ||
                            wgmmaOps[op].landedEpoch >= epoch);
  if (unlanded)
    report("writes, with no barrier since every thread of its warpgroup "
           "waited for it, what a wgmma reads as B:", p, r, g);
  else if (g.readEpoch == epoch && (g.manyWarps || g.readerWarp != warp))
    report("writes, in the barrier interval another warp reads,", p, r, g);
  else if (g.writer >= 0 && g.writer != current && g.writeEpoch == epoch &&
           (g.writer / 32 != warp || g.writerWarpOps == ops))
    report("writes, in the barrier interval another thread writes,", p, r, g);
  g.writer = current;
  g.writeEpoch = epoch;
  g.writerWarpOps = ops;
  g.writeSeq = ++writesSoFar[current];
  g.pending = async;
  g.visibleFrom = epoch + 1;
  if (async)
    copies[current].pending.push_back({&g, copies[current].committed});
}
EMU_UNCHECKED static void read(const char *p, const Region &r, Granule &g) {
  const int warp = current / 32;
  if (g.writer < 0) {
    // Global memory was written before the launch.
    if (r.granules)
      report("reads, never written,", p, r, g);
  } else if (g.pending) {
    report("reads a cp.async its writer has not waited for:", p, r, g);
  } else if (g.writer != current && epoch < g.visibleFrom) {
    if (g.writer / 32 != warp)
      report("reads, in the barrier interval another warp writes,", p, r, g);
    else if (g.writerWarpOps == threads[current].warpOps)
      report("reads, with no warp-wide operation since, what another lane "
             "of its warp writes:", p, r, g);
  }
  if (g.readEpoch != epoch) {
    g.readEpoch = epoch;
    g.readerWarp = warp;
    g.manyWarps = false;
  } else if (g.readerWarp != warp) {
    g.manyWarps = true;
  }
}
/// Whether an access at `p` may need checking: a kernel thread's, not to
/// its own stack (its "registers"), within the regions' bounds.
EMU_UNCHECKED __attribute__((always_inline)) inline bool candidate(const void *at) {
  const char *p = static_cast<const char *>(at);
  if (!inThread || busy || (p >= stackLo && p < stackHi))
    return false;
  for (const Gap &gap : gaps)
    if (p >= gap.lo && p < gap.hi)
      return false;
  return (p >= shared.lowest && p < shared.highest) ||
         (p >= outputs.lowest && p < outputs.highest) ||
         (p >= scratch.lowest && p < scratch.highest);
}
/// An access of `bytes` at `at`, if it is to shared memory or a buffer;
/// `asyncReader` names a read by the async proxy ("wgmma", "a bulk
/// reduction"), which needs each writer's fence.proxy.async since.
EMU_UNCHECKED static void access(const void *at, size_t bytes, bool isWrite,
                                 bool async = false,
                                 const char *asyncReader = nullptr) {
  if (!candidate(at) && !candidate(static_cast<const char *>(at) + bytes - 1))
    return;
  Busy guard;
  const char *p = static_cast<const char *>(at);
  const char *from = p - (reinterpret_cast<unsigned long long>(p) % 2);
  for (const char *q = from; q < p + bytes; q += 2) {
    const Region *r = nullptr;
    if (Granule *g = find(q, &r)) {
      if (isWrite) {
        write(q, *r, *g, async);
      } else {
        read(q, *r, *g);
        if (asyncReader && g->writer >= 0 &&
            g->writeSeq > fencedWrites[g->writer]) {
          char what[96];
          std::snprintf(what, sizeof what,
                        "%s reads, with no fence.proxy.async by its writer "
                        "since,",
                        asyncReader);
          report(what, q, *r, *g);
        }
      }
    }
  }
}
EMU_UNCHECKED static void commit() {
  Busy guard;
  ++copies[current].committed;
}
/// All but the newest `newest` committed groups of this thread are done.
EMU_UNCHECKED static void waitFor(int newest) {
  Busy guard;
  Copies &cp = copies[current];
  int done = cp.committed - newest;
  std::vector<Pending> left;
  for (const Pending &c : cp.pending) {
    if (c.group >= done) {
      left.push_back(c);
      continue;
    }
    Granule *g = c.granule;
    if (g->writer == current && g->pending) {
      g->pending = false;
      g->visibleFrom = epoch + 1;
      g->writeSeq = ++writesSoFar[current]; // for fence.proxy.async
    }
  }
  cp.pending = left;
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
static void wgmmaAtExit(int n);
static void bulkAtExit(int n);
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
    for (int w = 0; w < n; w += 128)
      progress |= release(w, std::min(128, n - w), AtWarpgroupBarrier);
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
    wgmmaAtExit(n);
    bulkAtExit(n);
    return;
  }
}
} // namespace emu

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
inline void reduceAddGlobal(float *p, float v) { *p += v; }
inline void reduceAddGlobal4(float *p, const float (&v)[4]) {
  if (reinterpret_cast<unsigned long long>(p) % 16) {
    std::fprintf(stderr, "misaligned 16-byte global reduction\n");
    std::abort();
  }
  for (int e = 0; e < 4; ++e) p[e] += v[e];
}
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
  for (int i = 0; i < 2; ++i) x[i] = toFloat(p[i]);
}
inline void store2(float *p, const float (&x)[2]) {
  if (reinterpret_cast<unsigned long long>(p) % 8) {
    std::fprintf(stderr, "misaligned 8-byte global access\n");
    std::abort();
  }
  p[0] = x[0], p[1] = x[1];
}
inline void load4AtL2(const float *p, float (&x)[4]) {
  globalAligned16(p);
  for (int i = 0; i < 4; ++i) x[i] = p[i];
}
inline void loadShared4(const float *p, float (&x)[4]) {
  globalAligned16(p, "shared");
  for (int i = 0; i < 4; ++i) x[i] = p[i];
}
inline void storeShared4(float *p, const float (&x)[4]) {
  globalAligned16(p, "shared");
  for (int i = 0; i < 4; ++i) p[i] = x[i];
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return unsigned((unsigned long long)a * b >> 32);
}
inline float fastExp2(float x) { return std::exp2(x); }
inline float fastRcp(float x) { return 1.0f / x; }
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
inline void storeGlobal128(void *p, u32 a, u32 b, u32 c, u32 d) {
  globalAligned16(p);
  u32 *w = static_cast<u32 *>(p);
  w[0] = a, w[1] = b, w[2] = c, w[3] = d;
}

struct uint4 { u32 x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
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
struct alignas(8) uint2 { u32 x, y; };
/// An 8-byte access of four 2-byte elements: aligned to 8 on the GPU.
template <typename T> inline uint2 loadPacked4(const T *p) {
  static_assert(sizeof(T) == 2, "four 2-byte elements");
  if (reinterpret_cast<unsigned long long>(p) % 8) {
    std::fprintf(stderr, "misaligned 8-byte global access\n");
    std::abort();
  }
  // (element by element, so that the race checker sees the reads)
  return {u32(p[0].bits) | u32(p[1].bits) << 16,
          u32(p[2].bits) | u32(p[3].bits) << 16};
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
#define EMU_ACCESS_HOOKS(n)                                                   \
  EMU_HOOK void __tsan_read##n(void *p) {                                     \
    if (emu::race::candidate(p)) emu::race::access(p, n, false);              \
  }                                                                           \
  EMU_HOOK void __tsan_write##n(void *p) {                                    \
    if (emu::race::candidate(p)) emu::race::access(p, n, true);               \
  }                                                                           \
  EMU_HOOK void __tsan_unaligned_read##n(void *p) {                           \
    if (emu::race::candidate(p)) emu::race::access(p, n, false);              \
  }                                                                           \
  EMU_HOOK void __tsan_unaligned_write##n(void *p) {                          \
    if (emu::race::candidate(p)) emu::race::access(p, n, true);               \
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

/// Warpgroup MMA (sm_90a; the kernels' GPTC_WGMMA path), as the PTX ISA
/// defines it: the 128 threads of a warpgroup each deposit A (their warp's
/// 16 rows as an mma.m16n8k16 A fragment) and B's shared-memory
/// descriptor, which must agree; then each computes its own accumulators
/// (warp w's rows 16w.., as N/8 mma C fragments). B is decoded as the
/// device decodes the descriptor: start address, LBO and SBO in 16-byte
/// units, no swizzling, element (n, k) at (n%8)·16 + (n/8)·SBO + (k%8)·2 +
/// (k/8)·LBO bytes K-major, (n%8)·2 + (n/8)·SBO + (k%8)·16 + (k/8)·LBO
/// N-major.
///
/// With accumulate false (scale-d), a product starts its accumulators
/// where it lands: what they held is dropped.
///
/// Asynchronous, as late as the ISA allows: a product lands when the
/// thread's wgmma.wait_group retires its commit group, B read from shared
/// memory then (so a tile overwritten while the product is in flight gives
/// other numbers; and the race checker reports a write to B before a
/// barrier that follows every thread's landing: race::WgmmaOp). Its
/// accumulators hold a NaN meanwhile (a read of them in flight poisons the
/// results), and a write to them is reported. The A
/// fragments are taken at issue; ptxas keeps their registers until the
/// wait, and test/cuda/wgmma_fences.py checks that nothing else uses them.
/// Also checked: a wgmma.fence before each batch, naming its operands; the
/// reads of B ordered after its writers' fence.proxy.async and a barrier
/// (race checker, at issue); groups committed before a wait; none in
/// flight when the thread ends.
static u32 wgA[1024][4];
static unsigned long long wgB[1024];
static bool wgFenced[1024];
static int wgUncommitted[1024];
/// The device keeps 18 bits of a shared address in a descriptor; the
/// emulation's addresses are offsets from sharedBase that may need more.
/// Each thread's recent descriptors remember the whole address.
struct WgDescriptor { unsigned long long desc; u32 address; };
static WgDescriptor wgRecent[1024][16];
static int wgNext[1024];
inline unsigned long long wgmmaDescriptor(u32 address, u32 lbo, u32 sbo,
                                          bool swizzle128 = false) {
  unsigned long long d = (unsigned long long)((address & 0x3ffff) >> 4) |
                         (unsigned long long)(lbo >> 4) << 16 |
                         (unsigned long long)(sbo >> 4) << 32 |
                         (unsigned long long)swizzle128 << 62;
  int me = emu::current;
  wgRecent[me][wgNext[me]++ % 16] = {d, address};
  return d;
}
/// The batch's operands, as its wgmma.fence named them (one or two pairs of
/// accumulators and A fragments, or accumulators alone where A is read
/// from shared memory): a wgmma on others would read registers the fence
/// did not order.
struct WgFencedPair {
  const void *d = nullptr;
  const u32 (*a)[4] = nullptr, (*aEnd)[4] = nullptr;
  bool names(const void *dd, const u32 (*aa)[4]) const {
    return dd == d && (aa ? aa >= a && aa < aEnd : a == nullptr);
  }
};
static WgFencedPair wgFencedPairs[1024][2];
/// Wgmma issued by each thread, and made (race::newWgmmaOp) by each
/// warpgroup, in this block; a warpgroup's current one.
static int wgIssued[1024], wgMade[8], wgCurrentOp[8];
/// One wgmma in flight, as this thread's share of it: the A values its
/// accumulators need (rows lane/4 and lane/4 + 8 of its warp, k 0..15),
/// where B lies, and the commit group it belongs to.
struct WgInFlight {
  float *d;
  int nt;
  bool transB;
  float a[2][16];
  u32 address, lbo, sbo;
  bool swizzled; // SWIZZLE_128B (layout type 1), else none
  long long group;
  int readOfB; // its race::wgmmaOps id (of A's reads too, from shared memory)
  bool starts = false; // scale-d false: d = a · b, what d held dropped
  // A from shared memory (K-major), read as it lands: this thread's rows
  // aRow and aRow + 8.
  bool aShared = false;
  u32 aAddress = 0, aLbo = 0, aSbo = 0;
  bool aSwizzled = false;
  int aRow = 0;
};
/// Accumulators in flight: their value as the products land (the
/// registers themselves hold kWgPoison until the last one has).
struct WgAccumulators {
  float *d;
  int floats, inFlight;
  float value[32];
};
constexpr u32 kWgPoison = 0x7fcadbadu; // a quiet NaN
struct WgThread {
  std::vector<WgInFlight> ops;
  std::vector<WgAccumulators> accs;
  long long committed = 0; // commit groups so far
};
static WgThread wgThreads[1024];
EMU_UNCHECKED inline void wgmmaFenceCheck(int me) {
  if (!wgFenced[me])
    emu::race::misuse("wgmma with no wgmma.fence since the last wait");
}
template <int N, int K>
EMU_UNCHECKED inline void wgmmaFence(float (&d)[N][4], u32 (&a)[K][4]) {
  int me = emu::current;
  wgFenced[me] = true;
  wgFencedPairs[me][0] = {d, a, a + K};
  wgFencedPairs[me][1] = {};
}
template <int N, int K, int N2, int K2>
EMU_UNCHECKED inline void wgmmaFence(float (&d)[N][4], u32 (&a)[K][4],
                                     float (&d2)[N2][4], u32 (&a2)[K2][4]) {
  int me = emu::current;
  wgFenced[me] = true;
  wgFencedPairs[me][0] = {d, a, a + K};
  wgFencedPairs[me][1] = {d2, a2, a2 + K2};
}
template <int N, int N2>
EMU_UNCHECKED inline void wgmmaFence(float (&d)[N][4], float (&d2)[N2][4]) {
  int me = emu::current;
  wgFenced[me] = true;
  wgFencedPairs[me][0] = {d};
  wgFencedPairs[me][1] = {d2};
}
EMU_UNCHECKED inline void wgmmaCommit() {
  int me = emu::current;
  if (wgUncommitted[me]) ++wgThreads[me].committed;
  wgUncommitted[me] = 0;
}
/// Where B's element (n, k) of a wgmma lies, as the device decodes the
/// descriptor. Without swizzling: 8 x 8 core matrices, (n%8)·16 + (n/8)·SBO
/// + (k%8)·2 + (k/8)·LBO bytes K-major, (n%8)·2 + (n/8)·SBO + (k%8)·16 +
/// (k/8)·LBO N-major. SWIZZLE_128B: rows of 128 bytes, (n%8)·128 +
/// (n/8)·SBO + k·2 K-major, (k%8)·128 + (k/8)·SBO + n·2 N-major (N up to
/// 64, one atom), then the address's bits 4-6 XORed with its bits 7-9 (the
/// 16-byte chunk with the row within 8), as the device does it to the
/// shared address: here to the host address, the __shared__ variables
/// being host statics aligned as declared.
inline const char *wgmmaElement(u32 address, u32 lbo, u32 sbo, bool transB,
                                bool swizzled, int n, int k) {
  u32 at;
  if (swizzled)
    at = transB ? u32((k % 8) * 128 + (k / 8) * sbo + n * 2)
                : u32((n % 8) * 128 + (n / 8) * sbo + k * 2);
  else
    at = transB ? u32((n % 8) * 2 + (n / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo)
                : u32((n % 8) * 16 + (n / 8) * sbo + (k % 8) * 2 + (k / 8) * lbo);
  const char *p = sharedPointer(address + at);
  if (!swizzled)
    return p;
  const uintptr_t bits = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<const char *>(bits ^ (((bits >> 7) & 7) << 4));
}

/// Lands one product in its accumulators' running value.
EMU_UNCHECKED inline void wgmmaLand(WgThread &t, const WgInFlight &op) {
  const int lane = emu::current & 31;
  emu::race::landWgmmaOp(op.readOfB);
  WgAccumulators *acc = nullptr;
  for (WgAccumulators &x : t.accs)
    if (x.d == op.d) acc = &x;
  float a[2][16];
  std::memcpy(a, op.a, sizeof a);
  if (op.aShared && op.nt)
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 16; ++k) {
        unsigned short av;
        std::memcpy(&av, wgmmaElement(op.aAddress, op.aLbo, op.aSbo, false,
                                      op.aSwizzled, op.aRow + 8 * h, k),
                    2);
        a[h][k] = toFloat(bf16{av});
      }
  for (int j = 0; j < op.nt; ++j)
    for (int e = 0; e < 4; ++e) {
      int n = 8 * j + 2 * (lane % 4) + e % 2;
      float sum = 0.0f;
      for (int k = 0; k < 16; ++k) {
        unsigned short bv;
        std::memcpy(&bv, wgmmaElement(op.address, op.lbo, op.sbo, op.transB,
                                      op.swizzled, n, k),
                    2);
        sum += a[e / 2][k] * toFloat(bf16{bv});
      }
      acc->value[4 * j + e] = (op.starts ? 0.0f : acc->value[4 * j + e]) + sum;
    }
  if (--acc->inFlight) return;
  for (int i = 0; i < acc->floats; ++i) {
    u32 bits;
    std::memcpy(&bits, op.d + i, 4);
    if (bits != kWgPoison)
      emu::race::misuse("accumulators written while a wgmma on them is in flight");
  }
  std::memcpy(op.d, acc->value, 4 * acc->floats);
  *acc = t.accs.back();
  t.accs.pop_back();
}
template <int N, int kCopy = 0> EMU_UNCHECKED inline void wgmmaWait() {
  static_assert(N >= 0, "a count of commit groups");
  emu::race::Busy guard; // the checker need not see the bookkeeping
  int me = emu::current;
  if (wgUncommitted[me])
    emu::race::misuse("wgmma.wait_group with wgmma not committed");
  wgFenced[me] = false; // the next batch needs its own fence
  WgThread &t = wgThreads[me];
  const long long done = t.committed - N; // groups [0, done) land
  size_t landed = 0;
  while (landed < t.ops.size() && t.ops[landed].group < done)
    wgmmaLand(t, t.ops[landed++]);
  t.ops.erase(t.ops.begin(), t.ops.begin() + landed);
}
namespace emu {
/// At the end of a block: a thread that left with a wgmma in flight.
EMU_UNCHECKED static void wgmmaAtExit(int n) {
  race::Busy guard;
  for (int me = 0; me < n; ++me) {
    WgThread &t = wgThreads[me];
    if (!t.ops.empty() || wgUncommitted[me]) {
      current = me;
      race::misuse("thread ends with a wgmma in flight");
    }
    t = WgThread();
    wgUncommitted[me] = 0;
    wgFenced[me] = false;
    wgIssued[me] = 0;
  }
  std::fill(wgMade, wgMade + 8, 0);
}
} // namespace emu
/// Puts `op` in flight: its accumulators' value so far moves aside, and
/// the registers hold the poison until the last product on them lands.
EMU_UNCHECKED inline void wgmmaInFlight(const WgInFlight &op) {
  emu::race::Busy guard; // the checker need not see the bookkeeping
  WgThread &t = wgThreads[emu::current];
  WgAccumulators *acc = nullptr;
  for (WgAccumulators &x : t.accs)
    if (x.d == op.d) acc = &x;
  if (!acc) {
    t.accs.push_back({op.d, 4 * op.nt, 0, {}});
    acc = &t.accs.back();
    std::memcpy(acc->value, op.d, 4 * acc->floats);
    for (int i = 0; i < acc->floats; ++i) std::memcpy(op.d + i, &kWgPoison, 4);
  }
  ++acc->inFlight;
  t.ops.push_back(op);
}
template <int N, typename T> inline void wgmmaFenceOperands(T (&)[N][4]) {}
inline void fenceProxyAsync() { emu::race::fenceProxy(); }

/// Hopper's bulk reductions (cp.reduce.async.bulk .add.f32, the kernels'
/// GPTC_WGMMA path), as late as the ISA allows: the source is read when
/// the issuing thread's wait_group.read (or wait_group) retires its group,
/// the sums added to global memory when its wait_group does. So a source
/// written again before the read's wait (and a barrier), or sums read
/// before the wait, give other numbers. The race checker sees the
/// source's reads at issue: its writers' fence.proxy.async and a barrier
/// must come before. A thread may not end with one in flight.
struct BulkOp {
  float *dst;
  const float *src;
  int floats;
  long long group;
  bool read;
  std::vector<float> data;
};
struct BulkThread {
  std::vector<BulkOp> ops;
  long long committed = 0;
  int uncommitted = 0;
};
static BulkThread bulkThreads[1024];
EMU_UNCHECKED inline void bulkReduceAdd(float *global, u32 shared, u32 bytes) {
  const char *src = aligned16(shared);
  globalAligned16(global);
  if (bytes == 0 || bytes % 16) {
    std::fprintf(stderr, "bulk reduction of %u bytes\n", bytes);
    std::abort();
  }
  emu::race::access(src, bytes, false, false, "a bulk reduction");
  emu::race::Busy guard;
  BulkThread &t = bulkThreads[emu::current];
  t.ops.push_back({global, reinterpret_cast<const float *>(src),
                   int(bytes / 4), t.committed, false, {}});
  ++t.uncommitted;
}
EMU_UNCHECKED inline void bulkCommit() {
  BulkThread &t = bulkThreads[emu::current];
  if (t.uncommitted) ++t.committed;
  t.uncommitted = 0;
}
/// Retires this thread's groups but the newest n: their sources read, and
/// with `sums` their sums added.
EMU_UNCHECKED inline void bulkRetire(int n, bool sums) {
  emu::race::Busy guard;
  BulkThread &t = bulkThreads[emu::current];
  const long long done = t.committed - n;
  std::vector<BulkOp> left;
  for (BulkOp &op : t.ops) {
    if (op.group < done && !op.read) {
      op.data.assign(op.src, op.src + op.floats);
      op.read = true;
    }
    if (op.group < done && sums)
      for (int i = 0; i < op.floats; ++i) op.dst[i] += op.data[i];
    else
      left.push_back(std::move(op));
  }
  t.ops = std::move(left);
}
template <int N> inline void bulkWaitRead() { bulkRetire(N, false); }
template <int N> inline void bulkWait() { bulkRetire(N, true); }
inline void fenceProxyAsyncGlobal() {}
/// Blocks run one after another in blockIdx order here, so a count that
/// the blocks before this one did not reach never will be: on a GPU the
/// wait would be for a later block (or one that never counts). The
/// kernels' counts stop at what their last waiter waits for, and a launch
/// leaves them zero: one past it was left by a launch before.
EMU_UNCHECKED inline bool countReached(const unsigned *count, unsigned n) {
  return *count >= n;
}
EMU_UNCHECKED inline void waitForCount(const unsigned *count, unsigned n,
                                       bool) {
  if (*count < n)
    emu::race::misuse("waits for a count the blocks before it did not reach",
                      "count");
  else if (*count > n)
    emu::race::misuse("finds a count past the one it waits for: left so "
                      "by a launch before",
                      "count");
}
namespace emu {
/// At the end of a block: a thread that left with a bulk reduction in
/// flight (or issued and not committed).
EMU_UNCHECKED static void bulkAtExit(int n) {
  race::Busy guard;
  for (int me = 0; me < n; ++me) {
    BulkThread &t = bulkThreads[me];
    if (!t.ops.empty() || t.uncommitted) {
      current = me;
      race::misuse("thread ends with a bulk reduction in flight",
                   "bulk copy");
    }
    t = BulkThread();
  }
}
} // namespace emu
/// The address a descriptor this thread made holds: the most recent
/// match (older entries may be another launch's, whose shared memory lay
/// elsewhere with the same 18 bits). `known` false where it made none.
EMU_UNCHECKED inline u32 wgmmaAddress(int me, unsigned long long desc,
                                      bool &known) {
  known = false;
  for (int i = 1; i <= 16 && i <= wgNext[me]; ++i)
    if (const WgDescriptor &r = wgRecent[me][(wgNext[me] - i) % 16]; r.desc == desc) {
      known = true;
      return r.address;
    }
  return 0;
}
/// wgmmaDescriptorPlus: the descriptor of the address `d` was made for,
/// `bytes` on, in its layout (one not made here stays unknown, and the
/// wgmma that uses it says so).
EMU_UNCHECKED inline unsigned long long
wgmmaDescriptorPlus(unsigned long long d, u32 bytes) {
  bool known = false;
  const u32 address = wgmmaAddress(emu::current, d, known);
  if (bytes % 16) emu::race::misuse("wgmma descriptor moved by a partial 16 bytes");
  if (!known) return (d >> 32) << 32 | u32(u32(d) + (bytes >> 4));
  return wgmmaDescriptor(address + bytes, u32(d >> 16 & 0x3fff) << 4,
                         u32(d >> 32 & 0x3fff) << 4, (d >> 62) == 1);
}
/// The misuse of a descriptor, if any: one wgmmaDescriptor did not make,
/// or with a base offset or a swizzle the kernels do not use.
EMU_UNCHECKED inline const char *wgmmaDescriptorMisuse(unsigned long long desc,
                                                       bool known) {
  if (!known) return "wgmma descriptor not made by wgmmaDescriptor";
  if ((desc >> 46) & ~(3ull << 16)) return "wgmma descriptor with a base offset";
  if ((desc >> 62) > 1) return "wgmma descriptor with a 64- or 32-byte swizzle";
  return nullptr;
}
/// The first thread of a warpgroup at a wgmma: an operand's bytes, rows
/// [0, rows) by k [0, 16) of the tile at `address`, must lie in one
/// __shared__ variable; their reads are the warpgroup's wgmma `opId`,
/// ordered as the race checker says.
EMU_UNCHECKED inline void wgmmaReads(const char *what, u32 address, u32 lbo,
                                     u32 sbo, bool trans, bool swizzled,
                                     int rows, int wg, int opId) {
  const char *lo = nullptr, *hi = reinterpret_cast<const char *>(~0ull);
  const emu::race::Region *r =
      emu::race::find(emu::race::shared, sharedPointer(address), lo, hi);
  for (int n = 0; n < rows; ++n)
    for (int k = 0; k < 16; ++k) {
      const char *p = wgmmaElement(address, lbo, sbo, trans, swizzled, n, k);
      if (!r || p < r->begin || p + 2 > r->end) {
        emu::race::misuse(what);
        return;
      }
      emu::race::access(p, 2, false, false, "wgmma");
      emu::race::Busy guard;
      const emu::race::Region *in = nullptr;
      if (emu::race::Granule *g = emu::race::find(p, &in))
        g->wgmmaOp[wg % 2] = opId;
    }
}
static unsigned long long wgADesc[1024];
/// One wgmma: A from the fragments `a` or, where a is null, from shared
/// memory through aDesc (K-major); B through desc.
template <bool kTransB, int NT>
EMU_UNCHECKED inline void wgmmaIssue(float (&d)[NT][4], const u32 (*a)[4],
                                     unsigned long long aDesc,
                                     unsigned long long desc, bool accumulate) {
  int me = emu::current, first = me & ~127, lane = me & 31, warp = me / 32 % 4;
  if (emu::threads.size() % 128)
    emu::race::misuse("wgmma in a block that is not whole warpgroups");
  wgmmaFenceCheck(me);
  if (wgFenced[me] && !wgFencedPairs[me][0].names(d, a) &&
      !wgFencedPairs[me][1].names(d, a))
    emu::race::misuse("wgmma on operands its wgmma.fence did not name");
  ++wgUncommitted[me];
  if (a)
    for (int i = 0; i < 4; ++i) wgA[me][i] = (*a)[i];
  wgB[me] = desc;
  wgADesc[me] = aDesc;
  emu::wait(emu::AtWarpgroupBarrier);
  bool known = false, aKnown = true;
  const u32 address = wgmmaAddress(me, desc, known);
  const u32 aAddress = a ? 0 : wgmmaAddress(me, aDesc, aKnown);
  WgInFlight op;
  op.d = &d[0][0];
  op.nt = NT;
  op.starts = !accumulate;
  op.transB = kTransB;
  op.lbo = u32(desc >> 16 & 0x3fff) << 4;
  op.sbo = u32(desc >> 32 & 0x3fff) << 4;
  op.swizzled = (desc >> 62) == 1;
  op.address = address;
  op.group = wgThreads[me].committed;
  // The warpgroup's threads are all at this wgmma (the barrier above):
  // the first of them here makes its record.
  const int wg = me / 128;
  if (wg >= 2)
    emu::race::misuse("wgmma in a block's third warpgroup: the race "
                      "checker follows two");
  if (wgIssued[me]++ == wgMade[wg]) {
    emu::race::Busy guard;
    wgCurrentOp[wg] = emu::race::newWgmmaOp();
    ++wgMade[wg];
  }
  op.readOfB = wgCurrentOp[wg];
  if (const char *misuse = wgmmaDescriptorMisuse(desc, known))
    emu::race::misuse(misuse);
  else if (!a)
    if (const char *aMisuse = wgmmaDescriptorMisuse(aDesc, aKnown))
      emu::race::misuse(aMisuse);
  if (!a) {
    op.aShared = true;
    op.aAddress = aAddress;
    op.aLbo = u32(aDesc >> 16 & 0x3fff) << 4;
    op.aSbo = u32(aDesc >> 32 & 0x3fff) << 4;
    op.aSwizzled = (aDesc >> 62) == 1;
    op.aRow = 16 * warp + lane / 4;
  }
  if (me == first) {
    for (int t = first; t < first + 128; ++t) {
      if (wgB[t] != desc) emu::race::misuse("the warpgroup's B descriptors differ");
      if (!a && wgADesc[t] != aDesc)
        emu::race::misuse("the warpgroup's A descriptors differ");
    }
    wgmmaReads("wgmma reads B outside the __shared__ variable it starts in",
               address, op.lbo, op.sbo, kTransB, op.swizzled, 8 * NT, wg,
               op.readOfB);
    if (!a)
      wgmmaReads("wgmma reads A outside the __shared__ variable it starts in",
                 aAddress, op.aLbo, op.aSbo, false, op.aSwizzled, 64, wg,
                 op.readOfB);
  }
  if (!known || !aKnown) op.nt = 0; // nothing to land
  if (a)
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 16; ++k) {
        int rl = lane / 4 + 8 * h;
        op.a[h][k] = half(wgA[first + 32 * warp + (rl % 8) * 4 + (k % 8) / 2][rl / 8 + 2 * (k / 8)], k % 2);
      }
  wgmmaInFlight(op);
  emu::wait(emu::AtWarpgroupBarrier);
}
template <bool kTransB, int NT>
EMU_UNCHECKED inline void wgmmaBf16(float (&d)[NT][4], const u32 (&a)[4],
                                    unsigned long long desc,
                                    bool accumulate = true) {
  wgmmaIssue<kTransB>(d, &a, 0, desc, accumulate);
}
/// A from shared memory (K-major), through its descriptor.
template <bool kTransB, int NT>
EMU_UNCHECKED inline void wgmmaBf16(float (&d)[NT][4], unsigned long long a,
                                    unsigned long long desc,
                                    bool accumulate = true) {
  wgmmaIssue<kTransB>(d, nullptr, a, desc, accumulate);
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

/// The names a declaration (what follows `__shared__ ` up to its `;`)
/// declares: `T a[2], b` has a and b.
std::vector<std::string> declaredNames(const std::string &decl) {
  std::vector<std::string> names;
  int depth = 0;
  for (size_t i = 0, piece = 0; i <= decl.size(); ++i) {
    char c = i < decl.size() ? decl[i] : ',';
    if (c == '<' || c == '[' || c == '(')
      ++depth;
    else if (c == '>' || c == ']' || c == ')')
      --depth;
    else if (c == ',' && depth == 0) {
      // The declarator's name: the last identifier before any bounds.
      std::string d = decl.substr(piece, i - piece);
      d = d.substr(0, d.find('['));
      size_t e = d.find_last_not_of(" \t");
      size_t b = d.find_last_not_of("abcdefghijklmnopqrstuvwxyz"
                                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
                                    e) + 1;
      names.push_back(d.substr(b, e + 1 - b));
      piece = i + 1;
    }
  }
  return names;
}

/// A kernel source with its memory made known to the race checker, on the
/// same lines: each `__shared__ T a[2], b;` becomes `static T a[2], b;
/// emu::race::declare(&a, sizeof a, "a"); ...` where it is declared, and
/// each module-scope `__device__ T x[n];` (scratch) is declared when the
/// library loads. (Only declarations that start a line.) The dynamic
/// shared memory, `extern __shared__ T a[];`, becomes `static T a[n];` of
/// `dynamicBytes` (the most the kernel's launches ask for), declared as that
/// many bytes.
std::string declareMemory(const std::string &source, uint32_t dynamicBytes) {
  std::string out;
  size_t done = 0;
  for (size_t line = 0; line < source.size();) {
    size_t next = source.find('\n', line);
    next = next == std::string::npos ? source.size() : next + 1;
    size_t at = source.find_first_not_of(" \t", line);
    if (at == std::string::npos)
      break;
    bool shared = source.compare(at, 11, "__shared__ ") == 0;
    bool device = source.compare(at, 11, "__device__ ") == 0;
    bool dynamic = source.compare(at, 18, "extern __shared__ ") == 0;
    size_t end = source.find(';', at);
    line = next;
    if (dynamic && end != std::string::npos) {
      std::string decl = source.substr(at + 18, end - at - 18);
      std::string name = declaredNames(decl).front();
      std::string type = decl.substr(0, decl.rfind(name));
      std::string bytes = std::to_string(dynamicBytes);
      out += source.substr(done, at - done) + "alignas(16) static " + type +
             name +
             "[(" + bytes + " + sizeof(" + type + ") - 1) / sizeof(" + type +
             ") + 1]; emu::race::declare(&" + name + ", " + bytes + ", \"" +
             name + "\");";
      done = line = end + 1;
      continue;
    }
    if (!(shared || device) || end == std::string::npos)
      continue;
    std::string decl = source.substr(at + 11, end - at - 11);
    if (device && (decl.find('(') != std::string::npos ||
                   decl.find('{') != std::string::npos))
      continue; // a function
    std::string declares;
    for (const std::string &name : declaredNames(decl))
      declares += shared ? " emu::race::declare(&" + name + ", sizeof " +
                               name + ", \"" + name + "\");"
                         : " static const bool declared_" + name +
                               " = (emu::race::declareScratch(&" + name +
                               ", sizeof " + name + ", \"" + name +
                               "\"), true);";
    out += source.substr(done, at - done) +
           (shared ? "alignas(16) static " + decl : "__device__ " + decl) +
           ";" + declares;
    done = line = end + 1;
  }
  return out + source.substr(done);
}

std::string dims(const uint32_t (&d)[3]) {
  return std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " +
         std::to_string(d[2]);
}

} // namespace

HostKernels::HostKernels(const rt::Program &p, HostTarget target) {
  std::string src = std::string("#define GPTC_WGMMA ") +
                    (target == HostTarget::Sm90a ? "1" : "0") + "\n" + kShim;
  const std::string types = cuda::kernelTemplate("types.cuh");
  const std::vector<uint32_t> dynamicBytes = rt::dynamicSharedBytes(p);
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    std::string s = p.kernels[k].source;
    size_t at = s.find(types);
    if (at == std::string::npos) {
      error = "kernel " + p.kernels[k].name + " has no emitted source";
      return;
    }
    s.replace(at, types.size(), "");
    // Unnamed, so that its names are this library's alone: g++ would make
    // a template's static locals (the dynamic shared memory) unique across
    // the process, and a later library with the same kernel would use an
    // earlier one's, which its race checker never declared.
    src += "namespace { namespace k" + std::to_string(k) + " {\n" +
           declareMemory(s, dynamicBytes[k]) + "} }\n";
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
             "  emu::race::launchOutputs(nullptr, nullptr, 0);\n"
             "  gridSize = {gx, gy, 1};\n  blockSize = {256, 1, 1};\n"
             "  blockIndex.z = 0;\n"
             "  for (blockIndex.y = 0; blockIndex.y < gy; ++blockIndex.y)\n"
             "  for (blockIndex.x = 0; blockIndex.x < gx; ++blockIndex.x)\n"
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
      std::string bytes;
      for (int b : l.outputs)
        bytes += std::to_string(p.buffers.at(b).bytes()) + ", ";
      src += "static const long long bytes_" + id + "[] = {" + bytes + "0};\n";
      src += "extern \"C\" void run_" + id + "(void **a) {\n  args = a;\n"
             "  emu::body = body_" + id + ";\n"
             "  emu::race::launchOutputs(a + " +
             std::to_string(l.inputs.size()) + ", bytes_" + id + ", " +
             std::to_string(l.outputs.size()) + ");\n"
             "  gridSize = {" + dims(l.grid) + "};\n"
             "  blockSize = {" + dims(l.block) + "};\n"
             "  for (blockIndex.z = 0; blockIndex.z < gridSize.z; ++blockIndex.z)\n"
             "  for (blockIndex.y = 0; blockIndex.y < gridSize.y; ++blockIndex.y)\n"
             "  for (blockIndex.x = 0; blockIndex.x < gridSize.x; ++blockIndex.x)\n"
             "    emu::runBlock(blockSize.x);\n}\n";
    }
  char tmpl[] = "/tmp/gptc-host-kernels-XXXXXX";
  if (!mkdtemp(tmpl)) {
    error = "cannot create a temporary directory";
    return;
  }
  dir = tmpl;
  std::ofstream(dir + "/kernels.cpp") << src;
  // -fsanitize=thread only instruments (the race checker implements the
  // hooks); linking without it keeps ThreadSanitizer's runtime out.
  std::string cxx = GPTC_HOST_CXX;
  std::string cmd = cxx +
                    " -std=c++17 -O1 -ffp-contract=off -fPIC -fsanitize=thread"
                    " -c -o " + dir + "/kernels.o " + dir + "/kernels.cpp 2> " +
                    dir + "/errors.txt && " + cxx + " -shared -o " + dir +
                    "/kernels.so " + dir + "/kernels.o 2>> " + dir +
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

const char *backwardName(AttentionBackward backward) {
  switch (backward) {
  case AttentionBackward::Split: return "split";
  case AttentionBackward::Atomic: return "atomic";
  case AttentionBackward::Atomic128: return "atomic128";
  case AttentionBackward::Wgmma: return "wgmma";
  case AttentionBackward::WgmmaOverlap: return "wgmma-overlap";
  case AttentionBackward::WgmmaBulk:
    return "wgmma-bulk";
  case AttentionBackward::WgmmaOrdered:
    return "wgmma-ordered";
  case AttentionBackward::WgmmaSplit: return "wgmma-split";
  case AttentionBackward::WgmmaSplitSs: return "wgmma-split-ss";
  case AttentionBackward::WgmmaDs: return "wgmma-ds";
  }
  return "?";
}

cuda::EmitOptions withBackward(cuda::EmitOptions opts,
                               AttentionBackward backward) {
  if (!cuda::selectAttentionAlgorithm(opts, false, backwardName(backward)))
    throw std::logic_error(std::string("no backward ") + backwardName(backward));
  return opts;
}

rt::Program &emitForHost(rt::Program &p, HostTarget target,
                         AttentionBackward backward) {
  return emitForHost(p, target, withBackward({}, backward));
}

rt::Program &emitForHost(rt::Program &p, HostTarget target,
                         cuda::EmitOptions opts) {
  opts.wgmmaAttention = target == HostTarget::Sm90a; // what sm_90a may run
  cuda::emitCUDA(p, target == HostTarget::Sm90a ? "sm_90a" : "sm_80", opts);
  return p;
}

namespace {

class HostKernelBackend : public rt::Backend {
public:
  explicit HostKernelBackend(HostTarget target) : target_(target) {}
  std::string name() const override { return "host-compiled CUDA"; }

  void load(const rt::Program &p) override {
    p_ = &p;
    kernels_ = std::make_unique<HostKernels>(p, target_);
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
  HostTarget target_;
  const rt::Program *p_ = nullptr;
  std::unique_ptr<HostKernels> kernels_;
  std::unique_ptr<uint8_t[], Free> arena_;
  std::unique_ptr<rt::Backend> gemms_;
};

} // namespace

std::unique_ptr<rt::Backend> makeHostKernelBackend(HostTarget target) {
  return std::make_unique<HostKernelBackend>(target);
}

} // namespace gptc::test
