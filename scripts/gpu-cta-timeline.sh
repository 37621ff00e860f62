#!/usr/bin/env bash
# Per-CTA timelines of the decode products on a GPU machine, with binaries built elsewhere
# (`CTA_TIMELINE=1 scripts/gpu-bundle.sh`, packed as BUNDLE.tar.xz: it holds duet and duet-cta).
# Makes the qwen2-7b files it needs (random weights, in parallel), records one-token FP8
# weight-only and BF16 decode and a 32-sequence Q4_K_M step with the diagnostic build
# (DUET_CTA_TIMELINE_OUT), and prints scripts/cta_timeline_report.py's table for each, with the
# o product's CTAs listed one by one, and each kind's CTA-end spread. Reports and the xz'd CSVs go
# to OUT.
#   RUNS: which of fp8wo bf16 q4km32 (default all three).
# Usage: scripts/gpu-cta-timeline.sh BUNDLE.tar.xz OUT
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
start_run "$1" "$2"
[ -x "$bin/duet-cta" ] || { echo "no duet-cta in $1 (CTA_TIMELINE=1 scripts/gpu-bundle.sh)"; exit 2; }
runs=${RUNS:-fp8wo bf16 q4km32}

# run label: file, synth type, bench arguments
spec() {
  case $1 in
    fp8wo) echo "q7-fp8ch|fp8-channel|--fp8 weight-only -p 0 -n 16 -r 1" ;;
    bf16) echo "q7-bf16.gguf|BF16|-p 0 -n 16 -r 1" ;;
    q4km32) echo "q7-q4km.gguf|Q4_K_M|-p 0 -n 0 -r 1 -b 32" ;;
  esac
}
for r in $runs; do
  IFS='|' read -r file type _ <<<"$(spec "$r")"
  [ -e "$work/$file" ] || "$bin/duet" synth --arch qwen2 --shape qwen2-7b -t "$type" -o "$work/$file" -q &
done
wait
for r in $runs; do
  IFS='|' read -r file _ args <<<"$(spec "$r")"
  echo "== $r: duet-cta bench -m $file $args"
  # shellcheck disable=SC2086
  DUET_CTA_TIMELINE_OUT="$out/cta_$r.csv" "$bin/duet-cta" bench -m "$work/$file" $args 2>&1 | grep -E "tg|step|cta timeline|rror"
  [ -s "$out/cta_$r.csv" ] || { echo "no records from $r"; continue; }
  # The o product: 3584 rows after the q/k/v product's 4608; its grid from the table.
  kind=$(python3 scripts/cta_timeline_report.py "$out/cta_$r.csv" | awk '/3584 rows g[0-9]+ after 4608/ {print $1, $2, $3, $4, $5; exit}')
  python3 scripts/cta_timeline_report.py "$out/cta_$r.csv" --spread ${kind:+--detail "$kind"} --json "$out/cta_$r.json" \
    >"$out/cta_$r.txt"
  head -40 "$out/cta_$r.txt"
  # The records, small enough to come back from a GPU machine (the CSV of 16 tokens is ~40 MB).
  xz -T0 -6 "$out/cta_$r.csv"
done
