#!/usr/bin/env python3
"""Each GEMM shape of a gptc step, timed in PyTorch on the same GPU.

gptc's profile (GPTC_PROFILE=1) times each cuBLASLt GEMM shape of the step
with its epilogue ("cuBLASLt 16384x3072x768 bf16 tB + gptc epilogue"), but
says nothing of whether cuBLASLt, as gptc calls it, is as fast as the GEMMs
PyTorch runs. This script reads the profile's GEMM lines and times the
same product in PyTorch: the same M, N and K, the same operand layouts (gpt's
a is [M, K], or [K, M] read transposed where the line says tA; b is [K, N],
or [N, K] with tB), bf16, torch.matmul, no epilogue. Then one line a shape:
gptc's mean µs a call (with its epilogue, which PyTorch's plain product does
not have), PyTorch's median µs, and their ratio. A large ratio on a shape
whose epilogue is cheap points at how gptc asks cuBLASLt, not at the
product.

  python3 torch_gemms.py gpt2-bf16-profile.log            # on the GPU
  /usr/bin/python3 torch_gemms.py --cpu LOG              # the same, on the CPU

With --cpu (the lit test's way: tiny shapes, Debian's CPU PyTorch) the
products run in float32 on the CPU and are timed by the wall clock.
"""

import argparse
import re
import statistics
import sys
import time

# "    23.456       84     279.24  10.2%      80.00    28.7%  cuBLASLt
# 16384x3072x768 bf16 tB + gptc epilogue (matmul_gelu_grad at m.cpp:33:16)"
LINE = re.compile(
    r"^\s*(?P<ms>[\d.]+)\s+(?P<calls>\d+)\s+(?P<us>[\d.]+)\s+[\d.]+%.*?"
    r"cuBLASLt (?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)(?P<batch>x\d+)?"
    r"(?P<loops> \(\d+ GEMMs\))? (?P<dtype>\w+)(?P<trans>(?: t[AB])*)"
    r"(?P<epilogue>[^(]*)\((?P<op>\w+) at ")


def gemm_lines(text):
    """The profile's GEMM shapes: one dict each, in the profile's order."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        out.append({"m": int(m["m"]), "n": int(m["n"]), "k": int(m["k"]),
                    "batched": bool(m["batch"] or m["loops"]),
                    "batch": (m["batch"] or "") + (m["loops"] or ""),
                    "dtype": m["dtype"],
                    "ta": " tA" in m["trans"], "tb": " tB" in m["trans"],
                    "epilogue": m["epilogue"].strip(), "op": m["op"],
                    "calls": int(m["calls"]), "gptc_us": float(m["us"])})
    return out


def time_product(torch, g, cuda, reps):
    """PyTorch's median µs for g's product, operands laid out as gptc's."""
    dev = "cuda" if cuda else "cpu"
    dt = torch.bfloat16 if cuda else torch.float32
    m, n, k = g["m"], g["n"], g["k"]
    # Varied operands, never zeros (they can run faster than real data).
    a = (torch.randn(k, m, device=dev, dtype=dt).t() if g["ta"]
         else torch.randn(m, k, device=dev, dtype=dt))
    b = (torch.randn(n, k, device=dev, dtype=dt).t() if g["tb"]
         else torch.randn(k, n, device=dev, dtype=dt))
    out = torch.empty(m, n, device=dev, dtype=dt)
    for _ in range(3):
        torch.matmul(a, b, out=out)
    times = []
    if cuda:
        torch.cuda.synchronize()
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b, out=out)
            stop.record()
            stop.synchronize()
            times.append(1000.0 * start.elapsed_time(stop))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.matmul(a, b, out=out)
            times.append(1e6 * (time.perf_counter() - t0))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", help="a gptc GPTC_PROFILE=1 run's stderr")
    ap.add_argument("--cpu", action="store_true",
                    help="float32 on the CPU (the test's way), not bf16 on a GPU")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    try:
        text = open(args.profile).read()
    except OSError as e:
        sys.exit(f"torch_gemms.py: cannot read {args.profile}: {e.strerror}")
    gemms = gemm_lines(text)
    if not gemms:
        sys.exit(f"torch_gemms.py: {args.profile} has no cuBLASLt lines of a "
                 "GPTC_PROFILE=1 table")
    import torch
    cuda = not args.cpu
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_gemms.py: PyTorch sees no GPU (--cpu runs on the CPU)")
    name = torch.cuda.get_device_name() if cuda else "CPU, float32"
    print(f"gptc's GEMMs against PyTorch {torch.__version__} torch.matmul "
          f"({name}; µs a call; gptc's with its epilogue, PyTorch's without)")
    print(f"{'shape':>22} {'layout':6} {'op':17} {'calls':>5} {'gptc us':>9} "
          f"{'torch us':>9} {'ratio':>6}  gptc's epilogue")
    total_gptc = total_torch = 0.0
    for g in gemms:
        shape = f"{g['m']}x{g['n']}x{g['k']}{g['batch']}"
        layout = ("tA" if g["ta"] else "") + ("tB" if g["tb"] else "") or "-"
        if g["batched"]:
            print(f"{shape:>22} {layout:6} {g['op']:17} {g['calls']:5} "
                  f"{g['gptc_us']:9.2f} {'-':>9} {'-':>6}  batched: not timed")
            continue
        us = time_product(torch, g, cuda, args.reps)
        total_gptc += g["gptc_us"] * g["calls"]
        total_torch += us * g["calls"]
        print(f"{shape:>22} {layout:6} {g['op']:17} {g['calls']:5} "
              f"{g['gptc_us']:9.2f} {us:9.2f} {g['gptc_us'] / us:6.2f}  "
              f"{g['epilogue'] or '-'}")
    print(f"{'all':>22} {'':6} {'':17} {'':5} {total_gptc / 1000:8.3f}m "
          f"{total_torch / 1000:8.3f}m {total_gptc / max(total_torch, 1e-9):6.2f}"
          "  (ms over the profile's calls)")


if __name__ == "__main__":
    main()
