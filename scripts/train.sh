#!/usr/bin/env bash
# The main job: train gpt2-tiny on the Brown corpus, then sample from it.
# Runs scripts/setup.sh first (packages, pinned data, build); tokenizes the
# corpus once into a train and a val shard; trains on the GPU when one is
# there and gptc can use it, else on the CPU; writes checkpoints and the log
# to runs/brown-tiny/. Extra arguments go to `gptc train` (e.g. --steps=500).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
scripts/setup.sh

deps=${GPTC_DEPS:-$repo/.deps}
data=$deps/brown
if [[ ! -f $data/brown_train.bin || ! -f $data/brown_val.bin ]]; then
  build/bin/gptc tokenize "$data/brown.txt" -o "$data/brown_train.bin" \
    --val-fraction=0.05
fi

# No --device: gptc train runs the compiled program on the GPU when the CUDA
# backend finds one, and the CPU executor otherwise.
run=runs/brown-tiny
# A re-run continues from the newest complete checkpoint (a finished run
# just samples again).
newest() { ls -d "$run"/step_*/DONE 2>/dev/null | sort | tail -n 1 | xargs -r dirname; }
resume=()
[[ -n $(newest) ]] && resume=(--resume)
build/bin/gptc train --model=gpt2-tiny \
  --data="$data/brown_train.bin" --val-data="$data/brown_val.bin" \
  --batch=8 --seq=64 --steps=300 --lr=1e-3 --min-lr=1e-4 --warmup=20 \
  --val-every=50 --val-batches=8 --ckpt-dir=$run --ckpt-every=100 \
  "${resume[@]}" "$@"

build/bin/gptc sample --init-from="$(newest)" \
  --prompt="The jury said" --max-new-tokens=40 --seed=1
