#!/usr/bin/python3
"""gptc's CPU training step against PyTorch's, same model, data and machine.

Runs `gptc train` for a few steps and an eager PyTorch 1.13 GPT-2 (the
independent model of test/reference/gpt2_torch.py, with autograd and
torch.optim.AdamW) on the same configuration, batch and thread count, and
prints the median step time of each and their ratio. CPU times are only
meaningful as that ratio: both run in the same invocation on the same cores.

Usage: bench/cpu_train_step.py [--steps=N] [--batch=B] [--seq=T] [--threads=N]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(REPO, "test", "reference"))
import gpt2_torch as G  # noqa: E402
import torch  # noqa: E402


def gptc_steps(args, cfg, data):
    cmd = [os.path.join(REPO, "build", "bin", "gptc"), "train",
           "--model=gpt2-tiny", "--n-layer=%d" % cfg.n_layer,
           "--n-head=%d" % cfg.n_head, "--n-embd=%d" % cfg.n_embd,
           "--block-size=%d" % cfg.block_size,
           "--vocab-size=%d" % cfg.vocab_size, "--data=" + data,
           "--device=cpu", "--batch=%d" % args.batch, "--seq=%d" % args.seq,
           "--steps=%d" % args.steps, "--lr=1e-3", "--warmup=1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=dict(os.environ,
                                  OMP_NUM_THREADS=str(args.threads))).stdout
    ms = [float(m) for m in re.findall(r"\| ([0-9.]+) ms \|", out)]
    return ms[2:]  # the first steps warm caches and allocators


def torch_steps(args, cfg, tokens):
    torch.set_num_threads(args.threads)
    params = {k: v.float().requires_grad_(True)
              for k, v in G.init_params(cfg, 0).items()}
    decay = [p for p in params.values() if p.dim() == 2]
    no_decay = [p for p in params.values() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    n = args.batch * args.seq
    ms = []
    for step in range(args.steps):
        window = tokens[step * n:step * n + n + 1]
        idx, tgt = G.batch_from_tokens(window, args.batch, args.seq)
        start = time.perf_counter()
        _, loss = G.forward(params, cfg, idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        ms.append((time.perf_counter() - start) * 1e3)
    return ms[2:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    cfg = G.GPT2Config(n_layer=4, n_head=4, n_embd=128, block_size=256,
                       vocab_size=50257)  # gpt2-tiny
    tokens = G.random_tokens(args.steps * args.batch * args.seq + 1,
                             cfg.vocab_size, 1)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tokens.bin")
        G.write_llmc_shard(data, tokens)
        ours = statistics.median(gptc_steps(args, cfg, data))
    theirs = statistics.median(torch_steps(args, cfg, tokens))
    print("gpt2-tiny B=%d T=%d, %d threads, median of %d steps"
          % (args.batch, args.seq, args.threads, args.steps - 2))
    print("gptc CPU executor: %.1f ms/step" % ours)
    print("PyTorch %s eager:  %.1f ms/step" % (torch.__version__, theirs))
    print("ratio (PyTorch / gptc): %.2f" % (theirs / ours))


if __name__ == "__main__":
    main()
