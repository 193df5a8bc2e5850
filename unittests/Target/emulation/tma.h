//===- tma.h - tensor maps and tensor copies on the host ------------------===//
//
// Part of the host emulation that HostKernels.cpp puts in front of the
// kernels it compiles for the CPU, joined by its emulation() in the order
// threads.h, builtins.h, wgmma.h, mbarrier.h, tma.h. Not a header to
// include: each part uses what the ones before it define.
//
// Hopper's tensor copies (types.cuh: TensorMap, tensorMapAcquire,
// tensorCopy2d). On a GPU the driver encodes a tensor map in 128 opaque
// bytes; here gptcEmuEncodeTensorMap writes the fields the copies read in
// the emulation's own layout, checked as cuTensorMapEncodeTiled checks
// them, and HostKernels::tensorMap calls it. A copy lands at once, with
// the 128-byte swizzle (a box that leaves its tensor is reported), and
// counts its bytes at its mbarrier; the race checker keeps its granules
// in flight until that phase completes (mbarrier.h), so that a read
// before it, or a copy into a stage a wgmma may still read, is reported.
// A multicast copy is one copy for each block it names.
//
//===----------------------------------------------------------------------===//

struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

namespace emu {
/// The emulation's layout of a 2-D bf16 tensor map with the 128-byte
/// swizzle: opaque[0] this tag, then the tensor's address, its inner
/// (contiguous) and outer extents in elements, the bytes from a row to
/// the next, and the box's inner and outer extents.
constexpr unsigned long long kTensorMapTag = 0x676d617074637074ull;
struct TensorMapFields {
  unsigned long long tag, base, inner, outer, rowBytes, boxInner, boxOuter;
};
EMU_UNCHECKED inline const TensorMapFields *
tensorMapFields(const TensorMap *map, const char *op) {
  auto *f = reinterpret_cast<const TensorMapFields *>(map);
  if (!map || reinterpret_cast<unsigned long long>(map) % 64 != 0 ||
      f->tag != kTensorMapTag) {
    char what[96];
    std::snprintf(what, sizeof what, "%s through no encoded tensor map", op);
    race::misuse(what, "tensor copy");
    return nullptr;
  }
  return f;
}
} // namespace emu

/// Encodes `map` as cuTensorMapEncodeTiled would for a bf16 tensor of
/// `outer` rows of `inner` elements, `rowBytes` apart, in boxes of
/// boxInner x boxOuter with the 128-byte swizzle; 0 if the driver would
/// take it, else 1 (the driver's CUDA_ERROR_INVALID_VALUE). The emulation
/// copies box rows of 128 bytes alone (boxInner 64), all gptc asks for.
extern "C" int gptcEmuEncodeTensorMap(TensorMap *map, const void *base,
                                      unsigned long long inner,
                                      unsigned long long outer,
                                      unsigned long long rowBytes,
                                      unsigned boxInner, unsigned boxOuter) {
  const auto address = reinterpret_cast<unsigned long long>(base);
  if (reinterpret_cast<unsigned long long>(map) % 64 != 0 || address % 16 ||
      rowBytes % 16 || rowBytes < 2 * inner || inner == 0 || outer == 0 ||
      boxOuter == 0 || boxOuter > 256 ||
      2 * boxInner != 128) // gptc's boxes: rows of the swizzle's 128 bytes
    return 1;
  std::memset(map, 0, sizeof *map);
  emu::TensorMapFields f{emu::kTensorMapTag, address,  inner,   outer,
                         rowBytes,           boxInner, boxOuter};
  std::memcpy(map, &f, sizeof f);
  return 0;
}

/// fence.proxy.tensormap: nothing to order here, but the map must be one.
EMU_UNCHECKED inline void tensorMapAcquire(const TensorMap *map) {
  emu::race::Busy guard;
  emu::tensorMapFields(map, "an acquire");
}

/// The box at element (x, y) into shared memory at `to`: box row r at `to`
/// + 128r, its 16-byte chunk c at chunk c ^ (r % 8) of the row (the
/// 128-byte swizzle, which needs `to` 1,024-byte aligned). Its bytes
/// complete at *bar. A box that leaves the tensor is reported: the device
/// would fill the rest with zeros, but gptc's kernels never ask for one,
/// so it means a coordinate or a map is wrong.
EMU_UNCHECKED inline void tensorCopy2d(u32 to, const TensorMap *map, int x,
                                       int y, unsigned long long *bar) {
  const emu::TensorMapFields *f;
  emu::Mbarrier *b;
  {
    emu::race::Busy guard;
    f = emu::tensorMapFields(map, "a copy");
    b = emu::mbarrierAt(bar, "a tensor copy's complete_tx");
    if (!f || !b)
      return;
    emu::mbarrierSeesInit(*b, "a tensor copy's complete_tx");
    // (As wgmma.h swizzles: by the host address, the variables being host
    // statics aligned as declared.)
    if (reinterpret_cast<unsigned long long>(sharedPointer(to)) % 1024) {
      emu::race::misuse("a copy with the 128-byte swizzle into shared memory "
                        "not 1,024-byte aligned",
                        "tensor copy");
      return;
    }
    if (x < 0 || y < 0 || (unsigned long long)x + 64 > f->inner ||
        (unsigned long long)y + f->boxOuter > f->outer) {
      char what[128];
      std::snprintf(what, sizeof what,
                    "a box of 64 x %llu at (%d, %d) leaves the %llu x %llu "
                    "tensor",
                    f->boxOuter, x, y, f->inner, f->outer);
      emu::race::misuse(what, "tensor copy");
      return;
    }
  }
  char *dst = sharedPointer(to);
  const size_t bytes = size_t(f->boxOuter) * 128;
  // The writes, checked and kept in flight until the phase completes.
  const size_t before = emu::race::copies[emu::current].pending.size();
  emu::race::access(dst, bytes, true, /*async=*/true);
  {
    emu::race::Busy guard;
    auto &pending = emu::race::copies[emu::current].pending;
    for (size_t i = before; i < pending.size(); ++i)
      b->landing.push_back(pending[i].granule);
    pending.resize(before);
  }
  const char *base = reinterpret_cast<const char *>(f->base);
  for (unsigned long long r = 0; r < f->boxOuter; ++r)
    for (unsigned long long c = 0; c < 8; ++c)
      std::memcpy(dst + 128 * r + 16 * (c ^ (r % 8)),
                  base + (y + r) * f->rowBytes + 2 * (x + 8 * c), 16);
  emu::race::Busy guard;
  b->tx -= (long long)bytes;
  emu::mbarrierMayComplete(*b);
}

/// The same box into `to` of each block of the cluster whose rank's bit
/// `blocks` sets (.multicast::cluster), its bytes counted at that block's
/// mbarrier at bar's address: one copy for each.
EMU_UNCHECKED inline void tensorCopy2dMulticast(u32 to, const TensorMap *map,
                                                int x, int y,
                                                unsigned long long *bar,
                                                unsigned short blocks) {
  if (blocks == 0 || blocks >> (emu::threads.size() / emu::ctaThreads)) {
    emu::race::Busy guard;
    emu::race::misuse("a multicast to no block, or to a rank outside the "
                      "cluster",
                      "tensor copy");
    return;
  }
  for (u32 rank = 0; blocks >> rank; ++rank)
    if (blocks >> rank & 1)
      tensorCopy2d(clusterSharedAddress(to, rank), map, x, y,
                   reinterpret_cast<unsigned long long *>(sharedPointer(
                       clusterSharedAddress(sharedAddress(bar), rank))));
}
