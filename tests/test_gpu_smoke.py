"""The GPU smoke check: a clear skip on CPU, and every training command it would run is valid."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_helpers import BENCHMARKS, load_benchmark
from mutualrl.cli.main import run

SCRIPT = BENCHMARKS / "gpu_smoke.py"


def load():
    return load_benchmark("gpu_smoke")


def test_without_a_gpu_it_says_skipped_and_exits_0():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["skipped"] == "no GPU"


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_every_training_check_plans_on_a_simulated_node(gpus, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    plan = load().checks(tmp_path, gpus, steps=3, learning=True)
    assert [name for name, _ in plan][:3] == ["two-policies-transformers", "two-policies-vllm-colocate", "zero3-2-ranks"]
    assert {name for name, _ in plan} <= set(load().COVERED_ON_CPU)  # each check says what the CPU suite covers
    trains = [command for _, command in plan if isinstance(command, list) and "train" in command]
    assert len(trains) >= 2
    for command in trains:
        argv = command[command.index("train"):]
        assert run([*argv, "--dry-run", "--gpus", str(gpus)]) == 0, capsys.readouterr().err
