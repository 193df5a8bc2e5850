#!/usr/bin/python3
"""Helpers of the `gptc train` lit tests (standard library only).

  tokens OUT --count N --vocab V [--seed S] [--nanogpt] [--set I=ID]...
      Token data with structure a tiny model learns in a few steps: a Markov
      chain that follows a successor table (the same for every seed, so train
      and val data share it) with probability 0.9 and jumps uniformly
      otherwise. llm.c shard unless --nanogpt. --set overwrites token I (to
      plant an out-of-range id).
  chain START N --vocab V
      The N most likely successors of token START under the tokens chain,
      as text: ids below 94 are GPT-2's byte tokens for '!' .. '~'.
  dump SHARD
      The tokens of an llm.c shard, space-separated, and how many are EOT.
  edit IN OUT [--scale NAME=F]... [--put NAME[I]=X]... [--nan NAME]
          [--truncate BYTES]
      Copies an F32 safetensors file, scaling a tensor, setting its element
      I (row-major) to X or its first to NaN, or cutting the file short.
  steps LOG [--from K]
      The step lines of LOG without their timings (step, loss, lr, norm,
      skipped), from step K on: what must reproduce exactly.
  check-init LOG --vocab V
      The first step's loss is within 0.1 of ln(V).
  check-falls LOG
      Train loss: the mean of the last 5 steps is below the first step's by
      at least 1.0; val loss: the last is below the first by at least 1.0.
  compare-losses A B --rtol R
      Two runs' step losses agree to R relative, step by step.
  compare-tensors A B --atol X
      Two safetensors files hold the same tensors to X absolute.
  compare-resumed FULL RESUMED
      RESUMED continued a run from step K ("resuming from ... at step K");
      its step lines (timings aside) and val lines are exactly FULL's after
      step K.
  one-error ERR OUT
      A failed command's output: ERR holds exactly one line, an error from
      gptc, and OUT nothing.
  limit-file-size BYTES -- CMD...
      Runs CMD with RLIMIT_FSIZE = BYTES: a write past it fails with EFBIG,
      as one on a full disk fails with ENOSPC.
  kill-at PATTERN OUT -- CMD...
      Runs CMD with stdout to OUT and SIGKILLs it on the first line that
      starts with PATTERN: an interrupted run, as a crash would leave it.
"""
import json
import math
import os
import random
import re
import signal
import struct
import subprocess
import sys

STEP = re.compile(r"^step (\d+)/(\d+) \| loss (\S+) \| lr (\S+) \| norm (\S+) "
                  r"\| [0-9.]+ ms \| [0-9]+ tok/s(?: \| MFU [0-9.]+%)?"
                  r"( \| skipped .*)?$")


def fail(message):
    print("train_helper: " + message, file=sys.stderr)
    sys.exit(1)


def write_tokens(path, tokens, nanogpt):
    body = struct.pack("<%dH" % len(tokens), *tokens)
    header = b"" if nanogpt else struct.pack("<256i", 20240520, 1,
                                             len(tokens), *([0] * 253))
    with open(path, "wb") as f:
        f.write(header + body)


def cmd_tokens(args):
    out, count, vocab, seed, nanogpt, sets = args[0], None, None, 0, False, []
    it = iter(args[1:])
    for a in it:
        if a == "--count":
            count = int(next(it))
        elif a == "--vocab":
            vocab = int(next(it))
        elif a == "--seed":
            seed = int(next(it))
        elif a == "--nanogpt":
            nanogpt = True
        elif a == "--set":
            i, v = next(it).split("=")
            sets.append((int(i), int(v)))
        else:
            fail("unknown option " + a)
    successor = successors(vocab)
    rng = random.Random(seed)
    t, tokens = 0, []
    for _ in range(count):
        t = successor[t] if rng.random() < 0.9 else rng.randrange(vocab)
        tokens.append(t)
    for i, v in sets:
        tokens[i] = v
    write_tokens(out, tokens, nanogpt)


