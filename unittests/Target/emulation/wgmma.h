//===- wgmma.h - warpgroup MMA and bulk copies on the host ----------------===//
//
// Part of the host emulation that HostKernels.cpp puts in front of the
// kernels it compiles for the CPU, joined by its emulation() in the order
// threads.h, builtins.h, wgmma.h, mbarrier.h, tma.h. Not a header to
// include: each part uses what the ones before it define.
//
// sm_90a's instructions for the kernels' GPTC_WGMMA path: wgmma (its
// fences, commit groups and waits, B and A read through descriptors),
// fence.proxy.async, and the bulk reductions, each landing as late as the
// ISA allows, with the misuses the ISA forbids reported.
//
//===----------------------------------------------------------------------===//

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
struct WgDescriptor {
  unsigned long long desc;
  u32 address;
};
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
  // A from shared memory (K-major, or M-major with aTrans), read as it
  // lands: this thread's rows aRow and aRow + 8.
  bool aShared = false, aTrans = false;
  u32 aAddress = 0, aLbo = 0, aSbo = 0;
  bool aSwizzled = false;
  int aRow = 0;
};
/// Accumulators in flight: their value as the products land (the
/// registers themselves hold kWgPoison until the last one has).
struct WgAccumulators {
  float *d;
  int floats, inFlight;
  float value[128]; // up to m64n256's 128 a thread
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
template <int N> EMU_UNCHECKED inline void wgmmaFence(float (&d)[N][4]) {
  int me = emu::current;
  wgFenced[me] = true;
  wgFencedPairs[me][0] = {d};
  wgFencedPairs[me][1] = {};
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
  if (wgUncommitted[me])
    ++wgThreads[me].committed;
  wgUncommitted[me] = 0;
}
/// Where B's element (n, k) of a wgmma lies, as the device decodes the
/// descriptor. Without swizzling: 8 x 8 core matrices, (n%8)·16 + (n/8)·SBO
/// + (k%8)·2 + (k/8)·LBO bytes K-major, (n%8)·2 + (n/8)·SBO + (k%8)·16 +
/// (k/8)·LBO N-major. SWIZZLE_128B: rows of 128 bytes, (n%8)·128 +
/// (n/8)·SBO + k·2 K-major, (k%8)·128 + (k/8)·SBO + (n%64)·2 + (n/64)·LBO
/// N-major (LBO from one atom of 64 columns to the next: the PTX ISA's
/// canonical MN-major layout), then the address's bits 4-6 XORed with its bits
/// 7-9 (the 16-byte chunk with the row within 8), as the device does it to the
/// shared address: here to the host address, the __shared__ variables
/// being host statics aligned as declared.
inline const char *wgmmaElement(u32 address, u32 lbo, u32 sbo, bool transB,
                                bool swizzled, int n, int k) {
  u32 at;
  if (swizzled)
    at =
        transB
            ? u32((k % 8) * 128 + (k / 8) * sbo + (n % 64) * 2 + (n / 64) * lbo)
            : u32((n % 8) * 128 + (n / 8) * sbo + k * 2);
  else
    at = transB
             ? u32((n % 8) * 2 + (n / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo)
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
    if (x.d == op.d)
      acc = &x;
  float a[2][16];
  std::memcpy(a, op.a, sizeof a);
  if (op.aShared && op.nt)
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 16; ++k) {
        unsigned short av;
        std::memcpy(&av,
                    wgmmaElement(op.aAddress, op.aLbo, op.aSbo, op.aTrans,
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
        std::memcpy(&bv,
                    wgmmaElement(op.address, op.lbo, op.sbo, op.transB,
                                 op.swizzled, n, k),
                    2);
        sum += a[e / 2][k] * toFloat(bf16{bv});
      }
      acc->value[4 * j + e] = (op.starts ? 0.0f : acc->value[4 * j + e]) + sum;
    }
  if (--acc->inFlight)
    return;
  for (int i = 0; i < acc->floats; ++i) {
    u32 bits;
    std::memcpy(&bits, op.d + i, 4);
    if (bits != kWgPoison)
      emu::race::misuse(
          "accumulators written while a wgmma on them is in flight");
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
    if (x.d == op.d)
      acc = &x;
  if (!acc) {
    if (op.nt > 32)
      emu::race::misuse("wgmma with more than 256 columns");
    t.accs.push_back({op.d, 4 * op.nt, 0, {}});
    acc = &t.accs.back();
    std::memcpy(acc->value, op.d, 4 * acc->floats);
    for (int i = 0; i < acc->floats; ++i)
      std::memcpy(op.d + i, &kWgPoison, 4);
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
    std::fprintf(stderr, "a bulk reduction of %u bytes\n", bytes);
    std::abort();
  }
  emu::race::access(src, bytes, false, false, "a bulk reduction");
  emu::race::Busy guard;
  BulkThread &t = bulkThreads[emu::current];
  t.ops.push_back({global,
                   reinterpret_cast<const float *>(src),
                   int(bytes / 4),
                   t.committed,
                   false,
                   {}});
  ++t.uncommitted;
}
EMU_UNCHECKED inline void bulkCommit() {
  BulkThread &t = bulkThreads[emu::current];
  if (t.uncommitted)
    ++t.committed;
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
      for (int i = 0; i < op.floats; ++i)
        op.dst[i] += op.data[i];
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
      race::misuse("thread ends with a bulk reduction in flight", "bulk copy");
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
    if (const WgDescriptor &r = wgRecent[me][(wgNext[me] - i) % 16];
        r.desc == desc) {
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
  if (bytes % 16)
    emu::race::misuse("wgmma descriptor moved by a partial 16 bytes");
  if (!known)
    return (d >> 32) << 32 | u32(u32(d) + (bytes >> 4));
  return wgmmaDescriptor(address + bytes, u32(d >> 16 & 0x3fff) << 4,
                         u32(d >> 32 & 0x3fff) << 4, (d >> 62) == 1);
}
/// The misuse of a descriptor, if any: one wgmmaDescriptor did not make,
/// or with a base offset or a swizzle the kernels do not use.
EMU_UNCHECKED inline const char *wgmmaDescriptorMisuse(unsigned long long desc,
                                                       bool known) {
  if (!known)
    return "wgmma descriptor not made by wgmmaDescriptor";
  if ((desc >> 46) & ~(3ull << 16))
    return "wgmma descriptor with a base offset";
  if ((desc >> 62) > 1)
    return "wgmma descriptor with a 64- or 32-byte swizzle";
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
        g->wgmmaOp[wg] = opId;
    }
}
static unsigned long long wgADesc[1024];
/// One wgmma: A from the fragments `a` or, where a is null, from shared
/// memory through aDesc (K-major, or M-major with kTransA); B through desc.
template <bool kTransB, bool kTransA, int NT>
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
    for (int i = 0; i < 4; ++i)
      wgA[me][i] = (*a)[i];
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
  // (wg counts the cluster's warpgroups; a granule of a block's shared
  // memory keeps the last read of each of that block's own, `local`.)
  const int wg = me / 128, local = me % emu::ctaThreads / 128;
  if (local >= 4)
    emu::race::misuse("wgmma in a block's fifth warpgroup: the race "
                      "checker follows four");
  if (wgIssued[me]++ == wgMade[wg]) {
    emu::race::Busy guard;
    wgCurrentOp[wg] = emu::race::newWgmmaOp(first);
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
    op.aTrans = kTransA;
    op.aAddress = aAddress;
    op.aLbo = u32(aDesc >> 16 & 0x3fff) << 4;
    op.aSbo = u32(aDesc >> 32 & 0x3fff) << 4;
    op.aSwizzled = (aDesc >> 62) == 1;
    op.aRow = 16 * warp + lane / 4;
  }
  if (me == first) {
    for (int t = first; t < first + 128; ++t) {
      if (wgB[t] != desc)
        emu::race::misuse("the warpgroup's B descriptors differ");
      if (!a && wgADesc[t] != aDesc)
        emu::race::misuse("the warpgroup's A descriptors differ");
    }
    wgmmaReads("wgmma reads B outside the __shared__ variable it starts in",
               address, op.lbo, op.sbo, kTransB, op.swizzled, 8 * NT, local,
               op.readOfB);
    if (!a)
      wgmmaReads("wgmma reads A outside the __shared__ variable it starts in",
                 aAddress, op.aLbo, op.aSbo, kTransA, op.aSwizzled, 64, local,
                 op.readOfB);
  }
  if (!known || !aKnown)
    op.nt = 0; // nothing to land
  if (a)
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 16; ++k) {
        int rl = lane / 4 + 8 * h;
        op.a[h][k] = half(wgA[first + 32 * warp + (rl % 8) * 4 + (k % 8) / 2]
                             [rl / 8 + 2 * (k / 8)],
                          k % 2);
      }
  wgmmaInFlight(op);
  emu::wait(emu::AtWarpgroupBarrier);
}
template <bool kTransB, int NT>
EMU_UNCHECKED inline void wgmmaBf16(float (&d)[NT][4], const u32 (&a)[4],
                                    unsigned long long desc,
                                    bool accumulate = true) {
  wgmmaIssue<kTransB, false>(d, &a, 0, desc, accumulate);
}
/// A from shared memory (K-major, or M-major with kTransA), through its
/// descriptor.
template <bool kTransB, bool kTransA = false, int NT>
EMU_UNCHECKED inline void wgmmaBf16(float (&d)[NT][4], unsigned long long a,
                                    unsigned long long desc,
                                    bool accumulate = true) {
  wgmmaIssue<kTransB, kTransA>(d, nullptr, a, desc, accumulate);
}
