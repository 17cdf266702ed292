"""A plan that finds GPUs in ``nvidia-smi`` and none in torch refuses in one line naming both (a driver older than the
torch build, a CPU build on a GPU box), instead of planning the pool on the CPU; ``CUDA_VISIBLE_DEVICES=`` still asks
for a CPU run on purpose."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

from mutualrl.host.nvidia_smi import DriverReport, parse_gpu_list, parse_header, read_driver, torch_misses_gpus
from mutualrl.launch.plan import detect
from test_cli_errors import assert_one_line_error, run_cli

LISTING = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd)\n"
                  for i in range(8))
HEADER = """Sun Nov 29 13:00:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def stand_in_nvidia_smi(folder: Path) -> Path:
    """An ``nvidia-smi`` that lists 8 H100s on a CUDA 12.4 driver (``-L``: the list; no argument: the header)."""
    folder.mkdir(exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = -L ]; then cat <<'EOF'\n{LISTING}EOF\n"
                      f"else cat <<'EOF'\n{HEADER}EOF\nfi\n")
    script.chmod(0o755)
    return folder


def test_nvidia_smis_list_and_header_are_read():
    assert parse_gpu_list(LISTING) == ["NVIDIA H100 80GB HBM3"] * 8
    assert parse_header(HEADER) == ("550.54.15", "12.4")
    assert parse_header("no header") == (None, None)


def test_a_cuda_13_torch_on_a_cuda_12_driver_is_told_the_driver_it_needs():
    report = DriverReport(["NVIDIA H100 80GB HBM3"] * 8, "550.54.15", "12.4")
    line = torch_misses_gpus(report, "2.13.0", "13.0")
    assert line is not None and line.startswith(
        "nvidia-smi lists 8 GPUs (driver 550.54.15, CUDA 12.4) but torch 2.13.0 sees none: the torch build is for "
        "CUDA 13.0, which needs driver R580 or newer")
    assert "built for CUDA 12.4 from PyTorch's own index" in line
    cpu = torch_misses_gpus(report, "2.13.0+cpu", None)
    assert cpu is not None and "it is a CPU build" in cpu and "CUDA 12.4 or older" in cpu
    assert torch_misses_gpus(DriverReport([], "550.54.15", "12.4"), "2.13.0", "13.0") is None
    assert torch_misses_gpus(None, "2.13.0", "13.0") is None  # no nvidia-smi: a CPU box, nothing to say


@pytest.fixture()
def gpu_box(tmp_path, monkeypatch):
    """This CPU box with a stand-in ``nvidia-smi`` first on PATH and no CUDA_VISIBLE_DEVICES."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{stand_in_nvidia_smi(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


def test_the_stand_in_is_read_from_path(gpu_box):
    report = read_driver()
    assert report is not None and report.describe() == "8 GPUs (driver 550.54.15, CUDA 12.4)"


def test_the_paper_pools_dry_run_on_a_cuda_12_driver_with_a_torch_that_sees_no_gpu_exits_in_one_line(gpu_box, capsys):
    torch_version = importlib.metadata.version("torch")
    code, err = run_cli(["train", "--pool", "2qwen", "--dry-run", "-o", "run"], capsys)
    assert_one_line_error(code, err, "nvidia-smi lists 8 GPUs (driver 550.54.15, CUDA 12.4)",
                          f"but torch {torch_version} sees none", "CUDA_VISIBLE_DEVICES=")
    assert not (gpu_box / "run").exists()


def test_a_cuda_13_build_is_refused_with_the_driver_it_needs(gpu_box, monkeypatch, capsys):
    monkeypatch.setattr(detect, "torch_build", lambda: ("2.13.0", "13.0"))
    monkeypatch.setattr(detect, "detect_gpus", lambda: 0)
    code, err = run_cli(["train", "--pool", "2qwen", "--dry-run", "-o", "run"], capsys)
    assert_one_line_error(code, err, "the torch build is for CUDA 13.0, which needs driver R580 or newer")


def test_cuda_visible_devices_empty_still_plans_on_the_cpu(gpu_box, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    detect.refuse_unseen_gpus()  # no refusal: a CPU run asked for on purpose
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(detect.PlacementError, match="nvidia-smi lists 8 GPUs"):
        detect.refuse_unseen_gpus()
