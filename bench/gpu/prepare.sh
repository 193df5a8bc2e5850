#!/usr/bin/env bash
# bench/gpu/prepare.sh — runs HERE, on the build machine (MLIR, no GPU).
#
# Builds gptc and gptc-runtime, compiles the benchmark training programs
# (`gptc compile -o`: gptc-runtime with the Program appended) for the GPU's
# arch, cubins included so the GPU machine needs no NVRTC for them; copies a token shard and the shared libraries a bare CUDA image
# lacks (OpenBLAS, gfortran, ...) into bench/gpu/out/ (gitignored), and says
# how large it is: the device tool carries it, 64 MiB with the repo at most.
# Then, on the GPU machine, bench/gpu/run.sh does the rest (see README.md).
#
#   bench/gpu/prepare.sh                 # sm_90a (H100/H200), B=16, T=1024
#   GPU_ARCH=sm_80 BENCH_BATCH=8 bench/gpu/prepare.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=$root/bench/gpu/out
build=${BUILD_DIR:-$root/build}
arch=${GPU_ARCH:-sm_90a}
batch=${BENCH_BATCH:-16}      # GPT-2 124M: B x 1024 tokens per step
seq=${BENCH_SEQ:-1024}
tiny_batch=4 tiny_seq=64      # gpt2-tiny: the correctness runs
jobs=${JOBS:-2}

cd "$root"
if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -B "$build" -S "$root" -DCMAKE_BUILD_TYPE=Release
fi
ninja -C "$build" -j"$jobs" gptc gptc-runtime
gptc=$build/bin/gptc

rm -rf "$bundle"
mkdir -p "$bundle"/{lib,programs,data}

# The programs: tiny ones for the checks, GPT-2 124M for the benchmark. (No
# strip: the Program is appended to the executable.)
compile() { # name model precision batch seq [more gptc compile flags]
  "$gptc" compile --model="$2" --precision="$3" --batch="$4" --seq="$5" \
    --gpu-arch="$arch" "${@:6}" -o "$bundle/programs/$1"
}
# GPT-2 124M with other attention kernels than the default, compiled for
# their dumps alone (the attention bench's cubins): the step runs them from
# the auto program instead, with GPTC_VARIANT naming them.
dump_only() { # dump dir name, then gptc compile flags
  "$gptc" compile --model=gpt2 --precision=bf16 --batch="$batch" \
    --seq="$seq" --gpu-arch="$arch" "${@:2}" --dump-kernels="$tmp/$1" \
    -o "$tmp/$1.program" > /dev/null
}
compile tiny-fp32 gpt2-tiny fp32 $tiny_batch $tiny_seq
compile tiny-bf16 gpt2-tiny bf16 $tiny_batch $tiny_seq
# GPT-2's widths (C=768, heads of 64: the attention kernels the benchmark
# runs, over 3 tiles of 64) in one layer with a small vocabulary: a
# --check-kernels run the CPU backend keeps short.
compile check-gpt2w-bf16 gpt2 bf16 2 192 --n-layer=1 --vocab-size=1000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
compile gpt2-bf16 gpt2 bf16 "$batch" "$seq" --dump-kernels="$tmp/split"
# The weight gradients' GEMMs on a second stream (gpt-plan-streams).
compile gpt2-bf16-overlap gpt2 bf16 "$batch" "$seq" --overlap-weight-grads
# Every projection's bias gradient in its weight-gradient GEMM, as before
# the thirty-second session, against the default's (--bias-grads=fused).
compile gpt2-bf16-biasgemm gpt2 bf16 "$batch" "$seq" --bias-grads=gemm
# c_fc's bias gradient from the GEMM that writes GELU's derivative
# (--bias-grads=gelu): on sm_90a gptc's own warp-specialized GEMM sums its
# partials on the way, timed at load against cuBLASLt's ways; and one
# layer at GPT-2's widths for its check (T=256: 512 rows, so that the
# blocks in pairs fit too).
compile gpt2-bf16-biasgelu gpt2 bf16 "$batch" "$seq" --bias-grads=gelu
compile check-gpt2w-bf16-biasgelu gpt2 bf16 2 256 --n-layer=1 \
  --vocab-size=1000 --bias-grads=gelu
