#!/usr/bin/env bash
# The attention kernels on a GPU machine, with binaries built elsewhere (scripts/gpu-bundle.sh,
# packed as BUNDLE.tar.xz): duet_gpu_attention's tests (all but the benchmark) under each setting
# of TEST_SETS, then its benchmark printout (decode K/V bandwidth, prompt TFLOP/s) under each
# setting of BENCH_SETS. Settings are separated by "|", each one or more VAR=value words or "-"
# for none (e.g. TEST_SETS="- | DUET_ATTN_DECODE_MMA=1"). The runs' logs go to OUT/attn-tests.log
# and OUT/attn-bench.log, one after another (few files: a device call returns a limited number); the
# qwen2-7b Q4_K_M file is made in WORK (default /tmp/duet-gpu) meanwhile, for a
# scripts/gpu-decode-ab.sh run after this one in the same call. Exits 1 if a test run failed.
# Usage: TEST_SETS=... BENCH_SETS=... scripts/gpu-attention-ab.sh BUNDLE.tar.xz OUT [WORK]
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
start_run "$1" "$2" "${3:-}"
(synth_q7 q7-q4km.gguf:Q4_K_M) >"$out/synth.log" 2>&1 &
synth_pid=$!
status=0
run_tests() {  # N SETTING
  local set=$2 rc
  echo "== duet_gpu_attention tests [$(echo $set)]" | tee -a "$out/attn-tests.log"
  env "${env_words[@]}" "$bin/duet_gpu_attention" --gtest_filter='-*Benchmark*' >"$work/attn-test.log" 2>&1
  rc=$?
  cat "$work/attn-test.log" >>"$out/attn-tests.log"
  grep -E "PASSED|FAILED| FAIL$|decode long" "$work/attn-test.log" | head -30
  echo "   exit status $rc"
  [ $rc = 0 ] || status=1
}
run_bench() {  # N SETTING
  local set=$2
  echo "== duet_gpu_attention benchmark [$(echo $set)]" | tee -a "$out/attn-bench.log"
  env "${env_words[@]}" "$bin/duet_gpu_attention" --gtest_filter='*Benchmark*' >"$work/attn-bench.log" 2>&1
  cat "$work/attn-bench.log" >>"$out/attn-bench.log"
  grep -E "bench decode" "$work/attn-bench.log"
}
each_setting "${TEST_SETS:-}" run_tests
each_setting "${BENCH_SETS:-}" run_bench
wait $synth_pid
exit $status
