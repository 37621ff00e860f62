"""duet's tokenizer vs HF `tokenizers` (live) on 3,000+ hard strings per tokenizer.json.

Env: DUET_BIN (the duet binary), DUET_SOURCE_DIR (repo root), DUET_SHARED_DIR (default
$DUET_SOURCE_DIR/../shared; the tokenizers live in tokenizers/{qwen3,llama3,deepseek_v3}).
Checks, for each tokenizer: encode ids (special parsing on and off), decode (with and without
skip_special) of the encodings and of random id lists, streaming decode == one-shot decode, and
decode(encode(s)) == s wherever HF round-trips.
"""
import json
import os
import random
import subprocess
import sys

import pytest

import tokenizers  # noqa: E402  (installed by scripts/setup.sh)

SRC = os.environ.get("DUET_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.environ.get("DUET_SHARED_DIR", os.path.join(SRC, "..", "shared"))
DUET = os.environ.get("DUET_BIN", "")
sys.path.insert(0, os.path.join(SRC, "scripts", "ref"))
from tokenizer_hard_strings import hard_strings  # noqa: E402

NAMES = ["qwen3", "llama3", "deepseek_v3"]
N_STRINGS = int(os.environ.get("DUET_TOKENIZER_N", "3000"))


def tok_dir(name):
    return os.path.join(SHARED, "tokenizers", name)


def duet_jsonl(args, lines):
    inp = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()
    p = subprocess.run([DUET, "tokenize"] + args + ["--jsonl"], input=inp, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    out = [json.loads(l) for l in p.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(lines)
    return out


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def report(kind, strings, got, want, limit=5):
    bad = [i for i in range(len(strings)) if got[i] != want[i]]
    msgs = []
    for i in bad[:limit]:
        k = first_diff(got[i], want[i])
        msgs.append(f"  {kind} #{i} {strings[i]!r:.200}: first diff at {k}: duet {got[i][k:k+6]} hf {want[i][k:k+6]}")
    return bad, "\n".join(msgs)


@pytest.fixture(scope="module", params=NAMES)
def setup(request):
    name = request.param
    path = os.path.join(tok_dir(name), "tokenizer.json")
    if not DUET or not os.path.exists(DUET):
        pytest.fail("DUET_BIN not set")
    if not os.path.exists(path):
        pytest.fail(f"{path} missing")
    hf = tokenizers.Tokenizer.from_file(path)
    added = sorted(hf.get_added_tokens_decoder().values(), key=lambda t: t.content)
    # All non-special added tokens plus a fixed sample of special ones (DeepSeek has 800).
    plain = [t.content for t in added if not t.special]
    special = [t.content for t in added if t.special]
    specials = plain + random.Random(1).sample(special, min(len(special), 64 - len(plain)))
    strings = hard_strings(N_STRINGS, specials, seed=1000 + NAMES.index(name))
    return name, path, hf, strings


def test_encode_parse_special(setup):
    name, path, hf, strings = setup
    want = [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)]
    got = duet_jsonl(["--tokenizer", path], strings)
    bad, msg = report("encode", strings, got, want)
    print(f"{name}: encode (special on) {len(strings) - len(bad)}/{len(strings)} identical")
    assert not bad, f"{len(bad)} mismatches\n{msg}"


def test_encode_no_special(setup):
    name, path, hf, strings = setup
    hf.encode_special_tokens = True
    try:
        want = [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)]
    finally:
        hf.encode_special_tokens = False
    got = duet_jsonl(["--tokenizer", path, "--no-special"], strings)
    bad, msg = report("encode --no-special", strings, got, want)
    print(f"{name}: encode (special off) {len(strings) - len(bad)}/{len(strings)} identical")
    assert not bad, f"{len(bad)} mismatches\n{msg}"


def test_decode_and_stream(setup):
    name, path, hf, strings = setup
    ids = [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)]
    # Random id lists break UTF-8 across tokens on purpose.
    r = random.Random(7)
    vocab = hf.get_vocab_size()
    rand_ids = [[r.randrange(vocab) for _ in range(r.randrange(1, 12))] for _ in range(1000)]
    all_ids = ids + rand_ids
    for skip in (False, True):
        want = hf.decode_batch(all_ids, skip_special_tokens=skip)
        args = ["--tokenizer", path, "--decode"] + (["--skip-special"] if skip else [])
        got = duet_jsonl(args, all_ids)
        bad = [i for i in range(len(all_ids)) if got[i] != want[i]]
        assert not bad, f"decode(skip={skip}) mismatch on {len(bad)}: e.g. {all_ids[bad[0]]} duet {got[bad[0]]!r} hf {want[bad[0]]!r}"
        streamed = duet_jsonl(args + ["--stream"], all_ids)
        bad = [i for i in range(len(all_ids)) if streamed[i] != got[i]]
        assert not bad, f"stream != decode on {len(bad)}: e.g. {all_ids[bad[0]]}"
    # Round trip wherever HF round-trips.
    hf_round = hf.decode_batch(ids, skip_special_tokens=False)
    got = duet_jsonl(["--tokenizer", path, "--decode"], ids)
    n_rt = sum(1 for s, h in zip(strings, hf_round) if s == h)
    bad = [i for i, (s, h) in enumerate(zip(strings, hf_round)) if s == h and got[i] != s]
    print(f"{name}: decode identical on {len(all_ids)} id lists; round trip {n_rt}/{len(strings)} (HF round-trips)")
    assert not bad


def test_added_token_flags(tmp_path):
    """lstrip / rstrip / single_word / normalized added tokens, saved by HF itself."""
    path = os.path.join(tok_dir("qwen3"), "tokenizer.json")
    if not DUET or not os.path.exists(DUET) or not os.path.exists(path):
        pytest.fail("DUET_BIN or qwen3 tokenizer missing")
    from tokenizers import AddedToken
    hf = tokenizers.Tokenizer.from_file(path)
    hf.add_special_tokens([AddedToken("<L>", lstrip=True), AddedToken("<R>", rstrip=True),
                           AddedToken("<LR>", lstrip=True, rstrip=True)])
    hf.add_tokens([AddedToken("wordy", single_word=True), AddedToken("caf\u00e9", normalized=True),
                   AddedToken("<N>", normalized=False), AddedToken("<N>x", normalized=True)])
    out = str(tmp_path / "tokenizer.json")
    hf.save(out)
    base = ["a <L> b", "a  \t<L>", "<L>  x", "x <R>  y", "x<R>\n\ny", " <LR> ", "\u3000<LR>\u3000z",
            "wordy", "a wordy b", "awordy", "wordyb", "_wordy_", "1wordy", "caf\u00e9", "cafe\u0301",
            "<N>x", "<N>", "<L><R><LR>", "<L> <L>  <R> <R>", "a <L>b<R> c", "<|im_start|> <L>",
            "\u24b6wordy", "\u200dwordy", "wordy\u0301", "\u216bwordy", "\u00bdwordy", "\u0663wordy",
            "wordy\u203f", "\U0001F130wordy", "wordy\u2adc", "\u00a0wordy\u3000"]
    r = random.Random(3)
    strings = base + ["".join(r.choice(base + [" ", "  ", "\n", "q"]) for _ in range(5)) for _ in range(500)]
    for special in (True, False):
        hf.encode_special_tokens = not special
        want = [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)]
        got = duet_jsonl(["--tokenizer", out] + ([] if special else ["--no-special"]), strings)
        bad, msg = report("flags", strings, got, want)
        assert not bad, f"special={special}: {len(bad)} mismatches\n{msg}"
    hf.encode_special_tokens = False
