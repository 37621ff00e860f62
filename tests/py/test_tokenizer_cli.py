"""`duet tokenize` command line: plain/JSON output, --decode, --add-bos, --no-special, --bench,
and error exits. Env: DUET_BIN, DUET_SHARED_DIR (default $DUET_SOURCE_DIR/../shared)."""
import json
import os
import subprocess

import pytest

SRC = os.environ.get("DUET_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.environ.get("DUET_SHARED_DIR", os.path.join(SRC, "..", "shared"))
DUET = os.environ.get("DUET_BIN", "")
QWEN = os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json")
DEEPSEEK = os.path.join(SHARED, "tokenizers", "deepseek_v3", "tokenizer.json")



def run(args, data):
    return subprocess.run([DUET, "tokenize"] + args, input=data, capture_output=True, timeout=120)


def test_encode_plain_json_and_decode():
    text = "Hello <|im_start|>world\n"
    p = run(["--tokenizer", QWEN], text.encode())
    assert p.returncode == 0, p.stderr
    plain = [int(x) for x in p.stdout.split()]
    p = run(["--tokenizer", QWEN, "--json"], text.encode())
    ids = json.loads(p.stdout)
    assert ids == plain and 151644 in ids
    p = run(["--tokenizer", QWEN, "--no-special", "--json"], text.encode())
    assert 151644 not in json.loads(p.stdout)
    p = run(["--tokenizer", QWEN, "--decode"], " ".join(map(str, ids)).encode())
    assert p.returncode == 0 and p.stdout.decode() == text
    p = run(["--tokenizer", QWEN, "--decode", "--skip-special"], json.dumps(ids).encode())
    assert p.stdout.decode() == "Hello world\n"
    p = run(["--tokenizer", QWEN, "--decode", "--stream"], json.dumps(ids).encode())
    assert p.stdout.decode() == text


def test_bos_rules_and_bench():
    p = run(["--tokenizer", DEEPSEEK, "--json", "--add-special"], b"hi")
    assert json.loads(p.stdout)[0] == 0  # add_bos_token: true in tokenizer_config.json
    p = run(["--tokenizer", DEEPSEEK, "--json"], b"hi")
    assert json.loads(p.stdout)[0] != 0
    p = run(["--tokenizer", DEEPSEEK, "--json", "--add-bos"], b"hi")
    assert json.loads(p.stdout)[0] == 0
    p = run(["--tokenizer", DEEPSEEK, "--bench", "2"], b"some text " * 100)
    r = json.loads(p.stdout)
    assert r["bytes"] == 1000 and r["n_tokens"] > 0 and r["best_s"] > 0


def test_errors():
    p = run(["--tokenizer", "/nonexistent/tokenizer.json"], b"x")
    assert p.returncode == 1 and b"nonexistent" in p.stderr
    p = run([], b"x")
    assert p.returncode == 2
    if os.path.exists(QWEN):
        p = run(["--tokenizer", QWEN, "--decode"], b"1 2 x")
        assert p.returncode == 1
        p = run(["--tokenizer", QWEN, "--jsonl"], b"not json\n")
        assert p.returncode == 1
