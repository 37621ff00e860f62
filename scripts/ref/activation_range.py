#!/usr/bin/env python3
"""The largest activations a real GGUF model produces on a text, at every point where a backend may
round them to a narrower type: matrix inputs (F16 for tensor cores, int8 blocks for dp4a, E4M3 with
one scale per tensor for native FP8 prompts), K/V cache rows (F16), products' outputs and the
residual stream. F16 holds at most 65504; a point past it must stay float32 on every path.

The weights are dequantized by the `gguf` package (independent of duet) and run through
model_numpy_ref.forward (float64) with its `stats` hook. Architectures: llama (Q/K rows un-permuted
from llama.cpp's interleaved RoPE layout), qwen2, qwen3, gemma3 (norm weights stored as 1 + w).
Tokens: `duet tokenize -m MODEL` of the text (BOS added when the model adds one).

Usage: activation_range.py MODEL.gguf [--text FILE] [--tokens N] [--duet build/duet] [--json]
  e.g. scripts/ref/activation_range.py models/gemma-3-270m-q4_k_m.gguf --text models/shakespeare.txt
Needs numpy and gguf (scripts/requirements.txt); about a minute and 3 GB for Gemma 3 270M at 256 tokens.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_numpy_ref import forward  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
F16_MAX = 65504.0


def field(reader, name, default=None):
    f = reader.fields.get(name)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0]


def unpermute(w, n_head):
    """llama.cpp's convert permutes llama Q/K rows for interleaved RoPE; back to HF's halves."""
    rows, cols = w.shape
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def load(path):
    """(HF-style config, float32 weights under HF names) of a GGUF file."""
    r = GGUFReader(path)
    arch = field(r, "general.architecture")
    if arch not in ("llama", "qwen2", "qwen3", "gemma3"):
        sys.exit(f"activation_range: architecture {arch} not supported")
    gemma = arch == "gemma3"
    T = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        T[t.name] = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
    nh = field(r, f"{arch}.attention.head_count")
    nkv = field(r, f"{arch}.attention.head_count_kv", nh)
    L = field(r, f"{arch}.block_count")
    hd = T["blk.0.attn_q.weight"].shape[0] // nh
    cfg = {
        "model_type": "gemma3_text" if gemma else arch,
        "hidden_size": field(r, f"{arch}.embedding_length"),
        "intermediate_size": field(r, f"{arch}.feed_forward_length"),
        "num_hidden_layers": L, "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd,
        "vocab_size": T["token_embd.weight"].shape[0],
        "rope_theta": field(r, f"{arch}.rope.freq_base", 10000.0),
        "rms_norm_eps": field(r, f"{arch}.attention.layer_norm_rms_epsilon"),
        "tie_word_embeddings": "output.weight" not in T,
    }
    if gemma:
        # llama.cpp scales Gemma 3's queries by 1/sqrt(head_dim) (what query_pre_attn_scalar is
        # for the sizes up to 12B); layers 6k + 5 are global, the rest slide.
        cfg.update({"sliding_window": field(r, "gemma3.attention.sliding_window"), "sliding_window_pattern": 6,
                    "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": hd})
    names = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
             "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj",
             "ffn_norm": "pre_feedforward_layernorm" if gemma else "post_attention_layernorm",
             "post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}
    W = {"model.embed_tokens.weight": T["token_embd.weight"], "model.norm.weight": T["output_norm.weight"]}
    if "output.weight" in T:
        W["lm_head.weight"] = T["output.weight"]
    for name, w in T.items():
        if not name.startswith("blk."):
            continue
        _, i, base, kind = name.split(".")
        if arch == "llama" and base in ("attn_q", "attn_k") and kind == "weight":
            w = unpermute(w, nh if base == "attn_q" else nkv)
        W[f"model.layers.{i}.{names[base]}.{kind}"] = w
    if gemma:  # GGUF stores Gemma's norm weights as 1 + w; the forward applies 1 + w itself
        W = {k: (v - 1.0 if k.endswith("norm.weight") else v) for k, v in W.items()}
    add_bos = bool(field(r, "tokenizer.ggml.add_bos_token", False))
    return cfg, W, add_bos


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--text", default=str(ROOT / "models" / "shakespeare.txt"))
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--duet", default=str(ROOT / "build" / "duet"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cfg, W, add_bos = load(a.model)
    text = Path(a.text).read_text(encoding="utf-8")[:a.tokens * 16]
    cmd = [a.duet, "tokenize", "-m", a.model, "--json"] + (["--add-bos"] if add_bos else [])
    toks = json.loads(subprocess.run(cmd, input=text, capture_output=True, text=True, check=True).stdout)
    toks = toks[:a.tokens]
    stats = {}
    forward(cfg, W, toks, stats)
    if a.json:
        print(json.dumps({"model": Path(a.model).name, "tokens": len(toks), "max_abs": stats, "f16_max": F16_MAX}))
        return
    print(f"{Path(a.model).name}: {len(toks)} tokens of {Path(a.text).name}; largest |value| per point")
    print(f"| point | max abs | of F16's {F16_MAX:g} |\n| --- | --- | --- |")
    for k, v in stats.items():
        print(f"| {k} | {v:.4g} | {v / F16_MAX:.2%}{' (over)' if v > F16_MAX else ''} |")


if __name__ == "__main__":
    main()
