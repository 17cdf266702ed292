"""A plan that finds GPUs in ``nvidia-smi`` and none in torch refuses in one line naming both (a driver older than the
torch build, a CPU build on a GPU box) where the run would use GPUs, instead of planning the pool on the CPU; a run
that needs none (the tiny pool) is planned on the CPU with a warning; ``--gpus 0`` and a ``CUDA_VISIBLE_DEVICES`` that
names no device ask for a CPU run on purpose."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

from mutualrl.host.nvidia_smi import (
    DriverReport,
    hides_gpus,
    parse_gpu_list,
    parse_header,
    parse_uuids,
    read_driver,
    torch_misses_gpus,
)
from mutualrl.launch.plan import detect
from mutualrl.launch.run import TrainOptions, resolve_config
from plan_helpers import dry_run
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
                          f"but torch {torch_version} sees none and the run needs GPUs (vLLM, DeepSpeed zero3)",
                          "--gpus 0 (or CUDA_VISIBLE_DEVICES=")
    assert not (gpu_box / "run").exists()


def test_a_cuda_13_build_is_refused_with_the_driver_it_needs(gpu_box, monkeypatch, capsys):
    monkeypatch.setattr(detect, "torch_build", lambda: ("2.13.0", "13.0"))
    monkeypatch.setattr(detect, "detect_gpus", lambda: 0)
    code, err = run_cli(["train", "--pool", "2qwen", "--dry-run", "-o", "run"], capsys)
    assert_one_line_error(code, err, "the torch build is for CUDA 13.0, which needs driver R580 or newer")


def test_cuda_visible_devices_empty_still_plans_on_the_cpu(gpu_box, monkeypatch):
    paper, _ = resolve_config(TrainOptions(pool="2qwen", dry_run=True))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect.refuse_unseen_gpus(paper) is None  # no refusal, no warning: a CPU run asked for on purpose
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "NoDevFiles")  # what some schedulers set: hides them, and is named
    assert detect.refuse_unseen_gpus(paper) == (
        "CUDA_VISIBLE_DEVICES=NoDevFiles hides the 8 GPUs (driver 550.54.15, CUDA 12.4) nvidia-smi lists: the run is "
        "planned on the CPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(detect.PlacementError, match="nvidia-smi lists 8 GPUs"):
        detect.refuse_unseen_gpus(paper)


def test_a_cuda_visible_devices_hides_every_gpu_exactly_when_its_first_entry_names_none():
    listing = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-8932f937-d72c-4106-c12f-20bd9faed9f6)\n"
               "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1111aaaa-d72c-4106-c12f-20bd9faed9f6)\n")
    report = DriverReport(parse_gpu_list(listing), "550.54.15", "12.4", parse_uuids(listing))
    assert report.uuids == ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "GPU-1111aaaa-d72c-4106-c12f-20bd9faed9f6")
    hidden = ["", " ", "-1", "-1,0", "NoDevFiles", "2", "GPU-deadbeef", "cpu"]
    shown = ["0", "1", "1,0", "0,-1", " 0 ", "GPU-8932f937", "GPU-1111aaaa-d72c-4106-c12f-20bd9faed9f6,0"]
    assert [value for value in hidden + shown if hides_gpus(report, {"CUDA_VISIBLE_DEVICES": value})] == hidden
    assert not hides_gpus(report, {})  # unset: every GPU is visible
    assert not hides_gpus(DriverReport(["A100"], None, None), {"CUDA_VISIBLE_DEVICES": "GPU-any"})  # no UUIDs: trusted


def test_a_run_that_needs_no_gpu_is_planned_on_the_cpu_with_a_warning(gpu_box, monkeypatch):
    """The tiny pool (no vLLM, DeepSpeed, device map or --gpus) on a box whose torch sees none of nvidia-smi's GPUs."""
    monkeypatch.setattr(detect, "torch_build", lambda: ("2.13.0+cpu", None))
    monkeypatch.setattr(detect, "detect_gpus", lambda: 0)
    plan = dry_run("tiny", run_dir=gpu_box / "run")
    assert plan.placement.policies[0].device_type == "cpu"
    said = [w for w in plan.warnings if "nvidia-smi lists" in w]
    assert len(said) == 1 and said[0].startswith("planned on the CPU: nvidia-smi lists 8 GPUs") and "--gpus 0" in said[0]
    tiny, _ = resolve_config(TrainOptions(pool="tiny"))
    with pytest.raises(detect.PlacementError, match=r"sees none and the run needs GPUs \(--gpus 2\)"):
        detect.this_node(tiny, 2, False, None, None, None, None)  # a real (not simulated) node asked for 2 GPUs
    paper, _ = resolve_config(TrainOptions(pool="2qwen"))
    assert detect.this_node(paper, 0, False, None, None, None, None).warning is None  # --gpus 0: the CPU on purpose
