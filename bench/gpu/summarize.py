#!/usr/bin/env python3
"""Reads the logs bench/gpu/run.sh wrote and prints one summary table.

Inputs, all in the results directory (missing ones show as "-", or as
"not run"):
  check-tiny-fp32.log, check-tiny-bf16.log   train_gpt2 --check-kernels
  check-tiny-bf16-fallback.log               the same, GPTC_GEMM_FALLBACK=1
  check-tiny-bf16-dgelu.log                  the same, GPTC_GEMM_DGELU=cublaslt
  check-gpt2w-bf16.log                       the same, one layer of GPT-2 widths
  check-gpt2w-bf16-atomic.log                the same, --attention-backward=atomic
  check-gpt2w-bf16-wide.log                  the same (T=256), --attention-forward=mma128
                                             and --attention-backward=atomic128
  check-gpt2w-bf16-mma2.log                  the same (T=256), --attention-forward=mma2
  check-gpt2w-bf16-pipe.log                  the same, --attention-forward=mma-pipe
  check-gpt2w-bf16-mma.log                   the same, --attention-forward=mma (the
                                             default forward but on sm_90a)
  check-gpt2w-bf16-wgmma.log                 the same, --attention-forward=wgmma
  check-gpt2w-bf16-wgmmabwd.log              the same, --attention-backward=wgmma
  check-gpt2w-bf16-wgmmaov.log               the same, --attention-backward=wgmma-overlap
  check-gpt2w-bf16-wgmmasplit.log            the same, --attention-backward=wgmma-split
  check-gpt2w-bf16-wgmmass.log               the same, --attention-backward=wgmma-split-ss
  check-gpt2w-bf16-wgmmads.log               the same, --attention-backward=wgmma-ds
  check-gpt2w-bf16-wgmmabulk.log             the same, --attention-backward=wgmma-bulk
  check-gpt2w-bf16-wgmmaord.log              the same, --attention-backward=wgmma-ordered
  check-gpt2w-bf16-wgmmaovf.log              the same (T=256), --attention-forward=wgmma-overlap
  check-gpt2w-bf16-wgmma128.log              the same (T=256), --attention-forward=wgmma128
  check-gpt2w-bf16-wgmmak128.log             the same (T=384), --attention-forward=wgmma-k128
  check-gpt2w-bf16-wgmmassf.log              the same, --attention-forward=wgmma-ss
  check-gpt2w-bf16-auto.log                  the same (T=256), both directions auto
  check-gpt2w-bf16-maxfirst.log              check-gpt2w-bf16's program with
                                             GPTC_VARIANT=maxfirst,own (the
                                             loss gradient's max-first form)
  check-tiny-bf16-cudnn.log,                 check-tiny-bf16 and check-gpt2w-bf16's
  check-gpt2w-bf16-cudnn{,-dq-sums}.log      programs with GPTC_VARIANT=cudnn (cuDNN's
                                             attention), and with GPTC_CUDNN=all
                                             GPTC_VARIANT=cudnn-dq-sums,cudnn
  check-gpt2lw-bf16{,-uncapped}.log          the same at C=1280 (GPT-2 large's
                                             width), as timed and with
                                             GPTC_VARIANT=uncapped
  attention.log                              attention_bench: the kernels alone
  wgmma-probe.log                            wgmma_probe: the tensor cores alone, by layout
  tiny-{fp32,bf16}-{cuda,cpu}.log            step lines, same seed and data
  tiny-bf16-accum2-{cuda,cpu}.log            the same at --grad-accum=2
  gpt2-bf16.log                              the timed GPT-2 124M run
  gpt2-bf16-profile.log                      the GPTC_PROFILE=1 run
  gpt2-bf16-atomic-profile.log               the same, GPTC_VARIANT=mma,atomic
  gpt2-bf16-wide{,-profile}.log              the auto program with
                                             GPTC_VARIANT=mma2,atomic128
  gpt2-bf16-untuned.log                      the GPTC_GEMM_TUNE=0 run
  gpt2-bf16-nopdl.log                        GPTC_PDL=0 (plain launches)
  gpt2-bf16-overlap.log                      --overlap-weight-grads
  gpt2-bf16-biasgemm.log                     --bias-grads=gemm
  gpt2-bf16-biasgelu{,-profile}.log          --bias-grads=gelu
  gpt2-bf16-castweights.log                  --weight-copies=false
  gpt2-bf16-accum4.log                       the default program, --grad-accum=4
  gpt2-bf16-addaccum4.log                    --accumulate-in-place=false, --grad-accum=4
  torch-accum4.{log,json}                    PyTorch, --grad-accum=4
  gpt2-bf16-dgelu.log                        GPTC_GEMM_DGELU=cublaslt
  gpt2-bf16-recompute.log                    --recompute=gelu,layernorm
  gpt2-bf16-wgmma.log                        GPTC_VARIANT=mma,wgmma
  gpt2-bf16-auto{,-profile,-cudnn-all}.log   --attention-forward=auto
                                             --attention-backward=auto
  gpt2-bf16-atomic.log                       GPTC_VARIANT=mma,atomic
  gpt2-{medium,large}-bf16.log               GPT-2 medium (B) and large (B/2) timed
  torch.json, torch.log                      bench/gpu/torch_gpt2.py --out --profile
  gemms.log                                  bench/gpu/torch_gemms.py: the profile's
                                             GEMM shapes timed in PyTorch
  *.mem                                      peak MiB from nvidia-smi samples
Writes summary.json beside them, and benchmarks-entry.md: a draft of the
docs/benchmarks.md entry (machine, commit, tables as measured). Python 3
standard library only.
"""

