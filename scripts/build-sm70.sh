#!/usr/bin/env bash
# Proves the V100 build: compiles every CUDA source of duet for sm_70 with Debian's CUDA 11.8
# toolkit (the last major CUDA release with sm_70; CUDA 13 cannot target it). Installs the
# toolkit from Debian's non-free component when missing (about 2 GB), then builds the duet
# binary and the GPU tests into build-sm70/. Nothing runs: there is no V100 here; the
# generic kernel path (DUET_KERNELS=generic) is what that card would execute, and it is tested on
# newer GPUs by scripts/gpu-check.sh.
# Usage: scripts/build-sm70.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! [ -x /usr/bin/nvcc ] || ! /usr/bin/nvcc --version | grep -q "release 11.8" || ! [ -x /usr/bin/g++-11 ]; then
  src=/etc/apt/sources.list.d/debian.sources
  if [ -f "$src" ] && ! grep -q 'non-free' "$src"; then
    sed -i 's/^Components: main$/Components: main contrib non-free/' "$src"
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit g++-11 >/dev/null
fi
# Debian's nvcc runs ptxas and friends from PATH: its own must come before a newer toolkit's.
export PATH="/usr/bin:$PATH"
/usr/bin/nvcc --version | tail -1
# Where a newer toolkit's headers sit in /usr/local/include (searched before /usr/include), a
# directory of links to Debian's CUDA 11.8 headers of the same names goes first on the path.
inc=$PWD/build-sm70/cuda-11.8-include
rm -rf "$inc" && mkdir -p "$inc"
for f in /usr/local/include/*; do
  b=$(basename "$f")
  if [ -e "/usr/include/$b" ]; then ln -s "/usr/include/$b" "$inc/$b"; fi
done
# CUDA 11.8 takes host compilers up to GCC 11.
cmake -S . -B build-sm70 -G Ninja -DCMAKE_BUILD_TYPE=Release -DDUET_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=70 \
  -DCMAKE_CUDA_COMPILER=/usr/bin/nvcc -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++-11 -DCUDAToolkit_ROOT=/usr \
  -DCMAKE_CUDA_FLAGS="-I$inc" -DCMAKE_CXX_FLAGS="-I$inc" >/dev/null
ninja -C build-sm70 -j"${DUET_JOBS:-2}" duet $(ninja -C build-sm70 -t targets all | grep -o '^duet_gpu_[a-z_]*' | sort -u)
echo "sm_70 build: duet and the GPU tests compiled for sm_70 with CUDA 11.8"
