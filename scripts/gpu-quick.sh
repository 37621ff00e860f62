#!/usr/bin/env bash
# One short GPU iteration (under 10 minutes on an H200) of the CUDA backend's work loop, with
# binaries built elsewhere (scripts/gpu-bundle.sh, packed as BUNDLE.tar.xz):
#   1. the kernel parity tests named by GPU_TESTS (default: ops, matmul parity, the tiny-model
#      whole-model parity), each log into OUT;
#   2. `duet synth` qwen2-7b files (Q4_K_M, BF16, FP8 per-channel; random weights) in WORK;
#   3. `duet bench` on them (tg128, pp512, pp2048; decode steps of 1 and 32 sequences for Q4_K_M),
#      an eager per-op profile of one Q4_K_M and one BF16 decode, FP8 weight-only and native
#      (BENCH_SET picks files, AB_ENV repeats them under a knob setting, PROFILE_PROMPT=1 adds
#      eager per-op profiles of a 2048-token FP8 native and BF16 prompt; NCU_PROMPT=1 adds every
#      kernel's time in one 512-token prompt under ncu; NCU_DECODE=1 the same for eager decode steps
#      of BF16, Q4_K_M, FP8 weight-only and native, and Q4_K_M steps of 32 sequences; NCU_DEEP /
#      NCU_MMA=1 the speed-of-light, stall and occupancy sections of chosen kernels, see below);
#   4. llama.cpp on the same Q4_K_M and BF16 files (LLAMA_FILES) when LLAMA_TAR names a packed llama_cpp package
#      (the CUDA build of llama-cpp-python, see scripts/ref/llamacpp_gpu_bench.py), same run;
#   5. whole-model parity of the qwen2-7b Q4_K_M file (PARITY_FILES names others) against duet's
#      CPU backend (PARITY=0 skips). PROFILES=0 skips step 3's eager per-op profiles.
#   KTRACE=1 adds a kernel trace of Q4_K_M decode graph replays of 1 and 32 sequences
#   (libduet_ktrace.so, scripts/ktrace_report.py: where each step's time goes, kernel by kernel)
#   into OUT/ktrace.txt, outside the final table.
# Prints a table (scripts/gpu_report.py) at the end.
# Usage: scripts/gpu-quick.sh BUNDLE.tar.xz OUT [WORK]
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
start_run "$1" "$2" "${3:-}"
duet=$bin/duet
export DUET_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
status=0

synth() {  # shape type file
  [ -e "$work/$3" ] && return 0
  /usr/bin/time -f "synth $1 $2: %e s, %M KB" "$duet" synth --arch qwen2 --shape "$1" -t "$2" -o "$work/$3" -q 2>&1 | tail -1
}
# The files are made on the CPUs while the GPU runs the tests. MODELS=all adds the other files of
# the whole-model parity check (qwen2-0.5b and gemma3-270m geometry, qwen2-7b Q8_0).
(synth qwen2-7b Q4_K_M q7-q4km.gguf; synth qwen2-7b BF16 q7-bf16.gguf; synth qwen2-7b fp8-channel q7-fp8ch) \
  >"$out/synth.log" 2>&1 &
synth_pid=$!
if [ "${MODELS:-}" = all ]; then
  (synth qwen2-0.5b Q4_K_M q05-q4km.gguf; synth qwen2-0.5b Q8_0 q05-q8.gguf; synth qwen2-0.5b BF16 q05-bf16.gguf
   synth qwen2-0.5b fp8-channel q05-fp8ch; synth qwen2-0.5b fp8-block q05-fp8blk
   "$duet" synth --arch gemma3 --shape gemma3-270m -t Q4_K_M -o "$work/g270-q4km.gguf" -q
   "$duet" synth --arch gemma3 --shape gemma3-270m -t BF16 -o "$work/g270-bf16.gguf" -q
   synth qwen2-7b Q8_0 q7-q8.gguf) >"$out/synth2.log" 2>&1 &
  synth2_pid=$!
fi

