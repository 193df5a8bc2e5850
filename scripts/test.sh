#!/usr/bin/env bash
# Every test of gptc: the GoogleTest unit tests and the lit suite (FileCheck
# tests of the dialect, the passes and the CLI; the PyTorch reference checks),
# all through ctest. Runs scripts/setup.sh first.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/setup.sh"
ctest --test-dir "$repo/build" --output-on-failure -j2
