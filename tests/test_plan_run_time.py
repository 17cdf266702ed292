"""Every GPU plan estimates its run's time (FLOPs a token, the card's bf16 peak, stated efficiency ranges) and shows the
step measured where its run folder has one; ``sweep --slurm`` asks for the time and CPUs that estimate needs, or says
where the values given cannot fit it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from mutualrl.launch.plan.launch_plan import LaunchPlan
from mutualrl.launch.plan.render import render_plan
from mutualrl.launch.plan.run_time import (
    GENERATE_EFFICIENCY,
    TRAIN_EFFICIENCY,
    bf16_peak_tflops,
    measured_step_s,
    policy_time,
)
from mutualrl.launch.sweep.slurm import SlurmOptions
from mutualrl.launch.sweep.task_needs import fit_time_and_cpus
from mutualrl.run_folder import RunPaths
from plan_helpers import dry_run


def test_the_cards_peak_is_matched_longest_name_first():
    assert bf16_peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert bf16_peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert bf16_peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0 and bf16_peak_tflops("NVIDIA A10") == 125.0
    assert bf16_peak_tflops("NVIDIA L40S") == 362.0 and bf16_peak_tflops("NVIDIA GH200 480GB") == 989.0
    assert bf16_peak_tflops("Tesla T4") is None


def test_a_steps_flops_and_seconds_by_hand():
    """1e9 parameters, 100 sequences of 1,000 tokens: generating 2·P·T = 2e14 FLOPs; training with gradient
    checkpointing (8·P), the reference (beta > 0) and the old log-probabilities (4 micro-batches, GA 1): 12·P·T."""
    grpo = {"gradient_checkpointing": True, "beta": 0.001, "steps_per_generation": 4, "gradient_accumulation_steps": 1}
    step = policy_time("p", grpo, gpus=2, params=1e9, sequences=100, sequence_tokens=1000, peak_tflops=1000.0,
                       optimizer_steps_per_generation=4, measured_s=None)
    assert step.generate_flops == pytest.approx(2e14) and step.train_flops == pytest.approx(12e14)
    speed = 2 * 1000e12
    assert step.low_s == pytest.approx(2e14 / (speed * GENERATE_EFFICIENCY[1]) + 12e14 / (speed * TRAIN_EFFICIENCY[1]))
    assert step.high_s == pytest.approx(2e14 / (speed * GENERATE_EFFICIENCY[0]) + 12e14 / (speed * TRAIN_EFFICIENCY[0]))
    plain = policy_time("p", {"beta": 0.0}, 2, 1e9, 100, 1000, 1000.0, 1, None)
    assert plain.train_flops == pytest.approx(6e14)  # forward and backward only


def test_the_paper_pools_plan_prints_its_estimate_and_keeps_it_in_its_json(tmp_path):
    plan = dry_run("2qwen", gpus=8, run_dir=tmp_path / "run")
    estimate = plan.run_time
    assert estimate is not None and estimate.assumed_gpu and estimate.gpu == "H100"
    assert estimate.generations == 105  # 15 epochs x 7 paper steps of MATH's 7,500 train prompts
    assert estimate.sequence_tokens == 1024 + 3072
    assert [p.sequences for p in estimate.policies] == [5120, 5120]  # 1,024 prompts x K = 5
    low, high = estimate.run_s
    assert 0 < low < high and high == pytest.approx(105 * estimate.step_s[1])
    console = Console(record=True, width=400)
    render_plan(plan, console)
    text = console.export_text()
    assert "Run time (estimate, on H100 (assumed: a simulated node), 989 TFLOPS bf16 a GPU at 15-40 % training" in text
    assert "105 steps:" in text
    assert LaunchPlan.from_json(json.loads(json.dumps(plan.to_json()))).run_time == estimate
    h200 = dry_run("2qwen", gpus=8, run_dir=tmp_path / "run", gpu_memory_gib=141.0).run_time
    assert h200.gpu == "H200" and h200.assumed_gpu  # --gpu-memory 141: costed as the card of that size


def test_a_cpu_plan_has_no_estimate(tmp_path):
    assert dry_run("tiny", run_dir=tmp_path / "run").run_time is None


def test_the_measured_step_comes_from_the_run_folders_metrics(tmp_path):
    paths, name = RunPaths(tmp_path), "qwen2.5-math-1.5b"
    assert measured_step_s(paths, name) is None
    rows = [{"kind": "train", "policy": name, "step": step, "time": 1000.0 + 30.0 * step} for step in (4, 8, 12)]
    paths.policy_metrics(name).parent.mkdir(parents=True)
    paths.policy_metrics(name).write_text("".join(json.dumps(row) + "\n" for row in rows) + "{cut sho")
    assert measured_step_s(paths, name) == pytest.approx(30.0)
    plan = dry_run("2qwen", gpus=8, run_dir=tmp_path)  # the plan of a run whose first policy measured 30 s a step
    first = plan.run_time.policies[0]
    assert first.measured_s == pytest.approx(30.0) and first.policy == plan.policies[0].name


def _plans(run_s: tuple[float, float] | None, ranks: int) -> list[SimpleNamespace]:
    policy = SimpleNamespace(placement=SimpleNamespace(device_type="cuda", num_processes=ranks))
    run_time = None if run_s is None else SimpleNamespace(run_s=run_s)
    return [SimpleNamespace(run_time=run_time, policies=[policy, policy])]


def test_slurm_time_and_cpus_follow_the_plan_and_given_values_below_it_are_said():
    options, notes = fit_time_and_cpus(SlurmOptions(), _plans((3600.0, 36000.0), 4))
    assert (options.time_min, options.cpus_per_task, notes) == (660, 32, [])  # 10 h + 10 %; 8 ranks x 4
    options, notes = fit_time_and_cpus(SlurmOptions(time_min=240, cpus_per_task=4), _plans((3600.0, 36000.0), 4))
    assert (options.time_min, options.cpus_per_task) == (240, 4) and len(notes) == 2
    assert notes[0].startswith("--slurm-time 240: a run may need up to 660 min")
    assert notes[1].startswith("--slurm-cpus 4: a run's 8 GPU ranks keep about 32 cores busy")
    options, notes = fit_time_and_cpus(SlurmOptions(), [SimpleNamespace(run_time=None, policies=[])])
    assert (options.time_min, options.cpus_per_task, notes) == (240, 4, [])  # a CPU pool: the defaults
