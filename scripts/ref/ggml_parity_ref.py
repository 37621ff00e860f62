#!/usr/bin/env python3
"""Generates tests/data/ggml_parity_ref.{json,bin}: llama.cpp's own CPU kernels' outputs on fixed
inputs, which tests/unit/kernels_ggml_parity_test.cpp holds duet's CPU kernels to, bit for bit.

Reference: the ggml CPU library bundled in the PyPI `llama-cpp-python` package (lib/libggml-cpu.so,
called through ctypes); it must be an AVX2 + FMA build without AVX-512, the code path duet
reproduces. Not part of CI (llama-cpp-python builds llama.cpp from source); the fixture is
committed and the unit test needs only it.

Inputs are not stored: the test regenerates them from the seeds in the JSON, with integer
arithmetic that C++ and numpy evaluate identically (see the generators below, mirrored in the
test). Weight rows are random block bytes whose fp16/bf16/f32 fields are forced to finite normal
values, so they cover every quant code; activations are float32 rows close to N(0, (1.15 scale)^2).
Recorded outputs (raw little-endian in the .bin, offsets in the .json):
  * activation quantizers quantize_row_q8_0 / q8_1 / q8_K: the quantized bytes;
  * ggml_vec_dot_<w>_<act> for every weight type llama.cpp runs without repacking: one float;
  * Q4_K repacked 8x8 (repack<block_q4_K, 8, 8>), ggml_gemv_q4_K_8x8_q8_K on one activation row
    and ggml_gemm_q4_K_8x8_q8_K on four (ggml_quantize_mat_q8_K_4x8): rows / 4 x rows floats;
  * ggml_mul_mat of a Q2_K..Q6_K matrix (not repacked) with 3..24 activation rows through
    ggml_graph_compute_with_ctx (2 threads): n_tokens x rows floats.

Usage: python3 scripts/ref/ggml_parity_ref.py
"""
import ctypes
import glob
import importlib.util
import json
import os
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data")
NAME = "ggml_parity_ref"

# ggml type ids (ggml.h; duet's DType uses the same numbers).
GGML_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q8_1": 9,
             "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "Q8_K": 15, "BF16": 30}
# (elements per block, bytes per block, byte offsets of the fp16 fields in a block): ggml-common.h.
BLOCK = {"Q4_0": (32, 18, [0]), "Q4_1": (32, 20, [0, 2]), "Q5_0": (32, 22, [0]),
         "Q5_1": (32, 24, [0, 2]), "Q8_0": (32, 34, [0]), "Q8_1": (32, 36, [0, 2]),
         "Q2_K": (256, 84, [80, 82]), "Q3_K": (256, 110, [108]), "Q4_K": (256, 144, [0, 2]),
         "Q5_K": (256, 176, [0, 2]), "Q6_K": (256, 210, [208]), "Q8_K": (256, 292, []),
         "F32": (1, 4, []), "F16": (1, 2, []), "BF16": (1, 2, [])}
ACT = {"Q4_0": "Q8_0", "Q5_0": "Q8_0", "Q8_0": "Q8_0", "Q4_1": "Q8_1", "Q5_1": "Q8_1",
       "Q2_K": "Q8_K", "Q3_K": "Q8_K", "Q4_K": "Q8_K", "Q5_K": "Q8_K", "Q6_K": "Q8_K",
       "F32": "F32", "F16": "F16", "BF16": "BF16"}
