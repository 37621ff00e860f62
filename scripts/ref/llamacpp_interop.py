#!/usr/bin/env python3
"""Interoperability check: llama.cpp (through llama-cpp-python) loads duet-written GGUF files of
every architecture in several file types and generates from them. Prints a table; exit 1 on any
failure. Needs `pip install llama-cpp-python` (not part of CI: it builds llama.cpp from source).

    python3 scripts/ref/llamacpp_interop.py [--duet build/duet] [--layers 2]
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [("qwen2", "qwen2-0.5b"), ("qwen3", "qwen3-0.6b"), ("llama", "llama3-1b"), ("gemma3", "gemma3-270m")]
TYPES = ["Q4_K_M", "Q8_0", "Q6_K", "F16"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duet", default=str(ROOT / "build" / "duet"))
    ap.add_argument("--layers", default="2")
    args = ap.parse_args()
    from llama_cpp import Llama
    os.environ.setdefault("DUET_TOKENIZERS", str(ROOT.parent / "shared" / "tokenizers"))
    failures = 0
    print(f"| arch | shape | type | llama.cpp loads | n_vocab | generated |")
    print(f"| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as d:
        for arch, shape in SHAPES:
            for ty in TYPES:
                path = Path(d) / f"{shape}-{ty}.gguf"
                subprocess.run([args.duet, "synth", "--arch", arch, "--shape", shape, "--layers", args.layers,
                                "--type", ty, "-o", path, "-q"], check=True)
                try:
                    m = Llama(str(path), n_ctx=64, n_threads=2, verbose=False)
                    out = m("Hello", max_tokens=4, temperature=0)
                    text = out["choices"][0]["text"]
                    print(f"| {arch} | {shape} | {ty} | yes | {m.n_vocab()} | {len(m.tokenize(text.encode(), add_bos=False, special=True))} tokens |")
                    del m
                except Exception as e:  # noqa: BLE001 - report and continue
                    failures += 1
                    print(f"| {arch} | {shape} | {ty} | NO: {e} | | |")
                path.unlink()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
