#!/usr/bin/env bash
# Times `duet synth` of a qwen2-7b (DeepSeek-R1-Distill-Qwen-7B geometry) file on all cores of
# the machine it runs on, for the file types given (default Q4_K_M Q8_0), and prints one line
# per type: wall seconds, peak RSS, file size. Usage: scripts/gpu-synth-timing.sh DUET_BIN [TYPES...]
set -euo pipefail
DUET=${1:?duet binary}; shift
TYPES=${*:-Q4_K_M Q8_0}
OUTDIR=${SYNTH_OUTDIR:-/tmp}
echo "cores: $(nproc)"
for t in $TYPES; do
  f="$OUTDIR/qwen2-7b-$t.gguf"
  /usr/bin/time -f "%e %M" -o /tmp/time.$t "$DUET" synth --arch qwen2 --shape qwen2-7b --type "$t" -o "$f" -q
  read -r secs rss < /tmp/time.$t
  echo "synth qwen2-7b $t: ${secs} s wall, peak RSS $((rss / 1024)) MB, $(stat -c %s "$f") bytes"
  rm -f "$f"
done
