"""Admission check: a CPU pool the machine cannot hold is refused before anything starts, with the numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import child_env
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.checks import MAX_PROCESSES_PER_CORE, PROCESS_BASELINE_GIB, admission_check
from mutualrl.launch.plan.mwra import Placement, PolicyPlacement


def cpu_placement(policies: int, processes_each: int = 1, cores: int = 2) -> Placement:
    placed = [PolicyPlacement(name=f"p{i}", device_type="cpu", devices=(), num_processes=processes_each,
                              cpu_threads=1) for i in range(policies)]
    return Placement(policies=placed, gpus=0, cpu_cores=cores, explicit=False)


def test_processes_per_core_by_hand():
    assert admission_check(cpu_placement(2, processes_each=2), 0.1, 24.0, force=False) == []  # 4 on 2 cores
    assert admission_check(cpu_placement(MAX_PROCESSES_PER_CORE * 2), 0.1, 24.0, force=False) == []  # the limit
    with pytest.raises(PlacementError, match=r"9 policy processes on 2 CPU cores"):
        admission_check(cpu_placement(9), 0.1, 24.0, force=False)
    warned = admission_check(cpu_placement(50), 0.1, 24.0, force=True)
    assert len(warned) == 1 and "50 policy processes" in warned[0] and "--force" in warned[0]


def test_ram_with_each_process_baseline_by_hand():
    need = 3.0 + 4 * PROCESS_BASELINE_GIB  # 4.2 GiB
    assert admission_check(cpu_placement(4), 3.0, need + 0.01, force=False) == []
    with pytest.raises(PlacementError, match=r"about 4\.2 GiB of RAM needed .* this machine has 4\.0 GiB"):
        admission_check(cpu_placement(4), 3.0, 4.0, force=False)


def test_gpu_placements_are_left_to_the_gpu_memory_check():
    gpu = Placement(policies=[PolicyPlacement("a", "cuda", (0,), 1, 1)], gpus=1, cpu_cores=1, explicit=False)
    assert admission_check(gpu, 1e6, 1.0, force=False) == []


@pytest.mark.slow  # over 5 s on the 2-core box: the full suite, not the fast tier
def test_fifty_policies_on_this_box_are_refused_in_one_line_and_nothing_is_written(tmp_path):
    policies = "\n".join(f"    - {{name: p{i}, model: 'builtin:tiny-bpe'}}" for i in range(50))
    recipe = tmp_path / "fifty.yaml"
    tiny = Path(__file__).resolve().parents[1] / "recipes" / "pools" / "tiny.yaml"
    recipe.write_text(f"extends: {tiny}\npool:\n  name: fifty\n  policies:\n{policies}\n")
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--pool", str(recipe), "-o", str(run),
                           "--set", "launch.threads_per_policy=1"], env=child_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "cannot hold the pool" in done.stderr and "--force" in done.stderr and "Traceback" not in done.stderr
    assert not (run / "logs").exists() and not (run / "see").exists()
