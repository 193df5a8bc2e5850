#!/usr/bin/env bash
# bench/gpu/run.sh — runs THERE, on the GPU machine, in the repo root, after
# bench/gpu/prepare.sh ran HERE (the GPU machine has no MLIR and no network:
# everything it runs comes prepared in bench/gpu/out/). One call of the
# device tool does it all inside its 10-minute limit:
#
#   run(command="bash bench/gpu/run.sh", carry=["bench/gpu/out"], timeout_s=600)
#
# Steps, in this order (each under its own time limit; a failing step
# does not stop the rest; what the budget does not reach is skipped):
# nvidia-smi; the wgmma probe (the tensor cores alone, by operand layout);
# --check-kernels on gpt2-tiny fp32 and bf16 and on one layer of GPT-2's
# widths (every launch on the GPU against the CPU backend, with each
# attention algorithm: atomic, mma128/atomic128 (T=256), mma2, mma-pipe,
# the warpgroup-MMA ones on sm_90a, auto) and at C=1280 (capped and
# uncapped layernorm gradients); the attention kernels alone
# (attention_bench: the forwards and the backwards timed, each one's
# results against the default's, and two probes of the wgmma backward
# timed unchecked); GPT-2 124M bf16 timed, then profiled
# (GPTC_PROFILE=1; its log's GPTC_GEMM_TUNE lines give every GEMM
# epilogue way's time, the row-chunked ones included); the PyTorch
# yardstick bench/gpu/torch_gpt2.py with the same B and T, and its kernels
# by kind beside gptc's profile (GEMMs, attention, optimizer, the rest);
# GPT-2 124M at --grad-accum=4 (with and without the gradients summed in
# place by the launches that write them, and PyTorch's);
# GPT-2 124M with GPTC_PDL=0 (plain launches: no kernel starts under the
# one before it); GPT-2 124M compiled with --overlap-weight-grads (the weight gradients'
# GEMMs on a second stream), with --bias-grads=gemm (the output
# projections' and c_attn's bias gradients in their GEMMs) and with
# --bias-grads=gelu (c_fc's from the GEMM that writes GELU's derivative,
# gptc's own on sm_90a, profiled too); each GEMM shape of gptc's profile timed in
# PyTorch with the same operand layouts (bench/gpu/torch_gemms.py); 10
# steps of gpt2-tiny on cuda and on cpu with the same seed and data,
# losses compared (bf16 at --grad-accum=2 too); Nsight Compute on one launch each of the layernorms
# and their gradient, the loss, the embedding gradient, the row dot, c_attn's bias gradient, the
# GELU-derivative pass and the gradient norm, then of the wgmma-overlap
# forward and wgmma-split backward, then of the atomic wgmma backward;
# GPT-2 124M with --attention-forward=auto
# --attention-backward=auto (every attention algorithm timed at load, the
# fastest run; cuDNN's among them where it loads, then again with
# GPTC_CUDNN=all), and that program with GPTC_VARIANT naming one algorithm a
# direction (wide: mma2,atomic128; wgmma; atomic); --check-kernels of
# gpt2-tiny bf16 with GPTC_GEMM_FALLBACK=1 (the kernels that stand in for
# a refused cuBLASLt epilogue) and with GPTC_GEMM_DGELU=cublaslt; GPT-2
# 124M with GPTC_GEMM_DGELU=cublaslt; GPT-2 medium and large (their
# layernorm gradients' uncapped twins timed at load); then GPT-2 124M
# again with GPTC_GEMM_TUNE=0 (cuBLASLt's first choice for every GEMM,
# untimed, against the default, which times the algorithms and epilogue
# ways at load and keeps the fastest). On request only: GPT-2 124M
# compiled with --recompute=gelu,layernorm (the time the smaller arena
# costs). Peak memory for gptc and PyTorch comes from nvidia-smi samples,
# so the two are measured alike. Prints one summary table last; results go
# to $OUT (the device tool's) or bench/gpu/results.
#
#   bash bench/gpu/run.sh [probe] [check] [quickcheck] [attn] [tiny] [gpt2] [torch] [pdl] [overlap] [biasgemm] [biasgelu] [castweights] [accum] [gemms] [auto] [wide] [atomic] [fallback] [dgelu] [large] [untuned] [recompute] [wgmma] [ncu] [ownncu]   # a subset
#
# (recompute needs a bundle prepared with BENCH_RECOMPUTE=1.)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=${BENCH_BUNDLE:-$root/bench/gpu/out} # (tests name another)
res=${OUT:-$root/bench/gpu/results}
logs=$res/logs
mkdir -p "$logs"
# A second run.sh in the same device call (two subsets in the order the
# call wants them) keeps the first one's logs, so the summary covers
# both: its archive is unpacked here, and packed again with these at the
# end. (Without this, the twenty-ninth session's second call of two lost
# the first's timings.)
if [[ -f $res/logs.tar.gz ]]; then
  tar -C "$res" -xzf "$res/logs.tar.gz" 2>/dev/null ||
    echo "could not unpack the earlier $res/logs.tar.gz; its logs are lost" >&2
