#!/usr/bin/env python3
"""One table from scripts/gpu-check.sh's bench stage: duet bench JSON lines (bench.jsonl) and,
when present, llama-bench JSON files (llama-bench-<file>.json) measured in the same run.

Usage: gpu_report.py OUT_DIR"""
import json
import sys
from pathlib import Path


def main():
    out = Path(sys.argv[1])
    rows = {}
    for line in (out / "bench.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        j = json.loads(line)
        r = rows.setdefault(j["label"], {"dtype": j.get("dtype"), "device": j.get("device")})
        if j.get("tg", 0):
            r["tg"] = j["tg_tok_s"]
            r["tg_roof"] = j.get("tg_roofline")
            for s in j.get("batch_steps", []):
                r[f"step{s['seqs']}"] = s["step_ms"]
        if j.get("pp", 0):
            r[f"pp{j['pp']}"] = j["pp_tok_s"]
            r[f"pp{j['pp']}_roof"] = j.get("pp_roofline")
    print("| duet (%s) | tg128 tok/s | roofline | pp512 tok/s | pp2048 tok/s | pp2048 roofline | step 1 / 8 / 32 seqs ms |"
          % next(iter(rows.values()))["device"] if rows else "no duet figures")
    print("| --- | --- | --- | --- | --- | --- | --- |")

    def f(x, fmt="%.1f"):
        return fmt % x if isinstance(x, (int, float)) else "-"

    for label, r in rows.items():
        steps = " / ".join(f(r.get(f"step{b}"), "%.2f") for b in (1, 8, 32))
        print(f"| {label} | {f(r.get('tg'))} | {f((r.get('tg_roof') or 0) * 100, '%.0f%%')} | {f(r.get('pp512'))} | "
              f"{f(r.get('pp2048'))} | {f((r.get('pp2048_roof') or 0) * 100, '%.0f%%')} | {steps} |")
    llama = out / "llamacpp.jsonl"
    if llama.exists():
        print()
        print("| llama.cpp, same files | tg128 tok/s | pp512 tok/s | pp2048 tok/s | greedy 16 tokens |")
        print("| --- | --- | --- | --- | --- |")
        for line in llama.read_text().splitlines():
            if not line.strip():
                continue
            j = json.loads(line)
            name = Path(j["file"]).name
            if "error" in j:
                print(f"| {name} | {j['error']} | | | |")
                continue
            print(f"| {name} | {f(j.get('tg128_tok_s'))} | {f(j.get('pp512_tok_s'))} | {f(j.get('pp2048_tok_s'))} | "
                  f"{len(j.get('greedy16', []))} tokens |")


if __name__ == "__main__":
    main()
