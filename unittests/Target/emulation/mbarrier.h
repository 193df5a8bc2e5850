//===- mbarrier.h - shared-memory barriers and register hand-offs ---------===//
//
// Part of the host emulation that HostKernels.cpp puts in front of the
// kernels it compiles for the CPU, joined by its emulation() in the order
// threads.h, builtins.h, wgmma.h, mbarrier.h, tma.h. Not a header to
// include: each part uses what the ones before it define.
//
// What warp-specialized kernels hand work over with (types.cuh):
// mbarrierInit, mbarrierArrive and mbarrierWait, as the PTX ISA defines
// mbarrier's phases, with the transaction count that tensor copies
// complete (mbarrierArriveExpectTx; tma.h lands the copies); and setmaxnreg
// (raiseRegisters, lowerRegisters), which has nothing to do here but be
// warpgroup-wide. A waiting thread sleeps until the phase it names completes;
// an arrival releases what its thread did before it to every thread that then
// waits for its phase (the race checker's clocks, threads.h). A wait no arrival
// can end is reported, and let go, so that the block still ends. In a
// cluster, a thread may arrive at another block's mbarrier
// (mbarrierArriveRemote, at its clusterSharedAddress), and tensor copies
// multicast to the cluster's blocks complete each one's (tma.h).
//
//===----------------------------------------------------------------------===//

namespace emu {
/// One mbarrier of the block: where the kernel keeps it, its arrival
/// count, the arrivals its current phase still needs, the bytes of copies
/// it still expects (its transaction count: up by an arrival's expect_tx,
/// down as copies land), the phases it completed, and the clocks its
/// arrivals released: of the current phase so far, and of the last
/// completed one. `landing`: the granules tensor copies wrote in the
/// current phase, in flight (race::Granule::pending) until it completes.
struct Mbarrier {
  const void *at = nullptr;
  int expected = 0, pending = 0;
  long long tx = 0;
  std::vector<race::Granule *> landing;
  long long phases = 0;
  int initThread = 0, initEpoch = 0, initClock = 0; // who initialised it
  int cta = 0; // the rank of the block whose shared memory holds it

  int released[race::kMaxThreads], done[race::kMaxThreads];
};
constexpr int kMaxMbarriers = 64; // a cluster's
static Mbarrier *mbarriers = new Mbarrier[kMaxMbarriers];
static int mbarrierCount;

EMU_UNCHECKED static void mbarriersAtStart() { mbarrierCount = 0; }
/// The block's mbarrier at `at`; null (reported) if none was initialised
/// there.
EMU_UNCHECKED inline Mbarrier *mbarrierAt(const void *at, const char *op) {
  for (int i = 0; i < mbarrierCount; ++i)
    if (mbarriers[i].at == at)
      return &mbarriers[i];
  char what[96];
  std::snprintf(what, sizeof what, "%s of an mbarrier not initialised", op);
  race::misuse(what, "mbarrier");
  return nullptr;
}
/// An arrival or wait must see the init: by its thread, after a barrier,
/// or through another mbarrier (from another block of the cluster: after
/// barrier.cluster, or through an mbarrier).
EMU_UNCHECKED inline void mbarrierSeesInit(const Mbarrier &b, const char *op) {
  if (current != b.initThread &&
      (race::epoch == b.initEpoch || !race::sameBlock(b.initThread)) &&
      !race::ordered(b.initThread, b.initClock)) {
    char what[160];
    if (race::sameBlock(b.initThread))
      std::snprintf(what, sizeof what,
                    "%s in the barrier interval of the mbarrier's init", op);
    else
      std::snprintf(what, sizeof what,
                    "%s from another block of the cluster, with no "
                    "barrier.cluster (or mbarrier) since the mbarrier's init",
                    op);
    race::misuse(what, "mbarrier");
  }
}
/// Whether the phase of `parity` waited for has completed: the current
/// phase is of the other parity (so the first phase, 0, has not; a wait
/// for parity 1 returns at once).
EMU_UNCHECKED inline bool mbarrierPassed(const Mbarrier &b, unsigned parity) {
  return unsigned(b.phases & 1) != parity;
}
/// The last completed phase's releases become this thread's.
EMU_UNCHECKED inline void mbarrierAcquire(const Mbarrier &b) {
  if (b.phases == 0)
    return;
  int *mine = race::clocks[current];
  for (int t = 0; t < race::clockThreads; ++t)
    mine[t] = std::max(mine[t], b.done[t]);
}
/// Completes the current phase once its arrivals are in and the bytes it
/// expects landed: the copies' granules become written (to wgmma, the
/// async proxy, with no fence needed) by their issuer at the clock it
/// issued them, which the phase releases.
EMU_UNCHECKED inline void mbarrierMayComplete(Mbarrier &b) {
  if (b.pending > 0 || b.tx > 0)
    return;
  if (b.tx < 0)
    race::misuse("copies landed more bytes than the phase expects", "mbarrier");
  for (race::Granule *g : b.landing)
    if (g->pending) {
      g->pending = false;
      g->visibleFrom = race::ctaEpochs[b.cta] + 1;
      g->writeSeq = 0;
      b.released[g->writer] = std::max(b.released[g->writer], g->writeClock);
    }
  b.landing.clear();
  b.tx = 0;
  ++b.phases;
  b.pending = b.expected;
  std::copy(b.released, b.released + race::clockThreads, b.done);
  std::fill(b.released, b.released + race::clockThreads, 0);
}
EMU_UNCHECKED static bool mbarrierPhaseDone(int t) {
  return mbarrierPassed(mbarriers[threads[t].mbarrier], threads[t].parity);
}
EMU_UNCHECKED static void mbarrierDeadlock(int t) {
  race::Busy guard;
  const int was = current;
  const Dim3 block = blockIndex;
  current = t;
  blockIndex = threads[t].block;
  race::misuse("waits for a phase that no arrival completes (the block "
               "deadlocks)",
               "mbarrier");
  current = was;
  blockIndex = block;
}
} // namespace emu

