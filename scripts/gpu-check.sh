#!/usr/bin/env bash
# The GPU checks of the CUDA backend, on a machine with an NVIDIA GPU, in one or two runs:
#   tests   the GPU test executables (kernel parity tables, whole-model parity on the tiny models)
#   models  `duet synth` files of real shapes (qwen2-0.5b, gemma3-270m, qwen2-7b) in Q4_K_M, Q8_0,
#           BF16 and FP8, and whole-model parity of each against duet's CPU backend
#   bench   `duet bench` on the qwen2-7b files (pp512, pp2048, tg128, decode steps of 1 and 32
#           sequences), one table with the roofline fractions; llama.cpp on the same GGUF files
#           (scripts/ref/llamacpp_gpu_bench.py) when LLAMA_WHEEL names a CUDA build of the
#           llama-cpp-python wheel (its pure-Python needs, e.g. diskcache, as wheels beside it),
#           or LLAMA_SITE a directory where that package is already unpacked
# Binaries: --bin DIR (from scripts/gpu-bundle.sh, for a machine without the build dependencies),
# else build-gpu/ is built here (needs cmake, ninja, nlohmann-json, CLI11, GoogleTest, CUDA).
# Usage: scripts/gpu-check.sh [--bin DIR] [--work DIR] [--out DIR] [stage ...]   (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
bin=""
work=/tmp/duet-gpu
out=${OUT:-/tmp/duet-gpu-out}
stages=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    tests|models|bench|all) stages+=("$1"); shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#stages[@]} -eq 0 ] && stages=(all)
want() { for s in "${stages[@]}"; do [ "$s" = "$1" ] || [ "$s" = all ] && return 0; done; return 1; }
mkdir -p "$work" "$out"
if [ -z "$bin" ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDUET_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
    ninja -C build-gpu >/dev/null || { echo "gpu-check: build failed" >&2; exit 1; }
  bin=build-gpu
  export DUET_TOKENIZERS=${DUET_TOKENIZERS:-../shared/tokenizers}
  find build-gpu/tests -maxdepth 1 -name 'duet_gpu_*' -type f -executable -exec cp {} build-gpu/ \;
else
  export DUET_TOKENIZERS=${DUET_TOKENIZERS:-$bin/tokenizers}
fi
bin=$(cd "$bin" && pwd)
duet="$bin/duet"
export DUET_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv,noheader | tee "$out/gpu.txt"
status=0

if want tests; then
  for t in "$bin"/duet_gpu_*; do
    [ "$(basename "$t")" = duet_gpu_model ] && continue
    echo "== $(basename "$t")"
    "$t" --gtest_brief=1 >"$out/$(basename "$t").log" 2>&1 || status=1
    grep -E '^\[|FAILED|Failure|bench|GB/s|TFLOP' "$out/$(basename "$t").log" | head -80
  done
  if [ -x "$bin/duet_gpu_model" ]; then
    echo "== duet_gpu_model (tiny models)"
    "$bin/duet_gpu_model" --gtest_filter='Archs/*' >"$out/duet_gpu_model_tiny.log" 2>&1 || status=1
    grep -E '^\[parity\]|FAILED|PASSED' "$out/duet_gpu_model_tiny.log" | head -60
  fi
fi

synth() {  # arch shape type file
  [ -e "$work/$4" ] && return 0
  /usr/bin/time -f "synth $2 $3: %e s, %M KB" "$duet" synth --arch "$1" --shape "$2" -t "$3" -o "$work/$4" -q 2>&1 | tail -1
}

if want models; then
  echo "== synth models"
  synth qwen2 qwen2-0.5b Q4_K_M q05-q4km.gguf
  synth qwen2 qwen2-0.5b Q8_0 q05-q8.gguf
  synth qwen2 qwen2-0.5b BF16 q05-bf16.gguf
  synth qwen2 qwen2-0.5b fp8-channel q05-fp8ch
  synth qwen2 qwen2-0.5b fp8-block q05-fp8blk
  synth gemma3 gemma3-270m Q4_K_M g270-q4km.gguf
  synth gemma3 gemma3-270m BF16 g270-bf16.gguf
  synth qwen2 qwen2-7b Q4_K_M q7-q4km.gguf
  synth qwen2 qwen2-7b Q8_0 q7-q8.gguf
  synth qwen2 qwen2-7b BF16 q7-bf16.gguf
  synth qwen2 qwen2-7b fp8-channel q7-fp8ch
  list=""
  for f in q05-q4km.gguf q05-q8.gguf q05-bf16.gguf q05-fp8ch q05-fp8blk g270-q4km.gguf g270-bf16.gguf q7-q4km.gguf q7-q8.gguf q7-bf16.gguf q7-fp8ch; do
    [ -e "$work/$f" ] && list="$list,$work/$f"
  done
  echo "== duet_gpu_model (synth models of real shapes)"
  DUET_GPU_PARITY_MODELS=${DUET_GPU_PARITY_MODELS:-${list#,}} "$bin/duet_gpu_model" --gtest_filter='Listed*' \
    >"$out/duet_gpu_model_listed.log" 2>&1 || status=1
  grep -E '^\[parity\]|FAILED|PASSED' "$out/duet_gpu_model_listed.log" | head -60
fi

if want bench; then
  echo "== duet bench (qwen2-7b shapes, random weights)"
  : >"$out/bench.jsonl"
  bench_file "Q4_K_M" q7-q4km.gguf -b 1,8,32
  bench_file "Q8_0" q7-q8.gguf
  bench_file "BF16" q7-bf16.gguf -b 1,32
  bench_file "FP8 weight-only" q7-fp8ch --fp8 weight-only
  bench_file "FP8 native" q7-fp8ch --fp8 native
  DUET_KERNELS=generic bench_file "Q4_K_M generic" q7-q4km.gguf
  DUET_CUDA_NO_FUSE=1 bench_file "Q4_K_M unfused qkv/gate-up" q7-q4km.gguf
  for f in q7-q4km.gguf q7-bf16.gguf; do  # where decode time goes, op by op (eager)
    DUET_CUDA_PROFILE=1 "$duet" bench -m "$work/$f" -p 0 -n 32 -r 1 2>>"$out/bench.err" | tee "$out/profile-$f.txt"
  done
  if [ -n "${LLAMA_WHEEL:-}" ] && [ -e "$LLAMA_WHEEL" ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/duet-llsite "$LLAMA_WHEEL" "$(dirname "$LLAMA_WHEEL")"/*.whl 2>&1 | tail -1
    LLAMA_SITE=/tmp/duet-llsite
  fi
  if [ -n "${LLAMA_SITE:-}" ]; then
    echo "== llama.cpp on the same files"
    # ggml's CUDA backend links NCCL: the toolkit's, or the one a PyTorch install carries.
    nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
    LD_LIBRARY_PATH="${nccl:+$nccl:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" PYTHONPATH="$LLAMA_SITE" \
      python3 scripts/ref/llamacpp_gpu_bench.py "$work/q7-q4km.gguf" "$work/q7-q8.gguf" "$work/q7-bf16.gguf" \
      2>>"$out/llamacpp.err" | tee "$out/llamacpp.jsonl"
  fi
  python3 scripts/gpu_report.py "$out" | tee "$out/report.md"
fi
exit $status
