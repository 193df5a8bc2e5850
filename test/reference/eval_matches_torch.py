#!/usr/bin/env python3
"""`gptc eval` against an independent PyTorch GPT-2 (gpt2_torch.py).

Builds a config, writes random weights as safetensors and random tokens as a
token file, runs

  gptc eval --model=gpt2-tiny --n-layer=L --n-head=H --n-embd=C
            --block-size=BS --vocab-size=V --init-from=W.safetensors
            --data=TOKENS --batch=B --seq=T --logits-out=LOGITS.safetensors

and compares gptc's loss (the last stdout line, `loss <value>`) and its logits
(one F32 tensor "logits" [B, T, V] in LOGITS.safetensors) with PyTorch in
float32. The inputs are the first B*T+1 tokens of the file: inputs =
tokens[0:B*T] as [B, T], targets = tokens[1:B*T+1] as [B, T]. The token file
holds more tokens than that, so reading the wrong window fails the test.

Exits 0 on agreement, 1 with a diff report otherwise.

Tolerances (both 1e-5, from gpt2_torch.LOSS_RTOL / LOGITS_RTOL)
---------------------------------------------------------------
loss:   |loss_gptc - loss_torch| / |loss_torch|.  The loss is one number of
        size ~ln(V); a relative error is the natural measure.

logits: max|gptc - torch| / max|torch|, over all B*T*V elements (the
        infinity-norm relative error). Not per-element relative error: the
        rounding error of a logit comes from the dot product of the final
        hidden state with a row of wte and from every layer before it, so it
        scales with the size of the logits as a whole, not with that one
        logit -- a logit that happens to be 1e-4 carries the same absolute
        error as one that is 0.5, and a per-element relative test would fail
        it for no reason (or need an atol that hides real bugs). Normalising
        by the largest logit is the same as a per-element test with the atol
        floor set to the logits' scale.

Why 1e-5 is honest, neither loose nor flaky: float32 has eps = 6e-8. For the
configs here, two correct float32 implementations with different summation
orders (this module's matmul/softmax formulation vs. torch.nn.functional /
einsum) differ by 3e-7 to 5e-7 in this metric, and each is within 4e-7 to
7e-7 of a float64 evaluation (gptc's CPU executor, when these tests were
written, was 2.5e-7 to 3.3e-7 from torch32 on every config in the .test files) (`--verbose` prints these for the config being
run; `gpt2_torch.py --self-test` checks them). So 1e-5 leaves a margin of
~15-30x for gptc's own summation order (BLAS blocking, fused softmax,
padding to multiples of 64), while the typical GPT-2 mistakes all move the
logits by 10x the tolerance or more with the weights used here (self-test:
erf instead of tanh GELU 1.8e-4, LayerNorm eps 1e-6 instead of 1e-5 4e-4,
attention scale 1/d instead of 1/sqrt(d) 3.6e-3, mask off by one 7e-2, no
mask 9e-2, heads split the wrong way 0.49, positions off by one 0.16; zeroing
any bias or LayerNorm parameter >= 1.6e-2). The loss in float32 is within
1e-7 relative of float64, so its 1e-5 is dominated by how many digits gptc
prints: print at least 7 significant digits (e.g. %.6f for a loss ~7-11).
"""

import argparse
import math
import os
import re
import shlex
import subprocess
import sys

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as ref  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description="gptc eval vs PyTorch GPT-2")
    ap.add_argument("--gptc", required=True, help="path of the gptc binary")
    ap.add_argument("--tmp", required=True,
                    help="scratch folder (lit's %%t); created if missing")
    ap.add_argument("--model", default="gpt2-tiny")
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--vocab-size", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--extra-tokens", type=int, default=97,
                    help="tokens in the file beyond the B*T+1 that are used")
    ap.add_argument("--prefix", default="",
                    help="prefix for every tensor name, e.g. 'transformer.'")
    ap.add_argument("--data-format", choices=["llmc", "nanogpt"],
                    default="llmc",
                    help="llm.c shard (header) or nanoGPT header-less .bin")
    ap.add_argument("--weights-dtype", default="F32",
                    help="safetensors dtype of the weights (F32 by default; "
                    "the reference then uses the rounded values)")
    ap.add_argument("--metadata", action="store_true",
                    help="write a __metadata__ entry as HF files have")
    ap.add_argument("--shuffle-names", action="store_true",
                    help="store tensors in a scrambled order")
    ap.add_argument("--gptc-arg", action="append", default=[],
                    help="extra argument for gptc (repeatable)")
    ap.add_argument("--loss-rtol", type=float, default=ref.LOSS_RTOL)
    ap.add_argument("--logits-rtol", type=float, default=ref.LOGITS_RTOL)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--verbose", "-v", action="store_true")
    return ap.parse_args(argv)


