#!/usr/bin/env python3
"""Reference token ids from llama.cpp (llama-cpp-python, vocab_only) for the tokenizers inside
the two real GGUF models, and for vocab-only GGUFs built from the HF tokenizer.json files
(llama3 -> pre "llama-bpe", qwen3 -> "qwen2", deepseek_v3 -> "deepseek-v3"; built with the gguf
package by build_vocab_gguf(), deterministically, so tests can rebuild them). Written once as
small gzipped fixtures for CI (which has no llama-cpp-python):

  tests/data/tokenizer/gguf_ref_<model>.jsonl.gz
    line 1: {"model", "file", "n", "seed", "specials", "llama_cpp"}   header
    then one line per hard string i: {"h": sha1(s)[:10], "ids": [...]}     parse_special = true
        plus "ids_ns" when parse_special = false differs, "dec" (lossy UTF-8 of the pieces
        llama_token_to_piece gives with special = true) when it differs from s
    then {"rand": [...], "dec": ...} random id lists (decode of arbitrary ids)

Usage: python3 scripts/ref/tokenizer_gguf_ref.py [--n 3000]   (vocab GGUFs use 1000 strings)
Models are found by find_model() (DUET_MODELS_DIR, ./models, or the pip packages that ship them).
"""
import argparse
import glob
import gzip
import hashlib
import io
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from tokenizer_hard_strings import hard_strings  # noqa: E402

MODELS = {
    # name: (glob patterns, lowercase), seed
    "smollm2": (["*smollm2*135m*.gguf"], 3001),
    "gemma3": (["*gemma*3*270m*.gguf"], 3002),
}
N_RANDOM_IDS = 500
# Vocab-only GGUFs converted from tokenizer.json: name -> (llama.cpp pre name, seed, n strings)
VOCAB_GGUFS = {
    "llama3": ("llama-bpe", 3101, 1000),
    "qwen3": ("qwen2", 3102, 1000),
    "deepseek_v3": ("deepseek-v3", 3103, 1000),
}


def shared_dir():
    return os.environ.get("DUET_SHARED_DIR", os.path.join(SRC, "..", "shared"))


def build_vocab_gguf(name, out_path):
    """Writes a vocab-only GGUF (arch llama, no tensors) from shared/tokenizers/<name>/tokenizer.json,
    the way convert_hf_to_gguf.py lays out a BPE vocabulary. Returns out_path, or None if the
    tokenizer.json is absent."""
    import gguf

    src = os.path.join(shared_dir(), "tokenizers", name, "tokenizer.json")
    if not os.path.exists(src):
        return None
    with open(src, encoding="utf-8") as f:
        d = json.load(f)
    vocab = d["model"]["vocab"]
    n = max(max(vocab.values()), max(a["id"] for a in d["added_tokens"])) + 1
    toks = [f"[PAD{i}]" for i in range(n)]
    types = [gguf.TokenType.UNUSED] * n
    for t, i in vocab.items():
        toks[i], types[i] = t, gguf.TokenType.NORMAL
    for a in d["added_tokens"]:
        toks[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]]
    w = gguf.GGUFWriter(out_path, "llama")
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(64)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(VOCAB_GGUFS[name][0])
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out_path


def find_model(name):
    pats, _ = MODELS[name]
    dirs = [os.environ.get("DUET_MODELS_DIR", ""), os.path.join(SRC, "models"), os.path.expanduser("~/.cache")]
    try:
        import site
        dirs += site.getsitepackages()
    except Exception:
        pass
    for d in dirs:
        if not d or not os.path.isdir(d):
            continue
        for root, _, files in os.walk(d):
            for f in files:
                low = f.lower()
                for p in pats:
                    if glob.fnmatch.fnmatch(low, p):
                        return os.path.join(root, f)
            if root.count(os.sep) - d.count(os.sep) > 3:
                continue
    return None


def fixture_path(name):
    return os.path.join(SRC, "tests", "data", "tokenizer", f"gguf_ref_{name}.jsonl.gz")


def string_hash(s):
    return hashlib.sha1(s.encode("utf-8")).hexdigest()[:10]


def main():
    import ctypes
    import tempfile

    import llama_cpp

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    cases = [(name, find_model(name), seed, args.n) for name, (_, seed) in MODELS.items()]
    for name, (_, seed, n) in VOCAB_GGUFS.items():
        cases.append(("vocab_" + name, build_vocab_gguf(name, os.path.join(tmp, name + ".gguf")), seed, n))
    for name, path, seed, n_strings in cases:
        if not path:
            raise SystemExit(f"model for {name} not found")
        write_fixture(llama_cpp, ctypes, name, path, seed, n_strings)


def write_fixture(llama_cpp, ctypes, name, path, seed, n_strings):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    vocab = llm._model.vocab
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    # Special-token texts from the vocabulary's attributes: control and user-defined.
    specials = []
    for i in range(n_vocab):
        attr = llama_cpp.llama_vocab_get_attr(vocab, i)
        if attr & (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED):
            specials.append(llama_cpp.llama_vocab_get_text(vocab, i).decode("utf-8", errors="replace"))
    r = random.Random(seed)
    specials = sorted(set(specials))
    specials = sorted(r.sample(specials, min(48, len(specials))))
    strings = hard_strings(n_strings, specials, seed=seed)

    def tokenize(s, special):
        b = s.encode("utf-8")
        cap = len(b) + 16
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(vocab, b, len(b), buf, cap, False, special)
        assert n >= 0, n
        return list(buf[:n])

    def detokenize(ids):
        # Concatenated llama_token_to_piece(special=True): what llama.cpp streams. Its
        # llama_detokenize additionally applies clean_spaces for some pre-types (llama3, gpt-2)
        # and strips the leading space for SPM vocabularies with add_space_prefix; neither
        # applies to the two real models (checked: identical there).
        out = b""
        buf = ctypes.create_string_buffer(256)
        for i, t in enumerate(ids):
            n = llama_cpp.llama_token_to_piece(vocab, t, buf, 256, 0, True)
            assert 0 <= n <= 256, n
            out += buf.raw[:n]
        return out.decode("utf-8", errors="replace")

    os.makedirs(os.path.dirname(fixture_path(name)), exist_ok=True)
    n_diff_dec = 0
    # mtime=0 keeps the .gz byte-identical across regenerations.
    with io.TextIOWrapper(gzip.GzipFile(fixture_path(name), "wb", compresslevel=9, mtime=0), encoding="utf-8") as f:
        head = {"model": name, "file": os.path.basename(path), "n": len(strings), "seed": seed,
                "specials": specials, "llama_cpp": llama_cpp.__version__}
        f.write(json.dumps(head, ensure_ascii=False) + "\n")
        for s in strings:
            ids = tokenize(s, True)
            row = {"h": string_hash(s), "ids": ids}
            ns = tokenize(s, False)
            if ns != ids:
                row["ids_ns"] = ns
            dec = detokenize(ids)
            if dec != s:
                row["dec"] = dec
                n_diff_dec += 1
            f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        rr = random.Random(seed + 1)
        for _ in range(N_RANDOM_IDS):
            ids = [rr.randrange(n_vocab) for _ in range(rr.randrange(1, 10))]
            f.write(json.dumps({"rand": ids, "dec": detokenize(ids)}, ensure_ascii=False,
                               separators=(",", ":")) + "\n")
    print(f"{name}: {path} -> {fixture_path(name)} ({os.path.getsize(fixture_path(name))} bytes), "
          f"{len(strings)} strings, {n_diff_dec} decode(encode(s)) != s")


if __name__ == "__main__":
    main()
