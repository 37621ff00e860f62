"""Checks duet's GGUF numbers against the independent `gguf` package (gguf-py):
dequantize bit-exact on every tensor of both real models and on random blocks of every type,
quantize bit-exact for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, and Q4_K_M files that gguf-py reads back."""
import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize

from conftest import REAL_MODELS, SOURCE_DIR, duet


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def f32_tensors(path):
    r = GGUFReader(path)
    out = {}
    for t in r.tensors:
        assert t.tensor_type == T.F32, t.name
        out[t.name] = np.asarray(t.data).reshape(-1)
    return out


def assert_dequant_matches(src_path, tmp_path):
    out = tmp_path / "f32.gguf"
    duet("quantize", src_path, out, "--type", "F32", "-q")
    mine = f32_tensors(out)
    ref = GGUFReader(src_path)
    assert len(ref.tensors) == len(mine)
    for t in ref.tensors:
        expect = dequantize(np.asarray(t.data), t.tensor_type).reshape(-1)
        got = mine[t.name]
        assert got.shape == expect.shape, t.name
        diff = np.flatnonzero(bits(got) != bits(expect))
        assert diff.size == 0, f"{t.name} ({t.tensor_type.name}): {diff.size} elements differ, first at {diff[0]}: {got[diff[0]]} vs {expect[diff[0]]}"


@pytest.mark.parametrize("name", REAL_MODELS)
def test_dequantize_real_model_bit_exact(name, real_model, tmp_path):
    assert_dequant_matches(real_model(name), tmp_path)


BLOCK_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.F16, T.BF16]
# Byte offsets of the fp16 scale fields in each block, forced finite so both sides compute the
# same finite numbers (NaN payloads are not what this test is about).
HALF_FIELDS = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
               T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}
SIZES = {T.Q4_0: (32, 18), T.Q4_1: (32, 20), T.Q5_0: (32, 22), T.Q5_1: (32, 24), T.Q8_0: (32, 34),
         T.Q2_K: (256, 84), T.Q3_K: (256, 110), T.Q4_K: (256, 144), T.Q5_K: (256, 176), T.Q6_K: (256, 210),
         T.F16: (1, 2), T.BF16: (1, 2)}


def random_blocks(rng, qtype, n_blocks):
    bs, ts = SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    if qtype in (T.F16, T.BF16):
        h = raw.view(np.uint16)
        exp_mask = 0x7C00 if qtype == T.F16 else 0x7F80
        h[(h & exp_mask) == exp_mask] &= ~np.uint16(0x4000)  # no inf/nan
        return raw
    for off in HALF_FIELDS[qtype]:
        h = raw[:, off:off + 2].copy().view(np.uint16)
        h &= np.uint16(0xBFFF)  # clear the top exponent bit: finite, |x| < 2
        raw[:, off:off + 2] = h.view(np.uint8)
    return raw


