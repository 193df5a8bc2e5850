#!/usr/bin/env python3
"""`gptc eval --precision=bf16` against PyTorch in bf16.

Two references on the same weights and tokens (gpt2_torch.py's model):

  emulated  gptc's bf16 policy spelled out with explicit casts: every matmul
            and the attention read bf16 copies of their operands (x.to(bf16)),
            multiply with float32 accumulation, and round the result once to
            bf16; the attention's softmax and P·V run in float32 on those
            inputs (as a flash-attention kernel does); layernorm, GELU, bias
            and residual adds and the loss stay float32. A projection with a
            bias is a GEMM epilogue (gpt-fuse-matmul-epilogue): the bias
            (and the MLP's GELU) meet the float32 accumulator, and the
            result is rounded once, to bf16, as torch.autocast's linear
            writes it; as cuBLASLt reads the bias in D's type, the bias is
            a bf16-rounded copy (proj_narrow). The output projections'
            results are widened for the float32 residual add -- unless
            gpt-pad-dims padded N to a multiple of 64, which puts a slice
            between GEMM and bias, and the pass declines: the rounded
            product plus the float32 bias.
  autocast  torch.autocast("cpu", dtype=torch.bfloat16) around the same
            model (torch 1.13: matmul runs in bf16; the bias add promotes the
            result back to float32; the loss is taken in float32 from the
            logits, as autocast does for cross_entropy). Autocast also rounds
            the attention scores and probabilities to bf16, which gptc's
            flash attention does not: a looser tolerance.

Metrics as eval_matches_torch.py: logits max|Δ| / max|ref|, loss |Δ|/|ref|.

Tolerances. bf16 keeps 8 significant bits: one rounding is within 2^-9
(2.0e-3) relative, one unit in the last place is 2^-8 (3.9e-3).
- emulated, logits: gptc and the emulation round the same values, but
  their float32 sums differ in the last bits, so now and then a value near
  a rounding tie lands one bf16 ulp apart. A flip in q or k moves scores
  that the softmax (weights of std 0.1 make it sharp) can amplify: over
  seeds 1-5 the largest logit moved by up to 5.5e-3 of the largest logit
  (1.5 ulps); every seed has a few such flips, with every projection
  rounding its result. So two measures: the
  root-mean-square difference relative to the largest logit, tol 8e-4
  (measured 3.0e-5 to 7.5e-4: flips touch few logits), and the largest
  difference, tol 2^-6 (1.6e-2, four ulps: a wrong rounding point or
  operand anywhere shows as far more).
  loss 1e-4: the loss averages B*T positions, so a few flipped logits move
  it by far less than one ulp.
- autocast, logits 2^-5 (3.1e-2), loss 5e-3: autocast adds two bf16 roundings
  per attention (scores, probabilities; each 2^-9 relative) and a bf16
  P·V in every layer; their errors add over the layers (about 2L+1 more
  roundings of 2^-9 each on the path to the logits, ~1e-2 for L = 2, times
  a margin of 3).
The test is not vacuous: the float32 model (no casts) must be farther from
the emulation than the emulated RMS tolerance (measured 1.27e-3 to 1.43e-3),
or a policy that did nothing would pass.
"""

import argparse
import math
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as ref  # noqa: E402

BF16 = torch.bfloat16


def rnd(x):
    """Round a float32 tensor to bf16 (nearest, ties to even), keep float32."""
    return x.to(BF16).to(torch.float32)


def mm(a, b):
    """bf16 operands, float32 accumulation, one rounding of the result."""
    return rnd(rnd(a) @ rnd(b))


def mm_bias(a, b, bias):
    """gpt.matmul_epilogue: bf16 operands, float32 accumulation, the float32
    bias added to the accumulator; the float32 result is not rounded."""
    return rnd(a) @ rnd(b) + bias


def proj_narrow(a, w, bias, act=lambda t: t, pad_multiple=64):
    """A projection (and activation) as gptc runs it: an epilogue that
    writes bf16, the bias rounded to bf16 as D's type, when its N is not
    padded; else the rounded product plus the float32 bias."""
    if w.shape[1] % pad_multiple == 0:
        return rnd(act(mm_bias(a, w, rnd(bias))))
    return act(mm(a, w) + bias)


