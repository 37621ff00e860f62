"""duet's tokenizer for GGUF vocabularies vs llama.cpp reference ids committed as fixtures
(tests/data/tokenizer/gguf_ref_*.jsonl.gz, written by scripts/ref/tokenizer_gguf_ref.py): the
two real models (Gemma 3 270M: SPM; SmolLM2-135M: BPE "smollm") and vocab-only GGUFs rebuilt
here from the HF tokenizer.json files (pre-types llama-bpe, qwen2, deepseek-v3).

Env: DUET_BIN, DUET_SOURCE_DIR, DUET_MODELS_DIR (where the .gguf files are), DUET_SHARED_DIR.
Skips a case whose model (or tokenizer.json / gguf package) is absent. Checks encode ids with special parsing on and off, decode of the encodings and of
random id lists (llama_detokenize with unparse_special), and streaming == one-shot decode.
"""
import gzip
import json
import os
import subprocess
import sys

import pytest

SRC = os.environ.get("DUET_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
DUET = os.environ.get("DUET_BIN", "")
sys.path.insert(0, os.path.join(SRC, "scripts", "ref"))
from tokenizer_gguf_ref import MODELS, VOCAB_GGUFS, build_vocab_gguf, find_model, fixture_path, string_hash  # noqa: E402

CASES = sorted(MODELS) + ["vocab_" + n for n in sorted(VOCAB_GGUFS)]
from tokenizer_hard_strings import hard_strings  # noqa: E402


def duet_jsonl(args, lines):
    inp = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()
    p = subprocess.run([DUET, "tokenize"] + args + ["--jsonl"], input=inp, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    out = [json.loads(l) for l in p.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(lines)
    return out


@pytest.fixture(scope="module", params=CASES)
def setup(request, tmp_path_factory):
    name = request.param
    if not DUET or not os.path.exists(DUET):
        pytest.fail("DUET_BIN not set")
    if name.startswith("vocab_"):
        import gguf  # noqa: F401
        model = build_vocab_gguf(name[len("vocab_"):], str(tmp_path_factory.mktemp("gguf") / (name + ".gguf")))
    else:
        model = find_model(name)
    if not model:
        pytest.fail(f"no GGUF file for {name}")
    with gzip.open(fixture_path(name), "rt", encoding="utf-8") as f:
        rows = [json.loads(l) for l in f]
    head, rows = rows[0], rows[1:]
    strings = hard_strings(head["n"], head["specials"], seed=head["seed"])
    enc = [r for r in rows if "h" in r]
    rand = [r for r in rows if "rand" in r]
    assert len(enc) == len(strings)
    drift = [i for i, (s, r) in enumerate(zip(strings, enc)) if string_hash(s) != r["h"]]
    assert not drift, f"hard_strings() changed since the fixture was written (e.g. #{drift[0]}): rerun scripts/ref/tokenizer_gguf_ref.py"
    return name, model, strings, enc, rand


def check(name, what, strings, got, want):
    bad = [i for i in range(len(strings)) if got[i] != want[i]]
    print(f"{name}: {what} {len(strings) - len(bad)}/{len(strings)} identical")
    if bad:
        i = bad[0]
        pytest.fail(f"{len(bad)} mismatches; first #{i} {strings[i]!r:.200}\n duet {got[i][:40]}\n ref  {want[i][:40]}")


def test_encode(setup):
    name, model, strings, enc, _ = setup
    got = duet_jsonl(["-m", model], strings)
    check(name, "encode (special on)", strings, got, [r["ids"] for r in enc])


def test_encode_no_special(setup):
    name, model, strings, enc, _ = setup
    got = duet_jsonl(["-m", model, "--no-special"], strings)
    check(name, "encode (special off)", strings, got, [r.get("ids_ns", r["ids"]) for r in enc])


def test_decode(setup):
    name, model, strings, enc, rand = setup
    ids = [r["ids"] for r in enc] + [r["rand"] for r in rand]
    want = [r.get("dec", s) for r, s in zip(enc, strings)] + [r["dec"] for r in rand]
    got = duet_jsonl(["-m", model, "--decode"], ids)
    check(name, "decode", [repr(x) for x in ids], got, want)
    streamed = duet_jsonl(["-m", model, "--decode", "--stream"], ids)
    check(name, "streamed decode == decode", [repr(x) for x in ids], streamed, got)
