"""Memory behaviour (peak RSS of one duet process, read with wait4): inspect maps the file and
reads headers only; synth and quantize stream tensor by tensor, so their peak stays below the
F32 size of the largest tensor (here qwen2-0.5b's 544 MB embedding) instead of growing with
the model; `duet run` stays under the mapped file + its KV cache + 300 MB.

ru_maxrss of a child includes the parent's RSS at spawn (the kernel carries the old mm's high
water mark across exec), so these bounds are conservative by the size of the pytest process;
keep heavy imports (numpy, gguf) out of it and read model facts in a subprocess."""
import json
import os
import subprocess
import sys

from conftest import DUET, REAL_MODELS


def peak_rss_mb(*args):
    p = subprocess.Popen([DUET, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    assert os.waitstatus_to_exitcode(status) == 0, err
    return ru.ru_maxrss / 1024.0


def test_inspect_reads_headers_only(real_model):
    for name in REAL_MODELS:
        rss = peak_rss_mb("inspect", real_model(name), "--json", "--tensors")
        assert rss < 200, (name, rss)


def test_synth_and_quantize_stream(tmp_path):
    f32 = tmp_path / "f16.gguf"
    rss = peak_rss_mb("synth", "--arch", "qwen2", "--shape", "qwen2-0.5b", "--type", "F16", "-o", f32, "-q", "--threads", "2")
    assert rss < 300, rss
    rss = peak_rss_mb("quantize", f32, tmp_path / "q.gguf", "--type", "Q4_K_M", "-q", "--threads", "2")
    # The input is mapped and each tensor's pages are dropped once it is written, so the peak is
    # the largest input tensor (token_embd, 272 MB in F16) plus small working buffers, not the
    # 1 GB file.
    assert rss < 272 + 150, rss


# KV cache geometry from the GGUF metadata, read in a child so that this process stays small.
_KV_GEOMETRY = """
import json, sys, gguf
r = gguf.GGUFReader(sys.argv[1])
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
def get(key):
    f = r.fields.get(arch + "." + key)
    return None if f is None else int(f.parts[-1][0])
n_heads = get("attention.head_count")
print(json.dumps({"n_layers": get("block_count"), "n_kv_heads": get("attention.head_count_kv") or n_heads,
                  "head_dim": get("attention.key_length") or get("embedding_length") // n_heads}))
"""


def kv_cache_bytes(model, n_ctx, kv_block_size=16):
    """F16 K and V for every layer over n_ctx tokens, rounded up to whole KV blocks as duet
    allocates them (ModelOptions: kv_block_size 16, one sequence of max_context tokens)."""
    g = json.loads(subprocess.run([sys.executable, "-c", _KV_GEOMETRY, str(model)], capture_output=True, text=True,
                                  check=True).stdout)
    n_tokens = -(-n_ctx // kv_block_size) * kv_block_size
    return g["n_layers"] * 2 * g["n_kv_heads"] * g["head_dim"] * 2 * n_tokens


def test_run_stays_under_file_plus_kv_cache(real_model):
    # -c 4096: `duet run` allocates the KV cache for exactly this context (default: prompt + n).
    n_ctx = 4096
    for name in REAL_MODELS:
        model = real_model(name)
        limit_mb = (os.path.getsize(model) + kv_cache_bytes(model, n_ctx)) / 2**20 + 300
        rss = peak_rss_mb("run", "-m", model, "-p", "The capital of France is", "-n", 128, "--ignore-eos",
                          "-c", n_ctx, "-t", 2)
        assert rss < limit_mb, (name, rss, limit_mb)
