"""Memory behaviour (peak RSS of one duet process, read with wait4): inspect maps the file and
reads headers only; synth and quantize stream tensor by tensor, so their peak stays below the
F32 size of the largest tensor (here qwen2-0.5b's 544 MB embedding) instead of growing with
the model."""
import os
import subprocess

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