# The weights cast to bf16 in every gradient function, as before the
# thirty-fifth session, against the default's copies written by AdamW
# (gpt-weight-copies).
compile gpt2-bf16-castweights gpt2 bf16 "$batch" "$seq" --weight-copies=false
# Gradient accumulation's sums all by the multi-tensor add, as before the
# thirty-sixth session's in-place sums (the weight gradients' GEMMs and
# wte's embedding gradient), against the default's (run.sh accum: both at
# --grad-accum=4).
compile gpt2-bf16-addaccum gpt2 bf16 "$batch" "$seq" --accumulate-in-place=false
# The opt-in wgmma attentions: the forward checked at GPT-2's widths (two
# runs timed it slower than mma.sync: docs/benchmarks.md); the backward
# (--attention-backward=wgmma) checked, and timed in the step by the auto
# program; its dump gives the attention bench its cubin.
if [[ $arch == sm_90a ]]; then
  compile check-gpt2w-bf16-wgmma gpt2 bf16 2 192 --n-layer=1 \
    --vocab-size=1000 --attention-forward=wgmma
  compile check-gpt2w-bf16-wgmmabwd gpt2 bf16 2 192 --n-layer=1 \
    --vocab-size=1000 --attention-backward=wgmma
  compile check-gpt2w-bf16-wgmmaov gpt2 bf16 2 192 --n-layer=1 \
    --vocab-size=1000 --attention-backward=wgmma-overlap
  # The wgmma forward with its output products in flight: T=256, four key
  # tiles, so that one of its three V buffers is refilled.
  compile check-gpt2w-bf16-wgmmaovf gpt2 bf16 2 256 --n-layer=1 \
    --vocab-size=1000 --attention-forward=wgmma-overlap
  # Two warpgroups a block, sharing each key tile (T=256: two blocks of
  # 128 queries, the first warpgroup sitting out its block's last tile).
  compile check-gpt2w-bf16-wgmma128 gpt2 bf16 2 256 --n-layer=1 \
    --vocab-size=1000 --attention-forward=wgmma128
  # The keys 128 at a time under one softmax (T=384: three steps; causal
  # blocks ending on a step of one tile and of two).
  compile check-gpt2w-bf16-wgmmak128 gpt2 bf16 2 384 --n-layer=1 \
    --vocab-size=1000 --attention-forward=wgmma-k128
  # The wgmma forward reading q from shared memory, 5 blocks an SM.
  compile check-gpt2w-bf16-wgmmassf gpt2 bf16 2 192 --n-layer=1 \
    --vocab-size=1000 --attention-forward=wgmma-ss
  # The split backward on wgmma (deterministic, no atomics).
  compile check-gpt2w-bf16-wgmmasplit gpt2 bf16 2 192 --n-layer=1 \
    --vocab-size=1000 --attention-backward=wgmma-split
  # The same, its kept rows read by wgmma from shared memory (4 blocks an
  # SM).
  compile check-gpt2w-bf16-wgmmass gpt2 bf16 2 192 --n-layer=1 \
    --vocab-size=1000 --attention-backward=wgmma-split-ss
  # wgmma-split's dk/dv blocks storing dS for dq blocks of one product a
  # tile pair (deterministic; its dq blocks wait for the dk/dv blocks).
  compile check-gpt2w-bf16-wgmmads gpt2 bf16 2 192 --n-layer=1 \
    --vocab-size=1000 --attention-backward=wgmma-ds
  # The wgmma backward with dq's shares summed by bulk reductions.
  compile check-gpt2w-bf16-wgmmabulk gpt2 bf16 2 192 --n-layer=1 \
    --vocab-size=1000 --attention-backward=wgmma-bulk
  # The same shares added in one order (deterministic): each block's adds
  # wait for the block before it, which no GPU has run yet.
  compile check-gpt2w-bf16-wgmmaord gpt2 bf16 2 192 --n-layer=1 \
    --vocab-size=1000 --attention-backward=wgmma-ordered
  dump_only wgmmabwd --attention-backward=wgmma
  dump_only wgmmabulk --attention-backward=wgmma-bulk
  dump_only wgmmaord --attention-backward=wgmma-ordered
  dump_only wgmmasplit --attention-backward=wgmma-split
  dump_only wgmmass --attention-backward=wgmma-split-ss
  dump_only wgmmads --attention-backward=wgmma-ds
  dump_only wgmmaov --attention-backward=wgmma-overlap
  dump_only wgmmaf --attention-forward=wgmma
  dump_only wgmmaovf --attention-forward=wgmma-overlap
  dump_only wgmma128 --attention-forward=wgmma128
  dump_only wgmmak128 --attention-forward=wgmma-k128
  dump_only wgmmassf --attention-forward=wgmma-ss
