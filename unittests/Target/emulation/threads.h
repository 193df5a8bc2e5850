//===- threads.h - blocks of threads as coroutines, race checker ----------===//
//
// Part of the host emulation that HostKernels.cpp puts in front of the
// kernels it compiles for the CPU, joined by its emulation() in the order
// threads.h, builtins.h, wgmma.h, mbarrier.h, tma.h. Not a header to
// include: each part uses what the ones before it define.
//
// The CUDA qualifiers as host C++, the built-in indices' storage, and each
// block's threads run as coroutines (ucontext): __syncthreads and the warp
// operations switch to a scheduler that resumes the threads once all live
// threads of the block (or warp) arrived, so barriers, shuffles and shared
// memory behave as on a GPU. A cluster's blocks (runCluster) run
// together, each with its own dynamic shared memory (HostKernels gives
// each rank a copy). The race checker (namespace emu::race) sees every
// access the kernels' -fsanitize=thread instrumentation reports.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <memory>
#include <string>
#include <ucontext.h>
#include <vector>
typedef long long i64;
typedef unsigned int u32;
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};
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
enum State {
  Running,
  AtBarrier,
  AtWarpBarrier,
  AtWarpgroupBarrier,
  AtMbarrier,       ///< waiting for a phase of an mbarrier (mbarrier.h)
  AtClusterBarrier, ///< barrier.cluster: every thread of the cluster's blocks
  Done
};
struct Thread {
  Dim3 index;
  Dim3 block;  ///< its block's blockIdx
  int cta = 0; ///< its block's rank in the cluster
  State state = Running;
  int mbarrier = -1;     ///< the mbarrier it waits at (mbarrier.h's index)
  unsigned parity = 0;   ///< the parity of the phase it waits for
  long long orCalls = 0; ///< __syncthreads_or calls so far
  long long warpOps = 0; ///< warp-wide operations (shuffles, mma, ...) so far
};
/// The running blocks' threads: a cluster's rank r block's are
/// threads[r·ctaThreads, (r + 1)·ctaThreads).
static std::vector<Thread> threads;
static int current;
static int ctaThreads;
/// The running thread's block's rank in its cluster, which picks its copy
/// of shared memory (HostKernels); at most kMaxCtas.
static int cta;
/// The barrier.cluster the running cluster's threads have all passed: until
/// the first, another block of the cluster may not have started on a GPU,
/// so its shared memory is not to be touched (builtins.h, mbarrier.h).
static int clusterBarriersPassed;
constexpr int kMaxCtas = 4;
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
/// The running thread's block's barrier intervals so far (its
/// __syncthreads), and each block's of the cluster.
static int epoch, ctaEpochs[kMaxCtas];
} // namespace race
static void resume(int t) {
  current = t;
  cta = threads[t].cta;
  blockIndex = threads[t].block;
  race::epoch = race::ctaEpochs[cta];
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
  if (s == AtWarpBarrier || s == AtWarpgroupBarrier)
    ++threads[current].warpOps;
  threads[current].state = s;
  yield();
}

