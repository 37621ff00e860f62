#!/usr/bin/env bash
# Decode A/B on one qwen2-7b Q4_K_M file (random weights) with binaries built elsewhere
# (scripts/gpu-bundle.sh, packed as BUNDLE.tar.xz): `duet bench` tg128 and decode steps of 1 and
# 32 sequences under each setting of a knob (KNOB, values VALUES, alternated twice), then
# llama.cpp on the same file in the same run when LLAMA_TAR names a packed llama_cpp package.
# FILE / TYPE / ARGS pick another file and benchmark (default q7-q4km.gguf, Q4_K_M,
# "-p 512 -n 128 -r 3 -b 1,32"; e.g. FILE=q7-fp8ch TYPE=fp8-channel ARGS="-p 2048 -n 0 -r 2 --fp8 native").
# Usage: KNOB=DUET_MATVEC_PERSISTENT VALUES="0 1" scripts/gpu-decode-ab.sh BUNDLE.tar.xz OUT
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$1
out=$2
work=/tmp/duet-gpu
mkdir -p "$out" "$work" /tmp/duet-bin
tar -xJf "$bundle" -C /tmp/duet-bin
bin=$(dirname "$(find /tmp/duet-bin -name duet -type f | head -1)")
export DUET_TOKENIZERS=$bin/tokenizers
file=${FILE:-q7-q4km.gguf}
[ -e "$work/$file" ] || "$bin/duet" synth --arch qwen2 --shape qwen2-7b -t "${TYPE:-Q4_K_M}" -o "$work/$file" -q
for round in 1 2; do
  for v in ${VALUES:-0 1}; do
    echo "== $file ${KNOB:-DUET_MATVEC_PERSISTENT}=$v (round $round)"
    env "${KNOB:-DUET_MATVEC_PERSISTENT}=$v" "$bin/duet" bench -m "$work/$file" ${ARGS:--p 512 -n 128 -r 3 -b 1,32} 2>/dev/null |
      grep -E "pp|tg|step"
  done
done | tee -a "$out/ab.txt"
if [ -n "${LLAMA_TAR:-}" ] && [ -e "$LLAMA_TAR" ]; then
  mkdir -p /tmp/duet-llsite && tar -xJf "$LLAMA_TAR" -C /tmp/duet-llsite
  [ -n "${LLAMA_DEPS:-}" ] && python3 -m pip install -q --no-index --no-deps --target /tmp/duet-llsite $LLAMA_DEPS 2>&1 | tail -1
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  LD_LIBRARY_PATH="${nccl:+$nccl:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" PYTHONPATH=/tmp/duet-llsite \
    timeout 200 python3 scripts/ref/llamacpp_gpu_bench.py "$work/$file" --reps 2 2>"$out/llamacpp.err" | tee "$out/llamacpp.jsonl"
fi