fi
# The backward attention with dq summed by atomics (FlashAttention-2's way;
# the default recomputes the probabilities in separate dq blocks): checked
# at GPT-2's widths; the auto program times it in the step.
compile check-gpt2w-bf16-atomic gpt2 bf16 2 192 --n-layer=1 \
  --vocab-size=1000 --attention-backward=atomic
dump_only atomic --attention-backward=atomic
# The attentions with 8 warps a block, 128 queries (opt-in
# --attention-forward=mma128) and 128 keys (--attention-backward=atomic128):
# checked at GPT-2's widths (T=256: a multiple of 128), and their cubins
# for the attention bench.
compile check-gpt2w-bf16-wide gpt2 bf16 2 256 --n-layer=1 \
  --vocab-size=1000 --attention-forward=mma128 --attention-backward=atomic128
dump_only wide --attention-forward=mma128
dump_only atomic128 --attention-backward=atomic128
# The forward with 4 warps of 32 rows (--attention-forward=mma2: each k and
# v fragment serves two row tiles), checked at GPT-2's widths (T=256); its
# dump gives the attention bench mma2's cubin.
compile check-gpt2w-bf16-mma2 gpt2 bf16 2 256 --n-layer=1 \
  --vocab-size=1000 --attention-forward=mma2
dump_only fast --attention-forward=mma2 --attention-backward=atomic128
# The mma forward with the next key tile's scores under this tile's softmax
# (--attention-forward=mma-pipe), checked at GPT-2's widths (T=192: three
# key tiles, the last of a round of two alone); its dump gives the
# attention bench its cubin.
compile check-gpt2w-bf16-pipe gpt2 bf16 2 192 --n-layer=1 \
  --vocab-size=1000 --attention-forward=mma-pipe
dump_only pipe --attention-forward=mma-pipe
# The mma.sync forward, the default on every arch but sm_90a (where every
# forward is timed at load, and the deterministic backwards, since the
# twenty-eighth session): checked at GPT-2's widths, and its dump gives the
# attention bench its reference forward.
compile check-gpt2w-bf16-mma gpt2 bf16 2 192 --n-layer=1 \
  --vocab-size=1000 --attention-forward=mma
dump_only mma --attention-forward=mma

# Every attention algorithm the arch has, each launch timed at load and the
# fastest kept (--attention-forward=auto --attention-backward=auto): checked
# at GPT-2's widths (T=256, so that the 128-row kernels are among them), and
# GPT-2 124M timed; its stderr says what each was timed at and what ran.
# run.sh also runs it with GPTC_VARIANT naming the kernels, for the steps of
# one algorithm each (wide, wgmma, atomic).
compile check-gpt2w-bf16-auto gpt2 bf16 2 256 --n-layer=1 \
  --vocab-size=1000 --attention-forward=auto --attention-backward=auto
compile gpt2-bf16-auto gpt2 bf16 "$batch" "$seq" --attention-forward=auto \
  --attention-backward=auto

# Wider rows than GPT-2's: at GPT-2 large's C=1280 (and medium's 1024) the
# layernorm gradients spill under their 2-blocks-an-SM register cap, so
# their uncapped twins are variants, timed at load. Checked at that width
# in one layer (T=192), as timed and with GPTC_VARIANT=uncapped; and GPT-2
# medium and large timed (their "timed at load" lines say which twin won).
compile check-gpt2lw-bf16 gpt2 bf16 2 192 --n-layer=1 --n-embd=1280 \
  --n-head=20 --vocab-size=1000
compile gpt2-medium-bf16 gpt2-medium bf16 "$batch" "$seq"
compile gpt2-large-bf16 gpt2-large bf16 $((batch / 2)) "$seq"

