#!/usr/bin/env python3
"""Helper for eval_errors.test: makes the bad inputs and checks the aftermath.

  eval_errors_helper.py make DIR
      writes the good and the bad weights/token files (names below) into DIR,
      and an empty folder DIR/out for --logits-out.
  eval_errors_helper.py check --stderr E --stdout O --empty-dir D
      after a failed `gptc eval`: stderr is exactly one non-blank line, stdout
      has no `loss` line, and D is still empty (nothing written, not even a
      temporary file).

The config every file matches (pass these flags to gptc):
  --n-layer=2 --n-head=2 --n-embd=32 --block-size=16 --vocab-size=64
  --batch=3 --seq=7          (one batch needs B*T+1 = 22 tokens)

File names avoid the key words the test looks for in the error message, so
that a key word can only match the message itself, not the path.
"""

import argparse
import os
import struct
import sys

B, T = 3, 7


def make(d):
    # torch is imported only here: `check` runs once per case and stays fast.
    import torch
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt2_torch as ref
    CFG = ref.GPT2Config(n_layer=2, n_head=2, n_embd=32, block_size=16,
                         vocab_size=64)
    os.makedirs(d, exist_ok=True)
    os.makedirs(os.path.join(d, "out"), exist_ok=True)
    for f in os.listdir(os.path.join(d, "out")):
        os.remove(os.path.join(d, "out", f))
    params = ref.init_params(CFG, seed=5)

    def w(name, data):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)

    good = ref.safetensors_bytes(params, metadata={"format": "pt"})
    w("w_good.safetensors", good)
    # Truncated: the data section ends 100 bytes early.
    w("w_cut.safetensors", good[:-100])
    # Truncated inside the header: the length prefix promises more bytes.
    w("w_stub.safetensors", good[:20])
    # A header that is not JSON.
    junk = b"{this is not json at all"
    junk += b" " * ((8 - len(junk) % 8) % 8)
    w("w_garbage.safetensors", struct.pack("<Q", len(junk)) + junk +
      b"\0" * 64)
    # A tensor missing.
    nofc = {k: v for k, v in params.items() if k != "h.1.mlp.c_fc.bias"}
    w("w_nofc.safetensors", ref.safetensors_bytes(nofc))
    # A tensor of the wrong shape: c_fc bias [129] instead of [4C] = [128].
    wide = dict(params)
    wide["h.0.mlp.c_fc.bias"] = torch.zeros(4 * CFG.n_embd + 1)
    w("w_wide.safetensors", ref.safetensors_bytes(wide))
    # The nn.Linear layout (out, in) instead of Conv1D's (in, out).
    tr = dict(params)
    tr["h.1.attn.c_attn.weight"] = params["h.1.attn.c_attn.weight"].t()
    w("w_transposed.safetensors", ref.safetensors_bytes(tr))
    # A tensor of the wrong dtype.
    w("w_ints.safetensors",
      ref.safetensors_bytes(params, dtypes={"h.0.ln_1.weight": "I32"}))

    n = 100
    toks = ref.random_tokens(n, CFG.vocab_size, seed=9)
    w("data_good.bin", ref.llmc_shard_bytes(toks))
    # A header shaped like llm.c's (version 1, right count, zero padding)
    # but with the wrong magic.
    w("data_a.bin", ref.llmc_shard_bytes(toks, magic=20240521))
    # Right magic, version 2.
    w("data_b.bin", ref.llmc_shard_bytes(toks, version=2))
    # Header says 100 tokens, the file holds 99.
    w("data_c.bin", ref.llmc_shard_bytes(toks, num_tokens=n)[:-2])
    # One token short of one batch: 21 tokens, B*T+1 = 22 needed.
    w("data_d.bin", ref.llmc_shard_bytes(toks[:B * T]))
    # Token id 70 >= vocab 64 among the inputs.
    bad = toks.clone()
    bad[5] = 70
    w("data_e.bin", ref.llmc_shard_bytes(bad))
    # Token id 65535 as the very last target (index B*T).
    bad = toks.clone()
    bad[B * T] = 65535
    w("data_f.bin", ref.llmc_shard_bytes(bad))
    return 0


def check(stderr_path, stdout_path, empty_dir):
    problems = []
    with open(stderr_path, "rb") as f:
        err = f.read().decode("utf-8", "replace")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if len(lines) != 1 or err.strip("\n").count("\n") != 0:
        problems.append("stderr should be exactly one line, it has %d:\n%s"
                        % (len(err.strip("\n").splitlines()), err))
    if stdout_path:
        with open(stdout_path, "rb") as f:
            out = f.read().decode("utf-8", "replace")
        if any(ln.strip().startswith("loss") for ln in out.splitlines()):
            problems.append("stdout has a loss line after an error:\n" + out)
    if empty_dir:
        left = sorted(os.listdir(empty_dir))
        if left:
            problems.append("%s should be empty, holds %s"
                            % (empty_dir, left))
    for p in problems:
        print("FAIL: " + p, file=sys.stderr)
    return 1 if problems else 0


def main(argv):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("dir")
    ck = sub.add_parser("check")
    ck.add_argument("--stderr", required=True)
    ck.add_argument("--stdout")
    ck.add_argument("--empty-dir")
    a = ap.parse_args(argv)
    if a.cmd == "make":
        return make(a.dir)
    return check(a.stderr, a.stdout, a.empty_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
