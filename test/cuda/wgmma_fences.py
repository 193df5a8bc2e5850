#!/usr/bin/env python3
"""Checks the register rules of warpgroup MMA in a PTX file.

wgmma.mma_async reads its accumulators and its A fragments (when A is in
registers) asynchronously. The PTX ISA makes two things undefined, and the
CUDA compiler does not prevent either: it moves register writes across an
`asm volatile("wgmma.fence...")` that names no registers.

  1. A write to a batch's operand registers between its wgmma.fence and the
     wgmma.mma_async that reads them: the hardware need not see it (the
     forward attention's scores were zeroed after their fence once).
  2. Any use of those registers by another instruction between the
     wgmma.mma_async and the wgmma.wait_group that retires its commit group
     (wait_group N leaves the N newest groups in flight).

Prints one line per violation and exits 1; otherwise one summary line,
and one more counting the wgmma.mma_async whose scale-d is a constant 0:
they start their accumulators (d = a * b), which need no zeroing before.

  wgmma_fences.py kernel.ptx
"""
import re
import sys

REGISTER = re.compile(r"%[A-Za-z_][\w]*")
LABEL = re.compile(r"^\$?[\w$]+:\s*")
GUARD = re.compile(r"^@!?%\w+\s+")


def statements(text):
    """(line, statement) for each instruction or directive, comments and
    labels gone."""
    text = re.sub(r"//[^\n]*", "", text)
    line = 1
    for piece in text.split(";"):
        at = 0
        while True:  # skip block braces, whitespace and labels
            at += len(piece[at:]) - len(piece[at:].lstrip("{} \t\n"))
            m = LABEL.match(piece[at:])
            if not m:
                break
            at += m.end()
        stmt = " ".join(piece[at:].split())
        if stmt:
            yield line + piece[:at].count("\n"), stmt
        line += piece.count("\n")


def destinations(stmt):
    """The registers an instruction writes: its first operand's."""
    stmt = GUARD.sub("", stmt)
    parts = stmt.split(None, 1)
    if len(parts) < 2 or parts[0].startswith(("st.", "st ", "bar", "bra", "red.")):
        return set()
    first = parts[1]
    if first.startswith("{"):
        first = first[: first.index("}") + 1]
    else:
        first = first.split(",", 1)[0]
    if not first.startswith(("{", "%")):
        return set()
    return set(REGISTER.findall(first))


def wgmma_operands(stmt):
    """The accumulator and register-A operands of a wgmma.mma_async."""
    groups = re.findall(r"\{([^}]*)\}", stmt)
    regs = set(REGISTER.findall(groups[0]))
    if len(groups) > 1:
        regs |= set(REGISTER.findall(groups[1]))
    return regs


def check(text):
    """The number of wgmma batches, of wgmma that start their accumulators,
    and one error line per broken batch."""
    errors, batches, starts = [], 0, 0
    constants = {}        # register -> the integer a mov gave it
    scale_d = None        # the constant of the last setp's register, if any
    fence = None          # line of the open batch's wgmma.fence
    written = {}          # register -> line, written since that fence
    late = {}             # register -> (write line, wgmma line), this batch
    groups = [{}]         # register -> wgmma line: committed groups in
                          # flight, oldest first, then the open one
    used = {}             # register -> (line, wgmma line), used in flight

    def in_flight():
        return {r: at for g in groups for r, at in g.items()}

    def close_fence():
        if late:
            first = min(late.values())
            errors.append(
                f"line {first[0]}: {len(late)} operand registers of the "
                f"wgmma.mma_async at line {first[1]} ({min(late)}, ...) are "
                f"written after the wgmma.fence at line {fence}")
        late.clear()

    def report_used():
        if used:
            first = min(used.values())
            reg = min(r for r in used if used[r] == first)
            errors.append(
                f"line {first[0]}: {len(used)} operand registers of the "
                f"wgmma.mma_async at line {first[1]} ({reg}, ...) are "
                f"used before its wgmma.wait_group")
        used.clear()

    for line, stmt in statements(text):
        if stmt.startswith("."):  # a directive; a new function resets
            if re.search(r"\.(entry|func)\b", stmt):
                close_fence()
                report_used()
                fence, written, groups = None, {}, [{}]
            continue
        op = GUARD.sub("", stmt).split(None, 1)[0]
        m = re.match(r"mov\.[ub]32 (%\w+), (-?\d+)$", stmt)
        if m:
            constants[m.group(1)] = int(m.group(2))
        m = re.match(r"setp\.ne\.b32 \w+, (%\w+), 0$", stmt)
        if m:
            scale_d = constants.get(m.group(1))
        if op.startswith("wgmma.fence"):
            close_fence()
            fence, written = line, {}
            batches += 1
        elif op.startswith("wgmma.mma_async"):
            if scale_d == 0:
                starts += 1
            scale_d = None
            if fence is None:
                errors.append(f"line {line}: wgmma.mma_async with no wgmma.fence before it")
            for r in wgmma_operands(stmt):
                if r in written:
                    late.setdefault(r, (written[r], line))
                groups[-1].setdefault(r, line)
        elif op.startswith("wgmma.commit_group"):
            if groups[-1]:
                groups.append({})
        elif op.startswith("wgmma.wait_group"):
            close_fence()
            report_used()
            n = int(re.search(r"(\d+)\s*$", stmt).group(1))
            committed = groups[:-1]
            groups = committed[max(0, len(committed) - n):] if n else []
            groups.append({})
            fence, written = None, {}
        elif not op.startswith("wgmma."):
            flying = in_flight()
            for r in set(REGISTER.findall(stmt)) & flying.keys():
                used.setdefault(r, (line, flying[r]))
            if fence is not None:
                for r in destinations(stmt):
                    written.setdefault(r, line)
    close_fence()
    report_used()
    return batches, starts, errors


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: wgmma_fences.py kernel.ptx")
    try:
        with open(sys.argv[1]) as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"wgmma_fences.py: cannot read {sys.argv[1]}: {e.strerror}")
    batches, starts, errors = check(text)
    for e in errors:
        print(f"{sys.argv[1]}:{e}")
    if errors:
        sys.exit(1)
    print(f"{batches} wgmma batches: every operand written before its "
          f"wgmma.fence, none used before its wgmma.wait_group")
    print(f"{starts} wgmma start their accumulators")


if __name__ == "__main__":
    main()