# The attention kernels alone (attention_bench.cpp): the GPT-2 programs'
# own cubins, the forwards, the row-dot pre-pass and the backwards (split,
# atomic, and atomic with 128 keys a block of 8 warps), with each launch's
# geometry from the manifests; the default forward at 5 blocks an SM (96
# registers, 32 bytes spilled on sm_90a) and the backward at 4 (128
# registers, 40 bytes spilled), where fewer instructions may buy
# occupancy; and the wgmma-overlap forward, the wgmma-split backward and
# the atomic wgmma backward as d497d2b had them (each wgmma's descriptor
# made again from its address, products' accumulators zeroed first; the
# overlap forward rescaling every tile): what the thirty-eighth session's
# fewer instructions a loop trip are worth; and wgmma-split as 3a75100 had
# it (its dq blocks issuing a half's products after the last half's dq
# product): what the forty-second session's order is worth. (The wgmma
# forwards' k and v tiles are 128-byte swizzled since the twenty-seventh
# session, whose bench timed that as "wgmma-sw2". Older baselines, timed
# before -- ff2b93d, b678291 and 085e28f on an H100 in the twenty-fourth
# session, f9f9cef on an H200 in the twenty-seventh, 4dc0bdd, 174e829 and
# 5d8ac01 in the twenty-ninth -- are no longer built: each source costs
# the bench an NVRTC compile.) The bench compiles sources with the GPU
# machine's NVRTC and gptc's options.
# It is host C++ on the driver API.
att=$bundle/attention
mkdir -p "$att"
# Each baseline commit's attention headers: attention.cuh alone before
# f2c6816, one header a kernel family from then on.
for commit in d497d2b 3a75100; do
  mkdir -p "$tmp/attention-$commit"
  for h in $(git -C "$root" ls-tree --name-only "$commit" \
               lib/Target/CUDA/kernels/ | grep '/attention[^/]*\.cuh$'); do
    git -C "$root" show "$commit:$h" > "$tmp/attention-$commit/${h##*/}"
  done
done
python3 - "$tmp" "$att" "$root/lib/Target/CUDA/kernels" <<'PY'
import json, os, re, shutil, sys
tmp, att, kernels = sys.argv[1], sys.argv[2], sys.argv[3]
def header(name, commit=None):
    d = f"{tmp}/attention-{commit}" if commit else kernels
    return open(f"{d}/{name}").read()
now = header("attention.cuh")
def baseline(source, entry, commit):
    """source with commit's attention headers in place of today's: each
    header by its old self where the commit has the same ones, else (one
    attention.cuh then) that one in place of all of today's, from
    attention.cuh up to the generated code."""
    assert source.count(now) == 1, f"{entry}: attention.cuh not embedded"
    old = sorted(os.listdir(f"{tmp}/attention-{commit}"))
    if old != ["attention.cuh"]:
        for name in old:
            assert os.path.exists(f"{kernels}/{name}"), f"{commit}: {name}"
            today = header(name)
            if source.count(today) == 1:
                source = source.replace(today, header(name, commit))
            else:
                assert today not in source, f"{entry}: {name} twice"
    else:
        start = source.index(now)
        end = source.index("\n//===--- generated ---===//", start)
        source = source[:start] + header("attention.cuh", commit) + source[end:]
    # The launch gives today's dynamic shared bytes, at least the old ones
    # (and today's alignment, which the old structs may not have).
    source = re.sub(r"static_assert\(sizeof\(\w+Shared<\d+>\)[^;]*;", "", source)
    return source
lines = []
# A probe's name, and the hook its source is recompiled with.
probes = {"probe-wgmma-nosum": "GPTC_PROBE_NO_DQ_SUM",
          "probe-wgmma-nodq": "GPTC_PROBE_NO_DQ",
          "probe-wgmma-split-dq": "GPTC_PROBE_DQ_BLOCKS_ONLY",
          "probe-wgmma-split-dkdv": "GPTC_PROBE_DKDV_BLOCKS_ONLY",
          "probe-wgmma-split-noexp": "GPTC_PROBE_NO_EXP",
          "probe-wgmma-overlap-noexp": "GPTC_PROBE_NO_EXP"}
