#!/usr/bin/env bash
# Runs every test: installs/builds through scripts/setup.sh, then the CTest suite (unit, golden,
# fuzz-regression) of the release build, then the unit tests again under ASan + UBSan.
# Set DUET_NO_ASAN=1 to skip the sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== tests (release build)"
ctest --test-dir build --output-on-failure -j2 --timeout 1800
if [ -z "${DUET_NO_ASAN:-}" ]; then
  echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUET_SANITIZE=ON >/dev/null
  ninja -C build-asan duet_unit_tests | tail -n 1
  ctest --test-dir build-asan -L unit --output-on-failure -j2 --timeout 1800
fi
