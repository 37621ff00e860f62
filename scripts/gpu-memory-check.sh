#!/usr/bin/env bash
# Peak RSS of duet's file tools on a qwen2-7b file (run on a machine with ~40 GB of free disk):
# synth F16 (15 GB), quantize F16 -> Q4_K_M, inspect. Usage: scripts/gpu-memory-check.sh DUET_BIN
set -euo pipefail
DUET=${1:?duet binary}
D=${MEMCHECK_DIR:-/tmp/memcheck}
mkdir -p "$D"
run() {  # label, command...
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$D/time" "$@" > /dev/null
  read -r secs rss < "$D/time"
  echo "$label: ${secs} s wall, peak RSS $((rss / 1024)) MB"
}
run "synth qwen2-7b F16" "$DUET" synth --arch qwen2 --shape qwen2-7b --type F16 -o "$D/f16.gguf" -q
run "quantize qwen2-7b F16 -> Q4_K_M" "$DUET" quantize "$D/f16.gguf" "$D/q4km.gguf" --type Q4_K_M -q
run "inspect qwen2-7b Q4_K_M" "$DUET" inspect "$D/q4km.gguf" --json --tensors
run "inspect qwen2-7b F16" "$DUET" inspect "$D/f16.gguf"
echo "largest tensor (F16 token_embd / output): $((152064 * 3584 * 2 / 1048576)) MB"
ls -l "$D"/*.gguf
rm -rf "$D"