def test_dequantize_random_blocks_every_type(tmp_path):
    rng = np.random.default_rng(7)
    src = tmp_path / "blocks.gguf"
    w = GGUFWriter(src, "llama")
    for i, qt in enumerate(BLOCK_TYPES):
        bs, ts = SIZES[qt]
        cols = 1024 if bs == 256 else 256
        rows = 48
        raw = random_blocks(rng, qt, rows * cols // bs).reshape(rows, cols // bs * ts)
        w.add_tensor(f"blk.{i}.ffn_up.weight", raw, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert_dequant_matches(src, tmp_path)


SIMPLE = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


@pytest.mark.parametrize("qtype", SIMPLE, ids=lambda q: q.name)
def test_quantize_simple_types_bit_exact(qtype, tmp_path):
    rng = np.random.default_rng(11 + int(qtype))
    data = rng.standard_normal((64, 512)).astype(np.float32)
    data[0, :32] = 0.0                      # all-zero block
    data[1, :32] = 0.5                      # constant block
    data[2, :32] = np.arange(32) - 16.0     # exact ties after scaling
    data[3, 5] = 1e4                        # outlier
    data[4] *= 1e-30                        # tiny values
    src = tmp_path / "f32.gguf"
    w = GGUFWriter(src, "llama")
    w.add_tensor("blk.0.ffn_up.weight", data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = tmp_path / "q.gguf"
    duet("quantize", src, out, "--type", qtype.name, "-q")
    t = GGUFReader(out).tensors[0]
    assert t.tensor_type == qtype
    expect = quantize(data, qtype)
    got = np.asarray(t.data).reshape(expect.shape)
    mism = np.flatnonzero((got != expect).any(axis=-1))
    assert mism.size == 0, f"{mism.size} rows differ, first row {mism[0]}"


def test_q4_k_m_qwen2_file_read_back_and_mix(tmp_path):
    """qwen2-0.5b shape (random weights, reduced to 6 layers to keep CI fast): duet's Q4_K_M file
    is read by gguf-py with the planned types, and every tensor dequantizes identically on both
    sides; converting via F32 gives the same bytes as synthesizing Q4_K_M directly."""
    direct = tmp_path / "direct.gguf"
    f32 = tmp_path / "f32.gguf"
    via = tmp_path / "via.gguf"
    duet("synth", "--arch", "qwen2", "--shape", "qwen2-0.5b", "--layers", "6", "--type", "Q4_K_M", "-o", direct, "-q")
    duet("synth", "--arch", "qwen2", "--shape", "qwen2-0.5b", "--layers", "6", "--type", "F32", "-o", f32, "-q")
    duet("quantize", f32, via, "--type", "Q4_K_M", "-q")
    assert direct.read_bytes() == via.read_bytes()
    r = GGUFReader(direct)
    types = {t.name: t.tensor_type.name for t in r.tensors}
    # d_model 896 is not a multiple of 256: tied embeddings (output's Q6_K) fall back to Q8_0,
    # attn_v of "more bits" layers Q6_K -> Q8_0, Q4_K -> Q5_0; ffn_down rows (4864) fit K blocks.
    assert types["token_embd.weight"] == "Q8_0"
    assert types["blk.2.attn_v.weight"] == "Q8_0" and types["blk.1.attn_v.weight"] == "Q5_0"
    assert types["blk.2.ffn_down.weight"] == "Q6_K" and types["blk.1.ffn_down.weight"] == "Q4_K"
    assert types["blk.2.attn_q.weight"] == "Q5_0" and types["blk.0.attn_q.bias"] == "F32"
    assert_dequant_matches(direct, tmp_path)


def test_q4_k_m_size_and_types_match_llama_cpp(tmp_path):
    """The same qwen2-0.5b input quantized by llama.cpp (fixture from scripts/ref/q4km_ref.py):
    identical per-tensor types and a file size within 1%."""
    ref = json.loads((SOURCE_DIR / "tests/data/q4km_qwen2_0.5b_ref.json").read_text())
    src = tmp_path / "f16.gguf"
    out = tmp_path / "q4km.gguf"
    duet("synth", "--arch", "qwen2", "--shape", "qwen2-0.5b", "--type", "F16", "-o", src, "-q")
    duet("quantize", src, out, "--type", "Q4_K_M", "-q")
    types = {t.name: t.tensor_type.name for t in GGUFReader(out).tensors}
    diff = {k: (types.get(k), v) for k, v in ref["types"].items() if types.get(k) != v}
    assert not diff, f"type differences (duet, llama.cpp): {dict(list(diff.items())[:10])}"
    size = out.stat().st_size
    assert abs(size - ref["size"]) <= 0.01 * ref["size"], (size, ref["size"])


@pytest.fixture(scope="module")
def kmix_source(tmp_path_factory):
    ref = json.loads((SOURCE_DIR / "tests/data/kmix_qwen2_0.5b_l8_ref.json").read_text())
    src = tmp_path_factory.mktemp("kmix") / "f16.gguf"
    duet(*ref["input"].split()[1:-2], "-o", src, "-q")
    return ref, src


@pytest.mark.parametrize("mix", ["Q2_K", "Q3_K_M", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K"])
def test_k_quant_mixes_match_llama_cpp(kmix_source, mix, tmp_path):
    """Every standard mix picks llama.cpp's type for every tensor (fixture from
    scripts/ref/kmix_ref.py on the same 8-layer qwen2-0.5b input) and lands within 1% of its size."""
    ref, src = kmix_source
    out = tmp_path / f"{mix}.gguf"
    duet("quantize", src, out, "--type", mix, "-q")
    types = {t.name: t.tensor_type.name for t in GGUFReader(out).tensors}
    want = ref["mixes"][mix]
    diff = {k: (types.get(k), v) for k, v in want["types"].items() if types.get(k) != v}
    assert not diff, f"{mix} type differences (duet, llama.cpp): {dict(list(diff.items())[:10])}"
    assert abs(out.stat().st_size - want["size"]) <= 0.01 * want["size"], (out.stat().st_size, want["size"])