def successors(vocab):
    table = random.Random(0)
    return [table.randrange(vocab) for _ in range(vocab)]


def cmd_chain(args):
    t, n, vocab = int(args[0]), int(args[1]), int(args[3])
    successor, text = successors(vocab), ""
    for _ in range(n):
        t = successor[t]
        text += chr(33 + t)
    print(text)


def cmd_dump(args):
    with open(args[0], "rb") as f:
        data = f.read()
    magic, version, count = struct.unpack("<3i", data[:12])
    if magic != 20240520 or version != 1 or len(data) != 1024 + 2 * count:
        fail("%s: not an llm.c shard" % args[0])
    tokens = struct.unpack("<%dH" % count, data[1024:])
    print(" ".join(map(str, tokens)) if count <= 100 else "%d tokens" % count)
    print("%d EOT" % tokens.count(50256))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            fail("%s: %s is not F32" % (path, name))
        b, e = info["data_offsets"]
        raw = data[8 + n + b:8 + n + e]
        tensors[name] = (info["shape"], list(struct.unpack("<%df" % (len(raw) // 4), raw)))
    return tensors, meta, data


def write_safetensors(path, tensors, meta):
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in tensors.items():
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if meta is not None:
        header["__metadata__"] = meta
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def cmd_edit(args):
    src, dst = args[0], args[1]
    tensors, meta, data = read_safetensors(src)
    it = iter(args[2:])
    for a in it:
        if a == "--scale":
            name, factor = next(it).split("=")
            shape, values = tensors[name]
            tensors[name] = (shape, [v * float(factor) for v in values])
        elif a == "--put":
            m = re.match(r"(.+)\[(\d+)\]=(.+)$", next(it))
            tensors[m.group(1)][1][int(m.group(2))] = float(m.group(3))
        elif a == "--nan":
            name = next(it)
            shape, values = tensors[name]
            tensors[name] = (shape, [float("nan")] + values[1:])
        elif a == "--truncate":
            with open(dst, "wb") as f:
                f.write(data[:len(data) - int(next(it))])
            return
        else:
            fail("unknown option " + a)
    write_safetensors(dst, tensors, meta)


def step_lines(path):
    lines = []
    with open(path) as f:
        for line in f:
            m = STEP.match(line.rstrip("\n"))
            if m:
                lines.append(m)
            elif line.startswith("step "):
                fail("%s: malformed step line: %r" % (path, line))
    return lines


def cmd_steps(args):
    first = int(args[2]) if len(args) > 2 and args[1] == "--from" else 1
    for m in step_lines(args[0]):
        if int(m.group(1)) >= first:
            print("step %s/%s loss %s lr %s norm %s%s" % (
                m.group(1), m.group(2), m.group(3), m.group(4), m.group(5),
                m.group(6) or ""))


def cmd_check_init(args):
    vocab = int(args[2])
    loss = float(step_lines(args[0])[0].group(3))
    if abs(loss - math.log(vocab)) > 0.1:
        fail("first loss %.6f is not within 0.1 of ln(%d) = %.6f"
             % (loss, vocab, math.log(vocab)))
    print("initial loss %.6f ~ ln(%d) = %.6f" % (loss, vocab, math.log(vocab)))


def cmd_check_falls(args):
    losses = [float(m.group(3)) for m in step_lines(args[0])]
    with open(args[0]) as f:
        vals = [float(l.split()[2]) for l in f if l.startswith("val loss ")]
    last = sum(losses[-5:]) / 5
    if not losses[0] - last >= 1.0:
        fail("train loss fell from %.4f to only %.4f" % (losses[0], last))
    if len(vals) < 2 or not vals[0] - vals[-1] >= 1.0:
        fail("val loss did not fall by 1.0: %s" % vals)
    print("train loss %.4f -> %.4f, val loss %.4f -> %.4f"
          % (losses[0], last, vals[0], vals[-1]))


def cmd_compare_losses(args):
    a, b, rtol = step_lines(args[0]), step_lines(args[1]), float(args[3])
    if len(a) != len(b) or not a:
        fail("%d and %d step lines" % (len(a), len(b)))
    worst = 0.0
    for x, y in zip(a, b):
        la, lb = float(x.group(3)), float(y.group(3))
        worst = max(worst, abs(la - lb) / abs(lb))
    if worst > rtol:
        fail("losses differ by %.3g relative (> %g)" % (worst, rtol))
    print("losses agree to %.3g relative over %d steps" % (worst, len(a)))


def cmd_compare_tensors(args):
    (a, _, _), (b, _, _), atol = read_safetensors(args[0]), read_safetensors(args[1]), float(args[3])
    if sorted(a) != sorted(b):
        fail("different tensor names")
    worst = 0.0
    for name in a:
        if a[name][0] != b[name][0]:
            fail("%s: shapes differ" % name)
        worst = max([worst] + [abs(x - y) for x, y in zip(a[name][1], b[name][1])])
    if worst > atol:
        fail("tensors differ by %.3g (> %g)" % (worst, atol))
    print("%d tensors agree to %.3g absolute" % (len(a), worst))


def lines_after_step(path, k):
    """Step lines (timings aside) and val lines printed after step k."""
    out, started = [], k == 0
    with open(path) as f:
        for line in f:
            m = STEP.match(line.rstrip("\n"))
            if m and started:
                out.append("step %s/%s loss %s lr %s norm %s%s" % (
                    m.group(1), m.group(2), m.group(3), m.group(4),
                    m.group(5), m.group(6) or ""))
            elif line.startswith("val loss ") and started:
                out.append(line.rstrip("\n"))
            started = started or (m is not None and int(m.group(1)) == k)
    return out


def cmd_compare_resumed(args):
    with open(args[1]) as f:
        m = re.search(r"^resuming from \S+ at step (\d+)$", f.read(), re.M)
    if not m:
        fail("%s: no 'resuming from' line" % args[1])
    k = int(m.group(1))
    full, resumed = lines_after_step(args[0], k), lines_after_step(args[1], 0)
    if not resumed or full != resumed:
        fail("after step %d the runs differ:\n%s\n---\n%s"
             % (k, "\n".join(full), "\n".join(resumed)))
    print("resumed at step %d: %d lines identical" % (k, len(resumed)))


def cmd_one_error(args):
    with open(args[0]) as f:
        err = f.read().splitlines()
    with open(args[1]) as f:
        out = f.read()
    if len(err) != 1 or not re.match(r"gptc( \w+)?: (error: )?", err[0]):
        fail("%s: expected one error line, got %r" % (args[0], err))
    if out:
        fail("%s: expected no output, got %r" % (args[1], out))


def cmd_limit_file_size(args):
    import resource
    limit = int(args[0])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    os.execvp(args[2], args[2:])


def cmd_kill_at(args):
    pattern, out, cmd = args[0], args[1], args[3:]
    with open(out, "w") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            f.write(line)
            if line.startswith(pattern):
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait()
    if proc.returncode != -signal.SIGKILL:
        fail("the run ended (status %d) before a line starting with %r"
             % (proc.returncode, pattern))


COMMANDS = {"tokens": cmd_tokens, "chain": cmd_chain, "dump": cmd_dump,
            "edit": cmd_edit, "steps": cmd_steps,
            "check-init": cmd_check_init, "check-falls": cmd_check_falls,
            "compare-losses": cmd_compare_losses,
            "compare-tensors": cmd_compare_tensors,
            "compare-resumed": cmd_compare_resumed, "one-error": cmd_one_error,
            "limit-file-size": cmd_limit_file_size, "kill-at": cmd_kill_at}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        fail("usage: train_helper.py {%s} ..." % ",".join(COMMANDS))
    COMMANDS[sys.argv[1]](sys.argv[2:])
