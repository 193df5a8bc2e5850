#!/usr/bin/env python3
"""Checks, in an sm_90a kernel's SASS, that ptxas kept the registers of the
A fragments a warpgroup MMA holds through a loop.

wgmma reads its A fragments from registers after the instruction issues.
ptxas 13.0 once gave the registers of the wgmma forward's q fragments,
loaded before its key loop and read in every iteration, to the
probabilities' fragments inside the loop (78e8693): from the second key
tile on, wgmma multiplied k by the last tile's probabilities. The PTX was
right; only the SASS shows it, and neither the host emulation nor
wgmma_fences.py can see it.

For each loop (a branch back to an earlier label, over more than 50
lines, around no other such loop with a wgmma: the tile loops) and each
HGMMA in it whose A registers were last
written by an LDSM (ldmatrix):
  - loaded in the loop, unconditionally, before the HGMMA (a fragment
    reloaded every tile): nothing else may write them in between;
  - loaded before the loop, or by a conditional LDSM (predicated, or
    skipped by a forward branch: the first tile's load): nothing else in
    the loop may write them at all, unless an LDSM overwrites them before
    any HGMMA reads them (the address of that LDSM).
A fragment last written by another instruction (probabilities or dS
packed from accumulators) is computed each tile, not held.

Prints one line per write that breaks this, and a summary line a file;
exits 1 if any.

  held_fragments.py kernel.sass...
  held_fragments.py --disassemble NVDISASM kernel.cubin > kernel.sass

--disassemble prints bench/sass_loops.py's sass_of: nvdisasm's listing of
a copy of a CUDA 13 sm_90a cubin whose ELF header says ABI version 7 and
e_flags 0x5a055a, which is how an older nvdisasm (Debian's
nvidia-cuda-toolkit 11.8, non-free) reads it (CUDA 13 here ships none),
and the labels of its control flow graph (`// label NAME ADDRESS`), which
name the blocks the listing prints no label for.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "bench"))
import sass_loops  # noqa: E402

INSTRUCTION = re.compile(
    r"\s+/\*[0-9a-f]+\*/\s+(@!?U?P[T0-9]\s+)?([A-Z][A-Za-z0-9_.]*)\s*(.*?)\s*;")
LABEL = re.compile(r"^(\.L_x_\d+):")
# Labels with their addresses, from nvdisasm's control flow graph
# (--disassemble appends them): the listing leaves out the label of a block
# whose first instruction it cannot print, as at the top of wgmma-k128's
# loop at D=64.
ADDRESSED_LABEL = sass_loops.ADDRESSED_LABEL
ADDRESS = re.compile(r"\s+/\*([0-9a-f]+)\*/")
BRANCH_TARGET = re.compile(r"\((\.L_x_\d+)\)")
A_OPERAND = re.compile(r"R\d+, R(\d+)\b")
NOT_A_REGISTER_WRITE = ("ST", "RED", "ATOM", "BRA", "HGMMA", "WARPGROUP",
                        "BAR", "EXIT", "RET", "SYNCS")


def written(op, args):
    """The registers an instruction writes (its first operand, with its
    width), or none."""
    m = re.match(r"R(\d+)\b", args)
    if not m or op.startswith(NOT_A_REGISTER_WRITE):
        return set()
    width = (4 if ("LDSM" in op and ".4" in op) or ".128" in op else
             2 if re.search(r"\.(64|WIDE)\b", op) or op.startswith("CS2R")
             else 1)
    return set(range(int(m.group(1)), int(m.group(1)) + width))


def a_fragment(op, args):
    m = A_OPERAND.match(args) if op.startswith("HGMMA") else None
    return set(range(int(m.group(1)), int(m.group(1)) + 4)) if m else set()


def check(path):
    lines = open(path).read().split("\n")
    labels = {m.group(1): i for i, l in enumerate(lines)
              if (m := LABEL.match(l))}
    # A label the listing lacks: the first printed instruction at or after
    # its address.
    printed = [(int(m.group(1), 16), i) for i, l in enumerate(lines)
               if (m := ADDRESS.match(l))]
    for l in lines:
        m = ADDRESSED_LABEL.match(l)
        if m and m.group(1) not in labels:
            address = int(m.group(2), 16)
            labels[m.group(1)] = next(
                (i for a, i in printed if a >= address), -1)
    code = [(i, bool(m.group(1)), m.group(2), m.group(3))
            for i, l in enumerate(lines) if (m := INSTRUCTION.match(l))]
    branches = [(i, labels.get(m.group(1), -1)) for i, _, op, args in code
                if op == "BRA" and (m := BRANCH_TARGET.search(args))]
    loops = sorted((to, at) for at, to in branches if 0 <= to < at and
                   at - to > 50)

    def has_wgmma(start, end):
        return any(start <= at <= end and op.startswith("HGMMA")
                   for at, _, op, _ in code)

    # A loop around a loop of wgmma is no tile loop: ptxas puts the slow
    # path of a vote (__all_sync in waitForCount) after the kernel's exit,
    # and its branch back makes one "loop" of nearly the whole kernel.
    loops = [(s, e) for s, e in loops
             if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e and
                        has_wgmma(s2, e2) for s2, e2 in loops)]

    def skipped(line, loop_start):  # by a forward branch within the loop
        return any(loop_start <= at < line < to for at, to in branches)

    def reloaded_before_read(line, regs):
        for at, _, op, args in code:
            if at <= line:
                continue
            if a_fragment(op, args) & regs:
                return False
            if op.startswith("LDSM") and written(op, args) & regs:
                return True
        return False

    broken, held, region = 0, 0, 0
    for start, end in loops:
        for at, _, op, args in code:
            regs = a_fragment(op, args)
            if not (start <= at <= end and regs):
                continue
            writes = [(w, pred, o) for w, pred, o, x in code
                      if region <= w < at and written(o, x) & regs]
            in_loop = [w for w in writes if w[0] >= start]
            last, predicated, writer = (in_loop or writes or
                                        [(0, False, "")])[-1]
            if not writer.startswith("LDSM"):
                continue
            held += 1
            every_tile = (last >= start and not predicated and
                          not skipped(last, start))
            first, stop = (last, at) if every_tile else (start, end)
            for w, _, o, x in code:
                if (first <= w <= stop and not o.startswith("LDSM") and
                        written(o, x) & regs and
                        not reloaded_before_read(w, regs)):
                    broken += 1
                    print(f"{path}:{w + 1}: {o} {x} writes "
                          f"R{min(regs)}-R{max(regs)}, the A fragment that "
                          f"line {at + 1}'s wgmma reads "
                          f"({'reloaded each tile' if every_tile else 'held'})")
        region = end
    print(f"{path}: {len(loops)} loops, {held} wgmma reads of A fragments "
          f"from ldmatrix, {broken} other writes to them")
    return broken == 0


def disassemble(nvdisasm, cubin):
    try:
        sys.stdout.write(sass_loops.sass_of(cubin, nvdisasm))
    except (OSError, ValueError) as e:
        sys.exit(f"held_fragments.py: {cubin}: "
                 f"{getattr(e, 'strerror', None) or e}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--disassemble"]:
        sys.exit(disassemble(sys.argv[2], sys.argv[3]))
    ok = all([check(path) for path in sys.argv[1:]])
    sys.exit(0 if ok else 1)
