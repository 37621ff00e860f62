#!/usr/bin/env python3
"""Single-threaded encode speed: duet vs HF `tokenizers` on ~1 MB of mixed English, Chinese and
code (deterministic), for each tokenizer.json. Load time is excluded on both sides.

duet runs `duet tokenize --tokenizer F --bench N` (best of N over the whole text). HF is timed
in-process two ways, both with RAYON_NUM_THREADS=1: one encode() of the whole text, and one
encode() per line (its faster mode on long inputs); the ratio uses HF's faster figure.
Also checks that both produce the same ids.

With --gguf MODEL.gguf (repeatable) it also times duet -m MODEL against llama.cpp's tokenizer
(llama-cpp-python, vocab_only) when that package is installed.

Usage: python3 scripts/bench_tokenizer.py --duet build/duet [--tokenizers DIR] [--mb 1] [--runs 5]
                                          [--gguf models/gemma-3-270m-q4_k_m.gguf ...]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EN = [
    "The quick brown fox jumps over the lazy dog while the committee debates the budget for next year.",
    "It's been a long time since we've seen numbers like 1,234,567 in the quarterly report, hasn't it?",
    "Large language models are trained on trillions of tokens drawn from the web, books and code.",
    "She said: \"Don't worry, we'll fix it tomorrow\" -- and then left for the airport at 6:45 a.m.",
]
ZH = [
    "自然语言处理是人工智能领域中的一个重要方向，它研究能实现人与计算机之间用自然语言进行有效通信的各种理论和方法。",
    "今天天气很好，我们一起去公园散步吧。晚上还要准备明天的会议材料，时间比较紧张。",
    "分词器的速度对于大规模语言模型的推理服务非常重要，尤其是在高并发的场景下。",
]
CODE = [
    "def tokenize(text: str) -> list[int]:\n    ids = []\n    for word in split(text):\n        ids.extend(bpe(word))\n    return ids\n",
    "for (size_t i = 0; i < n; ++i) {\n\tif (a[i] > max) { max = a[i]; idx = i; }\n}\n",
    "const server = http.createServer((req, res) => {\n  res.writeHead(200, {'Content-Type': 'application/json'});\n  res.end(JSON.stringify({ok: true}));\n});\n",
    "    SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id GROUP BY u.id HAVING n > 10;\n",
]


def make_text(mb, seed=1234):
    r = random.Random(seed)
    parts, size = [], 0
    target = int(mb * 1_000_000)
    while size < target:
        k = r.random()
        s = r.choice(EN) + " " if k < 0.45 else r.choice(ZH) if k < 0.75 else r.choice(CODE)
        if r.random() < 0.1:
            s += "\n\n"
        parts.append(s)
        size += len(s.encode())
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duet", default=os.environ.get("DUET_BIN", "build/duet"))
    ap.add_argument("--tokenizers", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "tokenizers"))
    ap.add_argument("--names", default="qwen3,llama3,deepseek_v3")
    ap.add_argument("--mb", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gguf", action="append", default=[])
    args = ap.parse_args()
    import tokenizers

    text = make_text(args.mb)
    data = text.encode()
    lines = text.splitlines(keepends=True)
    rows = []
    for name in args.names.split(","):
        path = os.path.join(args.tokenizers, name, "tokenizer.json")
        if not os.path.exists(path):
            print(f"skip {name}: {path} missing", file=sys.stderr)
            continue
        p = subprocess.run([args.duet, "tokenize", "--tokenizer", path, "--bench", str(args.runs)], input=data,
                           capture_output=True, check=True)
        duet = json.loads(p.stdout)
        p = subprocess.run([args.duet, "tokenize", "--tokenizer", path, "--json"], input=data, capture_output=True,
                           check=True)
        duet_ids = json.loads(p.stdout)
        hf = tokenizers.Tokenizer.from_file(path)
        hf.encode("warm up")
        best_whole = best_lines = 1e9
        for _ in range(args.runs):
            t0 = time.perf_counter()
            ids = hf.encode(text, add_special_tokens=False).ids
            best_whole = min(best_whole, time.perf_counter() - t0)
        for _ in range(args.runs):
            t0 = time.perf_counter()
            for line in lines:
                hf.encode(line, add_special_tokens=False)
            best_lines = min(best_lines, time.perf_counter() - t0)
        hf_best = min(best_whole, best_lines)
        rows.append((name, len(data), duet["n_tokens"], duet["best_s"], best_whole, best_lines,
                     hf_best / duet["best_s"], duet_ids == ids, duet["load_s"]))
    print(f"{'tokenizer':<12} {'bytes':>9} {'tokens':>8} {'duet MB/s':>10} {'HF whole MB/s':>14} "
          f"{'HF lines MB/s':>14} {'speedup':>8} {'same ids':>8} {'duet load s':>11}")
    for name, nb, nt, d, hw, hl, sp, same, load in rows:
        print(f"{name:<12} {nb:>9} {nt:>8} {nb / d / 1e6:>10.2f} {nb / hw / 1e6:>14.2f} {nb / hl / 1e6:>14.2f} "
              f"{sp:>7.2f}x {str(same):>8} {load:>11.3f}")
    if args.gguf:
        try:
            import llama_cpp
        except ImportError:
            llama_cpp = None
        print(f"\n{'gguf':<36} {'tokens':>8} {'duet MB/s':>10} {'llama.cpp MB/s':>15} {'speedup':>8} {'same ids':>8}")
        for path in args.gguf:
            p = subprocess.run([args.duet, "tokenize", "-m", path, "--bench", str(args.runs)], input=data,
                               capture_output=True, check=True)
            duet = json.loads(p.stdout)
            ref_s, same = float("nan"), "n/a"
            if llama_cpp is not None:
                llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
                best = 1e9
                for _ in range(max(1, args.runs // 2)):
                    t0 = time.perf_counter()
                    ids = llm.tokenize(data, add_bos=False, special=True)
                    best = min(best, time.perf_counter() - t0)
                ref_s = best
                p = subprocess.run([args.duet, "tokenize", "-m", path, "--json"], input=data, capture_output=True,
                                   check=True)
                same = str(json.loads(p.stdout) == ids)
            print(f"{os.path.basename(path):<36} {duet['n_tokens']:>8} {len(data) / duet['best_s'] / 1e6:>10.2f} "
                  f"{len(data) / ref_s / 1e6:>15.2f} {ref_s / duet['best_s']:>7.2f}x {same:>8}")


if __name__ == "__main__":
    main()
