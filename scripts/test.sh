#!/usr/bin/env bash
# Runs every test: installs/builds through scripts/setup.sh, then the CTest suite (unit, golden,
# fuzz-regression) of the release build, then the unit tests again under ASan + UBSan; first, the
# V100 build proof (every CUDA source compiled for sm_70 with CUDA 11.8, scripts/build-sm70.sh).
# Set DUET_NO_ASAN=1 / DUET_NO_SM70=1 to skip those passes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${DUET_NO_SM70:-}" ]; then
  echo "== CUDA sources for sm_70 (V100) with CUDA 11.8"
  bash scripts/build-sm70.sh | tail -n 2
fi
echo "== tests (release build)"
ctest --test-dir build --output-on-failure -j2 --timeout 1800
if [ -z "${DUET_NO_ASAN:-}" ]; then
  echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUET_SANITIZE=ON >/dev/null
  ninja -C build-asan duet_unit_tests | tail -n 1
  ctest --test-dir build-asan -L unit --output-on-failure -j2 --timeout 1800
fi