for role, name, dump, entry, bounds, old in (
        ("forward", "mma", "mma", "flash_attention_qkv_0", None, None),
        ("forward", "mma128", "wide", "flash_attention_qkv_0", None, None),
        ("forward", "mma2", "fast", "flash_attention_qkv_0", None, None),
        ("forward", "mma-pipe", "pipe", "flash_attention_qkv_0", None, None),
        ("forward", "mma-pipe-4", "pipe", "flash_attention_qkv_0", 4, None),
        ("forward", "wgmma", "wgmmaf", "flash_attention_qkv_0", None, None),
        ("forward", "wgmma-overlap", "wgmmaovf", "flash_attention_qkv_0", None, None),
        ("forward", "wgmma128", "wgmma128", "flash_attention_qkv_0", None, None),
        ("forward", "wgmma-k128", "wgmmak128", "flash_attention_qkv_0", None, None),
        ("forward", "wgmma-ss", "wgmmassf", "flash_attention_qkv_0", None, None),
        # Probe (unchecked): the wgmma-overlap forward with its exponentials
        # as two fmas, to time how much the special-function unit holds it.
        ("forward", "probe-wgmma-overlap-noexp", "wgmmaovf", "flash_attention_qkv_0", None, None),
        ("forward", "mma-5", "mma", "flash_attention_qkv_0", 5, None),
        ("forward", "wgmma-overlap-d497d2b", "wgmmaovf", "flash_attention_qkv_0", None, "d497d2b"),
        ("rowdot", "rowdot", "split", "attention_row_dot_0", None, None),
        ("backward", "split", "split", "flash_attention_qkv_grad_0", None, None),
        ("backward", "atomic", "atomic", "flash_attention_qkv_grad_0", None, None),
        ("backward", "atomic128", "atomic128", "flash_attention_qkv_grad_0", None, None),
        ("backward", "wgmma", "wgmmabwd", "flash_attention_qkv_grad_0", None, None),
        ("backward", "wgmma-overlap", "wgmmaov", "flash_attention_qkv_grad_0", None, None),
        ("backward", "wgmma-bulk", "wgmmabulk", "flash_attention_qkv_grad_0", None, None),
        ("backward", "wgmma-ordered", "wgmmaord", "flash_attention_qkv_grad_0", None, None),
        # Probes (attention.cuh's measurement hooks; dq wrong, unchecked):
        # the atomic wgmma backward with dq's product but no sums, and with
        # neither, to price its reductions and its product apart.
        ("backward", "probe-wgmma-nosum", "wgmmabwd", "flash_attention_qkv_grad_0", None, None),
        ("backward", "probe-wgmma-nodq", "wgmmabwd", "flash_attention_qkv_grad_0", None, None),
        ("backward", "wgmma-split", "wgmmasplit", "flash_attention_qkv_grad_0", None, None),
        ("backward", "wgmma-split-ss", "wgmmass", "flash_attention_qkv_grad_0", None, None),
        # Probes (unchecked) of wgmma-split: its dq blocks alone, its dk/dv
        # blocks alone, and its exponentials as two fmas.
        ("backward", "probe-wgmma-split-dq", "wgmmasplit", "flash_attention_qkv_grad_0", None, None),
        ("backward", "probe-wgmma-split-dkdv", "wgmmasplit", "flash_attention_qkv_grad_0", None, None),
        ("backward", "probe-wgmma-split-noexp", "wgmmasplit", "flash_attention_qkv_grad_0", None, None),
        ("backward", "wgmma-ds", "wgmmads", "flash_attention_qkv_grad_0", None, None),
        ("backward", "split-4", "split", "flash_attention_qkv_grad_0", 4, None),
        ("backward", "wgmma-d497d2b", "wgmmabwd", "flash_attention_qkv_grad_0", None, "d497d2b"),
        ("backward", "wgmma-split-d497d2b", "wgmmasplit", "flash_attention_qkv_grad_0", None, "d497d2b"),
        # wgmma-split before its dq blocks issued both halves' products at
        # a key tile's top (the forty-second session).
        ("backward", "wgmma-split-3a75100", "wgmmasplit", "flash_attention_qkv_grad_0", None, "3a75100")):
    if not os.path.exists(f"{tmp}/{dump}/manifest.json"):
        continue  # the wgmma kernels: sm_90a only
    manifest = json.load(open(f"{tmp}/{dump}/manifest.json"))
    k = next(k for k in manifest["kernels"] if k["name"] == entry)
    l = k["launches"][0]
    define = probes.get(name)
    if bounds is None and old is None and define is None:
        file = f"{role}-{name}.cubin"  # wgmma names a forward and a backward
        shutil.copy(f"{tmp}/{dump}/{k['cubin']}", f"{att}/{file}")
    else:
        file = f"{role}-{name}.cu"
        source = open(f"{tmp}/{dump}/{k['source']}").read()
        if define is not None:
            source = f"#define {define} 1\n" + source
        if bounds is not None:
            was = re.findall(r"__launch_bounds__\(128, \d+\)", source)
            assert len(was) == 1, f"{entry}: no __launch_bounds__(128, n)"
            source = source.replace(was[0], f"__launch_bounds__(128, {bounds})")
        if old:
            source = baseline(source, entry, old)
        open(f"{att}/{file}", "w").write(source)
    grid = l["grid"]
    lines.append(f"{role} {name} {file} {entry} {grid[0]} {grid[1]} "
                 f"{grid[2]} {l['block'][0]} {l['dynamic_shared_bytes']}")
