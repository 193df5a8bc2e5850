#!/usr/bin/env python3
"""How long a causal attention grid runs in each block order: a model.

Not a measurement. Blocks start in blockIdx order on a fixed count of slots
(SMs times blocks an SM); each block holds its slot for its tile count plus
a fixed overhead (half a tile). The result is each order's time over the
balanced one (all the work spread evenly over the slots), for GPT-2 124M's
grids at B=16, T=1024 (192 heads, 16 tiles of 64 a head) on 132 SMs:

  head by head     blockIdx.x a head's blocks, longest first (085e28f);
  longest first    blockWork() in attention.cuh: rank by rank across a
                   group of heads (the emitter's group sizes).

  /usr/bin/python3 bench/attention_order_model.py
"""

import heapq

SMS = 132
HEADS = 192
TILES = 16  # T / 64
OVERHEAD = 0.5  # a block's prologue and epilogue, in tiles


def makespan(blocks, slots):
    free = [0.0] * slots
    end = 0.0
    for work in blocks:
        start = heapq.heappop(free)
        finish = start + work + OVERHEAD
        end = max(end, finish)
        heapq.heappush(free, finish)
    return end


def orders(work, group):
    """(head by head, longest first in groups of `group` heads)."""
    ranks = sorted(range(len(work)), key=lambda r: -work[r])
    by_head = [work[r] for _ in range(HEADS) for r in ranks]
    grouped = [work[r] for _ in range(0, HEADS, group) for r in ranks
               for _ in range(group)]
    return by_head, grouped


KERNELS = [
    # name, tiles a block walks (by block), blocks an SM, heads a group
    ("forward (mma)", [i + 1 for i in range(TILES)], 4, 96),
    # 128 queries: 2i + 2 key tiles for two query tiles, less a masked one
    ("forward (mma128)", [4 * i + 3 for i in range(TILES // 2)], 2, 96),
    ("backward (split)", [i + 1 for i in range(TILES)] +
     [TILES - j for j in range(TILES)], 3, 32),
    ("backward (atomic)", [TILES - j for j in range(TILES)], 3, 32),
    # 128 keys: T/64 - 2j query tiles for two key tiles, less a skipped one
    ("backward (atomic128)", [2 * (TILES - 2 * j) - 1
                              for j in range(TILES // 2)], 1, 32),
]

if __name__ == "__main__":
    print(f"{'grid':<22} {'head by head':>13} {'longest first':>14}")
    for name, work, per_sm, group in KERNELS:
        slots = SMS * per_sm
        balanced = (sum(work) + OVERHEAD * len(work)) * HEADS / slots
        by_head, grouped = orders(work, group)
        print(f"{name:<22} {makespan(by_head, slots) / balanced - 1:>12.1%} "
              f"{makespan(grouped, slots) / balanced - 1:>14.1%}")
