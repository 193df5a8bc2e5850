#!/usr/bin/env python3
"""An LRU model of how often a weight-gradient GEMM's operands come from DRAM.

gemmWgmmaWeightGrad (lib/Target/CUDA/kernels/gemm_wgmma.cuh) cuts the tiles'
depth steps into one span a block (stream-K), so the blocks running side by
side sit at different depths and share no stage at the same moment; whether
the operands then come from L2 or DRAM depends on the order the tiles are
walked in. This models it, crudely: each block reads one stage a time unit
(a's 128 columns and b's 128 columns over 64 of k: two 16 KB pieces), the
blocks in turn, through an LRU cache of the L2's size. It prints the MiB read
from DRAM for GPT-2's weight gradients at B = 16 (k = 16,384), for tiles
walked n fastest, m fastest, and (the kernel's rule) the dimension with more
tiles fastest; and for whole tiles in waves (cuBLASLt's data-parallel
tiling) for reference. A model, not a measurement: no real cache is LRU, and
no two blocks run at one speed.

  python3 bench/stream_k_l2_model.py [--l2-mb 50] [--sms 132]
"""
import argparse
from collections import OrderedDict

SHAPES = [  # name, m (the layer's inputs), n (its outputs)
    ("c_attn", 768, 2304),
    ("attn c_proj", 768, 768),
    ("c_fc", 768, 3072),
    ("c_proj", 3072, 768),
    ("lm_head", 50304, 768),
]


def dram_mb(m, n, k, sms, l2_mb, order):
    rows, cols, depth = m // 128, n // 128, k // 64
    tiles = rows * cols
    capacity = int(l2_mb * 1024 * 1024 // (16 * 1024))
    cache, misses = OrderedDict(), 0

    def read(piece):
        nonlocal misses
        if piece in cache:
            cache.move_to_end(piece)
            return
        misses += 1
        cache[piece] = True
        if len(cache) > capacity:
            cache.popitem(last=False)

    m_fast = order == "m" or (order == "more" and rows > cols)

    def place(tile):
        return (tile % rows, tile // rows) if m_fast else (tile // cols, tile % cols)

    if order == "waves":
        for first in range(0, tiles, sms):
            wave = range(first, min(tiles, first + sms))
            for dt in range(depth):
                for tile in wave:
                    r, c = place(tile)
                    read(("a", r, dt))
                    read(("b", c, dt))
        return misses * 16 / 1024
    iterations = tiles * depth
    blocks = min(sms, iterations)
    at = [b * iterations // blocks for b in range(blocks)]
    end = [(b + 1) * iterations // blocks for b in range(blocks)]
    while any(at[b] < end[b] for b in range(blocks)):
        for b in range(blocks):
            if at[b] < end[b]:
                r, c = place(at[b] // depth)
                read(("a", r, at[b] % depth))
                read(("b", c, at[b] % depth))
                at[b] += 1
    return misses * 16 / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--l2-mb", type=float, default=50)
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--k", type=int, default=16384)
    args = parser.parse_args()
    print(f"MiB from DRAM, L2 {args.l2_mb:g} MiB, {args.sms} SMs, k = {args.k}")
    print(f"{'GEMM':12} {'m x n':>11} {'operands':>9} {'n fastest':>10} "
          f"{'m fastest':>10} {'more fastest':>13} {'waves':>8}")
    for name, m, n in SHAPES:
        operands = (m + n) * args.k * 2 / 2**20
        row = [dram_mb(m, n, args.k, args.sms, args.l2_mb, o)
               for o in ("n", "m", "more", "waves")]
        print(f"{name:12} {f'{m}x{n}':>11} {operands:9.0f} "
              + " ".join(f"{v:{w}.0f}" for v, w in zip(row, (10, 10, 13, 8))))


if __name__ == "__main__":
    main()