import json
import math
import os
import re
import statistics
import sys

STEP = re.compile(r"^step\s+(\d+)(?:/\d+)?\s*\|\s*loss\s+([-+0-9.eEnaif]+)"
                  r"(?:.*?\|\s*([0-9.]+)\s*ms)?")
CHECK = re.compile(r"check-kernels: (\d+) launches, (\d+) failures?")
# "backward wgmma-split flash_attention_qkv_grad_0   401.2 us  160.8 TFLOP/s  ..."
BENCH_ROW = re.compile(r"^(forward|backward)\s+(\S+)\s+\S+\s+([0-9.]+) us")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def steps(text):
    """[(step, loss, ms or None)] from llm.c-style step lines."""
    out = []
    for line in (text or "").splitlines():
        m = STEP.match(line.strip())
        if m:
            out.append((int(m.group(1)), float(m.group(2)),
                        float(m.group(3)) if m.group(3) else None))
    return out


def peak_mib(path):
    text = read(path)
    values = [float(v) for v in (text or "").split() if v.replace(".", "").isdigit()]
    return max(values) if values else None


def gpt2_flops_per_token(layers=12, embd=768, vocab=50304, block=1024, seq=1024):
    params = (vocab * embd + block * embd + layers * (12 * embd * embd + 13 * embd)
              + 2 * embd)
    return params, 6 * params + 6 * layers * embd * seq


KIND = re.compile(r"^\s*([0-9.]+)\s+[0-9.]+%\s+kind: (\w+)")
RUNS = re.compile(r"^timed runs: .*\bupdate (\d+)")


