#!/usr/bin/env python3
"""The instructions of each loop in a kernel's SASS, by opcode: what one
trip of an attention kernel's tile loop issues, no GPU needed.

A loop is a branch back to an earlier label; its body is every instruction
from that label to the branch, the ones a forward branch skips (the first
tile's loads, the diagonal tile's mask) included, so a trip issues at most
that many. Counted from the addresses (16 bytes an instruction): nvdisasm
11.8 prints no line for some sm_90 encodings, which the opcode mix then
lacks ("undecoded"). Static, like bench/kernel_instructions.sh, but of the SASS ptxas
made rather than the PTX: ptxas drops or adds much (it kept zeroed
accumulators as moves, and made each wgmma descriptor in five uniform
instructions; docs/benchmarks.md, thirty-eighth session).

  sass_loops.py [--nvdisasm PATH] [--min N] [--branches] FILE...

FILE is a cubin (disassembled with PATH, or $GPTC_NVDISASM: Debian's
non-free nvidia-cuda-toolkit 11.8 has an nvdisasm that reads CUDA 13's
sm_90a cubins once their ELF header is patched: sass_of, which
test/cuda/held_fragments.py --disassemble runs too) or nvdisasm's text.
Loops of fewer than N instructions (default 20) are left out. With
--branches, a line for each forward branch within a loop says how many
instructions it skips (by address), so that a trip that takes none of the
skipped paths (not the first tile, not the diagonal) can be counted: the
loop's count less those of the branches such a trip takes.
"""
import collections
import os
import re
import struct
import subprocess
import sys
import tempfile

INSTRUCTION = re.compile(
    r"^\s*/\*([0-9a-f]+)\*/\s+(@!?U?P[T0-9]\s+)?([A-Z][A-Za-z0-9_.]*)\s*(.*?)\s*;")
LABEL = re.compile(r"^\s*(\.L_x_\d+):")
# A label with its address, as sass_of appends them from nvdisasm's control
# flow graph: the listing leaves out the label of a block whose first
# instruction it does not print, and the graph names them all.
ADDRESSED_LABEL = re.compile(r"^//\s*label\s+(\.L_x_\d+)\s+0x([0-9a-f]+)\s*$")
GRAPH_NODE = re.compile(
    r'^"(\.L_x_\d+)"\n\[label="\{<entry>(?:\.L_x_\d+:\\l)?([0-9a-f]+):',
    re.MULTILINE)
BRANCH_TARGET = re.compile(r"\((\.L_x_\d+)\)")


def sass_of(path, nvdisasm):
    """The SASS text of a cubin (its header patched for nvdisasm 11.8) or
    of a text file."""
    with open(path, "rb") as f:
        image = bytearray(f.read())
    if not image.startswith(b"\x7fELF"):
        return image.decode()
    if not nvdisasm:
        raise ValueError("a cubin needs --nvdisasm or GPTC_NVDISASM")
    image[8] = 7  # EI_ABIVERSION
    struct.pack_into("<I", image, 48, 0x5A055A)  # e_flags: sm_90
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(image)
        f.flush()
        done = subprocess.run([nvdisasm, "-c", f.name], capture_output=True,
                              text=True)
        graph = subprocess.run([nvdisasm, "-bbcfg", "-poff", f.name],
                               capture_output=True, text=True)
    if done.returncode:
        raise ValueError(f"nvdisasm failed: {done.stderr.strip()}")
    # Where the graph could not be drawn, the listing's labels stand alone.
    nodes = GRAPH_NODE.findall(graph.stdout) if not graph.returncode else []
    return done.stdout + "".join(
        f"// label {name} 0x{address}\n" for name, address in nodes)


def loops(text):
    """(first address, last address, Counter of opcodes, forward branches)
    for each loop, in address order; a forward branch within it is
    (its address, its target's address)."""
    instructions, labels, pending, addressed = [], {}, [], {}
    for line in text.splitlines():
        m = ADDRESSED_LABEL.match(line)
        if m:
            addressed[m.group(1)] = int(m.group(2), 16)
            continue
        m = LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = INSTRUCTION.match(line)
        if m:
            address = int(m.group(1), 16)
            for label in pending:
                labels[label] = address
            pending = []
            instructions.append((address, m.group(3), m.group(4)))
    for label, address in addressed.items():
        labels.setdefault(label, address)
    found = []
    for address, op, args in instructions:
        t = BRANCH_TARGET.search(args) if op.startswith("BRA") else None
        start = labels.get(t.group(1)) if t else None
        if start is not None and start < address:
            body = collections.Counter(
                o.split(".")[0] for a, o, _ in instructions
                if start <= a <= address)
            forward = []
            for a, o, rest in instructions:
                f = BRANCH_TARGET.search(rest) if o.startswith("BRA") else None
                to = labels.get(f.group(1)) if f else None
                if start <= a < address and to is not None and a < to <= address:
                    forward.append((a, to))
            found.append((start, address, body, forward))
    return found


def main(argv):
    nvdisasm, least, files = os.environ.get("GPTC_NVDISASM"), 20, []
    branches = False
    args = iter(argv)
    for a in args:
        if a == "--nvdisasm":
            nvdisasm = next(args, None)
        elif a == "--min":
            least = int(next(args, "20"))
        elif a == "--branches":
            branches = True
        else:
            files.append(a)
    if not files:
        sys.exit("usage: sass_loops.py [--nvdisasm PATH] [--min N] "
                 "[--branches] FILE...")
    for path in files:
        try:
            text = sass_of(path, nvdisasm)
        except (OSError, ValueError) as e:
            sys.exit(f"sass_loops.py: {path}: {getattr(e, 'strerror', None) or e}")
        name = os.path.basename(path)
        for start, end, body, forward in loops(text):
            n = (end - start) // 16 + 1
            if n < least:
                continue
            mix = ", ".join(f"{op} {k}" for op, k in body.most_common())
            missing = n - sum(body.values())
            if missing:
                mix += f", undecoded {missing}"
            print(f"{name}: loop {start:#x}..{end:#x}: {n} instructions: {mix}")
            for at, to in forward if branches else []:
                print(f"{name}: loop {start:#x}..{end:#x}: branch at {at:#x} "
                      f"skips {(to - at) // 16 - 1} (to {to:#x})")


if __name__ == "__main__":
    main(sys.argv[1:])
