"""safetensors in and out: BF16/FP8 output layouts (compressed-tensors per-tensor / per-channel,
128x128 blocks) decoded by an independent numpy reader, FP8 -> GGUF exactness, sharded HF
checkpoints -> GGUF with llama q/k permutation and Gemma norm shift, and `duet inspect`."""
import json
import shutil
import struct

import numpy as np
import pytest
from gguf import GGUFReader
from safetensors.numpy import save_file

from conftest import SOURCE_DIR, duet

TOKENIZER = SOURCE_DIR.parent / "shared" / "tokenizers" / "qwen3"


def read_safetensors(path):
    """Minimal independent reader: returns {name: (dtype, shape, raw bytes)}."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = (v["dtype"], tuple(v["shape"]), data[base + b:base + e])
    return out


def bf16_to_f32(raw):
    return (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def e4m3_to_f32(raw):
    """OCP FP8 E4M3 (fn) decode, written from the spec: bias 7, no inf, S.1111.111 is NaN."""
    b = np.frombuffer(raw, dtype=np.uint8).astype(np.int32)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> 3) & 0xF
    man = b & 0x7
    val = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7))
    val = np.where((exp == 15) & (man == 7), np.nan, val)
    return (sign * val).astype(np.float32)


@pytest.fixture(scope="module")
def bf16_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("st") / "qwen3-bf16"
    duet("synth", "--arch", "qwen3", "--shape", "qwen3-0.6b", "--layers", "2", "--type", "st-bf16", "-o", d,
         "--tokenizer", TOKENIZER, "-q")
    return d


@pytest.mark.parametrize("kind,strategy", [("fp8-channel", "channel"), ("fp8-tensor", "tensor"), ("fp8-block", None)])
def test_fp8_output_layouts(bf16_dir, tmp_path, kind, strategy):
    out = tmp_path / kind
    duet("quantize", bf16_dir, out, "--type", kind, "-q")
    cfg = json.loads((out / "config.json").read_text())
    qc = cfg["quantization_config"]
    if strategy:
        assert qc["quant_method"] == "compressed-tensors"
        assert qc["config_groups"]["group_0"]["weights"]["strategy"] == strategy
    else:
        assert qc["quant_method"] == "fp8" and qc["weight_block_size"] == [128, 128]
    src = read_safetensors(bf16_dir / "model.safetensors")
    got = read_safetensors(out / "model.safetensors")
    name = "model.layers.1.mlp.down_proj.weight"
    dt, shape, raw = got[name]
    assert dt == "F8_E4M3" and shape == src[name][1]
    q = e4m3_to_f32(raw).reshape(shape)
    ref = bf16_to_f32(src[name][2]).reshape(shape)
    if strategy == "channel":
        sdt, sshape, sraw = got[name + "_scale"]
        assert sshape == (shape[0], 1)
        deq = q * np.frombuffer(sraw, np.float32).reshape(-1, 1)
    elif strategy == "tensor":
        sdt, sshape, sraw = got[name + "_scale"]
        assert sshape == (1,)
        deq = q * np.frombuffer(sraw, np.float32)[0]
    else:
        sdt, sshape, sraw = got[name.replace("weight", "weight_scale_inv")]
        assert sshape == ((shape[0] + 127) // 128, (shape[1] + 127) // 128)
        s = np.frombuffer(sraw, np.float32).reshape(sshape)
        deq = q * np.repeat(np.repeat(s, 128, 0), 128, 1)[:shape[0], :shape[1]]
    # E4M3 keeps 3 mantissa bits: relative error <= 2^-4 for normal values.
    err = np.abs(deq - ref)
    assert np.all(err <= np.abs(ref) * 2.0 ** -4 + np.abs(ref).max() * 2.0 ** -12)
    # Norms and embeddings stay BF16; the amax element maps to 448 exactly.
    assert got["model.norm.weight"][0] == "BF16" and got["model.embed_tokens.weight"][0] == "BF16"
    info = json.loads(duet("inspect", out, "--json").stdout)
    assert info["fp8_layout"] == ("block" if strategy is None else {"channel": "per-channel", "tensor": "per-tensor"}[strategy])
    # FP8 -> GGUF F32: each weight is exactly fp8 * scale in float32.
    gg = tmp_path / "f32.gguf"
    duet("quantize", out, gg, "--type", "F32", "--tokenizer-pre", "qwen2", "-q")
    t = {x.name: x for x in GGUFReader(gg).tensors}["blk.1.ffn_down.weight"]
    assert np.array_equal(np.asarray(t.data).reshape(shape).view(np.uint32), deq.astype(np.float32).view(np.uint32))


def write_hf_dir(d, config, tensors, shards=2):
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    shutil.copy(TOKENIZER / "tokenizer.json", d / "tokenizer.json")
    shutil.copy(TOKENIZER / "tokenizer_config.json", d / "tokenizer_config.json")
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        part = {n: tensors[n] for n in names[s::shards]}
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(d / fn))
        weight_map.update({n: fn for n in part})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def tiny_tensors(rng, arch, d=64, ff=128, heads=4, kv=2, hd=16, vocab=151936, layers=2, dtype=np.float32):
    t = {"model.embed_tokens.weight": rng.standard_normal((vocab, d)), "model.norm.weight": rng.standard_normal(d),
         "lm_head.weight": rng.standard_normal((vocab, d))}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = rng.standard_normal(d)
        t[p + "post_attention_layernorm.weight"] = rng.standard_normal(d)
        t[p + "self_attn.q_proj.weight"] = rng.standard_normal((heads * hd, d))
        t[p + "self_attn.k_proj.weight"] = rng.standard_normal((kv * hd, d))
        t[p + "self_attn.v_proj.weight"] = rng.standard_normal((kv * hd, d))
        t[p + "self_attn.o_proj.weight"] = rng.standard_normal((d, heads * hd))
        t[p + "mlp.gate_proj.weight"] = rng.standard_normal((ff, d))
        t[p + "mlp.up_proj.weight"] = rng.standard_normal((ff, d))
        t[p + "mlp.down_proj.weight"] = rng.standard_normal((d, ff))
        if arch == "gemma3":
            t[p + "pre_feedforward_layernorm.weight"] = rng.standard_normal(d)
            t[p + "post_feedforward_layernorm.weight"] = rng.standard_normal(d)
            t[p + "self_attn.q_norm.weight"] = rng.standard_normal(hd)
            t[p + "self_attn.k_norm.weight"] = rng.standard_normal(hd)
    return {k: v.astype(dtype) for k, v in t.items()}


def test_sharded_llama_to_gguf_permutes_qk(tmp_path):
    rng = np.random.default_rng(3)
    tensors = tiny_tensors(rng, "llama")
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 151936,
           "max_position_embeddings": 256, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    d = tmp_path / "llama"
    write_hf_dir(d, cfg, tensors)
    info = json.loads(duet("inspect", d, "--json").stdout)
    assert info["architecture"] == "llama" and info["n_params"] == sum(v.size for v in tensors.values())
    out = tmp_path / "llama.gguf"
    duet("quantize", d, out, "--type", "F32", "--tokenizer-pre", "qwen2", "-q")
    g = {t.name: np.asarray(t.data) for t in GGUFReader(out).tensors}

    def permute(w, n_head):  # as llama.cpp's converter reorders rows for GGML's RoPE
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    np.testing.assert_array_equal(g["blk.1.attn_q.weight"], permute(tensors["model.layers.1.self_attn.q_proj.weight"], 4))
    np.testing.assert_array_equal(g["blk.1.attn_k.weight"], permute(tensors["model.layers.1.self_attn.k_proj.weight"], 2))
    np.testing.assert_array_equal(g["blk.0.attn_v.weight"], tensors["model.layers.0.self_attn.v_proj.weight"])
    np.testing.assert_array_equal(g["blk.0.ffn_norm.weight"], tensors["model.layers.0.post_attention_layernorm.weight"])
    np.testing.assert_array_equal(g["output.weight"], tensors["lm_head.weight"])


def test_gemma3_bf16_to_gguf_shifts_norms(tmp_path):
    rng = np.random.default_rng(4)
    tensors = tiny_tensors(rng, "gemma3", vocab=151936)
    del tensors["lm_head.weight"]
    cfg = {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 151936,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "sliding_window": 64}
    d = tmp_path / "gemma"
    write_hf_dir(d, cfg, {k: v.astype(np.float16) for k, v in tensors.items()}, shards=1)
    out = tmp_path / "gemma.gguf"
    duet("quantize", d, out, "--type", "F32", "-q")
    r = GGUFReader(out)
    g = {t.name: np.asarray(t.data) for t in r.tensors}
    assert "output.weight" not in g
    src = tensors["model.layers.1.post_feedforward_layernorm.weight"].astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(g["blk.1.post_ffw_norm.weight"], src + np.float32(1))
    src = tensors["model.layers.0.self_attn.q_norm.weight"].astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(g["blk.0.attn_q_norm.weight"], src + np.float32(1))
    assert r.fields["gemma3.attention.sliding_window"].parts[-1][0] == 64


def test_inspect_reports_model_facts(real_model):
    info = json.loads(duet("inspect", real_model("SmolLM2-135M-Instruct.Q4_1.gguf"), "--json", "--tensors").stdout)
    assert info["architecture"] == "llama" and info["file_type"] == "Q4_1"
    assert info["vocab_size"] == 49152 and info["context_length"] == 8192 and info["has_chat_template"]
    assert info["special_tokens"]["eos"].startswith("2 ")
    assert sum(t["n_bytes"] for t in info["tensors"]) == sum(v["n_bytes"] for v in info["types"].values())