fi
start=$SECONDS
budget=${BENCH_BUDGET_S:-560} # leave the device tool time to copy results

if [[ ! -f $bundle/config.sh ]]; then
  echo "bench/gpu/out is missing: run bench/gpu/prepare.sh here first and carry bench/gpu/out" >&2
  exit 2
fi
source "$bundle/config.sh"
# The libraries and the programs travel as xz archives (prepare.sh).
for part in lib programs; do
  if [[ -f $bundle/$part.tar.xz && ! -d $bundle/$part ]]; then
    tar -C "$bundle" -xJf "$bundle/$part.tar.xz" 2>/dev/null ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$bundle/$part.tar.xz" "$bundle"
  fi
done
# By default all but recompute (measured three times in the twelfth
# session, docs/benchmarks.md), so that ncu fits the budget; ask for it by
# name.
steps_wanted=" ${*:-probe check attn tiny gpt2 torch pdl overlap biasgemm biasgelu castweights accum gemms auto wide wgmma atomic fallback dgelu ncu large untuned} "
want() { [[ $steps_wanted == *" $1 "* ]]; }

# cuBLASLt: the toolkit's, else the one PyTorch's wheels bring.
if ! ldconfig -p | grep -q 'libcublasLt.so.13' &&
   [[ ! -f /usr/local/cuda/lib64/libcublasLt.so.13 && -z ${GPTC_CUBLASLT:-} ]]; then
  lt=$(find /usr /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -n 1)
  [[ -n $lt ]] && export GPTC_CUBLASLT=$lt
fi
# cuDNN (optional: its fused attention is one more candidate of each
# attention launch timed at load): the loader's or the toolkit's, else the
# one PyTorch's wheels bring, whose sub-libraries then load from its
# directory.
if [[ -z ${GPTC_CUDNN_LIBRARY:-} ]] && ! ldconfig -p | grep -q 'libcudnn.so.9' &&
   [[ ! -f /usr/local/cuda/lib64/libcudnn.so.9 ]]; then
  cudnn=$(find /usr /opt -name 'libcudnn.so.9' 2>/dev/null | head -n 1)
  if [[ -n $cudnn ]]; then
    export GPTC_CUDNN_LIBRARY=$cudnn
    export LD_LIBRARY_PATH=$(dirname "$cudnn")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
fi
echo "cuDNN: ${GPTC_CUDNN_LIBRARY:-libcudnn.so.9 from the loader path, if any}"
export GPTC_CACHE_DIR=${GPTC_CACHE_DIR:-/tmp/gptc-cache}
# Every load times its kernel variants afresh: a choice an earlier step
# kept in the cache would leave a step's "timed at load" line an old one.
# (A step that sets GPTC_VARIANT itself pins its labels instead.)
export GPTC_VARIANT=${GPTC_VARIANT:-time}

