#!/usr/bin/env python3
"""Reference for every standard K-quant mix: quantizes a duet-synthesized qwen2-0.5b F16 GGUF
(8 layers, to keep the check fast) with llama.cpp through llama-cpp-python, for Q2_K, Q3_K_M,
Q4_K_S, Q4_K_M, Q5_K_M, Q6_K, and records each output's size and per-tensor types in
tests/data/kmix_qwen2_0.5b_l8_ref.json. Run once; needs `pip install llama-cpp-python`.

    python3 scripts/ref/kmix_ref.py [--duet build/duet]
"""
import argparse
import ctypes
import json
import subprocess
import tempfile
from pathlib import Path

import llama_cpp
from gguf import GGUFReader

ROOT = Path(__file__).resolve().parents[2]
MIXES = {"Q2_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K, "Q3_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q3_K_M,
         "Q4_K_S": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_S, "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
         "Q5_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M, "Q6_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K}
SYNTH = ["synth", "--arch", "qwen2", "--shape", "qwen2-0.5b", "--layers", "8", "--type", "F16"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duet", default=str(ROOT / "build" / "duet"))
    args = ap.parse_args()
    ref = {"input": "duet " + " ".join(SYNTH) + " (seed 1)", "llama_cpp_python": llama_cpp.__version__, "mixes": {}}
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "f16.gguf"
        subprocess.run([args.duet, *SYNTH, "-o", src, "-q"], check=True)
        for name, ftype in MIXES.items():
            out = Path(d) / f"{name}.gguf"
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = ftype
            params.nthread = 2
            rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params))
            assert rc == 0, (name, rc)
            types = {t.name: t.tensor_type.name for t in GGUFReader(out).tensors}
            ref["mixes"][name] = {"size": out.stat().st_size, "types": types}
            print(f"{name}: {out.stat().st_size} bytes")
            out.unlink()
    dst = ROOT / "tests" / "data" / "kmix_qwen2_0.5b_l8_ref.json"
    dst.write_text(json.dumps(ref, indent=0, sort_keys=True) + "\n")
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
