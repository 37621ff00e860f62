#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) in build-fuzzer/ and runs
# each for N seconds from its seed corpus.
#   scripts/fuzz.sh [seconds=60] [target...]      targets: fuzz_gguf fuzz_safetensors
#                                                  fuzz_chat_template fuzz_tokenizer_json
#                                                  fuzz_gguf_tokenizer (default all)
# Env: FUZZ_BUILD (build dir, default build-fuzzer), FUZZ_JOBS (ninja -j, default 2).
# New coverage goes to $FUZZ_BUILD/corpus/<target>; tests/fuzz/corpus stays untouched. A crash is
# saved as $FUZZ_BUILD/crashes/<target>/crash-*: fix the parser, then copy the input into
# tests/fuzz/corpus/regression/ (the unit tests and `ctest -L fuzz` replay that directory).
# Exit status: 0 when no target found a crash.
set -euo pipefail

cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_gguf fuzz_safetensors fuzz_chat_template fuzz_tokenizer_json fuzz_gguf_tokenizer)
BUILD=${FUZZ_BUILD:-build-fuzzer}
JOBS=${FUZZ_JOBS:-2}

if [ ! -f "$BUILD/build.ninja" ]; then
  CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$BUILD" -G Ninja \
    -DDUET_FUZZ=ON -DDUET_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}"

status=0
for t in "${TARGETS[@]}"; do
  work="$BUILD/corpus/$t"
  crashes="$BUILD/crashes/$t"
  mkdir -p "$work" "$crashes"
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  [ "$t" = fuzz_gguf_tokenizer ] && dict=(-dict=tests/fuzz/fuzz_gguf.dict)
  seeds=("tests/fuzz/corpus/$t")
  [ "$t" = fuzz_chat_template ] && seeds+=(tests/data/chat_template/templates)  # the real templates
  echo "== $t: ${SECONDS_PER_TARGET}s"
  # The first directory receives new inputs; the seed and regression directories are read only.
  # -rss_limit_mb/-malloc_limit_mb: an allocation the input cannot back is a finding too.
  if ! "$BUILD/tests/fuzz/$t" "$work" "${seeds[@]}" tests/fuzz/corpus/regression "${dict[@]}" \
      -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/" 2>"$BUILD/$t.log"; then
    status=1
    echo "!! $t failed; inputs in $crashes, log in $BUILD/$t.log"
    grep -E "ERROR|SUMMARY|Test unit written" "$BUILD/$t.log" | head -20 || true
  fi
  grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)" \
    "$BUILD/$t.log" || true
  echo "   corpus: $(ls "$work" | wc -l) inputs in $work"
done
exit $status
