#!/usr/bin/env bash
# Power draw and clocks during `duet bench` under several settings (binaries from
# scripts/gpu-bundle.sh, packed as BUNDLE.tar.xz): for each setting of SETS ("|"-separated, each
# VAR=value words or "-" for none), nvidia-smi samples power, SM and memory clocks, the active
# throttle reasons and the temperature every 20 ms while one `duet bench` with ARGS runs on the
# qwen2-7b Q4_K_M file (random weights, made in WORK if missing); prints the bench's figures and
# the samples' summary over the bench's second half (the decode tests when ARGS runs a long
# prefill first), each setting's samples into OUT/smi-N.csv.
# Usage: SETS="- | DUET_X=1" ARGS="-p 0 -n 256 -r 3 -d 16384" scripts/gpu-power-ab.sh BUNDLE.tar.xz OUT [WORK]
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
start_run "$1" "$2" "${3:-}"
synth_q7 q7-q4km.gguf:Q4_K_M
sample() {  # N SETTING
  local i=$1 set=$2 smi
  echo "== power-$i [$(echo $set)]: duet bench ${ARGS:--p 0 -n 256 -r 3}"
  nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks.mem,clocks_throttle_reasons.active,temperature.gpu \
    --format=csv,noheader,nounits -lms 20 >"$out/smi-$i.csv" &
  smi=$!
  env "${env_words[@]}" "$bin/$exe" bench -m "$work/q7-q4km.gguf" ${ARGS:--p 0 -n 256 -r 3} 2>&1 | grep -E "pp|tg|step"
  kill $smi
  wait $smi 2>/dev/null
  python3 - "$out/smi-$i.csv" <<'PY'
import sys
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(",") >= 5]
half = rows[len(rows) // 2:]
def col(k):
    return sorted(float(r[k]) for r in half if r[k].replace(".", "", 1).isdigit())
for name, k in (("power W", 1), ("sm MHz", 2), ("mem MHz", 3), ("temp C", 5)):
    v = col(k)
    if v:
        print(f"  {name:8s} min {v[0]:7.1f}  median {v[len(v) // 2]:7.1f}  max {v[-1]:7.1f}  ({len(v)} samples)")
reasons = {}
for r in half:
    reasons[r[4]] = reasons.get(r[4], 0) + 1
print("  throttle reasons (bitmask: samples):", ", ".join(f"{k}: {n}" for k, n in sorted(reasons.items())))
PY
}
each_setting "${SETS:-}" sample
