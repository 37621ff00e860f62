#!/usr/bin/env bash
# Builds the CUDA configuration on this machine (no GPU needed: the CUDA toolkit compiles for
# sm_90 by default, DUET_CUDA_ARCHS overrides) and gathers what scripts/gpu-check.sh needs on a
# GPU machine that lacks the build dependencies: the stripped duet binary, the GPU test
# executables, the tokenizers `duet synth` embeds, and the kernel tracer with its CUPTI.
# GPU_TESTS="duet_gpu_model ..." packs only those test executables (default: every duet_gpu_*;
# set and empty: none, e.g. a bundle that travels beside llama.cpp's 40 MB package),
# KTRACE=0 leaves the tracer out and TOKENIZERS=0 the tokenizers (a smaller bundle, e.g. beside a
# real model's first part for scripts/gpu-real-model.sh: GPU_TESTS=duet_gpu_model KTRACE=0
# TOKENIZERS=0, 16 MB packed).
# Usage: [CTA_TIMELINE=1] [GPU_TESTS=...] [KTRACE=0] [TOKENIZERS=0] scripts/gpu-bundle.sh [OUT_DIR (default .devcarry/gpu)]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.devcarry/gpu}
archs=${DUET_CUDA_ARCHS:-90}
# The CUDA 12+/13 toolkit (NVIDIA's default prefix), not Debian's 11.8 that build-sm70.sh may add.
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDUET_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" \
  -DCMAKE_CUDA_COMPILER="$nvcc" >/dev/null
tests=${GPU_TESTS-$(ninja -C build-gpu -t targets all | grep -o '^duet_gpu_[a-z_]*' | sort -u)}
ninja -C build-gpu -j"${DUET_JOBS:-2}" duet $tests
rm -rf "$out"
mkdir -p "$out/tokenizers"
cp build-gpu/duet "$out/"
for t in $tests; do cp "build-gpu/tests/$t" "$out/"; done
strip "$out"/duet "$out"/duet_gpu_* 2>/dev/null || true
# The kernel tracer (gpu-quick.sh KTRACE=1) and the CUPTI it links, where the toolkit has them.
if [ "${KTRACE:-1}" = 1 ] && ninja -C build-gpu -t targets all | grep '^duet_ktrace:' >/dev/null; then  # no -q: pipefail
  ninja -C build-gpu -j"${DUET_JOBS:-2}" duet_ktrace
  cp build-gpu/libduet_ktrace.so "$out/"
  cupti=$(ldd build-gpu/libduet_ktrace.so | awk '/libcupti/ {print $3}')
  [ -n "$cupti" ] && cp "$cupti" "$out/"
fi
# CTA_TIMELINE=1: also the diagnostic build with per-CTA timelines (kernels/cuda/cta_timeline.h) as
# duet-cta, for `DUET_CTA_TIMELINE_OUT=cta.csv duet-cta bench ...` and scripts/cta_timeline_report.py.
if [ "${CTA_TIMELINE:-0}" = 1 ]; then
  cmake -S . -B build-cta -G Ninja -DCMAKE_BUILD_TYPE=Release -DDUET_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DDUET_CTA_TIMELINE=ON -DDUET_TESTS=OFF >/dev/null
  ninja -C build-cta -j"${DUET_JOBS:-2}" duet
  cp build-cta/duet "$out/duet-cta"
  strip "$out/duet-cta"
fi
[ "${TOKENIZERS:-1}" = 1 ] && for t in qwen3 llama3; do cp -r ../shared/tokenizers/$t "$out/tokenizers/"; done
du -sh "$out"
