#!/usr/bin/env python3
"""Reference for the Q4_K_M mix: quantizes a duet-synthesized qwen2-0.5b F16 GGUF with
llama.cpp (through the llama-cpp-python package) and records the output size and per-tensor
types in tests/data/q4km_qwen2_0.5b_ref.json. Run once; needs `pip install llama-cpp-python`.

    python3 scripts/ref/q4km_ref.py [--duet build/duet]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duet", default=str(ROOT / "build" / "duet"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "f16.gguf"
        out = Path(d) / "q4km.gguf"
        subprocess.run([args.duet, "synth", "--arch", "qwen2", "--shape", "qwen2-0.5b", "--type", "F16",
                        "-o", src, "-q"], check=True)
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
        params.nthread = 2
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params))
        assert rc == 0, rc
        types = {t.name: t.tensor_type.name for t in GGUFReader(out).tensors}
        ref = {"input": "duet synth --arch qwen2 --shape qwen2-0.5b --type F16 (seed 1)",
               "llama_cpp_python": llama_cpp.__version__, "size": out.stat().st_size, "types": types}
    dst = ROOT / "tests" / "data" / "q4km_qwen2_0.5b_ref.json"
    dst.write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
    print(f"wrote {dst}: llama.cpp Q4_K_M size {ref['size']} bytes, {len(types)} tensors")


if __name__ == "__main__":
    main()
