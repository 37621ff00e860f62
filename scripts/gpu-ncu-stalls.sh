#!/usr/bin/env bash
# Where the warps of the streaming decode products wait, instruction by instruction: ncu's warp
# state and source counters (PC sampling) for one eager one-token gate/up launch (-s 10 -c 1:
# layer 2's third streaming product) of qwen2-7b FP8 weight-only and of BF16 (`duet synth`,
# random weights). Writes, per file, OUT/LABEL.ncu-rep, the details page (every section's
# metrics: issue slots, pipe use, stall reasons) as OUT/LABEL-details.csv and the SASS with its
# stall samples as OUT/LABEL-sass.csv; scripts/ncu_sass_stalls.py summarises the latter.
# SETS: extra runs, "|"-separated "label:file:WORDS" (file fp8 or bf16; WORDS: VAR=value words,
# and BIN=NAME to run the bundle's binary NAME instead of duet).
# Usage: scripts/gpu-ncu-stalls.sh BUNDLE.tar.xz OUT
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
start_run "$1" "$2"
command -v ncu >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
synth_q7 q7-fp8ch:fp8-channel q7-bf16.gguf:BF16
runs=("fp8:fp8:" "bf16:bf16:")
IFS='|' read -r -a extra <<<"${SETS:-}"
for s in "${extra[@]}"; do runs+=("$(echo $s)"); done
for r in "${runs[@]}"; do
  IFS=':' read -r label kind envs <<<"$r"
  case $kind in
    fp8) f=q7-fp8ch args="--fp8 weight-only" ;;
    *) f=q7-bf16.gguf args="" ;;
  esac
  echo "== $label ($f $args${envs:+, $envs})"
  split_setting "$envs"
  env "${env_words[@]}" timeout 120 ncu --clock-control none --section WarpStateStats --section SourceCounters \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section SpeedOfLight -k regex:matvec_mma_stream \
    -s 10 -c 1 -f -o "$out/$label" "$bin/$exe" bench -m "$work/$f" -p 0 -n 2 -r 1 --no-graphs $args \
    >"$out/$label.log" 2>&1 || { echo "ncu failed"; tail -5 "$out/$label.log"; continue; }
  ncu --import "$out/$label.ncu-rep" --page details --csv >"$out/$label-details.csv" 2>/dev/null
  ncu --import "$out/$label.ncu-rep" --page source --csv --print-source sass >"$out/$label-sass.csv" 2>/dev/null
  python3 scripts/ncu_sass_stalls.py "$out/$label-sass.csv" --details "$out/$label-details.csv" || true
done
