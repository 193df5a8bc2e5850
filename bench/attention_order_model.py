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

Then the same for a design not built: the bulk backward's dq shares summed
in a fixed order (deterministic), each block waiting for the one before
it (ordered_table below).

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


# A deterministic five-product backward (a design, not built): the bulk
# backward's dk/dv blocks add their dq shares to a query tile's float32
# sums in key-tile order, each waiting for the block before it in that
# order (a counter a tile, released once its reduction is complete). The
# blocks walk their query tiles from the last down, so that all of a
# head's blocks reach a tile together and the wait is one chain a tile,
# not one a step; with R copies of the sums (key tile n adding to copy
# n % R, the last block summing the copies in order) the chains are R
# times shorter. DELAYS are how long a share takes, from its reduction's
# issue to the next block seeing the counter, in tiles of work.
DELAYS = (0.25, 0.5, 0.75, 1.0)


def ordered_makespan(group, delay, copies, slots):
    """The bulk backward's grid (rank n: key tile n, TILES - n query
    tiles), longest first in groups of `group` heads, each share waiting
    for key tile n - copies' share of the same query tile."""
    landed = {}  # (head, key tile, query tile) -> when the share is seen
    free = [0.0] * slots
    end = 0.0
    for base in range(0, HEADS, group):
        for n in range(TILES):
            for head in range(base, min(base + group, HEADS)):
                t = heapq.heappop(free) + OVERHEAD / 2
                for m in reversed(range(n, TILES)):
                    t += 1.0
                    if n >= copies:
                        t = max(t, landed[head, n - copies, m])
                    landed[head, n, m] = t + delay
                t += OVERHEAD / 2
                end = max(end, t)
                heapq.heappush(free, t)
    return end


def ordered_table():
    slots = SMS * 3
    work = [TILES - n for n in range(TILES)]
    balanced = (sum(work) + OVERHEAD * len(work)) * HEADS / slots
    print("\nbulk backward, dq shares summed in key-tile order "
          "(over the balanced time; delay in tiles):")
    print(f"{'heads a group':>13} {'copies':>6} {'any order':>10} " +
          " ".join(f"{d:>6}" for d in DELAYS))
    # (GPT-2's grids: wgmma-bulk's groups of 32 heads; wgmma-ordered's of
    # 24, its second copy of the sums counted in the L2 budget.)
    for group in (24, 32, 96):
        _, grouped = orders(work, group)
        unordered = makespan(grouped, slots) / balanced - 1
        for copies in (1, 2, 4):
            cells = [ordered_makespan(group, d, copies, slots) / balanced - 1
                     for d in DELAYS]
            print(f"{group:>13} {copies:>6} {unordered:>10.1%} " +
                  " ".join(f"{c:>6.1%}" for c in cells))


if __name__ == "__main__":
    print(f"{'grid':<22} {'head by head':>13} {'longest first':>14}")
    for name, work, per_sm, group in KERNELS:
        slots = SMS * per_sm
        balanced = (sum(work) + OVERHEAD * len(work)) * HEADS / slots
        by_head, grouped = orders(work, group)
        print(f"{name:<22} {makespan(by_head, slots) / balanced - 1:>12.1%} "
              f"{makespan(grouped, slots) / balanced - 1:>14.1%}")
    ordered_table()