def kinds_side_by_side(prof, torch_json, torch_log, lines, summary):
    """gptc's time by kernel kind (the GPTC_PROFILE=1 table's "kind:" rows,
    over its timed runs of update, one a step) beside PyTorch's
    (torch_gpt2.py --profile), in ms a step; their sums, the timed runs'
    steps (the benchmark table's "gptc" and PyTorch rows) and what lies
    between: the step's time outside the kernels (launch gaps, host
    waits); then PyTorch's top kernels."""
    kinds, runs = {}, None
    for row in prof.splitlines():
        m = KIND.match(row)
        if m:
            kinds[m.group(2)] = float(m.group(1))
        m = RUNS.match(row)
        if m:
            runs = int(m.group(1))
    theirs = json.loads(torch_json).get("profile_ms_per_step", {}) if torch_json else {}
    if not kinds or not runs:
        return
    ours = {k: v / runs for k, v in kinds.items()}
    summary["kinds_ms_per_step"] = {"gptc": ours, "pytorch": theirs}
    lines.append("")
    lines.append(f"time by kind, ms a step (gptc: GPTC_PROFILE=1 over {runs} steps; "
                 "PyTorch: torch_gpt2.py --profile):")
    lines.append(f"{'kind':10} {'gptc':>8} {'PyTorch':>8} {'gptc-PyTorch':>13}")
    def row(name, a, b):
        diff = f"{a - b:+13.3f}" if a is not None and b is not None else f"{'-':>13}"
        mine = f"{a:8.3f}" if a is not None else f"{'-':>8}"
        their = f"{b:8.3f}" if b is not None else f"{'-':>8}"
        lines.append(f"{name:10} {mine} {their} {diff}")
    for kind in ("GEMM", "attention", "optimizer", "other"):
        row(kind, ours.get(kind, 0.0), theirs.get(kind))
    # (The kinds cover every kernel: their sum is the profile's.)
    sums = (sum(ours.values()), sum(theirs.values()) if theirs else None)
    row("kernels", *sums)
    bench = summary.get("bench", {}).get("rows", [])
    step = (next((r["ms_per_step"] for r in bench if r["impl"] == "gptc"), None),
            next((r["ms_per_step"] for r in bench
                  if r["impl"].startswith("pytorch") and "micro" not in r["impl"]),
                 None))
    row("step", *step)
    gaps = tuple(s - k if s is not None and k is not None else None
                 for s, k in zip(step, sums))
    row("between", *gaps)
    summary["kinds_ms_per_step"]["between_kernels"] = {"gptc": gaps[0],
                                                       "pytorch": gaps[1]}
    log = (torch_log or "").splitlines()
    start = next((i for i, l in enumerate(log) if l.startswith("profile of ")), None)
    if start is not None:
        lines.append("PyTorch's " + log[start])
        lines.extend(log[start + 1:start + 24])


def markdown_entry(res, summary, lines):
    """A draft of the docs/benchmarks.md entry for this run: the machine,
    the bundle's commit, the checks and the timings as measured, and the
    summary's other lines verbatim. What the figures mean is for the
    session to write."""
    smi = read(os.path.join(res, "nvidia-smi.txt")) or ""
    gpu = re.search(r"NVIDIA [A-Z][A-Za-z0-9 ]*?(?:HBM3e?|PCIe|SXM\w*|NVL)", smi)
    driver = re.search(r"Driver Version:\s*([0-9.]+)", smi)
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", smi)
    config = os.environ.get("BUNDLE_CONFIG", "")
    made = re.search(r"on (\S+) from (\S+)", read(config) or "") if config else None
    out = [f"{os.environ.get('RUN_DATE', '?')}, "
           f"{gpu.group(0) if gpu else 'GPU ?'}, driver "
           f"{driver.group(1) if driver else '?'} (CUDA {cuda.group(1) if cuda else '?'}). "
           f"Bundle from {made.group(2) if made else '?'} (prepare.sh at "
           f"{made.group(1) if made else '?'}), `bash bench/gpu/run.sh "
           f"{os.environ.get('RUN_STEPS', '').strip()}`"
           f" ({os.environ.get('RUN_SECONDS', '?')} s).", ""]
    checks = summary.get("checks", {})
    if checks:
        out += ["| check | launches | failures |", "|---|---:|---:|"]
        out += [f"| {k if k.startswith('gpt2') else 'tiny-' + k} | "
                f"{v['launches']} | {v['failures']} |" for k, v in checks.items()]
        out.append("")
    rows = summary.get("bench", {}).get("rows", [])
    if rows:
        b = summary["bench"]
        out += [f"GPT-2 124M bf16, B={b['batch']}, T={b['seq']}:", "",
                "| impl | ms/step | tok/s | MFU | peak MiB | loss |",
                "|---|---:|---:|---:|---:|---|"]
        for r in rows:
            mem = f"{r['peak_mib']:,.0f}" if r.get("peak_mib") else "-"
            out.append(f"| {r['impl']} | {r['ms_per_step']:.1f} | "
                       f"{r['tok_per_s']:,.0f} | {100 * r['mfu']:.1f}% | {mem} | "
                       f"{r['loss_first']:.3f} → {r['loss_last']:.3f} |")
        out.append("")
    out += ["The run's summary, verbatim:", "", "```"] + lines + ["```", ""]
    return "\n".join(out)


