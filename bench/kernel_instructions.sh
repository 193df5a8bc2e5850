#!/usr/bin/env bash
# Static instruction counts of the generated kernels, no GPU needed: each
# kernel's source from `gptc compile --dump-kernels` through nvcc to PTX for
# the same arch, then its tensor-core, shared-memory and total instruction
# counts (loops are unrolled, so these are per kernel body, not per launch).
#
#   bash bench/kernel_instructions.sh [gptc compile options] [-- kernel name regex]
#   bash bench/kernel_instructions.sh --model=gpt2 --precision=bf16 --gpu-arch=sm_90a -- flash
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
opts=() pattern=.
while (($#)); do
  if [[ $1 == -- ]]; then pattern=${2:-.}; break; fi
  opts+=("$1"); shift
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$repo/build/bin/gptc" compile "${opts[@]}" --dump-kernels="$tmp/k" -o "$tmp/program" > /dev/null
arch=$(sed -n 's/.*"arch": "\(sm_[0-9a-z]*\)".*/\1/p' "$tmp/k/manifest.json" | head -n 1)
printf '%-36s %6s %6s %9s %10s %7s\n' kernel mma wgmma ldmatrix ld.shared total
for cu in "$tmp"/k/*.cu; do
  name=$(basename "$cu" .cu)
  [[ $name =~ $pattern ]] || continue
  "$nvcc" -arch="$arch" -ptx -std=c++17 -o "$tmp/$name.ptx" "$cu"
  p=$tmp/$name.ptx
  printf '%-36s %6d %6d %9d %10d %7d\n' "$name" "$(grep -c 'mma.sync' "$p" || true)" \
    "$(grep -c 'wgmma.mma_async' "$p" || true)" \
    "$(grep -c 'ldmatrix' "$p" || true)" "$(grep -c 'ld.shared' "$p" || true)" \
    "$(grep -cE '^\s+[a-z@]' "$p" || true)"
done