# GPU_TESTS: test executables by name; matmulbench = the matmul kernel benchmark, launcher
# defaults only (DUET_MATMUL_BENCH_QUICK; with DUET_MATMUL_BENCH_MMA_SWEEP=1 in the environment it
# adds the tensor-core decode kernel's tile/warp sweep).
for t in ${GPU_TESTS:-ops matmul model}; do
  [ "$t" = none ] && continue
  exe=$bin/duet_gpu_$t
  filter='*'
  case $t in
    matmul) filter=${MATMUL_FILTER:-'AllTypes*:MatmulGraph*:MatmulUpload*'} ;;
    matmulbench) exe=$bin/duet_gpu_matmul; filter='MatmulBench*'; export DUET_MATMUL_BENCH_QUICK=1 ;;
    model) filter='Archs/*' ;;
  esac
  [ -x "$exe" ] || { echo "missing $exe"; status=1; continue; }
  echo "== $(basename "$exe") ($filter)"
  timeout 300 "$exe" --gtest_filter="$filter" --gtest_brief=1 >"$out/$t.log" 2>&1 || status=1
  unset DUET_MATMUL_BENCH_QUICK
  grep -E 'FAILED|Failure|^\[  PASSED|FAIL$|bench|GB/s|TFLOP' "$out/$t.log" | head -${GREP_LINES:-40}
done

wait $synth_pid
cat "$out/synth.log"
if [ "${MODELS:-}" = all ]; then
  wait $synth2_pid
  cat "$out/synth2.log"
  list=""
  for f in q05-q4km.gguf q05-q8.gguf q05-bf16.gguf q05-fp8ch q05-fp8blk g270-q4km.gguf g270-bf16.gguf q7-q4km.gguf q7-q8.gguf q7-bf16.gguf q7-fp8ch; do
    [ -e "$work/$f" ] && list="$list,$work/$f"
  done
  echo "== whole-model parity, synth models of real shapes"
  DUET_GPU_PARITY_MODELS=${list#,} timeout 360 "$bin/duet_gpu_model" --gtest_filter='Listed*' >"$out/model_listed.log" 2>&1 || status=1
  grep -E '^\[parity\]|FAILED|PASSED' "$out/model_listed.log" | head -60
fi
if [ "${BENCH:-1}" = 1 ]; then
echo "== duet bench"
: >"$out/bench.jsonl"
# BENCH_SET: which of q4km bf16 fp8wo fp8nat to bench (default all four); AB_ENV="VAR=value ...":
# each of them again with those environment settings (a knob A/B in the same run, labelled).
bench_set() {
  local sfx=$1
  for b in ${BENCH_SET:-q4km bf16 fp8wo fp8nat}; do
    case $b in
      q4km) bench_file "Q4_K_M$sfx" q7-q4km.gguf -b 1,32 ;;
      bf16) bench_file "BF16$sfx" q7-bf16.gguf ;;
      fp8wo) bench_file "FP8 weight-only$sfx" q7-fp8ch --fp8 weight-only ;;
      fp8nat) bench_file "FP8 native$sfx" q7-fp8ch --fp8 native ;;
    esac
  done
}
bench_set ""
if [ -n "${AB_ENV:-}" ]; then
  (export $AB_ENV; bench_set " [$AB_ENV]")
fi
tail -5 "$out/bench.err"
[ "${PROFILES:-1}" = 1 ] && for f in q7-q4km.gguf q7-bf16.gguf; do  # where decode time goes, op by op (eager)
  DUET_CUDA_PROFILE=1 "$duet" bench -m "$work/$f" -p 0 -n 16 -r 1 2>>"$out/bench.err" >"$out/profile-$f.txt"