def main():
    res = sys.argv[1] if len(sys.argv) > 1 else "."
    batch = int(os.environ.get("BATCH", "16"))
    seq = int(os.environ.get("SEQ", "1024"))
    peak = float(os.environ.get("PEAK_TFLOPS", "989")) * 1e12
    summary = {"checks": {}, "tiny": {}, "bench": {}}
    lines = []

    # Kernel checks.
    for prec in ("fp32", "bf16", "bf16-fallback", "bf16-dgelu", "gpt2w-bf16",
                 "gpt2w-bf16-atomic", "gpt2w-bf16-wgmma",
                 "gpt2w-bf16-wgmmabwd", "gpt2w-bf16-wgmmaov",
                 "gpt2w-bf16-wgmmasplit", "gpt2w-bf16-wgmmass",
                 "gpt2w-bf16-wgmmads", "gpt2w-bf16-wgmmabulk",
                 "gpt2w-bf16-wgmmaord",
                 "gpt2w-bf16-wgmmaovf",
                 "gpt2w-bf16-wgmma128", "gpt2w-bf16-wgmmak128",
                 "gpt2w-bf16-wgmmassf",
                 "gpt2w-bf16-wide",
                 "gpt2w-bf16-mma2", "gpt2w-bf16-pipe", "gpt2w-bf16-mma",
                 "gpt2w-bf16-auto", "gpt2w-bf16-maxfirst",
                 "bf16-cudnn", "gpt2w-bf16-cudnn",
                 "gpt2w-bf16-cudnn-dq-sums",
                 "gpt2lw-bf16",
                 "gpt2lw-bf16-uncapped"):
        log = (f"check-{prec}.log" if prec.startswith(("gpt2w", "gpt2lw"))
               else f"check-tiny-{prec}.log")
        text = read(os.path.join(res, log))
        m = CHECK.search(text or "")
        if m:
            launches, failures = int(m.group(1)), int(m.group(2))
            summary["checks"][prec] = {"launches": launches, "failures": failures}
            verdict = "PASS" if failures == 0 else "FAIL"
            lines.append(f"check-kernels {log[6:-4]:19}: {launches} launches, "
                         f"{failures} failures  {verdict}")
            fails = [l for l in text.splitlines()
                     if ("FAIL" in l and l.startswith("[")) or l.startswith("    also ")]
            lines.extend("    " + l[:300] for l in fails[:8])
            if len(fails) > 8:
                lines.append(f"    ... {len(fails) - 8} more in {log}")
        elif text is None:
            lines.append(f"check-kernels {log[6:-4]:19}: not run (no log)")
        else:
            lines.append(f"check-kernels {log[6:-4]:19}: did not finish (see log)")

    # Epilogues cuBLASLt refused (the runtime ran them as gemm_fallback
    # kernels; one line per epilogue and shape in any log).
    refused = set()
    for name in sorted(os.listdir(res)):
        if name.endswith(".log") and "fallback" not in name:
            for line in (read(os.path.join(res, name)) or "").splitlines():
                if line.startswith("gptc: cuBLASLt refused the epilogue"):
                    refused.add(line[len("gptc: "):][:200])
    summary["refused_epilogues"] = sorted(refused)
    lines.append(f"cuBLASLt epilogues refused: {len(refused) or 'none'}")
    lines.extend("    " + l for l in sorted(refused)[:8])

    # Tiny training: CUDA against the CPU backend, step by step.
    for prec, tol in (("fp32", 1e-3), ("bf16", 2e-2), ("bf16-accum2", 2e-2)):
        gpu = steps(read(os.path.join(res, f"tiny-{prec}-cuda.log")))
        cpu = steps(read(os.path.join(res, f"tiny-{prec}-cpu.log")))
        n = min(len(gpu), len(cpu))
        if n == 0:
            lines.append(f"tiny {prec} cuda vs cpu: no steps to compare")
            continue
        rel = max(abs(g[1] - c[1]) / max(abs(c[1]), 1e-12)
                  for g, c in zip(gpu[:n], cpu[:n]))
        ok = rel <= tol and all(math.isfinite(g[1]) for g in gpu[:n])
        summary["tiny"][prec] = {"steps": n, "max_rel_loss_diff": rel,
                                 "cuda_last": gpu[n - 1][1], "cpu_last": cpu[n - 1][1]}
        lines.append(f"tiny {prec} cuda vs cpu: {n} steps, loss {cpu[0][1]:.4f} -> "
                     f"{cpu[n - 1][1]:.4f} (cpu) / {gpu[n - 1][1]:.4f} (cuda), max "
                     f"rel diff {rel:.2e} (tol {tol:.0e})  {'PASS' if ok else 'FAIL'}")

    # The benchmark table.
    params, fpt = gpt2_flops_per_token(seq=seq)
    rows = []
    # (K: micro-batches a step; their tokens count, K·B·T a step.)
    for impl, log, K in (("gptc", "gpt2-bf16", 1),
                         ("gptc, untuned GEMMs", "gpt2-bf16-untuned", 1),
                         ("gptc, plain launches (GPTC_PDL=0)", "gpt2-bf16-nopdl",
                          1),
                         ("gptc, side-stream weight grads", "gpt2-bf16-overlap", 1),
                         ("gptc, bias gradients in the GEMMs", "gpt2-bf16-biasgemm", 1),
                         ("gptc, c_fc's bias gradient with GELU's derivative",
                          "gpt2-bf16-biasgelu", 1),
                         ("gptc, weights cast each step", "gpt2-bf16-castweights", 1),
                         ("gptc, mma2 + atomic128 attention", "gpt2-bf16-wide", 1),
                         ("gptc, atomic attention backward", "gpt2-bf16-atomic", 1),
                         ("gptc, DGELU in cuBLASLt", "gpt2-bf16-dgelu", 1),
                         ("gptc, recompute", "gpt2-bf16-recompute", 1),
                         ("gptc, wgmma attention backward", "gpt2-bf16-wgmma", 1),
                         ("gptc, attention auto", "gpt2-bf16-auto", 1),
                         ("gptc, attention auto, GPTC_CUDNN=all",
                          "gpt2-bf16-auto-cudnn-all", 1),
                         ("gptc, 4 micro-batches a step", "gpt2-bf16-accum4", 4),
                         ("gptc, 4 micro-batches, sums by the add",
                          "gpt2-bf16-addaccum4", 4)):
        g = steps(read(os.path.join(res, log + ".log")))
        timed = [s for s in g[3:] if s[2]] or [s for s in g if s[2]]
        if timed:
            ms = statistics.median(s[2] for s in timed)
            tok = K * batch * seq / (ms / 1000)
            rows.append({"impl": impl, "ms_per_step": ms, "tok_per_s": tok,
                         "mfu": fpt * tok / peak,
                         "peak_mib": peak_mib(os.path.join(res, log + ".mem")),
                         "loss_first": g[0][1], "loss_last": g[-1][1]})
    for name in ("torch", "torch-accum4"):
        t = read(os.path.join(res, name + ".json"))
        if not t:
            continue
        j = json.loads(t)
        K = j.get("grad_accum", 1)
        impl = j.get("impl", "pytorch") + (f", {K} micro-batches" if K > 1 else "")
        rows.append({"impl": impl, "ms_per_step": j["ms_per_step"],
                     "tok_per_s": j["tok_per_s"], "mfu": fpt * j["tok_per_s"] / peak,
                     "peak_mib": peak_mib(os.path.join(res, name + ".mem")),
                     "loss_first": j["loss_first"], "loss_last": j["loss_last"]})
    summary["bench"] = {"batch": batch, "seq": seq, "params": params,
                        "flops_per_token": fpt, "peak_flops": peak, "rows": rows}
    lines.append("")
    lines.append(f"GPT-2 124M bf16, B={batch} T={seq}, {fpt / 1e6:.1f} MFLOP/token, "
                 f"MFU against {peak / 1e12:.0f} TFLOP/s")
    lines.append(f"{'impl':31} {'ms/step':>9} {'tok/s':>10} {'MFU':>6} "
                 f"{'peak MiB':>9}  loss")
    for r in rows:
        mem = f"{r['peak_mib']:.0f}" if r["peak_mib"] else "-"
        lines.append(f"{r['impl']:31} {r['ms_per_step']:9.1f} {r['tok_per_s']:10,.0f} "
                     f"{100 * r['mfu']:5.1f}% {mem:>9}  {r['loss_first']:.3f} -> "
                     f"{r['loss_last']:.3f}")
    if not rows:
        lines.append("(no timings: see gpt2-bf16.log and torch.log)")
    tuned = read(os.path.join(res, "gpt2-bf16.log")) or ""
    for line in tuned.splitlines():
        if "GPTC_GEMM_TUNE:" in line:
            lines.append(line.strip())
            # The totals first, then where the kept algorithms lie in the
            # heuristic's lists, then one line a GEMM whose ways were timed
            # (every way's ms, the kept one marked).
            if "gemm_tuning" not in summary:
                summary["gemm_tuning"] = line.strip()
            elif "places in the heuristic's lists" in line:
                summary["gemm_places"] = line.strip()
            else:
                summary.setdefault("gemm_ways", []).append(line.strip())
    # What the default program timed at load (its attention algorithms,
    # the layernorms' twins, the loss gradient's two forms) and ran.
    for line in tuned.splitlines():
        if "kernel variants timed at load" in line:
            lines.append(line.strip())
            summary.setdefault("default_variants", []).append(line.strip())
    # Two logs copied whole (but run.sh's "==" lines): gptc's GEMM shapes
    # against PyTorch's products of the same layouts, and the tensor cores
    # alone by layout (wgmma_probe).
    for log, key in (("gemms.log", "gemms"), ("wgmma-probe.log", "wgmma_probe")):
        kept = [l.rstrip() for l in (read(os.path.join(res, log)) or "").splitlines()
                if l.strip() and not l.startswith("==")]
        if kept:
            lines.append("")
            lines.extend(kept)
            summary[key] = kept

    # What auto timed at load, and what it ran.
    auto = read(os.path.join(res, "gpt2-bf16-auto.log")) or ""
    timed = [l.strip() for l in auto.splitlines()
             if "kernel variants timed at load" in l]
    if timed:
        lines.extend(timed)
        summary["attention_variants"] = timed

    # Larger models: the step, and what their variants (the layernorm
    # gradients' uncapped twins) were timed at.
    for name, layers, embd, b in (("medium", 24, 1024, batch),
                                  ("large", 36, 1280, batch // 2)):
        text = read(os.path.join(res, f"gpt2-{name}-bf16.log")) or ""
        g = steps(text)
        timed = [s for s in g[3:] if s[2]] or [s for s in g if s[2]]
        if not timed:
            continue
        _, fpt_m = gpt2_flops_per_token(layers=layers, embd=embd, seq=seq)
        ms = statistics.median(s[2] for s in timed)
        tok = b * seq / (ms / 1000)
        mem = peak_mib(os.path.join(res, f"gpt2-{name}-bf16.mem"))
        row = {"ms_per_step": ms, "tok_per_s": tok, "mfu": fpt_m * tok / peak,
               "peak_mib": mem, "batch": b,
               "loss_first": g[0][1], "loss_last": g[-1][1],
               "variants": [l.strip() for l in text.splitlines()
                            if "kernel variants timed at load" in l]}
        summary[f"gpt2_{name}"] = row
        lines.append(f"GPT-2 {name} bf16, B={b} T={seq}: {ms:.1f} ms/step, "
                     f"{tok:,.0f} tok/s, MFU {100 * row['mfu']:.1f}%, peak "
                     f"{mem or 0:.0f} MiB, loss {row['loss_first']:.3f} -> "
                     f"{row['loss_last']:.3f}")
        lines.extend("    " + l for l in row["variants"])

    prof = read(os.path.join(res, "gpt2-bf16-profile.log"))
    if prof and "total ms" in prof:
        lines.append("")
        lines.append("top kernels (GPTC_PROFILE=1), each against its floor "
                     "(bytes at the DRAM peak or FLOPs at the bf16 peak):")
        start = prof.index("total ms")
        table = prof[start:].splitlines()
        lines.extend(table[:16])
        # The totals and the peaks the floors used, wherever the cut fell.
        for row in table[16:]:
            if " all " in row and "kernels" in row or row.startswith("floors:"):
                lines.append(row)
        for row in table:
            m = re.match(r"\s*([0-9.]+)\s+\d+\s+100\.0%\s+([0-9.]+)\s+([0-9.]+)%\s+all", row)
            if m:
                summary["profile"] = {"total_ms": float(m.group(1)),
                                      "of_floor": float(m.group(3)) / 100}
        kinds_side_by_side(prof, read(os.path.join(res, "torch.json")),
                           read(os.path.join(res, "torch.log")), lines, summary)

    # The attention kernels alone (attention_bench).
    bench = read(os.path.join(res, "attention.log")) or ""
    rows = [r for r in bench.splitlines()
            if r.startswith(("attention_bench:", "forward ", "rowdot ",
                             "backward "))]
    if rows:
        lines.append("")
        lines.extend(rows)
        summary["attention_bench"] = rows
        # The fastest of each direction among the algorithms the auto
        # program carries (the labels of its timed-at-load lines; the
        # bench's other rows are older versions kept for comparison),
        # counting only rows that ran and matched their reference.
        labels = set(re.findall(r"(?:: |, )([\w-]+) [0-9.]+ ms", auto))
        best = {}
        for r in rows:
            m = BENCH_ROW.match(r)
            if not m or (labels and m.group(2) not in labels):
                continue
            role, name, us = m.group(1), m.group(2), float(m.group(3))
            if ("FAIL" in r or "PASS" not in r) and "(the reference)" not in r:
                continue
            if role not in best or us < best[role][1]:
                best[role] = (name, us)
        for role in ("forward", "backward"):
            if role in best:
                name, us = best[role]
                lines.append(f"fastest {role} in the bench: {name}, {us:.1f} us")
                summary.setdefault("attention_bench_fastest", {})[role] = {
                    "algorithm": name, "us": us}

    # The other attention kernels' own profiles: their attention rows, to
    # set beside the default's above.
    for log, what, key in (
            ("gpt2-bf16-wide-profile", "--attention-forward=mma2 "
             "--attention-backward=atomic128", "wide_attention_rows"),
            ("gpt2-bf16-atomic-profile", "--attention-backward=atomic",
             "atomic_attention_rows"),
            ("gpt2-bf16-auto-profile", "--attention-forward=auto "
             "--attention-backward=auto", "auto_attention_rows")):
        text = read(os.path.join(res, log + ".log")) or ""
        rows = [r for r in text.splitlines() if "flash_attention_qkv" in r]
        if rows:
            lines.append("")
            lines.append(f"{what} (GPTC_PROFILE=1), the attention kernels:")
            lines.extend(rows[:4])
            summary[key] = rows[:4]

    with open(os.path.join(res, "benchmarks-entry.md"), "w") as f:
        f.write(markdown_entry(res, summary, lines))

    text = "\n".join(lines)
    print(text)
    with open(os.path.join(res, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(res, "summary.txt"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
