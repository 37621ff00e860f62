#!/usr/bin/env python3
"""llama.cpp references for the real models (via llama-cpp-python), committed as small fixtures.

For each model this writes tests/data/model/llamacpp_<model stem>.json with
  prompts:   10 prompts, their llama.cpp token ids (BOS added when the model adds one) and the
             greedy 64-token continuation (argmax of llama.cpp's logits, EOS not special-cased)
  text:      tests/data/model/ppl_text.txt as llama.cpp tokenizes it, the teacher-forced top-1
             token after every prefix, and llama.cpp's perplexity of that text computed the way
             `llama-perplexity -c 128` does (chunks of 128 tokens, BOS first when the model adds
             one, only the second half of each chunk scored)
The defaults are llama.cpp's: F16 KV cache, no flash attention, n_batch 512.

--corpus FILE instead writes tests/data/model/llamacpp_ppl512_<model stem>.json: llama.cpp's
perplexity of FILE (models/shakespeare.txt, made by scripts/setup.sh) the way
`llama-perplexity -c 512` computes it (n_ctx 512, non-overlapping chunks of 512 tokens, BOS first
when the model adds one, second half of each chunk scored), with each chunk's summed negative
log-likelihood so that a test can score any prefix of the chunks. The fixture is rewritten after
every chunk; --max-chunks N stops early ("complete": false).

--bench N prints llama.cpp's speed with N threads: prefill of 512 tokens (pp512) and decode of
128 tokens (tg128), best of 3, for comparison with `duet run --bench` on the same machine.

Usage: model_llamacpp_ref.py [--models-dir models] [--model FILE ...] [--bench 2 | --corpus FILE]
"""
import argparse
import hashlib
import json
import sys
import math
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "model"
MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]
N_GEN = 64
PPL_CTX = 128
CORPUS_CTX = 512

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three primary colors are",
    "To make a cup of tea, first",
    "Water boils at a temperature of",
    "The quick brown fox",
    "In 1969, astronauts landed on",
    "A list of healthy breakfast ideas:\n1.",
    "The most important thing about learning a new language is",
]


def load(path, n_threads=2, logits_all=True, n_ctx=1024):
    import llama_cpp
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=512, n_threads=n_threads,
                           n_threads_batch=n_threads, logits_all=logits_all, verbose=False, seed=0)


def adds_bos(llm):
    import llama_cpp
    return bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model)))


def tokenize(llm, text):
    return llm.tokenize(text.encode("utf-8"), add_bos=adds_bos(llm), special=False)


def greedy(llm, prompt_tokens, n):
    llm.reset()
    llm.eval(prompt_tokens)
    out = []
    for _ in range(n):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(tok)
        llm.eval([tok])
    return out


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - m - math.log(np.exp(x - m).sum())


