#!/usr/bin/env bash
# Real models on the GPU machine, brought there in parts over several calls of one warm machine
# (scripts/real-model-parts.sh cuts them here; a call carries at most 64 MiB). Each call:
#   1. copies the parts, manifests and corpus found in PARTS (this call's carried files) to STORE
#      (default /tmp/duet-real, which outlives the call while the machine stays warm), and unpacks
#      BUNDLE when this call carries it (a packed folder holding duet and duet_gpu_model, built
#      for the GPU; an earlier call's unpacked bundle is kept in /tmp/duet-bin otherwise);
#   2. puts each model whose parts are all there back together (checked against its manifest's
#      sha256) and says which parts are still missing;
#   3. once every manifest's model is whole and the binaries are there, runs the checks on the GPU:
#      - whole-model parity of the logits against duet's CPU backend on this machine's cores
#        (duet_gpu_model ListedGpuParity: 64 prompt tokens, 16 decoded, 3 sequences x 8 steps,
#        native and generic kernels, the bounds of tests/gpu/model_test.cpp);
#      - the real-model golden tests against llama.cpp's fixtures, run by the GPU build (`duet
#        run` / `duet perplexity` take the GPU when one is present): tests/py/test_model_cli.py
#        (greedy continuations, text prompts, seeded sampling, perplexity at -c 128 and KL of a
#        run against itself) and tests/py/test_perplexity.py (the corpus's first 8 chunks at -c
#        512 within 0.3% of llama.cpp), for these models only;
#      - the whole corpus's perplexity at -c 512 on the GPU against llama.cpp's whole-corpus
#        figure in tests/data/model/llamacpp_ppl512_<model>.json, and `duet bench` (pp512, tg128).
#      Logs into OUT (parity.log, pytest.log, real.txt: the summary).
# Exit status: 0 when parts are still missing or every check passed, 1 when a check failed.
# Usage: scripts/gpu-real-model.sh PARTS OUT [BUNDLE.tar.xz] [STORE]
# SmolLM2-135M-Instruct Q4_1 (98 MB) in two calls, prepared here by
#   GPU_TESTS=duet_gpu_model KTRACE=0 TOKENIZERS=0 scripts/gpu-bundle.sh .devcarry/rm &&
#   tar -C .devcarry -cJf .devcarry/rm.tar.xz rm &&
#   FIRST_MIB=38 PART_MIB=57 scripts/real-model-parts.sh .devcarry/real models/SmolLM2-135M-Instruct.Q4_1.gguf
#   call 1, carrying .devcarry/rm.tar.xz, .devcarry/real/shakespeare.txt and the model's .sha256 and
#   .part00: scripts/gpu-real-model.sh .devcarry/real $OUT .devcarry/rm.tar.xz
#   call 2 (within the machine's warm time), carrying .part01: scripts/gpu-real-model.sh .devcarry/real $OUT
# The checks run once every manifest the store holds is complete, on all those models: carry a
# model's manifest with its first part (Gemma 3 270M after SmolLM2: five more calls of 32-57 MiB).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
[ $# -ge 2 ] || { sed -n 2,32p "$0" | sed 's/^# \{0,1\}//'; exit 2; }
parts=$1
out=$2
bundle=${3:-}
store=${4:-/tmp/duet-real}
mkdir -p "$out" "$store/models"

# 1. This call's files into the store, and the binaries.
[ -d "$parts" ] && find "$parts" -maxdepth 1 -type f -exec cp {} "$store/" \;
if [ -n "$bundle" ] && [ -f "$bundle" ]; then
  unpack_bundle "$bundle"
else  # an earlier call's bundle, or none yet
  bin=$(find /tmp/duet-bin -name duet -type f 2>/dev/null | head -1)
  [ -n "$bin" ] && bin=$(dirname "$bin")
fi
ls -l "$store"

# 2. Whole models.
complete=1
models=()
for m in "$store"/*.sha256; do
  [ -e "$m" ] || continue
  name=$(basename "$m" .sha256)
  read -r sum n bytes <"$m"
  if [ -f "$store/models/$name" ] && [ "$(stat -c %s "$store/models/$name")" = "$bytes" ]; then
    models+=("$store/models/$name")
    continue
  fi
  missing=""
  for ((i = 0; i < n; i++)); do
    p=$(printf '%s/%s.part%02d' "$store" "$name" "$i")
    [ -f "$p" ] || missing="$missing $(basename "$p")"
  done
  if [ -n "$missing" ]; then
    echo "$name: still missing$missing"
    complete=0
    continue
  fi
  cat "$store/$name".part* >"$store/models/$name.tmp"
  got=$(sha256sum "$store/models/$name.tmp" | cut -d' ' -f1)
  if [ "$got" != "$sum" ]; then
    echo "$name: the assembled file's sha256 $got is not the manifest's $sum" | tee -a "$out/real.txt"
    rm -f "$store/models/$name.tmp"
    exit 1
  fi
  mv "$store/models/$name.tmp" "$store/models/$name"
  rm -f "$store/$name".part*  # the whole file is kept; its parts are no longer needed
  echo "$name: assembled, sha256 ok ($bytes bytes)"
  models+=("$store/models/$name")
done
[ -f "$store/shakespeare.txt" ] && cp "$store/shakespeare.txt" "$store/models/"
if [ "$complete" = 0 ] || [ ${#models[@]} -eq 0 ]; then
  echo "parts still missing: carry them in the next call (the machine must stay warm)"
  exit 0
fi
if [ -z "$bin" ] || [ ! -x "$bin/duet" ]; then
  echo "no binaries: carry the bundle (duet, duet_gpu_model) in a call"
  exit 0
fi

# 3. The checks.
export DUET_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/real.txt"
status=0
list=$(IFS=,; echo "${models[*]}")
echo "== whole-model parity against the CPU backend: ${models[*]}"
if [ -x "$bin/duet_gpu_model" ]; then
  DUET_GPU_PARITY_MODELS=$list "$bin/duet_gpu_model" --gtest_filter='ListedGpuParity*' >"$out/parity.log" 2>&1 || status=1
  grep -E '^\[parity\]|FAILED|PASSED|Failure' "$out/parity.log" | head -40 | tee -a "$out/real.txt"
else
  echo "duet_gpu_model missing from the bundle: parity not run" | tee -a "$out/real.txt"
  status=1
fi
keys=""
for m in "${models[@]}"; do
  k=$(basename "$m" | cut -d- -f1)  # SmolLM2, gemma: a word of the tests' parameter ids
  keys="${keys:+$keys or }$k"
done
echo "== the real-model golden tests on the GPU build (-k \"$keys or usage\")"
DUET_BIN=$bin/duet DUET_MODELS_DIR=$store/models python3 -m pytest -q -p no:cacheprovider \
  tests/py/test_model_cli.py tests/py/test_perplexity.py -k "$keys or usage" >"$out/pytest.log" 2>&1 || status=1
tail -25 "$out/pytest.log" | tee -a "$out/real.txt"
echo "== whole corpus at -c 512 on the GPU, and duet bench"
for m in "${models[@]}"; do
  stem=$(basename "$m" .gguf)
  ref=tests/data/model/llamacpp_ppl512_$stem.json
  start=$SECONDS
  "$bin/duet" perplexity -m "$m" -f "$store/models/shakespeare.txt" -c 512 ${PPL_CHUNKS:+--chunks $PPL_CHUNKS} --json \
    >"/tmp/ppl-$stem.json" 2>"/tmp/ppl-$stem.err" || { status=1; tail -3 "/tmp/ppl-$stem.err"; }
  python3 - "/tmp/ppl-$stem.json" "$ref" $((SECONDS - start)) <<'EOF' | tee -a "$out/real.txt" || status=1
import json, math, sys
got, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
n, scored = got["n_chunks"], ref["scored_per_chunk"]
# llama.cpp's figure over the same chunks (the whole corpus unless PPL_CHUNKS cut it short).
want = math.exp(sum(ref["chunk_nll"][:n]) / (n * scored))
rel = got["ppl"] / want - 1
print(f"{ref['model']}: GPU ppl {got['ppl']:.6f} over {n} of {ref['n_chunks_total']} chunks ({sys.argv[3]} s) "
      f"against llama.cpp's {want:.6f}: {rel:+.2e} (bound 3e-3)")
sys.exit(0 if n <= len(ref["chunk_nll"]) and abs(rel) < 0.003 else 1)
EOF
  "$bin/duet" bench -m "$m" -p 512 -n 128 -r 3 2>&1 | tail -4 | tee -a "$out/real.txt"
done
echo "real-model checks: $([ $status = 0 ] && echo passed || echo FAILED)" | tee -a "$out/real.txt"
exit $status