def fmt_shape(shape):
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


Report = ref.Report


def parse_loss(stdout):
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        return None, "gptc printed nothing on stdout"
    m = re.fullmatch(r"loss\s+(\S+)", lines[-1])
    if not m:
        return None, ("the last stdout line is %r, expected 'loss <value>'"
                      % lines[-1])
    try:
        return float(m.group(1)), None
    except ValueError:
        return None, "cannot parse the loss in %r" % lines[-1]


def describe_logits_error(rep, got, want32, want64, cfg, B, T, rtol):
    V = cfg.vocab_size
    err32, worst = ref.max_rel_error(got, want32)
    err64, _ = ref.max_rel_error(got, want64)
    base, _ = ref.max_rel_error(want32, want64)
    scale = float(want64.abs().max())
    rep.info("logits: max|gptc - torch32| / max|torch32| = %.3e (tolerance "
             "%.0e)" % (err32, rtol))
    rep.info("        max|gptc - torch64| / max|torch64| = %.3e; torch32 vs "
             "torch64 = %.3e; max|logit| = %.4f" % (err64, base, scale))
    if err32 <= rtol:
        return
    rep.fail("logits differ: %.3e > %.0e" % (err32, rtol))
    diff = (got.double() - want32.double()).abs()
    flat = diff.reshape(-1)
    k = min(8, flat.numel())
    top = torch.topk(flat, k).indices.tolist()
    rep.info("  worst elements (b, t, v): gptc vs torch32 (|diff| / max|torch|)")
    for i in top:
        b, rem = divmod(i, T * V)
        t, v = divmod(rem, V)
        rep.info("    (%d, %2d, %5d): %+.7e vs %+.7e  (%.2e)"
                 % (b, t, v, float(got[b, t, v]), float(want32[b, t, v]),
                    float(diff[b, t, v]) / scale))
    per_t = diff.amax(dim=(0, 2)) / scale
    rep.info("  max error by position t: " + " ".join(
        "%d:%.1e" % (t, float(e)) for t, e in enumerate(per_t)))
    per_b = diff.amax(dim=(1, 2)) / scale
    rep.info("  max error by batch row b: " + " ".join(
        "%d:%.1e" % (b, float(e)) for b, e in enumerate(per_b)))
    per_v = diff.amax(dim=(0, 1)) / scale
    bad_v = (per_v > rtol).nonzero().reshape(-1)
    if bad_v.numel():
        rep.info("  vocabulary columns over tolerance: %d of %d, from %d to %d"
                 % (bad_v.numel(), V, int(bad_v.min()), int(bad_v.max())))
    if float(per_t[0]) <= rtol < float(per_t.max()):
        rep.info("  hint: position 0 is right and later ones are not: look at "
                 "attention (mask, scale, heads) or position embeddings")
    ratio = got.double().abs().max() / scale
    rep.info("  max|gptc| / max|torch| = %.6f" % float(ratio))


