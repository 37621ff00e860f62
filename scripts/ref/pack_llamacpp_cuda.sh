#!/usr/bin/env bash
# Builds llama-cpp-python (PyPI's source distribution) with ggml's CUDA backend for one GPU
# architecture on this machine (needs the CUDA toolkit and network access to PyPI, no GPU), and packs
# its `llama_cpp` package as a tar.xz that the GPU scripts unpack beside their runs
# (`LLAMA_TAR=... scripts/gpu-quick.sh` or `scripts/gpu-decode-ab.sh`; llamacpp_gpu_bench.py then
# measures llama.cpp on duet's files in the same run). NCCL is left out (the GPU machine may not
# have it); the wheel's copies of each shared library under three names are packed once, with
# links for the other names, so that the package fits beside a duet bundle (~40 MB for sm_90).
# Also downloads diskcache's wheel, which llama_cpp imports and the GPU machine may lack
# (LLAMA_DEPS). About 20 minutes on 2 cores.
# Usage: scripts/ref/pack_llamacpp_cuda.sh OUT_DIR [CUDA_ARCH (default 90)] [VERSION (default 0.3.36)]
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
arch=${2:-90}
ver=${3:-0.3.36}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip download --no-deps --no-binary :all: --no-cache-dir "llama-cpp-python==$ver" -d "$tmp/src"
pip download --no-deps --no-cache-dir diskcache==5.6.3 -d "$out"
export PATH=/usr/local/cuda/bin:$PATH CUDACXX=/usr/local/cuda/bin/nvcc CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arch -DGGML_CUDA_NCCL=OFF -DGGML_NATIVE=OFF \
-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
pip wheel --no-deps --no-cache-dir "$tmp/src/llama_cpp_python-$ver.tar.gz" -w "$tmp/wheel"
mkdir -p "$tmp/site"
python3 -m zipfile -e "$tmp"/wheel/llama_cpp_python-*.whl "$tmp/site"
rm -rf "$tmp/site/lib" "$tmp/site/include"  # copies of llama_cpp/lib's libraries and headers
cd "$tmp/site/llama_cpp/lib"
for so in *.so; do  # libX.so, libX.so.0 and libX.so.0.N.M are copies: keep libX.so.0
  [ -e "$so.0" ] || continue
  rm -f "$so".0.*
  rm -f "$so" && ln -s "$so.0" "$so"
done
tar -cf - -C "$tmp/site" . | xz -9e -T0 >"$out/llama_cpp_cuda_sm$arch.tar.xz"
ls -la "$out"
