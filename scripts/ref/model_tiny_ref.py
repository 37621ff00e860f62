#!/usr/bin/env python3
"""Hugging Face transformers reference for the tiny models of tests/data/model/<arch>/.

For each architecture it builds the model with transformers from the config in
scripts/ref/model_numpy_ref.py (AutoModelForCausalLM.from_config, eager attention, float32, CPU),
loads the seeded weights of model_numpy_ref.tiny_weights() into it, saves it with
save_pretrained (config.json + model.safetensors), and writes the logits of the fixed token
sequence as logits_hf.f32 (float32 little-endian [n_tokens, vocab_size]) next to tokens.json.
It then reruns the numpy reference on the saved files, so logits_numpy.f32 matches them too.

Needs torch + transformers (not installed on the dev machine; run where they are):
    python3 scripts/ref/model_tiny_ref.py [--out tests/data/model] [--arch llama qwen2 qwen3 gemma3]
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import model_numpy_ref as ref  # noqa: E402


def build(arch, out_dir):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg_dict = dict(ref.CONFIGS[arch])
    model_type = cfg_dict["model_type"]
    config = AutoConfig.for_model(model_type, **{k: v for k, v in cfg_dict.items() if k != "model_type"})
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()

    weights = ref.tiny_weights(cfg_dict)
    state = model.state_dict()
    missing = [k for k in weights if k not in state]
    if missing:
        raise SystemExit(f"{arch}: transformers model lacks {missing[:5]}")
    new_state = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}
    if cfg_dict["tie_word_embeddings"] and "lm_head.weight" in state:
        new_state["lm_head.weight"] = new_state["model.embed_tokens.weight"]
    unset = [k for k in state if k not in new_state and not k.endswith("rotary_emb.inv_freq")]
    if unset:
        raise SystemExit(f"{arch}: weights not set by tiny_weights(): {unset[:5]}")
    model.load_state_dict(new_state, strict=False)

    d = out_dir / arch
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    tokens = ref.tiny_tokens(cfg_dict)
    (d / "tokens.json").write_text(json.dumps({"tokens": tokens}) + "\n")
    with torch.no_grad():
        out = model(torch.tensor([tokens], dtype=torch.long), use_cache=False)
    logits = out.logits[0].float().numpy()
    logits.astype("<f4").tofile(d / "logits_hf.f32")
    # Keep only what the tests read.
    for extra in ["generation_config.json"]:
        if (d / extra).exists():
            (d / extra).unlink()
    print(f"{arch}: transformers {transformers.__version__}, max|logit| {np.abs(logits).max():.3f} -> {d}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ref.ROOT / "tests" / "data" / "model"))
    ap.add_argument("--arch", nargs="*", default=list(ref.CONFIGS))
    args = ap.parse_args()
    out = Path(args.out)
    for a in args.arch:
        build(a, out)
        ref.write_model(a, out, recreate=False)  # numpy logits for the files just saved
        hf = np.fromfile(out / a / "logits_hf.f32", dtype="<f4")
        npy = np.fromfile(out / a / "logits_numpy.f32", dtype="<f4")
        rel = np.abs(hf - npy).max() / np.abs(npy).max()
        print(f"{a}: transformers vs numpy max|diff| / max|logit| = {rel:.2e}")
        if rel > 1e-4:
            raise SystemExit(f"{a}: transformers and the numpy reference disagree ({rel:.2e})")


if __name__ == "__main__":
    main()