/// Race checking within a cluster's blocks. Every access to a __shared__
/// variable, and to a launch's buffers, is seen: the plain C++ ones through
/// GCC's -fsanitize=thread instrumentation (the __tsan_* hooks below;
/// HostKernels registers each __shared__ variable where it is declared and each
/// buffer when its launch starts), and the inline-PTX helpers' (vector stores,
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
/// another reads, through lastBlockToArrive, is not checked. A cluster's
/// blocks run together, and the intervals are each block's own, so what
/// one block's thread writes another's reads only through an mbarrier or
/// barrier.cluster, which order by the clocks.)
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
  int writeSeq = 0;   // the writer's writes by then, for fence.proxy.async
  int writeClock = 0; // the writer's clock then (clocks, below)
  // The last wgmma of each warpgroup that reads it as B (wgmmaOps): a
  // block has at most 4 warpgroups.
  int wgmmaOp[4] = {-1, -1, -1, -1};
  bool pending = false; // a cp.async its writer has not waited for
  bool manyWarps = false;
};
/// A wgmma's read of B, as the warpgroup's threads land it. The device
/// reads B at some time between the instruction and the wait_group that
/// retires it, and one warp's wait need not mean another's has returned:
/// B may be written again only in a barrier interval after every thread
/// of the warpgroup landed it, or by a thread that acquired each landing
/// through mbarriers. (Kept per granule as each warpgroup's last reader:
/// a warpgroup's products land in order. The wgmma kernels are up to
/// three warpgroups a block.)
struct WgmmaOp {
  int unlanded;    // threads of the warpgroup yet to land it
  int landedEpoch; // the last barrier interval one of them did
  int first;       // the warpgroup's first thread
};
constexpr int kMaxWgmmaOps = 1 << 16; // a block's
static WgmmaOp wgmmaOps[kMaxWgmmaOps];
static int wgmmaOpCount;
/// Where each thread of an op's warpgroup landed it: its clock then.
static int (*landClocks)[128] = new int[kMaxWgmmaOps][128];
/// Order within a barrier interval, for warps that hand work to each
/// other through mbarriers (mbarrier.h) instead of __syncthreads: vector
/// clocks. clocks[t][u] is the last clock of thread u that thread t has
/// acquired (clocks[t][t], its own: it counts t's arrivals). A write of
/// u's is ordered before t's access once clocks[t][u] reached the write's
/// clock: u arrived at an mbarrier after the write, and t waited for that
/// phase (or for a later arrival of a thread that had). Untouched in a
/// block without mbarriers, where only barriers order threads.
constexpr int kMaxThreads = 1024;
static int (*clocks)[kMaxThreads] = new int[kMaxThreads][kMaxThreads]();
static int clockThreads; // the rows and columns in use
static bool clocksMoved; // an mbarrier touched them in this block
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
static long long block; // serial number of the block (or cluster) run
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
  if (first > 0 && p < rs.all[first - 1].end)
    return &rs.all[first - 1];
  if (first > 0)
    lo = std::max(lo, rs.all[first - 1].end);
  if (first < rs.size)
    hi = std::min(hi, rs.all[first].begin);
  return nullptr;
}
/// A __shared__ variable, where it is declared (each time; the first counts).
EMU_UNCHECKED static void declare(const void *at, size_t bytes,
                                  const char *name) {
  Busy guard;
  const char *p = static_cast<const char *>(at);
  for (int i = 0; i < shared.size; ++i)
    if (shared.all[i].begin == p)
      return;
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
    add(outputs, static_cast<const char *>(pointers[i]), size_t(bytes[i]), name,
        false);
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
  for (unsigned long long i = (number * 0x9e3779b97f4a7c15ull) >> 24 & slotMask;
       ; i = (i + 1) & slotMask) {
    PageSlot &s = slots[i];
    if (s.block != block) {
      s.number = number;
      s.block = block;
      if (!page && pagesUsed == int(pool.size()))
        pool.push_back(new Page);
      s.page = page ? page : pool[pagesUsed++];
      return &s;
    }
    if (s.number == number)
      return &s;
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
  std::fill(ctaEpochs, ctaEpochs + kMaxCtas, 0);
  if (clocksMoved)
    for (int t = 0; t < clockThreads; ++t)
      std::fill(clocks[t], clocks[t] + clockThreads, 0);
  for (int t = 0; t < n; ++t)
    clocks[t][t] = 1;
  clockThreads = n;
  clocksMoved = false;
  pagesUsed = 0;
  copies.assign(n, Copies());
  std::fill(writesSoFar, writesSoFar + n, 0);
  std::fill(fencedWrites, fencedWrites + n, 0);
  wgmmaOpCount = 0;
}
/// Whether this thread has acquired thread `writer`'s clock `clock`.
EMU_UNCHECKED inline bool ordered(int writer, int clock) {
  return clocks[current][writer] >= clock;
}
/// Whether thread `t` is of this thread's block, whose barrier intervals
/// `epoch` counts (another block's are no measure of order here).
EMU_UNCHECKED inline bool sameBlock(int t) { return t / ctaThreads == cta; }
/// barrier.cluster's release: every thread acquires every thread's clock
/// (each has arrived and waits), then moves its own on.
EMU_UNCHECKED static void joinClocks() {
  Busy guard;
  std::vector<int> all(clocks[0], clocks[0] + clockThreads);
  for (int t = 1; t < clockThreads; ++t)
    for (int u = 0; u < clockThreads; ++u)
      all[u] = std::max(all[u], clocks[t][u]);
  for (int t = 0; t < clockThreads; ++t) {
    std::copy(all.begin(), all.end(), clocks[t]);
    ++clocks[t][t];
  }
  clocksMoved = true;
}
/// A new wgmma of the warpgroup from thread `first` on: its id in wgmmaOps.
EMU_UNCHECKED static int newWgmmaOp(int first) {
  if (wgmmaOpCount == kMaxWgmmaOps) {
    std::fprintf(stderr, "race checker: more than %d wgmma in a block\n",
                 kMaxWgmmaOps);
    std::abort();
  }
  wgmmaOps[wgmmaOpCount] = {128, -1, first};
  return wgmmaOpCount++;
}
/// This thread's share of wgmma `id` landed.
EMU_UNCHECKED static void landWgmmaOp(int id) {
  --wgmmaOps[id].unlanded;
  wgmmaOps[id].landedEpoch = epoch;
  landClocks[id][current - wgmmaOps[id].first] = clocks[current][current];
}
/// Whether every thread of op `id`'s warpgroup landed it in an earlier
/// barrier interval, or this thread acquired each one's landing.
EMU_UNCHECKED static bool landedBefore(int id) {
  const WgmmaOp &op = wgmmaOps[id];
  if (op.unlanded > 0)
    return false;
  if (op.landedEpoch < epoch && sameBlock(op.first))
    return true;
  for (int t = 0; t < 128; ++t)
    if (!ordered(op.first + t, landClocks[id][t]))
      return false;
  return true;
}
/// A misuse of an instruction that is not a race (wgmma's rules, the bulk
/// copies'), reported the same way.
EMU_UNCHECKED static void misuse(const char *what,
                                 const char *instruction = "wgmma") {
  if (count++ == 0)
    std::snprintf(first, sizeof(first),
                  "%s misuse in block (%u, %u, %u): thread %d: %s", instruction,
                  blockIndex.x, blockIndex.y, blockIndex.z, current, what);
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
    unlanded |= op >= 0 && !landedBefore(op);
  if (unlanded)
    report("writes, with no barrier (or mbarrier) since every thread of its "
           "warpgroup waited for it, what a wgmma reads as B:",
           p, r, g);
  else if (g.readEpoch == epoch && (g.manyWarps || g.readerWarp != warp))
    report("writes, in the barrier interval another warp reads,", p, r, g);
  else if (g.writer >= 0 && g.writer != current &&
           (g.writeEpoch == epoch || !sameBlock(g.writer)) &&
           (g.writer / 32 != warp || g.writerWarpOps == ops) &&
           !ordered(g.writer, g.writeClock))
    report(sameBlock(g.writer)
               ? "writes, in the barrier interval another thread writes,"
               : "writes, with no barrier.cluster (or mbarrier) since, what "
                 "another block of the cluster writes:",
           p, r, g);
  g.writer = current;
  g.writeEpoch = epoch;
  g.writerWarpOps = ops;
  g.writeSeq = ++writesSoFar[current];
  g.writeClock = clocks[current][current];
  g.pending = async;
  g.visibleFrom = epoch + 1;
  if (async)
    copies[current].pending.push_back({&g, copies[current].committed});
}
/// (`track`: kept as this interval's read, for the writes after it; a
/// wgmma's reads are followed as its op instead, as they land.)
EMU_UNCHECKED static void read(const char *p, const Region &r, Granule &g,
                               bool track = true) {
  const int warp = current / 32;
  if (g.writer < 0) {
    // Global memory was written before the launch.
    if (r.granules)
      report("reads, never written,", p, r, g);
  } else if (g.pending) {
    report("reads a cp.async its writer has not waited for:", p, r, g);
  } else if (g.writer != current &&
             (epoch < g.visibleFrom || !sameBlock(g.writer)) &&
             !ordered(g.writer, g.writeClock)) {
    if (!sameBlock(g.writer))
      report("reads, with no barrier.cluster (or mbarrier) since, what "
             "another block of the cluster writes:",
             p, r, g);
    else if (g.writer / 32 != warp)
      report("reads, in the barrier interval another warp writes,", p, r, g);
    else if (g.writerWarpOps == threads[current].warpOps)
      report("reads, with no warp-wide operation since, what another lane "
             "of its warp writes:",
             p, r, g);
  }
  if (!track)
    return;
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
EMU_UNCHECKED __attribute__((always_inline)) inline bool
candidate(const void *at) {
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
  const bool wgmmaRead = asyncReader && std::strcmp(asyncReader, "wgmma") == 0;
  const char *p = static_cast<const char *>(at);
  const char *from = p - (reinterpret_cast<unsigned long long>(p) % 2);
  for (const char *q = from; q < p + bytes; q += 2) {
    const Region *r = nullptr;
    if (Granule *g = find(q, &r)) {
      if (isWrite) {
        write(q, *r, *g, async);
      } else {
        read(q, *r, *g, !wgmmaRead);
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
      g->writeClock = clocks[current][current];
    }
  }
  cp.pending = left;
}
} // namespace race
/// Releases threads waiting at a barrier that every live thread reached.
static bool release(int first, int count, State s) {
  bool any = false;
  for (int t = first; t < first + count; ++t) {
    if (threads[t].state == Running || threads[t].state == AtMbarrier)
      return false;
    any |= threads[t].state == s;
  }
  if (!any)
    return false;
  for (int t = first; t < first + count; ++t)
    if (threads[t].state == s)
      threads[t].state = Running;
  return true;
}
static void wgmmaAtExit(int n);
static void bulkAtExit(int n);
static void mbarriersAtStart();
static bool mbarrierPhaseDone(int t);
static void mbarrierDeadlock(int t);
/// Runs the blocks of a cluster of `ctas` along x, from blockIndex on
/// (restored after), `n` threads each: their threads together, so that
/// each one's waits on the others (barrier.cluster, mbarriers) end. A
/// block alone is a cluster of one.
static void runCluster(int n, int ctas) {
  const Dim3 first = blockIndex;
  const int all = n * ctas;
  // (Whole warps a block, so that no warp's threads straddle two blocks;
  // a wgmma's warpgroup needs 128·i, as on a GPU.)
  if (ctas < 1 || ctas > kMaxCtas || (ctas > 1 && n % 32)) {
    std::fprintf(stderr,
                 "emulation: clusters of 1 to %d blocks of 32·i threads\n",
                 kMaxCtas);
    std::abort();
  }
  threads.assign(all, Thread());
  ctaThreads = n;
  std::memset(orSlots, 0, sizeof orSlots);
  race::reset(all);
  clusterBarriersPassed = 0;
  mbarriersAtStart();
  while (int(coroutines.size()) < all)
    coroutines.push_back(newCoroutine());
  for (int t = 0; t < all; ++t) {
    threads[t].index.x = t % n;
    threads[t].cta = t / n;
    threads[t].block = first;
    threads[t].block.x += t / n;
  }
  for (;;) {
    for (int t = 0; t < all; ++t)
      if (threads[t].state == Running)
        resume(t);
    bool progress = false;
    for (int t = 0; t < all; ++t)
      if (threads[t].state == AtMbarrier && mbarrierPhaseDone(t)) {
        threads[t].state = Running;
        progress = true;
      }
    for (int c = 0; c < ctas; ++c) {
      for (int w = 0; w < n; w += 32)
        progress |= release(c * n + w, std::min(32, n - w), AtWarpBarrier);
      for (int w = 0; w < n; w += 128)
        progress |=
            release(c * n + w, std::min(128, n - w), AtWarpgroupBarrier);
      if (release(c * n, n, AtBarrier)) {
        ++race::ctaEpochs[c];
        progress = true;
      }
    }
    if (release(0, all, AtClusterBarrier)) {
      ++clusterBarriersPassed;
      race::joinClocks();
      for (int c = 0; c < ctas; ++c)
        ++race::ctaEpochs[c];
      progress = true;
    }
    if (progress)
      continue;
    // Threads waiting for a phase no arrival will complete: reported (a
    // misuse), and let go, so that the block ends.
    for (int t = 0; t < all; ++t)
      if (threads[t].state == AtMbarrier) {
        mbarrierDeadlock(t);
        threads[t].state = Running;
        progress = true;
      }
    if (progress)
      continue;
    for (int t = 0; t < all; ++t)
      if (threads[t].state != Done) {
        std::fprintf(stderr, "emulated block deadlocked\n");
        std::abort();
      }
    wgmmaAtExit(all);
    bulkAtExit(all);
    blockIndex = first;
    return;
  }
}
static void runBlock(int n) { runCluster(n, 1); }
} // namespace emu
