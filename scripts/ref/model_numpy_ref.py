#!/usr/bin/env python3
"""Tiny random decoder models and an independent float64 numpy forward pass (the reference the
model tests compare duet's logits with).

For each architecture (llama, qwen2, qwen3, gemma3) this writes tests/data/model/<arch>/:
  config.json          a Hugging Face config transformers can load
  model.safetensors    float32 weights under HF names (Gemma norms stored as w, applied as 1 + w)
  tokens.json          the fixed token sequence the logits are computed for
  logits_numpy.f32     float32 little-endian [n_tokens, vocab_size] from this file's forward pass

The weights come from tiny_weights() below, seeded, so scripts/ref/model_tiny_ref.py (the
transformers reference) can build the very same models. When a directory already holds a
model.safetensors (e.g. written by model_tiny_ref.py), it is kept and only the logits are redone.

Usage: model_numpy_ref.py [--out tests/data/model] [--arch llama ...] [--recreate]
Needs only numpy and safetensors.
"""
import argparse
import json
import math
import os
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

ROOT = Path(__file__).resolve().parents[2]

N_TOKENS = 40
SEED = 1234

# Small enough to commit, big enough to exercise GQA, head_dim != d_model / n_heads, biases,
# q/k norms, tied and untied embeddings, and (gemma3) five sliding-window layers of window 8
# followed by one global layer.
CONFIGS = {
    "llama": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 256, "max_position_embeddings": 256, "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    },
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 256, "max_position_embeddings": 256, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_act": "silu",
        "use_sliding_window": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "vocab_size": 256, "max_position_embeddings": 256, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_act": "silu",
        "attention_bias": False, "use_sliding_window": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    },
    "gemma3": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 6,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
        "vocab_size": 256, "max_position_embeddings": 256, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 8, "sliding_window_pattern": 6,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        "query_pre_attn_scalar": 32, "attn_logit_softcapping": None, "final_logit_softcapping": None,
        "rope_scaling": None, "attention_bias": False, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        "torch_dtype": "float32",
    },
}