def main(argv):
    args = parse_args(argv)
    rep = Report()
    cfg = ref.GPT2Config(args.n_layer, args.n_head, args.n_embd,
                         args.block_size, args.vocab_size)
    B, T = args.batch, args.seq
    os.makedirs(args.tmp, exist_ok=True)
    tag = "L%dH%dC%dBS%dV%d_B%dT%d_%s_%s%s" % (
        cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.vocab_size,
        B, T, args.data_format, args.weights_dtype,
        "_prefixed" if args.prefix else "")
    weights_path = os.path.join(args.tmp, "weights_%s.safetensors" % tag)
    data_path = os.path.join(args.tmp, "tokens_%s.bin" % tag)
    logits_path = os.path.join(args.tmp, "logits_%s.safetensors" % tag)
    for p in (weights_path, data_path, logits_path):
        if os.path.exists(p):
            os.remove(p)

    # Weights. The reference uses exactly the values that were stored.
    params = ref.init_params(cfg, seed=args.seed)
    if args.weights_dtype != "F32":
        stored_dtype = ref._ST_DTYPES[args.weights_dtype][0]
        params = {k: v.to(stored_dtype).to(torch.float32)
                  for k, v in params.items()}
    stored = ref.add_prefix(params, args.prefix)
    if args.shuffle_names:
        names = list(stored)
        perm = torch.randperm(len(names),
                              generator=torch.Generator().manual_seed(3))
        stored = {names[i]: stored[names[i]] for i in perm.tolist()}
    ref.write_safetensors(weights_path, stored, dtype=args.weights_dtype,
                          metadata={"format": "pt"} if args.metadata else None)

    # Tokens.
    n_tokens = B * T + 1 + args.extra_tokens
    tokens = ref.random_tokens(n_tokens, cfg.vocab_size, seed=args.seed)
    if args.data_format == "llmc":
        ref.write_llmc_shard(data_path, tokens)
    else:
        ref.write_nanogpt_bin(data_path, tokens)
    idx, tgt = ref.batch_from_tokens(tokens, B, T)

    # The reference, in float32 (the comparison) and float64 (diagnosis).
    with torch.no_grad():
        want32, loss32 = ref.forward(params, cfg, idx, tgt)
        p64 = {k: v.to(torch.float64) for k, v in params.items()}
        want64, loss64 = ref.forward(p64, cfg, idx, tgt)
    loss32, loss64 = float(loss32), float(loss64)

    cmd = [args.gptc, "eval", "--model=%s" % args.model] + cfg.cli_args() + [
        "--init-from=%s" % weights_path, "--data=%s" % data_path,
        "--batch=%d" % B, "--seq=%d" % T, "--logits-out=%s" % logits_path,
    ] + args.gptc_arg
    rep.info("config: %r, batch %d, seq %d, seed %d, prefix %r, data %s, "
             "weights %s" % (cfg, B, T, args.seed, args.prefix,
                             args.data_format, args.weights_dtype))
    rep.info("command: " + " ".join(shlex.quote(c) for c in cmd))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=args.timeout)
    except FileNotFoundError:
        rep.fail("cannot run %s" % args.gptc)
        rep.dump(sys.stderr)
        return 1
    except subprocess.TimeoutExpired:
        rep.fail("gptc took longer than %gs" % args.timeout)
        rep.dump(sys.stderr)
        return 1
    stdout = proc.stdout.decode("utf-8", "replace")
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        rep.fail("gptc exited with status %d" % proc.returncode)
    if proc.returncode != 0 or args.verbose:
        rep.info("--- gptc stdout ---\n" + stdout.rstrip())
        rep.info("--- gptc stderr ---\n" + stderr.rstrip())
    if proc.returncode != 0:
        rep.dump(sys.stderr)
        return 1

    # Loss.
    loss, why = parse_loss(stdout)
    if loss is None:
        rep.fail(why)
    else:
        rel = abs(loss - loss32) / abs(loss32)
        rep.info("loss: gptc %.9g, torch32 %.9g, torch64 %.9g, ln(V) %.6f; "
                 "relative error %.3e (tolerance %.0e)"
                 % (loss, loss32, loss64, math.log(cfg.vocab_size), rel,
                    args.loss_rtol))
        if not math.isfinite(loss) or not rel <= args.loss_rtol:
            rep.fail("loss differs: gptc %.9g vs torch %.9g (relative %.3e)"
                     % (loss, loss32, rel))

    # Logits.
    got = None
    if not os.path.exists(logits_path):
        rep.fail("gptc did not write %s" % logits_path)
    else:
        try:
            tensors = ref.read_safetensors(logits_path)
            dtypes = ref.read_safetensors_dtypes(logits_path)
        except Exception as exc:  # any malformed file is a failure
            rep.fail("cannot read %s: %s" % (logits_path, exc))
            tensors, dtypes = {}, {}
        if tensors and set(tensors) != {"logits"}:
            rep.fail("%s should hold exactly one tensor 'logits', holds %s"
                     % (logits_path, sorted(tensors)))
        if "logits" in tensors:
            t = tensors["logits"]
            if dtypes["logits"] != "F32":
                rep.fail("logits are %s, expected F32" % dtypes["logits"])
            if list(t.shape) != [B, T, cfg.vocab_size]:
                rep.fail("logits have shape %s, expected %s"
                         % (fmt_shape(t.shape),
                            fmt_shape([B, T, cfg.vocab_size])))
            elif not bool(torch.isfinite(t).all()):
                rep.fail("logits hold %d non-finite values"
                         % int((~torch.isfinite(t)).sum()))
            else:
                got = t.to(torch.float32)
    if got is not None:
        describe_logits_error(rep, got, want32, want64, cfg, B, T,
                              args.logits_rtol)
        if loss is not None:
            # Is gptc's loss consistent with its own logits?
            own = float(-ref.log_softmax(got.double()).gather(
                -1, tgt.unsqueeze(-1)).mean())
            rep.info("loss recomputed from gptc's logits: %.9g" % own)

    if rep.failed:
        rep.info("RESULT: MISMATCH (%s)" % tag)
        rep.dump(sys.stderr)
        return 1
    rep.info("RESULT: gptc matches PyTorch (%s)" % tag)
    rep.dump(sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
