"""`duet template` against Python jinja2 in transformers' environment, end to end through the CLI.

For each template in tests/data/chat_template/ and a sample of the conversations of
scripts/ref/chat_template_ref.py, the prompt duet prints must equal jinja2's byte for byte (and
duet must fail where jinja2 raises). Also renders the chat template stored in the SmolLM2 GGUF
(-m, bos/eos from tokenizer.ggml.tokens) and tokenizer_config.json files from shared/.
Skips when the duet binary has no `template` command yet.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.environ.get("DUET_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "ref"))

import chat_template_ref as ref  # noqa: E402
from chat_template_env import NOW_EPOCH_S, make_env  # noqa: E402

DUET = os.environ.get("DUET_BIN", os.path.join(ROOT, "build", "duet"))
MODELS = os.environ.get("DUET_MODELS_DIR", os.path.join(ROOT, "models"))
DATA = os.path.join(ROOT, "tests", "data", "chat_template")
SHARED = os.environ.get("DUET_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))


with open(os.path.join(DATA, "templates.json"), encoding="utf-8") as f:
    MANIFEST = json.load(f)

SAMPLE = ["single_user", "system_multi_turn", "non_ascii", "special_chars", "think_in_content", "tool_call_dict_args",
          "parallel_tool_calls", "starts_with_assistant", "thinking_disabled", "alt_two_turns_no_gen"]


def run_duet(args, messages, tools, tmp_path):
    mpath = tmp_path / "messages.json"
    mpath.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    cmd = [DUET, "template", "--messages", str(mpath), "--now", str(NOW_EPOCH_S)] + args
    if tools is not None:
        tpath = tmp_path / "tools.json"
        tpath.write_text(json.dumps(tools, ensure_ascii=False), encoding="utf-8")
        cmd += ["--tools", str(tpath)]
    return subprocess.run(cmd, capture_output=True, timeout=60)


def expected(source, ctx):
    return ref.outcome(make_env(), source, ctx)


def check(got, want, case_id):
    if "output" in want:
        assert got.returncode == 0, (case_id, got.stderr.decode())
        assert got.stdout.decode("utf-8") == want["output"], case_id
    else:
        assert got.returncode == 1, (case_id, got.stdout.decode())
        if "raised" in want:
            assert want["raised"] in got.stderr.decode("utf-8"), case_id


def cli_args(tmpl, case):
    args = ["--template-file", os.path.join(DATA, "templates", tmpl["file"])]
    if tmpl.get("bos_token") is not None:
        args += ["--bos", tmpl["bos_token"]]
    if tmpl.get("eos_token") is not None:
        args += ["--eos", tmpl["eos_token"]]
    if not case["add_generation_prompt"]:
        args.append("--no-gen-prompt")
    for k, v in case["extra"].items():
        args += ["--var", f"{k}={json.dumps(v)}"]
    return args


@pytest.mark.parametrize("tmpl", MANIFEST, ids=[t["name"] for t in MANIFEST])
def test_template_files_match_jinja2(tmpl, tmp_path):
    with open(os.path.join(DATA, "templates", tmpl["file"]), encoding="utf-8", newline="") as f:
        source = f.read()
    cases = [c for c in ref.CASES if c["id"] in SAMPLE]
    assert len(cases) >= 8
    for case in cases:
        want = expected(source, ref.context_for(tmpl, case))
        got = run_duet(cli_args(tmpl, case), case["messages"], case["tools"], tmp_path)
        check(got, want, case["id"])


def smollm2_gguf():
    path = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else ref.find_smollm2_gguf()


def test_gguf_chat_template_matches_jinja2(tmp_path):
    path = smollm2_gguf()
    if path is None:
        pytest.fail("SmolLM2 GGUF not available")
    import gguf  # noqa: F401
    source, bos, eos = ref.gguf_chat_template(path)
    tmpl = {"bos_token": bos, "eos_token": eos}
    for case in ref.CASES[:12]:
        want = expected(source, ref.context_for(tmpl, case))
        args = ["-m", path] + ([] if case["add_generation_prompt"] else ["--no-gen-prompt"])
        for k, v in case["extra"].items():
            args += ["--var", f"{k}={json.dumps(v)}"]
        got = run_duet(args, case["messages"], case["tools"], tmp_path)
        check(got, want, case["id"])


@pytest.mark.parametrize("name", ["qwen3", "llama3", "deepseek_v3"])
def test_tokenizer_config_matches_jinja2(name, tmp_path):
    path = os.path.join(SHARED, "tokenizers", name, "tokenizer_config.json")
    if not os.path.exists(path):
        pytest.fail(f"no {path}")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    tmpl = {"bos_token": ref.token_content(cfg.get("bos_token")), "eos_token": ref.token_content(cfg.get("eos_token"))}
    for case in [c for c in ref.CASES if c["id"] in ("system_multi_turn", "tool_call_string_args", "thinking_disabled")]:
        want = expected(cfg["chat_template"], ref.context_for(tmpl, case))
        args = ["--tokenizer-config", path] + ([] if case["add_generation_prompt"] else ["--no-gen-prompt"])
        for k, v in case["extra"].items():
            args += ["--var", f"{k}={json.dumps(v)}"]
        got = run_duet(args, case["messages"], case["tools"], tmp_path)
        check(got, want, case["id"])


def test_request_object_and_errors(tmp_path):
    request = {"messages": [{"role": "user", "content": "hi"}], "tools": ref.TOOLS}
    path = tmp_path / "req.json"
    path.write_text(json.dumps(request), encoding="utf-8")
    qwen = os.path.join(DATA, "templates", "qwen3.jinja")
    got = subprocess.run([DUET, "template", "--template-file", qwen, "--messages", str(path)], capture_output=True,
                         timeout=60)
    assert got.returncode == 0, got.stderr.decode()
    assert "get_weather" in got.stdout.decode()
    bad = subprocess.run([DUET, "template", "--template-file", qwen, "--messages", str(tmp_path / "missing.json")],
                         capture_output=True, timeout=60)
    assert bad.returncode == 1
    usage = subprocess.run([DUET, "template", "--messages", str(path)], capture_output=True, timeout=60)
    assert usage.returncode == 2