def tensor_shapes(cfg):
    """HF tensor names and row-major shapes of a config's decoder."""
    d, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", d // nh)
    mt = cfg["model_type"]
    gemma = mt == "gemma3_text"
    shapes = {"model.embed_tokens.weight": (v, d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (d,)
        shapes[p + "self_attn.q_proj.weight"] = (nh * hd, d)
        shapes[p + "self_attn.k_proj.weight"] = (nkv * hd, d)
        shapes[p + "self_attn.v_proj.weight"] = (nkv * hd, d)
        shapes[p + "self_attn.o_proj.weight"] = (d, nh * hd)
        if mt == "qwen2":
            shapes[p + "self_attn.q_proj.bias"] = (nh * hd,)
            shapes[p + "self_attn.k_proj.bias"] = (nkv * hd,)
            shapes[p + "self_attn.v_proj.bias"] = (nkv * hd,)
        if mt == "qwen3" or gemma:
            shapes[p + "self_attn.q_norm.weight"] = (hd,)
            shapes[p + "self_attn.k_norm.weight"] = (hd,)
        shapes[p + "post_attention_layernorm.weight"] = (d,)
        if gemma:
            shapes[p + "pre_feedforward_layernorm.weight"] = (d,)
            shapes[p + "post_feedforward_layernorm.weight"] = (d,)
        shapes[p + "mlp.gate_proj.weight"] = (ff, d)
        shapes[p + "mlp.up_proj.weight"] = (ff, d)
        shapes[p + "mlp.down_proj.weight"] = (d, ff)
    shapes["model.norm.weight"] = (d,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (v, d)
    return shapes


def tiny_weights(cfg, seed=SEED):
    """Seeded float32 weights: linear N(0, 1/fan_in), embeddings N(0, 1), norms around 1 (Gemma
    stores w with 1 + w applied, so N(0, 0.1) there), biases N(0, 0.1)."""
    rng = np.random.RandomState(seed)
    gemma = cfg["model_type"] == "gemma3_text"
    out = {}
    for name, shape in tensor_shapes(cfg).items():
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            w = rng.normal(0.0, 0.1, shape) + (0.0 if gemma else 1.0)
        elif name.endswith(".bias"):
            w = rng.normal(0.0, 0.1, shape)
        elif name == "model.embed_tokens.weight":
            w = rng.normal(0.0, 1.0, shape)
        else:
            w = rng.normal(0.0, 1.0 / math.sqrt(shape[1]), shape)
        out[name] = w.astype(np.float32)
    return out


def tiny_tokens(cfg, seed=SEED):
    rng = np.random.RandomState(seed + 1)
    return [int(t) for t in rng.randint(0, cfg["vocab_size"], size=N_TOKENS)]


# ---- the float64 forward pass ----

def rms_norm(x, w, eps, gemma):
    x = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * ((1.0 + w) if gemma else w)


def rope_neox(x, pos, theta):
    """x: [n_tokens, n_heads, head_dim]; HF rotate-half RoPE."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = pos[:, None].astype(np.float64) * inv[None, :]  # [n, hd/2]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)[:, None, :]
    half = hd // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def layer_is_sliding(cfg, i):
    if cfg["model_type"] != "gemma3_text":
        return False
    lt = cfg.get("layer_types")
    if lt:
        return lt[i] == "sliding_attention"
    return bool((i + 1) % cfg.get("sliding_window_pattern", 6))


def rope_theta(cfg, sliding):
    """RoPE base of a layer; reads transformers 5's rope_parameters when the config has them."""
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict):
        sub = rp.get("sliding_attention" if sliding else "full_attention", rp)
        if isinstance(sub, dict) and "rope_theta" in sub:
            return sub["rope_theta"]
    if sliding:
        return cfg.get("rope_local_base_freq", 10000.0)
    return cfg["rope_theta"]


def forward(cfg, W, tokens, stats=None):
    """Logits [n_tokens, vocab] in float64 for one sequence starting at position 0. With a dict
    `stats`, also the largest |value| at each point where a backend may round activations to a
    narrower type (matrix inputs, K/V cache rows, products' outputs, the residual stream):
    stats[point] = max over layers (scripts/ref/activation_range.py)."""
    def seen(point, v):
        if stats is not None:
            stats[point] = max(stats.get(point, 0.0), float(np.abs(v).max()))
    W = {k: v.astype(np.float64) for k, v in W.items()}
    mt = cfg["model_type"]
    gemma = mt == "gemma3_text"
    d = cfg["hidden_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", d // nh)
    eps = cfg["rms_norm_eps"]
    n = len(tokens)
    pos = np.arange(n)
    x = W["model.embed_tokens.weight"][np.array(tokens)]
    if gemma:
        x = x * math.sqrt(d)
    seen("embedding", x)
    scale = cfg["query_pre_attn_scalar"] ** -0.5 if gemma else hd ** -0.5
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps, gemma)
        seen("attn_norm (q/k/v input)", h)
        q = h @ W[p + "self_attn.q_proj.weight"].T
        k = h @ W[p + "self_attn.k_proj.weight"].T
        v = h @ W[p + "self_attn.v_proj.weight"].T
        if mt == "qwen2":
            q = q + W[p + "self_attn.q_proj.bias"]
            k = k + W[p + "self_attn.k_proj.bias"]
            v = v + W[p + "self_attn.v_proj.bias"]
        q = q.reshape(n, nh, hd)
        k = k.reshape(n, nkv, hd)
        v = v.reshape(n, nkv, hd)
        if mt == "qwen3" or gemma:
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps, gemma)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps, gemma)
        sliding = layer_is_sliding(cfg, i)
        theta = rope_theta(cfg, sliding)
        q = rope_neox(q, pos, theta)
        k = rope_neox(k, pos, theta)
        seen("q", q)
        seen("k (cache)", k)
        seen("v (cache)", v)
        group = nh // nkv
        mask = pos[None, :] <= pos[:, None]
        if sliding:
            mask &= (pos[:, None] - pos[None, :]) < cfg["sliding_window"]
        att = np.zeros((n, nh, hd))
        for hq in range(nh):
            hk = hq // group
            s = (q[:, hq, :] @ k[:, hk, :].T) * scale
            s = np.where(mask, s, -np.inf)
            s = s - s.max(axis=-1, keepdims=True)
            pr = np.exp(s)
            pr /= pr.sum(axis=-1, keepdims=True)
            att[:, hq, :] = pr @ v[:, hk, :]
        seen("attention (o input)", att)
        o = att.reshape(n, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
        seen("o output", o)
        if gemma:
            o = rms_norm(o, W[p + "post_attention_layernorm.weight"], eps, gemma)
            x = x + o
            h = rms_norm(x, W[p + "pre_feedforward_layernorm.weight"], eps, gemma)
        else:
            x = x + o
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps, gemma)
        seen("ffn_norm (gate/up input)", h)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        seen("gate output", g)
        seen("up output", u)
        a = (gelu_tanh(g) if gemma else silu(g)) * u
        seen("gated activation (down input)", a)
        f = a @ W[p + "mlp.down_proj.weight"].T
        seen("down output", f)
        if gemma:
            f = rms_norm(f, W[p + "post_feedforward_layernorm.weight"], eps, gemma)
        x = x + f
        seen("residual", x)
    x = rms_norm(x, W["model.norm.weight"], eps, gemma)
    seen("final norm (output input)", x)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return x @ head.T


def write_model(arch, out_dir, recreate):
    cfg = CONFIGS[arch]
    d = out_dir / arch
    d.mkdir(parents=True, exist_ok=True)
    st = d / "model.safetensors"
    if recreate or not st.exists():
        save_file(tiny_weights(cfg), str(st), metadata={"format": "pt"})
        (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        (d / "tokens.json").write_text(json.dumps({"tokens": tiny_tokens(cfg)}) + "\n")
    cfg_used = json.loads((d / "config.json").read_text())
    tokens = json.loads((d / "tokens.json").read_text())["tokens"]
    W = load_file(str(st))
    if "lm_head.weight" not in W and not cfg_used.get("tie_word_embeddings", False):
        raise SystemExit(f"{st}: untied model without lm_head.weight")
    logits = forward(cfg_used, W, tokens)
    logits.astype("<f4").tofile(d / "logits_numpy.f32")
    print(f"{arch}: {len(tokens)} tokens, max|logit| {np.abs(logits).max():.3f} -> {d}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "model"))
    ap.add_argument("--arch", nargs="*", default=list(CONFIGS))
    ap.add_argument("--recreate", action="store_true", help="rewrite weights even if present")
    args = ap.parse_args()
    for a in args.arch:
        write_model(a, Path(args.out), args.recreate)


if __name__ == "__main__":
    main()
