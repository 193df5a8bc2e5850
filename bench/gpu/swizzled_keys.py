#!/usr/bin/env python3
"""gptc's wgmma forward attention with k's tiles 128-byte swizzled: a bench
experiment, not one of gptc's kernels.

gptc's warpgroup-MMA forward reads k (the scores product's B, keys along N)
from wg::CoreTile: 8 x 8 core matrices of 128 contiguous bytes, without
swizzling. CUTLASS and FlashAttention-3 lay such a tile out in rows of 128
bytes with SWIZZLE_128B: 16-byte chunk q of row r at chunk q ^ (r % 8), the
tile 1,024-byte aligned, read through a descriptor of layout type 1 (the
start moved 32 bytes a k16 step, 1,024 bytes from one group of 8 rows to
the next). bench/gpu/wgmma_probe times the two layouts on the tensor cores
alone; this makes the whole forward kernel with the swizzled one, so the
same GPU run says what it is worth there (attention_bench's "wgmma-sw",
checked against the default forward's out and lse).

  swizzled_keys.py [--values] IN.cu OUT.cu

--values swizzles v's tiles too, read N-major by the output product (at
D = 64 one swizzle atom spans N; 1,024 bytes a group of 8 keys along K):
attention_bench's "wgmma-sw2". IN is a dumped flash_attention_qkv kernel compiled with
--attention-forward=wgmma at D=64 (gptc compile --dump-kernels). v's tiles
and every other kernel are left as they are. Exits non-zero, naming what it
did not find, on any other source.
"""

import re
import sys

SWIZZLED_KEYS = r'''
/// (bench/gpu/swizzled_keys.py: k's tile in rows of 128 bytes, 16-byte
/// chunk q of row r at chunk q ^ (r % 8), SWIZZLE_128B's layout, 1,024-byte
/// aligned; read as a K-major B, keys along N.)
template <int D> struct SwizzledKeys {
  static_assert(D == 64, "rows of 128 bytes");
  alignas(1024) unsigned short data[64 * D];
  /// Rows [row0, row0 + 64) from `src` (rows `stride` apart), 16 bytes a
  /// thread at a time with cp.async; 8 threads a row.
  template <int kThreads, bool kUnrolled = true>
  __device__ __forceinline__ void loadAsync(const bf16 *src, i64 stride,
                                            i64 row0) {
    constexpr int kChunks = 64 * D / 8;
    static_assert(kChunks % kThreads == 0, "whole rounds");
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i) {
      const int c = threadIdx.x + i * kThreads, r = c / 8, q = c % 8;
      copyAsync16(sharedAddress(data) + r * 128 + ((q ^ (r % 8)) * 16),
                  src + (row0 + r) * stride + q * 8);
    }
  }
  /// B = this tile's rows from n0 on (a multiple of 8) as N, columns
  /// [16kc, 16kc + 16) as K.
  __device__ __forceinline__ unsigned long long keysAlongN(int kc,
                                                           int n0 = 0) const {
    return wgmmaDescriptor(sharedAddress(data) + n0 * 128 + kc * 32, 16,
                           1024) |
           (1ull << 62);
  }
  /// B = rows [16kc, 16kc + 16) as K, the columns as N (N-major: one
  /// swizzle atom across N at D = 64, 1,024 bytes a group of 8 rows).
  __device__ __forceinline__ unsigned long long keysAlongK(int kc) const {
    return wgmmaDescriptor(sharedAddress(data) + kc * 2048, 16, 1024) |
           (1ull << 62);
  }
};
'''

# Each replacement: (what it must find exactly once, from where, with what).
REPLACEMENTS = [
    # k's and v's tiles of two types in the key loop's helpers.
    ("template <class LK, int kThreads, class Tile>\n"
     "__device__ __forceinline__ void loadKeyTileAsync(Tile &kTile, Tile &vTile,",
     None,
     "template <class LK, int kThreads, class Tile, class VTile>\n"
     "__device__ __forceinline__ void loadKeyTileAsync(Tile &kTile, VTile &vTile,"),
    ("template <class LK, int kThreads, class Tile>\n"
     "__device__ __forceinline__ void prefetchNextKeyTile(Tile (&sK)[2], Tile (&sV)[2],",
     None,
     "template <class LK, int kThreads, class Tile, class VTile>\n"
     "__device__ __forceinline__ void prefetchNextKeyTile(Tile (&sK)[2], VTile (&sV)[2],"),
    ("} // namespace wg\n", None, SWIZZLED_KEYS + "} // namespace wg\n"),
    # The wgmma forward's k tiles (the first declaration after it starts).
    ("  __shared__ wg::CoreTile<D> sQ, sK[2], sV[2];\n",
     "__device__ void attentionForwardWgmma(",
     "  __shared__ wg::CoreTile<D> sQ, sV[2];\n"
     "  __shared__ wg::SwizzledKeys<D> sK[2];\n"),
]


# --values: v's tiles too (read N-major by the output product).
VALUES = ("  __shared__ wg::CoreTile<D> sQ, sV[2];\n"
          "  __shared__ wg::SwizzledKeys<D> sK[2];\n",
          "  __shared__ wg::CoreTile<D> sQ;\n"
          "  __shared__ wg::SwizzledKeys<D> sK[2], sV[2];\n")


def swizzled_keys(source, values=False):
    # The kernel itself (after the embedded headers) must call the wgmma
    # forward at D=64: not the overlapping one, nor another kernel that
    # embeds attention.cuh.
    generated = source.split("//===--- generated ---===//")[-1]
    call = re.search(r"attentionForwardTensorCores<(\d+),(.*)>\(", generated)
    if not call or call.group(1) != "64" or call.group(2).endswith("true"):
        raise ValueError("not the wgmma forward at D=64 (gptc compile "
                         "--attention-forward=wgmma, 64-wide heads)")
    for old, after, new in REPLACEMENTS:
        start = 0
        if after is not None:
            start = source.find(after)
            if start < 0:
                raise ValueError(f"no {after.strip()!r} in the source")
        elif source.count(old) != 1:
            raise ValueError(f"{old.splitlines()[-1].strip()!r} found "
                             f"{source.count(old)} times, not once")
        at = source.find(old, start)
        if at < 0:
            raise ValueError(f"no {old.strip()!r} after {after.strip()!r}")
        source = source[:at] + new + source[at + len(old):]
    if values:
        if source.count(VALUES[0]) != 1:
            raise ValueError("no wgmma forward tiles to swizzle v's in")
        source = source.replace(VALUES[0], VALUES[1])
    return source


def main():
    args = sys.argv[1:]
    values = args[:1] == ["--values"]
    args = args[1:] if values else args
    if len(args) != 2:
        sys.exit("usage: swizzled_keys.py [--values] IN.cu OUT.cu")
    try:
        out = swizzled_keys(open(args[0]).read(), values)
    except (OSError, ValueError) as e:
        sys.exit(f"swizzled_keys.py: {args[0]}: {e}")
    open(args[1], "w").write(out)


if __name__ == "__main__":
    main()