def perplexity(llm, tokens, n_ctx, bos):
    """llama-perplexity: non-overlapping chunks of n_ctx, first token replaced by BOS when the
    model adds one, negative log-likelihood of the second half of each chunk."""
    n_chunks = len(tokens) // n_ctx
    nll, count = 0.0, 0
    for c in range(n_chunks):
        chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        if bos is not None:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        for i in range(n_ctx // 2, n_ctx - 1):
            nll -= log_softmax(llm.scores[i])[chunk[i + 1]]
            count += 1
    return math.exp(nll / count), n_chunks, count


def chunk_nll(llm, tokens, n_ctx, bos, max_chunks=None, on_chunk=None):
    """Per-chunk summed NLL of llama-perplexity's scored positions (see perplexity()); the
    log-softmax is taken in float64, 32 rows at a time. on_chunk(list so far) after each chunk."""
    n_chunks = len(tokens) // n_ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    first = n_ctx // 2
    out = []
    t0 = time.perf_counter()
    for c in range(n_chunks):
        chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        if bos is not None:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        targets = np.array(chunk[first + 1:n_ctx])
        nll = 0.0
        for r in range(first, n_ctx - 1, 32):
            x = np.asarray(llm.scores[r:min(r + 32, n_ctx - 1)], dtype=np.float64)
            m = x.max(axis=1, keepdims=True)
            lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
            t = targets[r - first:r - first + len(x)]
            nll += float((lse - x[np.arange(len(x)), t]).sum())
        out.append(nll)
        if on_chunk:
            on_chunk(out)
        done = sum(out) / ((c + 1) * (n_ctx - 1 - first))
        print(f"[{c + 1}/{n_chunks}] ppl {math.exp(done):.4f} ({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)
    return out


def corpus_reference(path, corpus, n_threads, out, max_chunks=None):
    """Writes the fixture to out after every chunk (atomically), so that an interrupted run
    leaves a valid fixture of the chunks done; "complete" says whether all chunks were scored."""
    import llama_cpp
    llm = load(path, n_threads=n_threads, n_ctx=CORPUS_CTX)
    bos = llm.token_bos() if adds_bos(llm) else None
    raw = Path(corpus).read_bytes()
    toks = tokenize(llm, raw.decode("utf-8"))
    scored = CORPUS_CTX - 1 - CORPUS_CTX // 2
    n_total = len(toks) // CORPUS_CTX
    t0 = time.perf_counter()
    ref = {}

    def write(nll):
        ref.update({
            "model": path.name,
            "llama_cpp_python": llama_cpp.__version__,
            "settings": {"n_ctx": CORPUS_CTX, "n_batch": 512, "kv": "f16", "flash_attn": False, "threads": n_threads},
            "corpus": Path(corpus).name,
            "corpus_sha256": hashlib.sha256(raw).hexdigest(),
            "add_bos": bos is not None,
            "n_tokens": len(toks),
            "n_ctx": CORPUS_CTX,
            "scored_per_chunk": scored,
            "n_chunks_total": n_total,
            "complete": len(nll) == n_total,
            "chunk_nll": nll,
            "ppl": math.exp(sum(nll) / (scored * len(nll))),
            "seconds": time.perf_counter() - t0,
        })
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(ref, separators=(",", ":")) + "\n")
        tmp.replace(out)

    chunk_nll(llm, toks, CORPUS_CTX, bos, max_chunks, on_chunk=write)
    return ref


def reference(path):
    llm = load(path)
    bos = llm.token_bos() if adds_bos(llm) else None
    prompts = []
    for p in PROMPTS:
        toks = tokenize(llm, p)
        prompts.append({"text": p, "tokens": toks, "continuation": greedy(llm, toks, N_GEN)})
    text = (DATA / "ppl_text.txt").read_text()
    toks = tokenize(llm, text)
    llm.reset()
    llm.eval(toks)
    top1 = [int(np.argmax(llm.scores[i])) for i in range(len(toks))]
    ppl, n_chunks, n_scored = perplexity(llm, toks, PPL_CTX, bos)
    import llama_cpp
    return {
        "model": path.name,
        "llama_cpp_python": llama_cpp.__version__,
        "settings": {"n_ctx": 1024, "n_batch": 512, "kv": "f16", "flash_attn": False},
        "add_bos": bos is not None,
        "prompts": prompts,
        "text": {"file": "tests/data/model/ppl_text.txt", "tokens": toks, "top1": top1,
                 "ppl_ctx": PPL_CTX, "ppl": ppl, "ppl_chunks": n_chunks, "ppl_scored": n_scored},
    }


def bench(path, n_threads):
    import llama_cpp
    llm = load(path, n_threads=n_threads, logits_all=False, n_ctx=1024)
    rng = np.random.RandomState(0)
    vocab = llm.n_vocab()
    prompt = [int(t) for t in rng.randint(100, min(vocab, 30000), size=512)]
    pp, tg = [], []
    for _ in range(3):
        llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        t0 = time.perf_counter()
        llm.eval(prompt)
        pp.append(512 / (time.perf_counter() - t0))
        llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        llm.eval(prompt[:1])
        t0 = time.perf_counter()
        for i in range(128):
            llm.eval([prompt[1 + i]])
        tg.append(128 / (time.perf_counter() - t0))
    print(f"{path.name}: llama.cpp {n_threads} threads: pp512 {max(pp):.1f} tok/s, tg128 {max(tg):.1f} tok/s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default=str(ROOT / "models"))
    ap.add_argument("--model", nargs="*", default=MODELS)
    ap.add_argument("--bench", type=int, default=0, help="only print llama.cpp speed with this many threads")
    ap.add_argument("--corpus", help="only write the c=512 perplexity fixture of this text")
    ap.add_argument("--threads", type=int, default=2, help="threads for --corpus (default 2)")
    ap.add_argument("--max-chunks", type=int, help="--corpus: score only the first chunks")
    args = ap.parse_args()
    for m in args.model:
        path = Path(args.models_dir) / m
        if args.bench:
            bench(path, args.bench)
            continue
        if args.corpus:
            out = DATA / f"llamacpp_ppl512_{path.stem}.json"
            ref = corpus_reference(path, args.corpus, args.threads, out, args.max_chunks)
            print(f"{m}: ppl(c={CORPUS_CTX}) {ref['ppl']:.4f} over {len(ref['chunk_nll'])} chunks, "
                  f"{ref['seconds']:.0f} s -> {out}")
            continue
        ref = reference(path)
        out = DATA / f"llamacpp_{path.stem}.json"
        out.write_text(json.dumps(ref, separators=(",", ":")) + "\n")
        print(f"{m}: ppl(c={PPL_CTX}) {ref['text']['ppl']:.4f} over {ref['text']['ppl_scored']} tokens -> {out}")


if __name__ == "__main__":
    main()