done
# ... and in decode steps of 32 sequences (eager)
[ "${PROFILES:-1}" = 1 ] && DUET_CUDA_PROFILE=1 "$duet" bench -m "$work/q7-q4km.gguf" -p 0 -n 0 -b 32 -r 1 2>>"$out/bench.err" >"$out/profile32-q7-q4km.txt"
if [ "${PROFILE_PROMPT:-0}" = 1 ]; then  # where a 2048-token prompt's time goes (eager), FP8 native vs BF16
  DUET_CUDA_PROFILE=1 "$duet" bench -m "$work/q7-fp8ch" -p 2048 -n 0 -r 1 --fp8 native 2>>"$out/bench.err" >"$out/profile-pp-fp8nat.txt"
  DUET_CUDA_PROFILE=1 "$duet" bench -m "$work/q7-bf16.gguf" -p 2048 -n 0 -r 1 2>>"$out/bench.err" >"$out/profile-pp-bf16.txt"
  DUET_CUDA_PROFILE=1 "$duet" bench -m "$work/q7-fp8ch" -p 0 -n 16 -r 1 --fp8 native 2>>"$out/bench.err" >"$out/profile-tg-fp8nat.txt"
fi
fi
if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null; then  # hardware counters of the decode kernels, eager
  echo "== ncu: decode kernels of one Q4_K_M and one FP8 step"
  m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_active
  m=$m,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size
  m=$m,launch__block_size,launch__registers_per_thread,dram__bytes_read.sum,smsp__inst_executed.sum
  for f in q7-q4km.gguf q7-fp8ch; do
    timeout 150 ncu --clock-control none --csv --page raw --metrics "$m" -k 'regex:matvec|norm|gated|qkv_rope|attention' \
      -c 40 "$duet" bench -m "$work/$f" -p 0 -n 2 -r 1 --no-graphs --fp8 weight-only >"$out/ncu-$f.csv" 2>"$out/ncu-$f.err"
    python3 scripts/ncu_table.py "$out/ncu-$f.csv" | head -45
  done
fi
if [ "${NCU_DECODE:-0}" = 1 ] && command -v ncu >/dev/null; then  # every kernel's time in eager decode steps
  echo "== ncu: kernels of eager decode steps (one sequence: 3 steps; 32 sequences: the batch step runs)"
  # NCU_DECODE_SPECS: other bench arguments, "|"-separated (e.g. "q7-q4km.gguf -n 0 -b 32").
  i=0
  IFS='|' read -ra dspecs <<<"${NCU_DECODE_SPECS:-q7-bf16.gguf -n 3|q7-q4km.gguf -n 3|q7-fp8ch -n 3 --fp8 weight-only|q7-fp8ch -n 3 --fp8 native|q7-q4km.gguf -n 0 -b 32}"
  for spec in "${dspecs[@]}"; do
    set -- $spec
    i=$((i + 1))
    timeout 150 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
      -c ${NCU_DECODE_COUNT:-1200} "$duet" bench -m "$work/$1" -p 0 -r 1 --no-graphs "${@:2}" >"$out/ncu-dec$i.csv" 2>"$out/ncu-dec$i.err"
    echo "-- $spec"
    python3 scripts/ncu_table.py "$out/ncu-dec$i.csv" --sum | head -24
  done
fi
if [ "${KTRACE:-0}" = 1 ] && [ -e "$bin/libduet_ktrace.so" ]; then  # graph replays, kernel by kernel
  wait $synth_pid 2>/dev/null
  CUDA_INJECTION64_PATH=$bin/libduet_ktrace.so LD_LIBRARY_PATH=$bin:${LD_LIBRARY_PATH:-} DUET_KTRACE_OUT="$work/ktrace.csv" \
    "$duet" bench -m "$work/q7-q4km.gguf" -p 0 -n 16 -r 3 -b 1,32 >"$out/ktrace-bench.txt" 2>&1
  python3 scripts/ktrace_report.py "$work/ktrace.csv" --json "$out/ktrace.json" >"$out/ktrace.txt" 2>&1 || status=1
  xz -T4 -c "$work/ktrace.csv" >"$out/ktrace.csv.xz"