def emulated_forward(p, cfg, idx, tgt):
    B, T = idx.shape
    C, H, D = cfg.n_embd, cfg.n_head, cfg.head_dim
    x = p["wte.weight"][idx] + p["wpe.weight"][torch.arange(T)]
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg.n_layer):
        pre = "h.%d." % i
        a = ref.layer_norm(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"])
        qkv = proj_narrow(a, p[pre + "attn.c_attn.weight"],
                          p[pre + "attn.c_attn.bias"])

        def heads(t):
            return rnd(t.reshape(B, T, H, D).permute(0, 2, 1, 3))
        q, k, v = (heads(qkv[..., j * C:(j + 1) * C]) for j in range(3))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        s = s.masked_fill(~allowed, float("-inf"))
        y = rnd(torch.softmax(s, dim=-1) @ v)
        y = y.permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + proj_narrow(y, p[pre + "attn.c_proj.weight"],
                            p[pre + "attn.c_proj.bias"])
        m = ref.layer_norm(x, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"])
        h = proj_narrow(m, p[pre + "mlp.c_fc.weight"], p[pre + "mlp.c_fc.bias"],
                        ref.gelu_tanh)
        x = x + proj_narrow(h, p[pre + "mlp.c_proj.weight"],
                            p[pre + "mlp.c_proj.bias"])
    x = ref.layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = mm(x, p["wte.weight"].t())
    return logits, loss_of(logits, tgt)


def loss_of(logits, tgt):
    logp = ref.log_softmax(logits.to(torch.float32))
    return -logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).mean()


def inf_rel(got, want):
    return float((got - want).abs().max() / want.abs().max())


def rms_rel(got, want):
    return float(((got - want) ** 2).mean().sqrt() / want.abs().max())


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gptc", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--vocab-size", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--weight-std", type=float, default=0.1,
                    help="large enough that bf16 rounding shows in the logits")
    args = ap.parse_args(argv)
    cfg = ref.GPT2Config(args.n_layer, args.n_head, args.n_embd,
                         args.block_size, args.vocab_size)
    B, T = args.batch, args.seq
    os.makedirs(args.tmp, exist_ok=True)
    weights = os.path.join(args.tmp, "bf16_weights.safetensors")
    data = os.path.join(args.tmp, "bf16_tokens.bin")
    logits_path = os.path.join(args.tmp, "bf16_logits.safetensors")

    params = ref.init_params(cfg, seed=args.seed, weight_std=args.weight_std)
    ref.write_safetensors(weights, params)
    tokens = ref.random_tokens(B * T + 1, cfg.vocab_size, seed=args.seed)
    ref.write_llmc_shard(data, tokens)
    idx, tgt = ref.batch_from_tokens(tokens, B, T)

    with torch.no_grad():
        emu_logits, emu_loss = emulated_forward(params, cfg, idx, tgt)
        f32_logits, f32_loss = ref.forward(params, cfg, idx, tgt)
        with torch.autocast("cpu", dtype=BF16):
            ac_logits, _ = ref.forward(params, cfg, idx)
        ac_logits = ac_logits.to(torch.float32)
        ac_loss = loss_of(ac_logits, tgt)

    cmd = [args.gptc, "eval", "--precision=bf16"] + cfg.cli_args() + [
        "--init-from=" + weights, "--data=" + data, "--batch=%d" % B,
        "--seq=%d" % T, "--logits-out=" + logits_path]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print("FAIL: gptc eval exited %d: %s" % (proc.returncode, proc.stderr))
        return 1
    loss = float(proc.stdout.strip().splitlines()[-1].split()[1])
    logits = ref.read_safetensors(logits_path)["logits"].to(torch.float32)

    tol_emu_rms, tol_emu_logits, tol_emu_loss = 8e-4, 2.0 ** -6, 1e-4
    tol_ac_logits, tol_ac_loss = 2.0 ** -5, 5e-3
    failures = 0
    emu_rms = rms_rel(logits, emu_logits)
    ok = emu_rms <= tol_emu_rms
    failures += not ok
    print("%s: gptc bf16 vs emulated: logits rms %.3e (tol %.1e)"
          % ("PASS" if ok else "FAIL", emu_rms, tol_emu_rms))
    rows = [
        ("emulated", inf_rel(logits, emu_logits),
         abs(loss - float(emu_loss)) / abs(float(emu_loss)),
         tol_emu_logits, tol_emu_loss),
        ("autocast", inf_rel(logits, ac_logits),
         abs(loss - float(ac_loss)) / abs(float(ac_loss)),
         tol_ac_logits, tol_ac_loss),
    ]
    for name, dl, dloss, tl, tloss in rows:
        ok = dl <= tl and dloss <= tloss
        failures += not ok
        print("%s: gptc bf16 vs %s: logits %.3e (tol %.3e), loss %.3e "
              "(tol %.1e)" % ("PASS" if ok else "FAIL", name, dl, tl, dloss,
                              tloss))
    f32_gap = rms_rel(f32_logits, emu_logits)
    ok = f32_gap > tol_emu_rms
    failures += not ok
    print("%s: float32 model vs emulated bf16: logits rms %.3e (must exceed "
          "%.1e)" % ("PASS" if ok else "FAIL", f32_gap, tol_emu_rms))
    print("info: autocast vs emulated: logits %.3e; losses gptc %.6f "
          "emulated %.6f autocast %.6f float32 %.6f"
          % (inf_rel(ac_logits, emu_logits), loss, float(emu_loss),
             float(ac_loss), float(f32_loss)))
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
