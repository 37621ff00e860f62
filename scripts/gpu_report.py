#!/usr/bin/env python3
"""One table from the GPU scripts' bench stage (gpu-check.sh, gpu-quick.sh): duet bench JSON lines
(bench.jsonl) and, when present, llama.cpp's figures on the same files from the same run
(llamacpp.jsonl), then the CUDA issue's speed bars that these figures decide (met / not met /
not measured here).

Usage: gpu_report.py OUT_DIR"""
import json
import sys
from pathlib import Path


def read_rows(out):
    """duet's figures by label: tg, tg_roof, ppN, ppN_roof, stepN (ms); none where the run had no
    bench stage (gpu-quick.sh with BENCH=0: tests only)."""
    rows = {}
    path = out / "bench.jsonl"
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
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
    return rows


def read_llama(out):
    """llama.cpp's figures by file name (llamacpp.jsonl), errors left out."""
    llama = {}
    path = out / "llamacpp.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                j = json.loads(line)
                if "error" not in j:
                    llama[Path(j["file"]).name] = j
    return llama


def bars(rows, llama):
    """The CUDA issue's speed bars on the qwen2-7b synth files: (bar, figure, verdict) rows,
    verdict "met", "not met" or "not measured" (a figure missing from this run)."""
    q4, bf, wo, nat = (rows.get(k, {}) for k in ("Q4_K_M", "BF16", "FP8 weight-only", "FP8 native"))
    lq4 = llama.get("q7-q4km.gguf", {})
    out = []

    def ratio(a, b):
        return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None

    def add(name, value, goal, fmt, higher=True):
        if value is None:
            out.append((name, "-", "not measured"))
        else:
            ok = value >= goal if higher else value <= goal
            out.append((name, fmt % value, "met" if ok else "not met"))

    add("Q4_K_M tg128 >= 1.5x llama.cpp", ratio(q4.get("tg"), lq4.get("tg128_tok_s")), 1.5, "%.2fx")
    def pct(x):
        return x * 100 if isinstance(x, (int, float)) else None

    add("Q4_K_M tg128 >= 50% of roofline", pct(q4.get("tg_roof")), 50, "%.1f%%")
    add("BF16 tg128 >= 80% of roofline", pct(bf.get("tg_roof")), 80, "%.1f%%")
    add("FP8 weight-only tg128 >= 1.7x BF16", ratio(wo.get("tg"), bf.get("tg")), 1.7, "%.2fx")
    add("FP8 native tg128 >= 1.7x BF16", ratio(nat.get("tg"), bf.get("tg")), 1.7, "%.2fx")
    for pp in (512, 2048):
        add(f"Q4_K_M pp{pp} >= 1.0x llama.cpp", ratio(q4.get(f"pp{pp}"), lq4.get(f"pp{pp}_tok_s")), 1.0, "%.2fx")
        add(f"FP8 native pp{pp} >= 1.5x BF16", ratio(nat.get(f"pp{pp}"), bf.get(f"pp{pp}")), 1.5, "%.2fx")
    add("BF16 pp2048 >= 45% of 790 TFLOP/s", pct(bf.get("pp2048_roof")), 45, "%.1f%%")
    add("Q4_K_M step of 32 sequences <= 1.6x one", ratio(q4.get("step32"), q4.get("step1")), 1.6, "%.2fx",
        higher=False)
    return out


def main():
    out = Path(sys.argv[1])
    rows = read_rows(out)
    print("| duet (%s) | tg128 tok/s | roofline | pp512 tok/s | pp2048 tok/s | pp2048 roofline | step 1 / 8 / 32 seqs ms |"
          % next(iter(rows.values()))["device"] if rows else "no duet figures")
    print("| --- | --- | --- | --- | --- | --- | --- |")

    def f(x, fmt="%.1f"):
        return fmt % x if isinstance(x, (int, float)) else "-"

    for label, r in rows.items():
        steps = " / ".join(f(r.get(f"step{b}"), "%.2f") for b in (1, 8, 32))
        roof = {k: r[k] * 100 if isinstance(r.get(k), (int, float)) else None for k in ("tg_roof", "pp2048_roof")}
        print(f"| {label} | {f(r.get('tg'))} | {f(roof['tg_roof'], '%.0f%%')} | {f(r.get('pp512'))} | "
              f"{f(r.get('pp2048'))} | {f(roof['pp2048_roof'], '%.0f%%')} | {steps} |")
    llama_path = out / "llamacpp.jsonl"
    if llama_path.exists():
        print()
        print("| llama.cpp, same files | tg128 tok/s | pp512 tok/s | pp2048 tok/s | greedy 16 tokens |")
        print("| --- | --- | --- | --- | --- |")
        for line in llama_path.read_text().splitlines():
            if not line.strip():
                continue
            j = json.loads(line)
            name = Path(j["file"]).name
            if "error" in j:
                print(f"| {name} | {j['error']} | | | |")
                continue
            print(f"| {name} | {f(j.get('tg128_tok_s'))} | {f(j.get('pp512_tok_s'))} | {f(j.get('pp2048_tok_s'))} | "
                  f"{len(j.get('greedy16', []))} tokens |")
    print()
    print("| bar (qwen2-7b synth files, this run) | figure | verdict |")
    print("| --- | --- | --- |")
    for name, value, verdict in bars(rows, read_llama(out)):
        print(f"| {name} | {value} | {verdict} |")


if __name__ == "__main__":
    main()