fi
# Deep ncu sections (speed of light, warp stalls, occupancy, memory) of chosen kernels: NCU_DEEP
# lists "kernel-regex;bench args" specs separated by "|" (e.g. 'matvec_mma;q7-fp8ch -p 0 -n 2 --fp8
# weight-only'); NCU_MMA=1 adds the quantized MMA kernel of a 32-sequence Q4_K_M step.
deep=${NCU_DEEP:-}
[ "${NCU_MMA:-0}" = 1 ] && deep="${deep:+$deep|}matmul_mma_kernel;q7-q4km.gguf -p 0 -n 0 -b 32"
if [ -n "$deep" ] && command -v ncu >/dev/null; then
  i=0
  IFS='|' read -ra specs <<<"$deep"
  for spec in "${specs[@]}"; do
    i=$((i + 1))
    kre=${spec%%;*}
    set -- ${spec#*;}
    echo "== ncu sections: $kre in duet bench -m $*"
    timeout 200 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy \
      --section LaunchStats --section MemoryWorkloadAnalysis -k "regex:$kre" --launch-skip 8 -c 4 \
      "$duet" bench -m "$work/$1" -r 1 --no-graphs "${@:2}" >"$out/ncu-deep$i.txt" 2>"$out/ncu-deep$i.err"
    grep -E "$kre|Duration|DRAM Throughput|Compute \(SM\)|Stall|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit (Reg|Shared)|Grid Size|Warp Cycles Per Issued|L2 Hit|Mem Busy" \
      "$out/ncu-deep$i.txt" | head -80
  done
fi
if [ "${NCU_PROMPT:-0}" = 1 ] && command -v ncu >/dev/null; then  # every kernel of one 512-token prompt, BF16 and FP8 native
  echo "== ncu: kernels of one pp512 forward (BF16, FP8 native)"
  for spec in "q7-bf16.gguf" "q7-fp8ch --fp8 native"; do
    set -- $spec
    timeout 200 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed \
      "$duet" bench -m "$work/$1" -p 512 -n 0 -r 1 --no-graphs "${@:2}" >"$out/ncu-pp-$1.csv" 2>"$out/ncu-pp-$1.err"
    python3 scripts/ncu_table.py "$out/ncu-pp-$1.csv" --sum | head -30
  done
fi
if [ -n "${LLAMA_TAR:-}" ] && [ -e "$LLAMA_TAR" ]; then
  mkdir -p /tmp/duet-llsite && tar -xJf "$LLAMA_TAR" -C /tmp/duet-llsite
  [ -n "${LLAMA_DEPS:-}" ] && python3 -m pip install -q --no-index --no-deps --target /tmp/duet-llsite $LLAMA_DEPS 2>&1 | tail -1
  site=$(dirname "$(find /tmp/duet-llsite -maxdepth 3 -name llama_cpp -type d | head -1)")
  echo "== llama.cpp on the same files"
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  LD_LIBRARY_PATH="${nccl:+$nccl:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" PYTHONPATH="$site" \
    timeout 240 python3 scripts/ref/llamacpp_gpu_bench.py $(for f in ${LLAMA_FILES:-q7-q4km.gguf q7-bf16.gguf}; do echo "$work/$f"; done) --reps 2 \
    2>>"$out/llamacpp.err" | tee "$out/llamacpp.jsonl"
fi
if [ "${PARITY:-1}" = 1 ] && [ -x "$bin/duet_gpu_model" ]; then
  # PARITY_FILES: which of the qwen2-7b files (default the Q4_K_M one)
  files=$(for f in ${PARITY_FILES:-q7-q4km.gguf}; do printf '%s,' "$work/$f"; done)
  echo "== whole-model parity: ${PARITY_FILES:-q7-q4km.gguf}"
  DUET_GPU_PARITY_MODELS=${files%,} timeout 300 "$bin/duet_gpu_model" --gtest_filter='Listed*' \
    >"$out/model_q7.log" 2>&1 || status=1
  grep -E '^\[parity\]|FAILED|PASSED' "$out/model_q7.log" | head -20
fi
python3 scripts/gpu_report.py "$out" | tee "$out/report.md"
# Everything in one archive that sorts first (the device tool returns only a few files).
tar -czf /tmp/duet-logs.tgz -C "$out" . && mv /tmp/duet-logs.tgz "$out/0logs.tgz"
exit $status