VEC_DOT_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16", "F32"]
VEC_DOT_TRIALS = 6
REPACK_N, REPACK_ROWS, REPACK_TRIALS = 1024, 16, 10
MULMAT_N, MULMAT_ROWS, MULMAT_THREADS = 512, 40, 2  # 40 rows: ragged against 16-row tiles
MULMAT_TYPES = ["Q2_K", "Q3_K", "Q5_K", "Q6_K"]
MULMAT_TOKENS = [3, 8, 13, 24]

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ---- deterministic inputs (mirrored in the C++ test) ----
def splitmix64(seed, count):
    """The first `count` outputs of splitmix64 seeded with `seed` (state += golden, then mix)."""
    with np.errstate(over="ignore"):
        z = (np.arange(1, count + 1, dtype=np.uint64) * np.uint64(GOLDEN)) + np.uint64(seed & M64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def gaussian_floats(seed, n, scale):
    """x[i] = float(sum of four 22-bit fields of draws 2i, 2i+1, centred) * (scale * 2^-21).
    The integer is exact in float32 (|s| < 2^23) and the product is one IEEE rounding."""
    z = splitmix64(seed, 2 * n).reshape(n, 2)
    m = np.uint64((1 << 22) - 1)
    s = sum(((z[:, k] >> np.uint64(sh)) & m).astype(np.int64) for k in (0, 1) for sh in (0, 22))
    s = s - 2 * ((1 << 22) - 1)
    return s.astype(np.float32) * np.float32(scale * 2.0 ** -21)


def weight_bytes(wtype, seed, n, rows):
    """rows x row_bytes random bytes (draws as little-endian u64, truncated), with every fp16
    block field (and every F16/BF16/F32 element) forced to a finite normal number: random sign
    and mantissa, binary exponent -9 .. -2."""
    per, bsize, fields = BLOCK[wtype]
    total = rows * (n // per) * bsize
    raw = splitmix64(seed, (total + 7) // 8).astype("<u8").view(np.uint8)[:total].copy()
    if wtype == "F32":
        w = raw.view("<u4")
        w[:] = (w & np.uint32(0x807FFFFF)) | ((np.uint32(118) + ((w >> np.uint32(23)) & np.uint32(7))) << np.uint32(23))
    elif wtype == "BF16":
        w = raw.view("<u2")
        w[:] = (w & np.uint16(0x807F)) | ((np.uint16(118) + ((w >> np.uint16(7)) & np.uint16(7))) << np.uint16(7))
    elif wtype == "F16":
        w = raw.view("<u2")
        w[:] = (w & np.uint16(0x83FF)) | ((np.uint16(6) + ((w >> np.uint16(10)) & np.uint16(7))) << np.uint16(10))
    else:
        blocks = raw.reshape(-1, bsize)
        for off in fields:
            h = blocks[:, off:off + 2].copy().view("<u2")[:, 0]
            h = (h & np.uint16(0x83FF)) | ((np.uint16(6) + ((h >> np.uint16(10)) & np.uint16(7))) << np.uint16(10))
            blocks[:, off:off + 2] = h.astype("<u2").view(np.uint8).reshape(-1, 2)
    return raw


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in bytes(data):
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


# ---- llama.cpp ----
class Ggml:
    def __init__(self):
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None:
            sys.exit(f"{NAME}: the llama-cpp-python package is not installed")
        libdir = os.path.join(os.path.dirname(spec.origin), "lib")
        paths = glob.glob(os.path.join(libdir, "libggml-cpu.so"))
        if not paths:
            sys.exit(f"{NAME}: no libggml-cpu.so under {libdir}")
        self.path = paths[0]
        self.base = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        self.cpu = ctypes.CDLL(self.path, mode=ctypes.RTLD_GLOBAL)
        self.cpu.ggml_cpu_init()
        has = lambda f: bool(getattr(self.cpu, f)())
        if not has("ggml_cpu_has_avx2") or not has("ggml_cpu_has_fma") or has("ggml_cpu_has_avx512"):
            sys.exit(f"{NAME}: {self.path} is not an AVX2 + FMA build without AVX-512; duet "
                     "reproduces that build's kernels")
        P, I64, SZ = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
        for q in ("quantize_row_q8_0", "quantize_row_q8_1", "quantize_row_q8_K",
                  "ggml_cpu_fp32_to_fp16", "ggml_cpu_fp32_to_bf16", "ggml_quantize_mat_q8_K_4x8"):
            getattr(self.cpu, q).argtypes = [P, P, I64]
            getattr(self.cpu, q).restype = None
        self.repack = getattr(self.cpu, "_ZN4ggml3cpu6repack6repackI10block_q4_KLl8ELl8EEEiP11ggml_tensorPKvm")
        self.repack.argtypes, self.repack.restype = [P, P, SZ], ctypes.c_int
        for g in ("ggml_gemv_q4_K_8x8_q8_K", "ggml_gemm_q4_K_8x8_q8_K"):
            getattr(self.cpu, g).argtypes = [ctypes.c_int, P, SZ, P, P, ctypes.c_int, ctypes.c_int]
            getattr(self.cpu, g).restype = None

        class InitParams(ctypes.Structure):
            _fields_ = [("mem_size", SZ), ("mem_buffer", P), ("no_alloc", ctypes.c_bool)]
        self.InitParams = InitParams
        b = self.base
        b.ggml_init.argtypes, b.ggml_init.restype = [InitParams], P
        b.ggml_free.argtypes, b.ggml_free.restype = [P], None
        b.ggml_new_tensor_2d.argtypes, b.ggml_new_tensor_2d.restype = [P, ctypes.c_int, I64, I64], P
        b.ggml_get_data.argtypes, b.ggml_get_data.restype = [P], P
        b.ggml_mul_mat.argtypes, b.ggml_mul_mat.restype = [P, P, P], P
        b.ggml_new_graph.argtypes, b.ggml_new_graph.restype = [P], P
        b.ggml_build_forward_expand.argtypes, b.ggml_build_forward_expand.restype = [P, P], None
        self.cpu.ggml_graph_compute_with_ctx.argtypes = [P, P, ctypes.c_int]
        self.cpu.ggml_graph_compute_with_ctx.restype = ctypes.c_int

    def activation(self, wtype, x):
        act = ACT[wtype]
        if act == "F32":
            return x.view(np.uint8).copy()
        per, bsize, _ = BLOCK[act]
        out = np.zeros(x.size // per * bsize, dtype=np.uint8)
        fn = {"Q8_0": "quantize_row_q8_0", "Q8_1": "quantize_row_q8_1", "Q8_K": "quantize_row_q8_K",
              "F16": "ggml_cpu_fp32_to_fp16", "BF16": "ggml_cpu_fp32_to_bf16"}[act]
        getattr(self.cpu, fn)(x.ctypes.data, out.ctypes.data, x.size)
        return out

    def vec_dot(self, wtype, n, w, a):
        names = {"F16": "ggml_vec_dot_f16", "BF16": "ggml_vec_dot_bf16", "F32": "ggml_vec_dot_f32"}
        name = names.get(wtype) or f"ggml_vec_dot_{wtype.lower().replace('_k', '_K')}_{ACT[wtype].lower().replace('_k', '_K')}"
        fn = getattr(self.cpu, name)
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = None
        s = np.zeros(1, dtype=np.float32)
        fn(n, s.ctypes.data, 0, w.ctypes.data, 0, a.ctypes.data, 0, 1)
        return name, s

    def repacked_q4_K(self, wq, n, rows, x4):
        packed = np.zeros_like(wq)
        # A ggml_tensor as repack() reads it: type at 0, ne[4] at 16, data at 248 (ggml.h layout).
        tensor = np.zeros(512, dtype=np.uint8)
        tensor[0:4].view("<i4")[0] = GGML_TYPE["Q4_K"]
        tensor[16:48].view("<i8")[:] = [n, rows, 1, 1]
        tensor[248:256].view("<u8")[0] = packed.ctypes.data
        assert self.repack(tensor.ctypes.data, wq.ctypes.data, wq.size) == 0
        a = self.activation("Q4_K", np.ascontiguousarray(x4[0]))
        a4 = np.zeros(4 * a.size, dtype=np.uint8)
        self.cpu.ggml_quantize_mat_q8_K_4x8(x4.ctypes.data, a4.ctypes.data, n)
        sv = np.zeros(rows, dtype=np.float32)
        sm = np.zeros(4 * rows, dtype=np.float32)
        self.cpu.ggml_gemv_q4_K_8x8_q8_K(n, sv.ctypes.data, 0, packed.ctypes.data, a.ctypes.data, 1, rows)
        self.cpu.ggml_gemm_q4_K_8x8_q8_K(n, sm.ctypes.data, rows, packed.ctypes.data, a4.ctypes.data, 4, rows)
        return sv, sm

    def mul_mat(self, wtype, wq, n, rows, x):
        b = self.base
        n_tok = x.shape[0]
        ctx = b.ggml_init(self.InitParams(64 << 20, None, False))
        assert ctx
        W = b.ggml_new_tensor_2d(ctx, GGML_TYPE[wtype], n, rows)
        X = b.ggml_new_tensor_2d(ctx, GGML_TYPE["F32"], n, n_tok)
        ctypes.memmove(b.ggml_get_data(W), wq.ctypes.data, wq.size)
        ctypes.memmove(b.ggml_get_data(X), x.ctypes.data, x.nbytes)
        Y = b.ggml_mul_mat(ctx, W, X)
        graph = b.ggml_new_graph(ctx)
        b.ggml_build_forward_expand(graph, Y)
        assert self.cpu.ggml_graph_compute_with_ctx(ctx, graph, MULMAT_THREADS) == 0
        out = np.zeros(n_tok * rows, dtype=np.float32)
        ctypes.memmove(out.ctypes.data, b.ggml_get_data(Y), out.nbytes)
        b.ggml_free(ctx)
        return out


class Blob:
    def __init__(self):
        self.parts, self.size, self.seen = [], 0, {}

    def add(self, arr):
        data = np.ascontiguousarray(arr).tobytes()
        if data in self.seen:
            return self.seen[data]
        ref = {"offset": self.size, "bytes": len(data)}
        self.parts.append(data)
        self.size += len(data)
        self.seen[data] = ref
        return ref


def dump(ref):
    """JSON with one line per case (the cases are many and alike)."""
    def lines(v, indent):
        pad = " " * indent
        if isinstance(v, dict) and any(isinstance(e, (dict, list)) for e in v.values()) and "offset" not in v:
            body = ",\n".join(f"{pad} {json.dumps(k)}: {lines(e, indent + 1)}" for k, e in v.items())
            return "{\n" + body + "\n" + pad + "}"
        if isinstance(v, list) and v and isinstance(v[0], dict):
            return "[\n" + ",\n".join(pad + " " + json.dumps(e) for e in v) + "\n" + pad + "]"
        return json.dumps(v)
    return lines(ref, 0) + "\n"


def main():
    g = Ggml()
    blob = Blob()
    import llama_cpp

    vec_dot = []
    for ti, wtype in enumerate(VEC_DOT_TYPES):
        for trial in range(VEC_DOT_TRIALS):
            floaty = ACT[wtype] in ("F32", "F16", "BF16")
            n = 512 if trial % 2 else 1536 + (24 if floaty else 0)
            x_seed, x_scale = 1000 + trial, trial % 5 + 1  # one x per trial, shared by the types
            w_seed = 2000 + 100 * ti + trial
            x = gaussian_floats(x_seed, n, x_scale)
            w = weight_bytes(wtype, w_seed, n, 1)
            a = g.activation(wtype, x)
            kernel, s = g.vec_dot(wtype, n, w, a)
            case = {"type": wtype, "kernel": kernel, "n": n, "x_seed": x_seed, "x_scale": x_scale,
                    "w_seed": w_seed, "dot": blob.add(s)}
            if not floaty:  # the quantized activation row is checked byte for byte
                case["quantizer"] = f"quantize_row_{ACT[wtype].lower().replace('_k', '_K')}"
                case["activation"] = blob.add(a)
            vec_dot.append(case)

    repack = {"n": REPACK_N, "rows": REPACK_ROWS, "trials": []}
    for trial in range(REPACK_TRIALS):
        w_seed, x_seed, x_scale = 3000 + trial, 3100 + trial, trial + 1
        wq = weight_bytes("Q4_K", w_seed, REPACK_N, REPACK_ROWS)
        x4 = gaussian_floats(x_seed, 4 * REPACK_N, x_scale).reshape(4, REPACK_N)
        sv, sm = g.repacked_q4_K(wq, REPACK_N, REPACK_ROWS, x4)
        repack["trials"].append({"w_seed": w_seed, "x_seed": x_seed, "x_scale": x_scale,
                                 "gemv": blob.add(sv), "gemm": blob.add(sm)})

    mul_mat = {"n": MULMAT_N, "rows": MULMAT_ROWS, "threads": MULMAT_THREADS, "cases": []}
    for ti, wtype in enumerate(MULMAT_TYPES):
        for n_tok in MULMAT_TOKENS:
            # duet has no AVX2 port of ggml's Q2_K / Q3_K vec_dot (its generic code sums differently).
            if n_tok < 8 and wtype in ("Q2_K", "Q3_K"):
                continue
            w_seed, x_seed = 4000 + 100 * ti + n_tok, 5000 + 100 * ti + n_tok
            wq = weight_bytes(wtype, w_seed, MULMAT_N, MULMAT_ROWS)
            x = gaussian_floats(x_seed, n_tok * MULMAT_N, 2).reshape(n_tok, MULMAT_N)
            out = g.mul_mat(wtype, wq, MULMAT_N, MULMAT_ROWS, x)
            mul_mat["cases"].append({"type": wtype, "n_tokens": n_tok, "w_seed": w_seed, "x_seed": x_seed,
                                     "x_scale": 2, "out": blob.add(out)})

    # A known answer for the test's mirror of the generators (a clear failure if it drifts).
    check = {"x_seed": 7, "x_scale": 3, "x_bits": [int(v) for v in gaussian_floats(7, 4, 3).view("<u4")],
             "w_seed": 7, "w_n": 512, "w_fnv1a64": {}}
    for wtype in sorted(set(VEC_DOT_TYPES + MULMAT_TYPES)):
        check["w_fnv1a64"][wtype] = f"{fnv1a64(weight_bytes(wtype, 7, 512, 1)):016x}"

    ref = {
        "generator": "scripts/ref/ggml_parity_ref.py",
        "reference": f"llama.cpp CPU kernels (AVX2 + FMA build, no AVX-512), llama-cpp-python "
                     f"{llama_cpp.__version__}, {os.path.basename(g.path)}",
        "blob": f"{NAME}.bin",
        "layout": "outputs are raw little-endian at blob offsets: activation rows as ggml lays them "
                  "out, floats as float32; gemm and mul_mat outputs are [token][row]",
        "inputs": "regenerated from seeds (see the script): activations gaussian_floats(x_seed, n, x_scale), "
                  "weights weight_bytes(type, w_seed, n, rows); vec_dot and repack inputs of several "
                  "rows are consecutive rows of one stream",
        "generator_check": check,
        "vec_dot": vec_dot,
        "repack_q4_K": repack,
        "mul_mat": mul_mat,
    }
    with open(os.path.join(DATA, f"{NAME}.bin"), "wb") as f:
        for p in blob.parts:
            f.write(p)
    with open(os.path.join(DATA, f"{NAME}.json"), "w") as f:
        f.write(dump(ref))
    print(f"wrote tests/data/{NAME}.json and {NAME}.bin ({blob.size} bytes): {len(vec_dot)} vec_dot cases, "
          f"{REPACK_TRIALS} repack trials, {len(mul_mat['cases'])} mul_mat cases")


if __name__ == "__main__":
    main()
