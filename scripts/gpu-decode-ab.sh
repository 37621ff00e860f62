#!/usr/bin/env bash
# Decode A/B with binaries built elsewhere (scripts/gpu-bundle.sh, packed as BUNDLE.tar.xz): `duet
# bench` on qwen2-7b files (random weights) under each setting of one or more knobs, the settings
# interleaved over ROUNDS rounds (so that drift of the machine hits every setting alike), then
# llama.cpp on the Q4_K_M file in the same run when LLAMA_TAR names a packed llama_cpp package.
#   KNOB / VALUES: one knob and its values (default DUET_MATVEC_PERSISTENT, "0 1");
#   SETS: instead, settings separated by "|", each one or more VAR=value words, "-" for none
#         (e.g. SETS="- | DUET_MATVEC_PAIR=0 | DUET_MATVEC_PAIR=0 DUET_ATTN_PDL=0"); the word
#         BIN=NAME runs the bundle's binary NAME instead of duet (e.g. a build of main packed
#         beside the branch's as duet-main: SETS="BIN=duet-main | - | DUET_X=1");
#   FILES: which files, of q4km bf16 fp8wo fp8nat (default q4km); FILE / TYPE / ARGS: one other
#          file and benchmark instead (e.g. FILE=q7-fp8ch TYPE=fp8-channel ARGS="-p 2048 -n 0 -r 2
#          --fp8 native"); ARGS also replaces the default arguments of FILES' benches (fp8wo and
#          fp8nat keep their --fp8 mode);
#   ROUNDS: rounds (default 2);
#   LLAMA_ARGS: extra arguments of llamacpp_gpu_bench.py (e.g. --depth 4096,16384 beside ARGS="-p
#               512 -n 128 -r 2 -d 0,4096,16384": the same tests at those context depths).
# Every line goes to OUT/ab.txt, then a table of each (file, figure, setting)'s values per round
# (tg128 / pp512 tok/s, step ms; OUT/ab.tsv holds them one per row).
# Usage: SETS="- | DUET_X=1" FILES="q4km bf16" scripts/gpu-decode-ab.sh BUNDLE.tar.xz OUT
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
start_run "$1" "$2"

# file spec: label|name|synth type|arguments the file always takes|default bench arguments
# (ARGS replaces only the last: fp8wo and fp8nat keep their --fp8 mode).
spec() {
  case $1 in
    q4km) echo "q4km|q7-q4km.gguf|Q4_K_M||-p 512 -n 128 -r 3 -b 1,32" ;;
    bf16) echo "bf16|q7-bf16.gguf|BF16||-p 0 -n 128 -r 3" ;;
    fp8wo) echo "fp8wo|q7-fp8ch|fp8-channel|--fp8 weight-only|-p 0 -n 128 -r 3" ;;
    fp8nat) echo "fp8nat|q7-fp8ch|fp8-channel|--fp8 native|-p 0 -n 128 -r 3" ;;
  esac
}
specs=()
if [ -n "${FILE:-}" ]; then
  specs+=("$FILE|$FILE|${TYPE:-Q4_K_M}||${ARGS:--p 512 -n 128 -r 3 -b 1,32}")
else
  for f in ${FILES:-q4km}; do
    s=$(spec "$f")
    [ -z "$s" ] && { echo "unknown file kind $f"; exit 2; }
    [ -n "${ARGS:-}" ] && s="${s%|*}|$ARGS"
    specs+=("$s")
  done
fi
# The files, made in parallel on the host's cores (each only once: fp8wo and fp8nat share one).
made=" "
for s in "${specs[@]}"; do
  IFS='|' read -r _ file type _ <<<"$s"
  case $made in *" $file "*) continue ;; esac
  made="$made$file "
  [ -e "$work/$file" ] || "$bin/duet" synth --arch qwen2 --shape qwen2-7b -t "$type" -o "$work/$file" -q &
done
wait

if [ -n "${SETS:-}" ]; then
  IFS='|' read -r -a sets <<<"$SETS"
else
  sets=()
  for v in ${VALUES:-0 1}; do sets+=("${KNOB:-DUET_MATVEC_PERSISTENT}=$v"); done
fi
: >"$out/ab.tsv"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for s in "${specs[@]}"; do
    IFS='|' read -r label file _ fixed args <<<"$s"
    for set in "${sets[@]}"; do
      set=$(echo $set)  # trimmed
      split_setting "$set"
      echo "== $label [${set:--}] (round $round)"
      res=$(env "${env_words[@]}" "$bin/$exe" bench -m "$work/$file" $fixed $args 2>/dev/null | grep -E "pp|tg|step")
      echo "$res"
      # One row per figure: tg/pp tok/s ("tg128 @ d4096 ..." -> tg128_d4096), step ms ("step x32
      # 4.969 ms ..." -> step_x32_ms).
      echo "$res" | awk -v l="$label" -v s="${set:--}" -v r="$round" -v OFS='\t' \
        '$1 ~ /^(tg|pp)[0-9]+$/ {if ($2 == "@") print l, s, r, $1 "_" $3, $4; else print l, s, r, $1, $2}
         $1 == "step" {print l, s, r, "step_" $2 "_ms", $3}' >>"$out/ab.tsv"
    done
  done
done | tee -a "$out/ab.txt"
echo "== by file, figure and setting (rounds in order; tg/pp in tok/s, steps in ms)"
awk -F'\t' '{k = $1 " " $4 " [" $2 "]"; if (!(k in v)) order[n++] = k; v[k] = v[k] " " $5} END {for (i = 0; i < n; i++) print order[i] ":" v[order[i]]}' \
  "$out/ab.tsv" | tee -a "$out/ab.txt"
if [ -n "${LLAMA_TAR:-}" ] && [ -e "$LLAMA_TAR" ]; then
  mkdir -p /tmp/duet-llsite && tar -xJf "$LLAMA_TAR" -C /tmp/duet-llsite
  [ -n "${LLAMA_DEPS:-}" ] && python3 -m pip install -q --no-index --no-deps --target /tmp/duet-llsite $LLAMA_DEPS 2>&1 | tail -1
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  q4=$work/q7-q4km.gguf
  [ -e "$q4" ] || "$bin/duet" synth --arch qwen2 --shape qwen2-7b -t Q4_K_M -o "$q4" -q
  LD_LIBRARY_PATH="${nccl:+$nccl:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" PYTHONPATH=/tmp/duet-llsite \
    timeout 300 python3 scripts/ref/llamacpp_gpu_bench.py "$q4" --reps 2 ${LLAMA_ARGS:-} 2>"$out/llamacpp.err" | tee "$out/llamacpp.jsonl"
fi