# A compiled training program runs with the bundled libraries (a command,
# not a function, so that timeout can run it).
lib=(env "LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
# Runs "$@" with at most $1 seconds (and never past the budget), output to
# $logs/$2.log; samples the GPU's memory use into $logs/$2.mem meanwhile.
step() {
  local limit=$1 name=$2
  shift 2
  local left=$((budget - (SECONDS - start)))
  ((limit > left)) && limit=$left
  if ((limit < 10)); then
    echo "== $name: skipped, out of time" | tee "$logs/$name.log"
    return 1
  fi
  echo "== $name (at most ${limit}s): $*"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 \
    > "$logs/$name.mem" 2>/dev/null &
  local sampler=$!
  timeout --kill-after=5 "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  tail -n 3 "$logs/$name.log" | sed 's/^/   /'
  ((rc == 124)) && echo "   (timed out after ${limit}s)"
  echo "   rc=$rc, $((SECONDS - start))s so far"
  return $rc
}

P=$bundle/programs
data=$bundle/data/train.bin

nvidia-smi > "$logs/nvidia-smi.txt" 2>&1
head -n 12 "$logs/nvidia-smi.txt"
echo "bundle: arch $ARCH, B=$BATCH T=$SEQ; needs $(cat "$bundle/glibc-needed.txt" 2>/dev/null), host has $(ldd --version | head -n 1)"

# The tensor cores alone (wgmma_probe.cpp, about 10 s): wgmma by the
# shared-memory layout it reads, against mma.sync, each product checked.
# First, so that even a short lease answers why gptc's wgmma kernels are
# slower than its mma.sync ones (the whole table goes to the summary).
if want probe && [[ -x $bundle/attention/wgmma_probe ]]; then
  step 60 wgmma-probe "$bundle/attention/wgmma_probe" 2048
fi

# A failing launch's outputs (device and reference) land in
# $logs/dump-<check>/ (logs.tar.gz), to be read here with numpy.
# cuDNN's attention (a candidate the runtime adds where libcudnn.so.9
# loads) in every attention launch of gpt2-tiny bf16 and of one layer at
# GPT-2's widths, each launch against the CPU backend: the forward and
# the deterministic backward, then the dq-sums backward. Each step fails
# alone, naming cuDNN's reason, where cuDNN cannot take the launches.
# Where the layer's check fails, the steps after it run without cuDNN
# (GPTC_CUDNN=0), so that a cuDNN that fails on this GPU costs the call
# its cuDNN figures and nothing else.
cudnn_checks() {
  local limit=$1
  GPTC_VARIANT=cudnn step "$limit" check-tiny-bf16-cudnn "${lib[@]}" \
    "$P/tiny-bf16" --device=cuda --check-kernels \
    --check-dump="$logs/dump-tiny-bf16-cudnn"
  if ! GPTC_VARIANT=cudnn step "$limit" check-gpt2w-bf16-cudnn "${lib[@]}" \
    "$P/check-gpt2w-bf16" --device=cuda --check-kernels \
    --check-dump="$logs/dump-gpt2w-bf16-cudnn"; then
    echo "   cuDNN's attention failed its check: the steps after run with GPTC_CUDNN=0"
    export GPTC_CUDNN=0
    return
  fi
  GPTC_CUDNN=all GPTC_VARIANT=cudnn-dq-sums,cudnn step "$limit" \
    check-gpt2w-bf16-cudnn-dq-sums "${lib[@]}" "$P/check-gpt2w-bf16" \
    --device=cuda --check-kernels \
    --check-dump="$logs/dump-gpt2w-bf16-cudnn-dq-sums"
}

# The loss gradient's cluster forms (a row split across a cluster of 2 or
# 4 blocks, the fifty-sixth session's, which no GPU has run before), each
# in one layer at GPT-2's widths against the CPU backend. Where one fails,
# the steps after it leave both out of the timing (GPTC_VARIANT's
# -label), so that a fault costs the call their figures and nothing else.
cluster_loss_checks() {
  local limit=$1 form
  for form in cluster2 cluster4; do
    if ! GPTC_VARIANT=$form,own step "$limit" "check-gpt2w-bf16-$form" \
      "${lib[@]}" "$P/check-gpt2w-bf16" --device=cuda --check-kernels \
      --check-dump="$logs/dump-gpt2w-bf16-$form"; then
      echo "   the loss gradient's $form form failed its check: the steps after run with GPTC_VARIANT=-cluster2,-cluster4,time"
      export GPTC_VARIANT=-cluster2,-cluster4,time
      return
    fi
  done
}

# gptc's own wgmma GEMMs (c_fc's forward and backward, and since the
# forty-ninth session the plain GEMMs with a transposed b and the
# projections with a bias alone, gemm_wgmma.cuh; GEMM tuning times them
# against cuBLASLt's ways, GPTC_GEMM_OWN): each
# block shape run wherever it fits (GPTC_GEMM_OWN=narrow, wide, paired)
# in one layer at GPT-2's widths, each launch against the CPU backend,
# then all timed among the other ways (their "ms a run" lines). The pairs
# (clusters of two blocks, the fifty-fourth session's, which no GPU has
# run before) need m a multiple of 256: the T=256 program. Where a check
# fails, the steps after it run without them (GPTC_GEMM_OWN=0; the pairs
# failing, without those alone: unpaired), so that a fault costs the call
# their figures and nothing else.
own_gemm_checks() {
  local limit=$1 check shape program
  # shape:program (each shape's weight-gradient stream-K blocks too); then
  # GELU's derivative with its bias gradient's partials
  # (--bias-grads=gelu), in the wide blocks and in pairs.
  for check in narrow:check-gpt2w-bf16 wide:check-gpt2w-bf16 \
    wide:check-gpt2w-bf16-biasgelu paired:check-gpt2w-bf16-auto \
    paired:check-gpt2w-bf16-biasgelu; do
    shape=${check%%:*} program=${check#*:}
    [[ -x $P/$program ]] || continue
    [[ $shape == paired && ${GPTC_GEMM_OWN:-} == unpaired ]] && continue
    if ! GPTC_GEMM_OWN=$shape step "$limit" "$program-own-$shape" \
      "${lib[@]}" "$P/$program" --device=cuda --check-kernels \
      --check-dump="$logs/dump-$program-own-$shape"; then
      # The pairs alone failing leaves the others timed (unpaired).
      local fallback=0
      [[ $shape == paired ]] && fallback=unpaired
      echo "   gptc's own GEMMs ($shape, $program) failed their check: the steps after run with GPTC_GEMM_OWN=$fallback"
      export GPTC_GEMM_OWN=$fallback
      [[ $fallback == 0 ]] && return
    fi
  done
  GPTC_GEMM_TUNE=time step "$limit" check-gpt2w-bf16-gemmways "${lib[@]}" \
    "$P/check-gpt2w-bf16" --device=cuda --check-kernels \
    --check-dump="$logs/dump-gpt2w-bf16-gemmways"
  grep "gptc wgmma GEMM" "$logs/check-gpt2w-bf16-gemmways.log" | sed 's/^/   /'
}

if want check; then
  # gptc's own GEMMs first: one that fails its check (or hangs until its
  # step's limit: the mbarrier waits have no timeout) is turned off for
  # every step after, which would otherwise time it at load again.
  own_gemm_checks 100
  for prec in fp32 bf16; do
    step 100 check-tiny-$prec "${lib[@]}" "$P/tiny-$prec" \
      --device=cuda --check-kernels --check-dump="$logs/dump-tiny-$prec"
  done
  for w in check-gpt2w-bf16 check-gpt2w-bf16-atomic check-gpt2w-bf16-wgmma \
    check-gpt2w-bf16-wgmmabwd check-gpt2w-bf16-wgmmaov \
    check-gpt2w-bf16-wgmmasplit check-gpt2w-bf16-wgmmass \
    check-gpt2w-bf16-wgmmads check-gpt2w-bf16-wgmmabulk \
    check-gpt2w-bf16-wgmmaord \
    check-gpt2w-bf16-wgmmaovf check-gpt2w-bf16-wgmma128 \
    check-gpt2w-bf16-wgmmak128 check-gpt2w-bf16-wgmmassf \
    check-gpt2w-bf16-wide check-gpt2w-bf16-mma2 check-gpt2w-bf16-pipe \
    check-gpt2w-bf16-mma \
    check-gpt2w-bf16-auto check-gpt2lw-bf16; do
    [[ -x $P/$w ]] || continue
    step 100 $w "${lib[@]}" "$P/$w" --device=cuda --check-kernels \
      --check-dump="$logs/dump-${w#check-}"
  done
  # The loss gradient's max-first form, whichever the timing chose.
  GPTC_VARIANT=maxfirst,own \
    step 100 check-gpt2w-bf16-maxfirst "${lib[@]}" "$P/check-gpt2w-bf16" \
      --device=cuda --check-kernels --check-dump="$logs/dump-gpt2w-bf16-maxfirst"
  # Its cluster forms (sm_90 on), 2 and 4 blocks a row.
  cluster_loss_checks 100
  # cuDNN's fused attention in every attention launch (where it loads).
  cudnn_checks 100
  # The layernorm gradients' uncapped twins, whichever the timing chose.
  [[ -x $P/check-gpt2lw-bf16 ]] && GPTC_VARIANT=uncapped \
    step 100 check-gpt2lw-bf16-uncapped "${lib[@]}" "$P/check-gpt2lw-bf16" \
      --device=cuda --check-kernels --check-dump="$logs/dump-gpt2lw-bf16-uncapped"
fi

# On request, when device time is short: the two checks the default
# kernels need, gpt2-tiny bf16 and one layer at GPT-2's widths.
if want quickcheck; then
  own_gemm_checks 60 # (first, as in check)
  step 60 check-tiny-bf16 "${lib[@]}" "$P/tiny-bf16" --device=cuda \
    --check-kernels --check-dump="$logs/dump-tiny-bf16"
  step 60 check-gpt2w-bf16 "${lib[@]}" "$P/check-gpt2w-bf16" --device=cuda \
    --check-kernels --check-dump="$logs/dump-gpt2w-bf16"
  GPTC_VARIANT=maxfirst,own \
    step 60 check-gpt2w-bf16-maxfirst "${lib[@]}" "$P/check-gpt2w-bf16" \
      --device=cuda --check-kernels --check-dump="$logs/dump-gpt2w-bf16-maxfirst"
  cluster_loss_checks 60
  cudnn_checks 60
  # The backward whose blocks wait for each other (wgmma-ordered): its
  # first run on a GPU, where a wait for a block not started would give
  # up after seconds with a trap (waitForCount), failing this step alone.
  [[ -x $P/check-gpt2w-bf16-wgmmaord ]] && \
    step 60 check-gpt2w-bf16-wgmmaord "${lib[@]}" "$P/check-gpt2w-bf16-wgmmaord" \
      --device=cuda --check-kernels --check-dump="$logs/dump-gpt2w-bf16-wgmmaord"
fi

# The attention kernels alone, GPT-2's cubins on random data: each forward
# and each backward timed and checked against the default's results.
if want attn && [[ -x $bundle/attention/attention_bench ]]; then
  # (a process a kernel, each running its references first: 120 s)
  step 120 attention "$bundle/attention/attention_bench" "$bundle/attention" 20
fi

if want gpt2; then
  step 150 gpt2-bf16 "${lib[@]}" "$P/gpt2-bf16" --device=cuda \
    --data="$data" --steps=30 --seed=1
  GPTC_PROFILE=1 step 90 gpt2-bf16-profile "${lib[@]}" "$P/gpt2-bf16" --device=cuda --data="$data" --steps=8 \
    --seed=1
fi

if want torch; then
  step 240 torch python3 "$root/bench/gpu/torch_gpt2.py" --batch="$BATCH" \
    --seq="$SEQ" --steps=20 --warmup=5 --data="$data" --profile=3 \
    --out="$logs/torch.json"
fi

# Plain launches (GPTC_PDL=0): the step against gpt2-bf16's, whose
# kernels launch under the one before them (programmatic dependent launch).
if want pdl; then
  GPTC_PDL=0 step 90 gpt2-bf16-nopdl "${lib[@]}" "$P/gpt2-bf16" --device=cuda \
    --data="$data" --steps=20 --seed=1
fi

# The weight gradients' GEMMs on the side stream, beside the backward's
# next launches (--overlap-weight-grads): the step against gpt2-bf16's.
if want overlap && [[ -x $P/gpt2-bf16-overlap ]]; then
  step 90 gpt2-bf16-overlap "${lib[@]}" "$P/gpt2-bf16-overlap" --device=cuda \
    --data="$data" --steps=20 --seed=1
fi

# The projections' bias gradients in their weight-gradient GEMMs
# (--bias-grads=gemm), against gpt2-bf16's (the output projections' from
# the layernorm gradients, c_attn's from attention's identities).
if want biasgemm && [[ -x $P/gpt2-bf16-biasgemm ]]; then
  step 90 gpt2-bf16-biasgemm "${lib[@]}" "$P/gpt2-bf16-biasgemm" --device=cuda \
    --data="$data" --steps=20 --seed=1
fi

# c_fc's bias gradient from the GEMM that writes GELU's derivative
# (--bias-grads=gelu), against gpt2-bf16's (from its weight gradient's),
# and its profile (the ways tuning timed for that GEMM, the kernels).
if want biasgelu && [[ -x $P/gpt2-bf16-biasgelu ]]; then
  step 90 gpt2-bf16-biasgelu "${lib[@]}" "$P/gpt2-bf16-biasgelu" --device=cuda \
    --data="$data" --steps=20 --seed=1
  GPTC_PROFILE=1 step 90 gpt2-bf16-biasgelu-profile "${lib[@]}" \
    "$P/gpt2-bf16-biasgelu" --device=cuda --data="$data" --steps=8 --seed=1
fi

# The weights cast to bf16 in the gradient function each step
# (--weight-copies=false), against gpt2-bf16's copies written by AdamW.
if want castweights && [[ -x $P/gpt2-bf16-castweights ]]; then
  step 90 gpt2-bf16-castweights "${lib[@]}" "$P/gpt2-bf16-castweights" \
    --device=cuda --data="$data" --steps=20 --seed=1
fi

# Gradient accumulation, 4 micro-batches a step: the default program (the
# weight gradients' GEMMs and wte's embedding gradient add to their sums in
# place, one multi-tensor add the rest), the one with every sum by the add
# (--accumulate-in-place=false), and PyTorch (.grad summed by backward()),
# tokens a step 4·B·T.
if want accum; then
  step 90 gpt2-bf16-accum4 "${lib[@]}" "$P/gpt2-bf16" --device=cuda \
    --data="$data" --steps=8 --seed=1 --grad-accum=4
  if [[ -x $P/gpt2-bf16-addaccum ]]; then
    step 90 gpt2-bf16-addaccum4 "${lib[@]}" "$P/gpt2-bf16-addaccum" \
      --device=cuda --data="$data" --steps=8 --seed=1 --grad-accum=4
  fi
  step 180 torch-accum4 python3 "$root/bench/gpu/torch_gpt2.py" --batch="$BATCH" \
    --seq="$SEQ" --steps=6 --warmup=3 --grad-accum=4 --data="$data" \
    --out="$logs/torch-accum4.json"
fi

# Each GEMM shape of the profiled gptc step, timed in PyTorch with the same
# operand layouts: whether cuBLASLt as gptc calls it is as fast as PyTorch's
# GEMMs are (gemms.log).
if want gemms && [[ -f $logs/gpt2-bf16-profile.log ]]; then
  step 60 gemms python3 "$root/bench/gpu/torch_gemms.py" \
    "$logs/gpt2-bf16-profile.log"
fi

# (After the timings: the training loop against the CPU's has held since
# the twelfth session, and the budget may run out before the later steps.)
if want tiny; then
  for prec in fp32 bf16; do
    for device in cuda cpu; do
      step 60 tiny-$prec-$device "${lib[@]}" "$P/tiny-$prec" \
        --device=$device --data="$data" --steps=10 --seed=1
    done
  done
  # Two micro-batches a step: grads_accumulate's in-place sums (cuBLASLt's
  # beta = 1, the embedding gradient's) against the CPU backend's.
  for device in cuda cpu; do
    step 60 tiny-bf16-accum2-$device "${lib[@]}" "$P/tiny-bf16" \
      --device=$device --data="$data" --steps=10 --seed=1 --grad-accum=2
  done
fi

# Nsight Compute on one launch of each kernel the last changes aimed at
# (ncu.log in the archive): the bandwidth-bound kernels of the step's
# "other" and optimizer time (the layernorms and their gradient, the loss,
# the embedding gradient, the row dot, the gradient norm, GELU's
# derivative after a plain GEMM), then the attention kernels below.
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
# Beside speed of light, occupancy and stalls: which pipes are busy
# (tensor, FMA, MUFU), the instruction mix, issue slots, and the sampled
# stalls by SASS line (the attention kernels' open question: latency or a
# pipe).
ncu_sections=(--section SpeedOfLight --section Occupancy
  --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis
  --section ComputeWorkloadAnalysis --section InstructionStats
  --section SchedulerStats --section SourceCounters)

# gptc's own wgmma GEMMs under Nsight Compute, each block shape run
# wherever it fits (GPTC_GEMM_OWN): c_fc's forward and backward at GPT-2's
# sizes, where they lost to cuBLASLt's epilogue GEMMs (forty-seventh
# session): L2 traffic, tensor-pipe use, stalls.
if want ownncu && [[ -n $ncu_bin ]]; then
  # (Not the pairs where they failed their check: GPTC_GEMM_OWN=unpaired.)
  own_shapes="narrow wide paired"
  [[ ${GPTC_GEMM_OWN:-} == unpaired ]] && own_shapes="narrow wide"
  for shape in $own_shapes; do
    GPTC_GEMM_OWN=$shape GPTC_CUDA_GRAPH=0 step 120 ncu-own-$shape "$ncu_bin" \
      --target-processes all --kernel-id ::regex:'^gemm_wgmma_.*_bf16$':1 \
      "${ncu_sections[@]}" \
      "${lib[@]}" "$P/gpt2-bf16" --device=cuda --data="$data" --steps=1 --seed=1
  done
  # GELU's derivative with its bias gradient's partials (--bias-grads=gelu).
  if [[ -x $P/gpt2-bf16-biasgelu ]]; then
    for shape in $own_shapes; do
      GPTC_GEMM_OWN=$shape GPTC_CUDA_GRAPH=0 step 120 \
        ncu-own-biasgelu-$shape "$ncu_bin" --target-processes all \
        --kernel-id ::regex:'^gemm_wgmma_((wide|paired)_)?gelu_grad_bias_bf16$':1 \
        "${ncu_sections[@]}" \
        "${lib[@]}" "$P/gpt2-bf16-biasgelu" --device=cuda --data="$data" \
        --steps=1 --seed=1
    done
  fi
fi

if want ncu; then
  if [[ -n $ncu_bin ]]; then
    # --kernel-id context:stream:name:invocation, the first of each name.
    # (attention_bias_grad_0: c_attn's bias gradient, dq's sums read in
    # place and dout's, one launch since the forty-ninth session;
    # reduce_sum_0: the position embedding's gradient; embedding_grad_0
    # from sort_ids_0's keys since the fiftieth session.)
    # (On sm_90a the default program times its attention algorithms at
    # load; GPTC_VARIANT=own runs its own kernels untimed.)
    GPTC_VARIANT=own GPTC_CUDA_GRAPH=0 step 150 ncu "$ncu_bin" --target-processes all \
      --kernel-id ::regex:'^(fused_layernorm_1|fused_layernorm_grad_1|cross_entropy_with_grad_0|embedding_grad_0|sort_ids_0|attention_row_dot_0|attention_bias_grad_0|gemm_fallback_gelu_grad_bf16|multi_tensor_reduce_0|reduce_sum_0)$':1 \
      "${ncu_sections[@]}" \
      "${lib[@]}" "$P/gpt2-bf16" --device=cuda --data="$data" --steps=1 --seed=1
    # The loss gradient's max-first form (the "maxfirst" variant: half the
    # instructions an element of the online form's, which ncu found using
    # 70% of its issue slots) and the layernorm gradient's staged form (the
    # next row's x and dy copied under this row's work): GPTC_VARIANT takes
    # them for the loss and the layernorm gradients, and every other
    # launch's own kernel.
    GPTC_VARIANT=maxfirst,staged,own GPTC_CUDA_GRAPH=0 step 60 ncu-loss "$ncu_bin" --target-processes all \
      --kernel-id ::regex:'^(cross_entropy_with_grad_0_maxfirst|fused_layernorm_grad_1_staged)$':1 \
      "${ncu_sections[@]}" \
      "${lib[@]}" "$P/gpt2-bf16" --device=cuda --data="$data" --steps=1 --seed=1
    # The warpgroup-MMA forward with its softmax under the output product
    # and the deterministic wgmma backward (the auto program's fifth
    # forward and sixth backward kernels: the ones sm_90a's default may
    # pick), tiles 128-byte swizzled, A fragments held: which pipe, or
    # which stall, bounds them. (GPTC_VARIANT takes each launch's first
    # listed label it has: wgmma-split first, which the forward lacks, or
    # the backward runs wgmma-overlap and its kernel is not profiled, as
    # in the thirtieth session.)
    [[ -f $P/gpt2-bf16-auto && $ARCH == sm_90a ]] && \
      GPTC_VARIANT=wgmma-split,wgmma-overlap \
      GPTC_CUDA_GRAPH=0 step 90 ncu-wgmma "$ncu_bin" --target-processes all \
        --kernel-id ::regex:'^flash_attention_qkv(_4|_grad_5)$':1 \
        "${ncu_sections[@]}" \
        "${lib[@]}" "$P/gpt2-bf16-auto" --device=cuda --data="$data" --steps=1 --seed=1
    # wgmma-split with its kept rows read from shared memory (the auto
    # program's seventh backward kernel): 4 blocks an SM against 3, for
    # three times the shared-memory reads of its score products.
    [[ -f $P/gpt2-bf16-auto && $ARCH == sm_90a ]] && \
      GPTC_VARIANT=wgmma-split-ss \
      GPTC_CUDA_GRAPH=0 step 90 ncu-wgmma-ss "$ncu_bin" --target-processes all \
        --kernel-id ::regex:'^flash_attention_qkv_grad_6$':1 \
        "${ncu_sections[@]}" \
        "${lib[@]}" "$P/gpt2-bf16-auto" --device=cuda --data="$data" --steps=1 --seed=1
    # The atomic wgmma backward (the auto program's fourth backward
    # kernel): five products a tile pair against wgmma-split's seven, yet
    # 379 µs against 315 on the H200: which stall, or the atomics. (wgmma
    # alone: with wgmma-overlap first the backward took that one too.)
    [[ -f $P/gpt2-bf16-auto && $ARCH == sm_90a ]] && \
      GPTC_VARIANT=wgmma \
      GPTC_CUDA_GRAPH=0 step 90 ncu-wgmma-atomic "$ncu_bin" --target-processes all \
        --kernel-id ::regex:'^flash_attention_qkv_grad_3$':1 \
        "${ncu_sections[@]}" \
        "${lib[@]}" "$P/gpt2-bf16-auto" --device=cuda --data="$data" --steps=1 --seed=1
    # The bulk backward (the auto program's ninth backward kernel), whose
    # dq shares the TMA unit adds, and wgmma-ordered (the tenth), the same
    # added in turn: the stalls at their waits (nvdisasm 11.8 shows
    # cp.async's and the bulk copies' waits alike, DEPBAR.LE SB0: if they
    # share a counter, each tile's wait for its copies also waits for the
    # last tile's reductions), and at the turns. (",own": every other
    # launch runs its own kernel, untimed.)
    for bulk in "wgmma-bulk 8" "wgmma-ordered 9"; do
      read -r label kernel <<< "$bulk"
      [[ -f $P/gpt2-bf16-auto && $ARCH == sm_90a ]] && \
        GPTC_VARIANT=$label,own \
        GPTC_CUDA_GRAPH=0 step 90 "ncu-$label" "$ncu_bin" --target-processes all \
          --kernel-id ::regex:"^flash_attention_qkv_grad_$kernel\$":1 \
          "${ncu_sections[@]}" \
          "${lib[@]}" "$P/gpt2-bf16-auto" --device=cuda --data="$data" --steps=1 --seed=1
    done
  else
    echo "== ncu: skipped, no ncu on this machine" | tee "$logs/ncu.log"
  fi
fi

# Every attention algorithm timed at load, the fastest run (auto): its
# "kernel variants timed at load" lines rank them in the step itself.
# wgmma-ordered's blocks wait for each other, which no GPU had run before
# the fortieth session's bundle: its timing at load could end the whole
# load (a trap after its polls give up). It is left out
# (GPTC_VARIANT's -wgmma-ordered) unless attention_bench ran it at GPT-2's
# size and its results passed.
# (Only sm_90a's program has it, and a label no launch has is an error.)
auto_variant=$GPTC_VARIANT
[[ $ARCH == sm_90a ]] &&
  ! grep -q '^backward wgmma-ordered .*PASS$' "$logs/attention.log" 2>/dev/null &&
  auto_variant=$GPTC_VARIANT,-wgmma-ordered
if want auto && [[ -f $P/gpt2-bf16-auto ]]; then
  GPTC_VARIANT=$auto_variant step 90 gpt2-bf16-auto "${lib[@]}" \
    "$P/gpt2-bf16-auto" --device=cuda --data="$data" --steps=15 --seed=1
  # cuDNN's dq-sums backward among the candidates too (unless cuDNN
  # failed its check above).
  [[ ${GPTC_CUDNN:-1} != 0 ]] &&
    GPTC_VARIANT=$auto_variant GPTC_CUDNN=all step 90 \
      gpt2-bf16-auto-cudnn-all "${lib[@]}" "$P/gpt2-bf16-auto" --device=cuda \
      --data="$data" --steps=15 --seed=1
  GPTC_VARIANT=$auto_variant GPTC_PROFILE=1 step 90 gpt2-bf16-auto-profile \
    "${lib[@]}" "$P/gpt2-bf16-auto" --device=cuda --data="$data" --steps=8 \
    --seed=1
fi

# One algorithm a direction, from the auto program with GPTC_VARIANT naming
# them (no timing at load): the candidates for the defaults together, mma2
# and atomic128 (timed and profiled); the wgmma backward; the atomic one.
auto_as() { # step-name "forward,backward" [step args...]
  local name=$1 variants=$2
  shift 2
  GPTC_VARIANT=$variants step 90 "$name" "${lib[@]}" "$P/gpt2-bf16-auto" \
    --device=cuda --data="$data" "$@" --seed=1
}
if want wide && [[ -f $P/gpt2-bf16-auto ]]; then
  auto_as gpt2-bf16-wide mma2,atomic128 --steps=15
  GPTC_PROFILE=1 auto_as gpt2-bf16-wide-profile mma2,atomic128 --steps=8
fi
if want wgmma && [[ -f $P/gpt2-bf16-auto && $ARCH == sm_90a ]]; then
  auto_as gpt2-bf16-wgmma mma,wgmma --steps=15
fi
if want atomic && [[ -f $P/gpt2-bf16-auto ]]; then
  auto_as gpt2-bf16-atomic mma,atomic --steps=15
  GPTC_PROFILE=1 auto_as gpt2-bf16-atomic-profile mma,atomic --steps=8
fi

if want fallback; then
  GPTC_GEMM_FALLBACK=1 step 60 check-tiny-bf16-fallback "${lib[@]}" \
    "$P/tiny-bf16" --device=cuda --check-kernels
  GPTC_GEMM_DGELU=cublaslt step 60 check-tiny-bf16-dgelu "${lib[@]}" \
    "$P/tiny-bf16" --device=cuda --check-kernels
fi

if want dgelu; then
  GPTC_GEMM_DGELU=cublaslt step 90 gpt2-bf16-dgelu "${lib[@]}" "$P/gpt2-bf16" \
    --device=cuda --data="$data" --steps=15 --seed=1
fi

# GPT-2 medium (B=16) and large (B=8): their layernorm gradients spill
# under the register cap, and their uncapped twins are timed at load (the
# logs' "timed at load" lines); the step times at those widths.
if want large; then
  for m in medium large; do
    [[ -x $P/gpt2-$m-bf16 ]] || continue
    step 90 gpt2-$m-bf16 "${lib[@]}" "$P/gpt2-$m-bf16" --device=cuda \
      --data="$data" --steps=10 --seed=1
  done
fi

if want untuned; then
  GPTC_GEMM_TUNE=0 step 120 gpt2-bf16-untuned "${lib[@]}" "$P/gpt2-bf16" \
    --device=cuda --data="$data" --steps=20 --seed=1
fi

if want recompute && [[ -f $P/gpt2-bf16-recompute ]]; then
  step 90 gpt2-bf16-recompute "${lib[@]}" "$P/gpt2-bf16-recompute" \
    --device=cuda --data="$data" --steps=15 --seed=1
fi

# One table last; the logs travel back as one archive ($OUT keeps 8 files).
BATCH=$BATCH SEQ=$SEQ BUNDLE_CONFIG=$bundle/config.sh RUN_DATE=$(date -u +%F) \
  RUN_SECONDS=$((SECONDS - start)) RUN_STEPS="$*" \
  python3 "$root/bench/gpu/summarize.py" "$logs"
cp "$logs/summary.txt" "$logs/summary.json" "$logs/benchmarks-entry.md" \
  "$res/" 2>/dev/null
tar -C "$res" -czf "$res/logs.tar.gz" logs && rm -rf "$logs"
echo "results: $res (summary.txt, summary.json, benchmarks-entry.md, logs.tar.gz), $((SECONDS - start))s"
