#!/usr/bin/env python3
"""An independent PyTorch GPT-2 training step: the yardstick for gptc's.

The usual strong baseline: bf16 autocast, torch.compile, flash attention
through F.scaled_dot_product_attention, fused AdamW, the vocabulary padded
to 50304, tied embeddings. It trains for a few steps with the batch and
sequence length of the gptc run it is compared with, and reports tokens per
second (median over the timed steps, after warm-up and compilation), peak
memory and MFU on one line of JSON (--out) and one line of text. With
--profile N it then profiles N more steps (torch.profiler) and prints where
the time went: GEMMs, attention, the optimizer and the rest, per step, and
the top kernels; the same kinds gptc's GPTC_PROFILE=1 table ends with, so
that the two sets of kernels can be set side by side (summarize.py).

  python3 torch_gpt2.py --batch 16 --seq 1024 --steps 20 --out torch.json
  /usr/bin/python3 torch_gpt2.py --cpu-smoke    # tiny, CPU, no compile
  python3 torch_gpt2.py --profile 3              # and where the time goes

FLOPs per token: 6N + 6*L*C*T (N counts every parameter once, the tied
embedding included; the attention term is halved for the causal mask), the
same count gptc's training loop uses for MFU.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.x (the CPU smoke test): the same thing, unfused
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class GPT(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # GPT-2's residual projections are scaled by 1/sqrt(2L).
                scale = (2 * n_layer) ** -0.5 if name.endswith("proj.weight") else 1
                nn.init.normal_(p, 0.0, std * scale)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied lm_head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)),
                               targets.view(-1))


def batches(args, device):
    """Windows of a token shard (llm.c: 256 int32 header, then uint16), or
    fixed-seed random tokens when there is no shard."""
    n = args.batch * args.seq + 1
    if args.data:
        import numpy as np
        with open(args.data, "rb") as f:
            header = np.frombuffer(f.read(1024), dtype=np.int32)
            if header[0] != 20240520:
                f.seek(0)  # nanoGPT: header-less uint16
            tokens = np.frombuffer(f.read(), dtype=np.uint16).astype(np.int64)
        tokens = torch.from_numpy(tokens)
    else:
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, 50257 if args.vocab > 50257 else args.vocab,
                               (n * 8,), generator=g)
    pos = 0
    while True:
        if pos + n > tokens.numel():
            pos = 0
        buf = tokens[pos:pos + n]
        pos += n - 1
        x = buf[:-1].view(args.batch, args.seq)
        y = buf[1:].view(args.batch, args.seq)
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


# Kernel kinds, as gptc's profile names them (CudaProfile.cpp, kernelKind):
# flash attention (forward, backward and its preprocessing), cuBLAS's and
# CUTLASS's GEMMs, the optimizer (clip_grad_norm_'s norms and fused AdamW),
# and the rest (Triton's fused elementwise kernels, layernorm, the loss,
# the embedding). Checked in this order: cuDNN's attention kernels have
# "sm90_" in their names, as cuBLAS's GEMMs do.
KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    # Not "addmm" alone: Inductor names the elementwise kernel that adds
    # a GEMM's bias "triton_poi_fused_addmm_...".
    ("GEMM", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "sm90_", "sm80_",
              "triton_tem_", "aten::addmm", "aten::mm", "aten::bmm",
              "aten::matmul")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "lpnorm")),
)


def kernel_kind(name):
    low = name.lower()
    for kind, needles in KINDS:
        if any(n in low for n in needles):
            return kind
    return "other"


def profile_steps(step, data, n, cuda):
    """Runs n steps under torch.profiler; returns {name: [us, calls]} per
    step: the GPU's kernels, or on the CPU (--cpu-smoke) each op's self
    time."""
    from torch.profiler import ProfilerActivity, profile
    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(n):
            x, y = next(data)
            step(x, y).item()
        if cuda:
            torch.cuda.synchronize()
    kernels = {}
    if cuda:
        for e in prof.events():
            if str(e.device_type).endswith("CUDA"):
                k = kernels.setdefault(e.name, [0.0, 0])
                k[0] += e.time_range.elapsed_us() / n
                k[1] += 1 / n
    else:
        for e in prof.key_averages():
            if e.self_cpu_time_total > 0:
                kernels[e.key] = [e.self_cpu_time_total / n, e.count / n]
    return kernels


def profile_report(kernels, top=15):
    """The kinds' ms a step and share, then the top kernels, as text; and
    the kinds as a dict for the JSON."""
    total = sum(us for us, _ in kernels.values()) or 1.0
    kinds = {}
    for name, (us, _) in kernels.items():
        kind = kernel_kind(name)
        kinds[kind] = kinds.get(kind, 0.0) + us / 1000
    lines = [f"{'ms/step':>9} {'share':>6}  kind"]
    for kind in ("GEMM", "attention", "optimizer", "other"):
        ms = kinds.get(kind, 0.0)
        lines.append(f"{ms:9.3f} {100 * ms * 1000 / total:5.1f}%  {kind}")
    lines.append(f"{total / 1000:9.3f} 100.0%  all {len(kernels)} kernels")
    lines.append("")
    lines.append(f"{'ms/step':>9} {'calls':>7} {'us/call':>9}  kind       kernel")
    for name, (us, calls) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{us / 1000:9.3f} {calls:7.1f} {us / max(calls, 1e-9):9.1f}  "
                     f"{kernel_kind(name):10} {name[:100]}")
    return "\n".join(lines), {k: round(kinds.get(k, 0.0), 4)
                              for k in ("GEMM", "attention", "optimizer", "other")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--grad-accum", type=int, default=1, metavar="K",
                    help="micro-batches of B x T a step, their gradients "
                         "summed (each loss scaled by 1/K) before the update")
    ap.add_argument("--warmup", type=int, default=5,
                    help="untimed steps first (compilation happens here)")
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--data", default="", help="token shard (else random)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="dense bf16 peak for MFU (H100 SXM: 989)")
    ap.add_argument("--out", default="", help="write the result as JSON here")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="then profile N steps: time by kernel kind and "
                         "the top kernels")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="a tiny model on the CPU, fp32, no compile: checks "
                         "the script on a machine without a GPU")
    args = ap.parse_args()

    if args.cpu_smoke:
        args.batch, args.seq, args.steps, args.warmup = 2, 32, 3, 1
        args.n_layer, args.n_head, args.n_embd, args.vocab = 2, 2, 64, 512
        args.no_compile = True
    cuda = torch.cuda.is_available() and not args.cpu_smoke
    device = "cuda" if cuda else "cpu"
    torch.manual_seed(1337)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    model = GPT(args.vocab, max(args.seq, 1024), args.n_layer, args.n_head,
                args.n_embd).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1},
              {"params": no_decay, "weight_decay": 0.0}]
    extra = {"fused": True} if cuda else {}
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            **extra)
    step_model = model if args.no_compile else torch.compile(model)

    if args.grad_accum < 1:
        ap.error("--grad-accum must be at least 1")

    def step(x, y):
        # The first micro-batch is (x, y), the others come from the data, as
        # nanoGPT's loop takes them; backward() adds each one's gradients
        # into .grad.
        total = 0.0
        for k in range(args.grad_accum):
            if k > 0:
                x, y = next(data)
            with torch.autocast(device_type=device, dtype=torch.bfloat16,
                                enabled=cuda):
                loss = step_model(x, y)
            if args.grad_accum > 1:
                loss = loss / args.grad_accum
            loss.backward()
            total = total + loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total

    data = batches(args, device)
    losses, times = [], []
    for i in range(args.warmup + args.steps):
        x, y = next(data)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step(x, y)
        losses.append(loss.item())  # synchronises
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)

    tokens = args.batch * args.seq * args.grad_accum
    median = statistics.median(times)
    tok_s = tokens / median
    flops_per_token = 6 * n_params + 6 * args.n_layer * args.n_embd * args.seq
    result = {
        "impl": "pytorch" + ("" if args.no_compile else "+compile"),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "batch": args.batch, "seq": args.seq, "grad_accum": args.grad_accum,
        "params": n_params,
        "steps": args.steps, "ms_per_step": 1000 * median,
        "tok_per_s": tok_s,
        "mfu": (flops_per_token * tok_s / (args.peak_tflops * 1e12)
                if cuda else None),
        "peak_mem_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "loss_first": losses[0], "loss_last": losses[-1],
    }
    mfu = f"{100 * result['mfu']:.1f}%" if result["mfu"] is not None else "n/a"
    mem = (f"{result['peak_mem_bytes'] / 2**30:.2f} GiB"
           if result["peak_mem_bytes"] is not None else "n/a")
    print(f"{result['impl']}: {n_params / 1e6:.2f}M params, B={args.batch} "
          f"T={args.seq}"
          + (f" x{args.grad_accum} micro-batches" if args.grad_accum > 1 else "")
          + f": {result['ms_per_step']:.1f} ms/step, "
          f"{tok_s:,.0f} tok/s, MFU {mfu}, peak memory {mem}, loss "
          f"{losses[0]:.4f} -> {losses[-1]:.4f}")
    if args.profile > 0:
        text, kinds = profile_report(profile_steps(step, data, args.profile, cuda))
        print(f"profile of {args.profile} steps (torch.profiler, "
              f"{'GPU kernels' if cuda else 'CPU ops, self time'}):")
        print(text)
        result["profile_ms_per_step"] = kinds
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
            f.write("\n")
    ok = all(math.isfinite(l) for l in losses)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
