"""Shared fixtures for the golden tests: paths to the duet binary, the models and scratch space."""
import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("DUET_SOURCE_DIR", Path(__file__).resolve().parents[2]))
DUET = os.environ.get("DUET_BIN", str(SOURCE_DIR / "build" / "duet"))
MODELS = Path(os.environ.get("DUET_MODELS_DIR", SOURCE_DIR / "models"))
REAL_MODELS = ["gemma-3-270m-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"]


def duet(*args, check=True, **kw):
    """Runs the duet binary; returns the CompletedProcess (text mode)."""
    p = subprocess.run([DUET, *map(str, args)], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"duet {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


@pytest.fixture
def real_model():
    def get(name):
        path = MODELS / name
        assert path.exists(), f"{path} missing: run scripts/setup.sh"
        return path
    return get
