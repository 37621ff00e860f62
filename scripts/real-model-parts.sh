#!/usr/bin/env bash
# Cuts real model files into parts small enough to travel to a GPU machine whose calls carry at
# most 64 MiB each (the repository's tracked files included), for scripts/gpu-real-model.sh to put
# back together there over several calls of one warm machine. For each FILE: OUT/NAME.partNN
# (PART_MIB MiB each, default 40; the first part FIRST_MIB, default PART_MIB, so that it can travel
# beside a bundle) and OUT/NAME.sha256 ("<sha256> <parts> <bytes>", the manifest the GPU machine
# checks the assembled file against). Also copies the perplexity corpus shakespeare.txt (found
# beside the first FILE, else in models/) to OUT.
# Usage: [PART_MIB=40] [FIRST_MIB=N] scripts/real-model-parts.sh OUT FILE...
#   e.g. FIRST_MIB=38 PART_MIB=57 scripts/real-model-parts.sh .devcarry/real models/SmolLM2-135M-Instruct.Q4_1.gguf
#   (two calls: the 16 MB bundle, the corpus, the manifest and part00 in the first, part01 in the
#   second, each under 64 MiB with the ~7 MiB of tracked files)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,12p "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out=$1
shift
part=${PART_MIB:-40}
first=${FIRST_MIB:-$part}
mkdir -p "$out"
for f in "$@"; do
  f=$(readlink -f "$f")
  [ -f "$f" ] || { echo "real-model-parts: $f is not a file" >&2; exit 1; }
  name=$(basename "$f")
  rm -f "$out/$name".part* "$out/$name.sha256"
  bytes=$(stat -c %s "$f")
  first_b=$((first * 1024 * 1024))
  part_b=$((part * 1024 * 1024))
  head -c "$first_b" "$f" >"$out/$name.part00"
  n=1
  if [ "$bytes" -gt "$first_b" ]; then
    # The rest in PART_MIB pieces: part01, part02, ...
    tail -c +$((first_b + 1)) "$f" | split -b "$part_b" -d -a 2 --numeric-suffixes=1 - "$out/$name.part"
    n=$(ls "$out/$name".part* | wc -l)
  fi
  echo "$(sha256sum "$f" | cut -d' ' -f1) $n $bytes" >"$out/$name.sha256"
  echo "$name: $bytes bytes in $n parts"
  ls -l "$out/$name".part* | awk '{printf "  %s %.1f MiB\n", $NF, $5 / 1048576}'
done
# The corpus: beside the first model file (scripts/setup.sh writes both into models/), else models/.
for c in "$(dirname "$(readlink -f "$1")")/shakespeare.txt" "$(dirname "$1")/shakespeare.txt" models/shakespeare.txt; do
  [ -f "$c" ] && { cp -L "$c" "$out/"; break; }
done
