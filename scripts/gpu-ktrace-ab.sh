#!/usr/bin/env bash
# Kernel traces of decode graph replays under several settings, with binaries built elsewhere
# (scripts/gpu-bundle.sh, packed as BUNDLE.tar.xz, with libduet_ktrace.so and its CUPTI): for each
# setting of SETS ("|"-separated, each VAR=value words or "-" for none; BIN=NAME as in
# scripts/gpu-decode-ab.sh) one `duet bench` on the qwen2-7b Q4_K_M file (random weights, made in
# WORK if missing) with ARGS (default "-p 0 -n 32 -r 1"), traced by libduet_ktrace.so, and
# scripts/ktrace_report.py's table of it (REPORT_ARGS, default "--skip 2") into OUT/ktrace-N.txt;
# the traces themselves stay in WORK.
# Usage: SETS="- | DUET_X=1" ARGS="-p 0 -n 32 -r 1 -d 16384" scripts/gpu-ktrace-ab.sh BUNDLE.tar.xz OUT [WORK]
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
start_run "$1" "$2" "${3:-}"
synth_q7 q7-q4km.gguf:Q4_K_M
trace() {  # N SETTING
  local i=$1 set=$2
  echo "== ktrace-$i [$(echo $set)]: duet bench ${ARGS:--p 0 -n 32 -r 1}" | tee "$out/ktrace-$i.txt"
  env "${env_words[@]}" LD_LIBRARY_PATH="$bin:${LD_LIBRARY_PATH:-}" CUDA_INJECTION64_PATH="$bin/libduet_ktrace.so" \
    DUET_KTRACE_OUT="$work/ktrace-$i.csv" "$bin/$exe" bench -m "$work/q7-q4km.gguf" ${ARGS:--p 0 -n 32 -r 1} 2>&1 |
    grep -E "pp|tg|step" | tee -a "$out/ktrace-$i.txt"
  python3 scripts/ktrace_report.py "$work/ktrace-$i.csv" ${REPORT_ARGS:---skip 2} >>"$out/ktrace-$i.txt" 2>&1
}
each_setting "${SETS:-}" trace