EMU_UNCHECKED inline void mbarrierInit(unsigned long long *bar, u32 count) {
  emu::race::Busy guard;
  emu::race::clocksMoved = true;
  emu::Mbarrier *b = nullptr;
  for (int i = 0; i < emu::mbarrierCount; ++i)
    if (emu::mbarriers[i].at == bar)
      b = &emu::mbarriers[i];
  if (!b) {
    if (emu::mbarrierCount == emu::kMaxMbarriers) {
      std::fprintf(stderr, "emulation: more than %d mbarriers in a block\n",
                   emu::kMaxMbarriers);
      std::abort();
    }
    b = &emu::mbarriers[emu::mbarrierCount++];
  }
  if (count == 0 || count >= (1u << 20))
    emu::race::misuse("init with a count of 0 or past 2^20 - 1", "mbarrier");
  b->at = bar;
  b->expected = b->pending = int(count);
  b->tx = 0;
  b->landing.clear();
  b->phases = 0;
  b->initThread = emu::current;
  b->cta = emu::cta;
  b->initEpoch = emu::race::epoch;
  b->initClock = emu::race::clocks[emu::current][emu::current];
  std::fill(b->released, b->released + emu::race::clockThreads, 0);
  std::fill(b->done, b->done + emu::race::clockThreads, 0);
}
/// One arrival, expecting `bytes` more of copies in the phase: this
/// thread's clock released to the phase, and the phase completed by the
/// last arrival it needs once its bytes landed.
EMU_UNCHECKED inline void mbarrierArriveExpecting(unsigned long long *bar,
                                                  long long bytes) {
  emu::race::Busy guard;
  emu::Mbarrier *b = emu::mbarrierAt(bar, "arrive");
  if (!b)
    return;
  emu::mbarrierSeesInit(*b, "arrive");
  int *mine = emu::race::clocks[emu::current];
  for (int t = 0; t < emu::race::clockThreads; ++t)
    b->released[t] = std::max(b->released[t], mine[t]);
  ++mine[emu::current];
  b->tx += bytes;
  --b->pending;
  emu::mbarrierMayComplete(*b);
}
inline void mbarrierArrive(unsigned long long *bar) {
  mbarrierArriveExpecting(bar, 0);
}
/// One arrival at the mbarrier at `bar`, a clusterSharedAddress: in this
/// block or another of the cluster (release at cluster scope).
inline void mbarrierArriveRemote(u32 bar) {
  emu::expectStartedOwner(bar, "an arrival at another block's mbarrier "
                               "before a barrier.cluster (it may not have "
                               "started)");
  mbarrierArriveExpecting(
      reinterpret_cast<unsigned long long *>(sharedPointer(bar)), 0);
}
inline void mbarrierArriveExpectTx(unsigned long long *bar, u32 bytes) {
  if (bytes >= (1u << 20))
    emu::race::misuse("expect_tx of 2^20 bytes or more", "mbarrier");
  mbarrierArriveExpecting(bar, bytes);
}
/// Returns once the phase of `parity` completed (try_wait in a loop).
EMU_UNCHECKED inline void mbarrierWait(unsigned long long *bar, u32 parity) {
  emu::Mbarrier *b;
  {
    emu::race::Busy guard;
    b = emu::mbarrierAt(bar, "wait");
    if (!b)
      return;
    emu::mbarrierSeesInit(*b, "wait");
    if (parity > 1)
      emu::race::misuse("wait for a parity other than 0 or 1", "mbarrier");
  }
  if (!emu::mbarrierPassed(*b, parity)) {
    emu::threads[emu::current].mbarrier = int(b - emu::mbarriers);
    emu::threads[emu::current].parity = parity;
    emu::wait(emu::AtMbarrier);
    if (!emu::mbarrierPassed(*b, parity))
      return; // let go from a deadlock: nothing acquired
  }
  emu::race::Busy guard;
  emu::mbarrierAcquire(*b);
}
/// The same, acquiring at cluster scope what arrivals from other blocks
/// released (here all acquires are).
inline void mbarrierWaitCluster(unsigned long long *bar, u32 parity) {
  mbarrierWait(bar, parity);
}
/// setmaxnreg: the warpgroup's threads all execute it (.sync.aligned).
template <int N> EMU_UNCHECKED inline void raiseRegisters() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
  emu::wait(emu::AtWarpgroupBarrier);
}
template <int N> EMU_UNCHECKED inline void lowerRegisters() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
  emu::wait(emu::AtWarpgroupBarrier);
}