open(f"{att}/kernels.txt", "w").write("\n".join(lines) + "\n")
shutil.copy(f"{tmp}/split/nvrtc-options.txt", f"{att}/nvrtc-options.txt")
PY
echo "$batch $seq 768 12" > "$att/sizes.txt" # GPT-2 124M: C = 768, 12 heads
cuda=${CUDA_HOME:-/usr/local/cuda}
g++ -O2 -std=c++17 -I"$cuda/include" -o "$att/attention_bench" \
  "$root/bench/gpu/attention_bench.cpp" -L"$cuda/lib64/stubs" -lcuda
# The tensor cores alone, by shared-memory layout (wgmma_probe.cpp: its
# kernels are compiled there, by that machine's NVRTC).
g++ -O2 -std=c++17 -I"$cuda/include" -o "$att/wgmma_probe" \
  "$root/bench/gpu/wgmma_probe.cpp" -L"$cuda/lib64/stubs" -lcuda
# The same step recomputing GELU and layernorm outputs in the backward: what
# the smaller arena costs in time. Only with BENCH_RECOMPUTE=1 (run.sh's
# recompute step is on request only: it would not fit the time budget).
if [[ ${BENCH_RECOMPUTE:-0} == 1 ]]; then
  compile gpt2-bf16-recompute gpt2 bf16 "$batch" "$seq" --recompute=gelu,layernorm
fi

# Shared libraries beyond glibc, libstdc++ and libgcc: a CUDA image has no
# OpenBLAS. (libcuda, cuBLASLt and NVRTC are opened with dlopen there.)
ldd "$bundle/programs/tiny-fp32" | awk '/=>/ { print $1, $3 }' |
  while read -r name path; do
    case $name in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|\
      libgcc_s.so*|libstdc++.so*) ;;
      *) cp -L "$path" "$bundle/lib/$name" ;;
    esac
  done
# glibc symbol versions the binary needs (the GPU image must have them).
objdump -T "$bundle/programs/tiny-fp32" "$bundle"/lib/*.so* 2>/dev/null |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 > "$bundle/glibc-needed.txt"

# Data: the Brown corpus shard scripts/setup.sh makes.
shard=${BENCH_DATA:-$root/.deps/brown/brown_train.bin}
if [[ ! -f $shard ]]; then
  "$gptc" tokenize "$root/.deps/brown/brown.txt" \
    -o "$root/.deps/brown/brown_train.bin" --val-fraction=0.05
fi
cp "$shard" "$bundle/data/train.bin"

# The large libraries travel compressed (OpenBLAS alone is ~35 MB), and so
# do the programs: each is the same runtime with its own Program appended,
# which one xz stream stores about once (44 MB of programs took 1.9).
tar -C "$bundle" -cJf "$bundle/lib.tar.xz" lib
XZ_OPT=-T0 tar -C "$bundle" -cJf "$bundle/programs.tar.xz" programs
programs_mib=$(du -sm "$bundle/programs" | cut -f1)
rm -rf "$bundle/lib" "$bundle/programs"

cat > "$bundle/config.sh" <<EOF
# Written by prepare.sh on $(date -u +%FT%TZ) from $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo '+dirty')
ARCH=$arch
BATCH=$batch
SEQ=$seq
TINY_BATCH=$tiny_batch
TINY_SEQ=$tiny_seq
EOF

size=$(du -sm "$bundle" | cut -f1)
echo "bench/gpu/out: ${size} MiB (programs: ${programs_mib} MiB in $(du -sh "$bundle/programs.tar.xz" | cut -f1), needs $(cat "$bundle/glibc-needed.txt"))"
if (( size > 56 )); then
  echo "warning: bench/gpu/out is ${size} MiB; with the repo it must stay under 64 MiB" >&2
fi
echo "next: the device tool's run, in the repo root, carry [\"bench/gpu/out\"]: bash bench/gpu/run.sh"
