"""nvidia-smi's output read into the driver's CUDA, a build's CUDA read from its version or requirements, and the
one-line refusal of builds newer than the driver (mutualrl.host.cuda_driver)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from mutualrl.host.cuda_driver import (NvidiaDriver, cuda_major_needed, driver_refusal, minimum_driver,
                                       parse_nvidia_smi, setup_refusal)

TESTS = Path(__file__).resolve().parent
RECORD = json.loads((TESTS.parent / "requirements-gpu.json").read_text())


def standin_table(driver: str, cuda: str) -> str:
    """The stand-in's table (tests/standin_gpu/nvidia-smi), laid out as nvidia-smi 580 lays it out."""
    env = {"STANDIN_DRIVER": driver, "STANDIN_CUDA": cuda, "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", str(TESTS / "standin_gpu" / "nvidia-smi")], capture_output=True, text=True,
                          check=True, env=env).stdout


def test_the_table_gives_the_gpus_the_driver_and_its_newest_cuda():
    table = standin_table("550.54.15", "12.4")
    assert parse_nvidia_smi(table) == NvidiaDriver(gpus=1, driver_version="550.54.15", cuda_version=(12, 4))
    row = next(line for line in table.splitlines() if "NVIDIA H200" in line)
    eight = table.replace(row, "\n".join(row.replace("   0  ", f"   {i}  ") for i in range(8)))
    assert parse_nvidia_smi(eight).gpus == 8  # the processes table's rows (no Bus-Id) are not GPUs


def test_the_list_and_the_query_forms_count_gpus_and_the_driver_alone_gives_its_cuda():
    listed = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\n" for i in range(4))
    assert parse_nvidia_smi(listed) == NvidiaDriver(4, None, None)
    queried = parse_nvidia_smi("570.86.15\n570.86.15\n")
    assert (queried.gpus, queried.driver_version, queried.cuda_major) == (2, "570.86.15", 12)
    assert NvidiaDriver(1, "580.95.05", None).cuda_major == 13 and NvidiaDriver(1, "470.1", None).cuda_major == 11
    assert NvidiaDriver(1, "418.1", None).cuda_major is None
    assert parse_nvidia_smi("") == NvidiaDriver(0, None, None)


def test_a_builds_cuda_comes_from_its_local_label_or_its_requirements():
    assert cuda_major_needed("2.13.0+cu126", ["nvidia-cublas-cu13"]) == 12  # the label wins: the build says it
    assert cuda_major_needed("2.13.0+cu118", []) == 11
    assert cuda_major_needed("2.13.0+cpu", ["nvidia-cublas-cu13"]) is None
    assert cuda_major_needed("2.5.1", ['nvidia-cublas-cu12==12.4.5.8; platform_system == "Linux"']) == 12
    assert cuda_major_needed("0.1", ["cuda-toolkit[cublas,cudart]==13.0.3; platform_system == 'Linux'"]) == 13
    assert cuda_major_needed("0.1", ["humming-kernels[cu13]==0.1.12", "nvidia-ml-py", "cuda-bindings<14"]) == 13
    assert cuda_major_needed("2.13.0", ["filelock", "sympy>=1.13.3"]) is None


def test_the_gpu_sets_torch_and_vllm_are_cuda_13_builds_needing_r580():
    """Read from the requirements pip recorded for the GPU set (requirements-gpu.json)."""
    for name in ("torch", "vllm"):
        dist = RECORD["packages"][name]
        assert cuda_major_needed(dist["version"], dist["requires_dist"]) == 13, name
    assert minimum_driver(13) == 580 and minimum_driver(12) == 525 and minimum_driver(99) is None


def test_a_driver_older_than_a_build_is_refused_in_one_line_and_a_new_enough_one_is_not():
    cuda_12 = NvidiaDriver(8, "550.54.15", (12, 4))
    builds = {"torch": ("2.13.0", 13, False), "vllm": ("0.30.0", 13, False)}
    said = driver_refusal(cuda_12, builds)
    assert said is not None and "\n" not in said
    assert "torch 2.13.0 and the GPU set's vllm 0.30.0 are CUDA 13 builds" in said and "R580" in said
    assert driver_refusal(NvidiaDriver(8, "580.95.05", (13, 0)), builds) is None
    assert driver_refusal(NvidiaDriver(8, None, None), builds) is None  # nothing to compare: not refused
    mixed = driver_refusal(cuda_12, {"torch": ("2.13.0+cu126", 12, True), "vllm": ("0.30.0", 13, False)})
    assert mixed.startswith("the GPU set's vllm 0.30.0 is a CUDA 13 build, which needs") and "torch" not in \
        mixed.split(",")[0]
    assert driver_refusal(cuda_12, {"torch": ("2.13.0+cu126", 12, True)}) is None


def test_the_set_ups_check_counts_an_installed_build_instead_of_the_records(monkeypatch):
    from mutualrl.host import cuda_driver

    table = standin_table("550.54.15", "12.4")
    installed: dict[str, tuple[str, list[str]]] = {}
    monkeypatch.setattr(cuda_driver, "installed_build", installed.get)
    said = setup_refusal(table, RECORD, with_vllm=True)
    assert said is not None and said.startswith("the GPU set's torch 2.13.0 and the GPU set's vllm 0.30.0 are CUDA 13")
    installed["torch"] = ("2.13.0+cu126", [])
    assert setup_refusal(table, RECORD, with_vllm=False) is None
    assert setup_refusal(table, RECORD, with_vllm=True).startswith("the GPU set's vllm 0.30.0 is a CUDA 13 build")
    installed["torch"] = ("2.13.0", RECORD["packages"]["torch"]["requires_dist"])  # the CUDA 13 build, installed
    assert setup_refusal(table, RECORD, with_vllm=False).startswith("the installed torch 2.13.0 is a CUDA 13 build")
    assert setup_refusal(standin_table("580.95.05", "13.0"), RECORD, with_vllm=True) is None
