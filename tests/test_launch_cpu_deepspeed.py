"""End to end: the launch plan's CPU DeepSpeed ZeRO-3 recipe runs vanilla TRL GRPO for real.

Two policies, each its own subprocess, run 2 GRPO steps of a tiny random Llama (hidden 32,
2 layers, real Llama-2 SentencePiece vocabulary) at the same time; both must exit 0, be wrapped
by a ZeRO-3 DeepSpeedEngine and change their weights. The first runs with exactly the environment
and DeepSpeed config the CPU plan generates; the second pushes the GPU-style accelerate config
(distributed_type DEEPSPEED, gpu_ids, deepspeed_config_file) through the real ``accelerate launch``
on this CPU machine, to show accelerate accepts the file and the DeepSpeed JSON it points to.
(They were two tests with three DeepSpeed ranks; one run of two ranks carries both checks.)

The first run compiles DeepSpeed's CPU communication op (about a minute on 2 cores,
cached in ``<mutualrl cache>/torch_extensions``); later runs take ~15 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import free_ports
from tiny_models import build_tiny_lm

from mutualrl.config.loader import load_run_config
from mutualrl.launch.plan.commands import WORKER_MODULE
from mutualrl.launch.plan.launch_plan import make_launch_plan

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).with_name("_grpo_steps.py")


def write_recipe(tmp_path: Path, models: dict[str, Path], port: int) -> Path:
    policies = "\n".join(f"    - {{name: {name}, model: '{folder}'}}" for name, folder in models.items())
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"""
pool:
  name: cpu-ds
  policies:
{policies}
regime: {{name: standalone}}
batch: {{prompts_per_step: 4, mini_batches_per_step: 2, micro_batch_prompts_per_device: 1}}
grpo:
  num_generations: 4
  max_completion_length: 8
  max_steps: 2
  learning_rate: 1.0e-2
  beta: 0.001
  bf16: true            # a GPU recipe's setting: the plan must turn it off on the CPU
  report_to: []
  logging_steps: 1
  seed: 7
launch: {{deepspeed: zero3, main_process_port: {port}}}
"""
    )
    return recipe


def run_spec(spec, script_argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, **spec.env}
    log = open(spec.log_path, "w")  # noqa: SIM115 - closed by the caller via the process
    return subprocess.Popen(script_argv, env=env, cwd=spec.cwd, stdout=log, stderr=subprocess.STDOUT)


def test_cpu_zero3_plan_and_gpu_style_accelerate_launch_train_two_policies_concurrently(tmp_path):
    models = {name: build_tiny_lm("mistral-sp", tmp_path / name, seed=i) for i, name in enumerate(["llama-a", "llama-b"])}
    config = load_run_config(str(write_recipe(tmp_path, models, free_ports(len(models))))).config
    run_dir = tmp_path / "run"
    plan = make_launch_plan(config, run_dir, gpus=0, cpu_cores=2)
    # Simulate GPUs so the GPU branch (accelerate launch, gpu_ids, DEEPSPEED yaml) is planned for llama-b...
    gpu_policy = make_launch_plan(config, run_dir, gpus=len(models), simulate=True,
                                  parent_visible_devices="").policy("llama-b")
    assert gpu_policy.accelerate_config["distributed_type"] == "DEEPSPEED"
    # ...but this machine has no GPU: keep the YAML and JSON, train in fp32 on the CPU.
    plan.policy("llama-b").accelerate_config = gpu_policy.accelerate_config
    plan.write()

    cpu_spec = plan.policy("llama-a").launch
    # The real worker is the lead's module; run the stand-in with the same argv tail and env.
    assert cpu_spec.argv[1:3] == ["-m", WORKER_MODULE]
    assert all(spec.env["ACCELERATE_USE_DEEPSPEED"] == "true" for spec in plan.specs)
    gpu_spec = gpu_policy.launch
    assert gpu_spec.argv[1:3] == ["-m", "mutualrl.host.accelerate_launch"]
    worker_at = gpu_spec.argv.index("-m", 3)
    gpu_argv = [*gpu_spec.argv[:worker_at], str(SCRIPT), *gpu_spec.argv[worker_at + 2 :]]
    gpu_env = {k: v for k, v in gpu_spec.env.items() if k != "CUDA_VISIBLE_DEVICES"}
    gpu_env["DS_ACCELERATOR"] = "cpu"
    procs = {"llama-a": (run_spec(cpu_spec, [sys.executable, str(SCRIPT), *cpu_spec.argv[3:]]), cpu_spec),
             "llama-b": (run_spec(type(gpu_spec)(gpu_spec.policy, gpu_argv, gpu_env, gpu_spec.cwd, gpu_spec.log_path),
                                  gpu_argv), gpu_spec)}
    for name, (proc, spec) in procs.items():
        rc = proc.wait(timeout=900)
        log = Path(spec.log_path).read_text()
        assert rc == 0, f"{name} exited {rc}:\n{log[-4000:]}"

    results = {name: json.loads((run_dir / f"result-{name}.json").read_text()) for name in models}
    for result in results.values():
        assert result["engine"] == "DeepSpeedEngine"
        assert result["zero_stage"] == 3
        assert result["device"].startswith("cpu")
        assert result["bf16"] is False and result["use_vllm"] is False
        assert result["global_step"] == 2
        assert result["changed"] == result["params"] > 0
        # TRL accepted the derived fields: 4 prompts x K=4 per generation, 2 updates of GA 2.
        assert result["generation_batch_size"] == 16
        assert (result["per_device_train_batch_size"], result["gradient_accumulation_steps"]) == (4, 2)
        assert result["steps_per_generation"] == 4
    result = results["llama-a"]  # the CPU plan's own environment (llama-b's threads are the GPU plan's)
    assert result["omp_threads"] == 1
    # Each policy of the CPU plan rendezvouses on a port of its own (llama-a's rank ran on its own while
    # llama-b's ran on the GPU plan's).
    assert result["env"]["MASTER_PORT"] == cpu_spec.env["MASTER_PORT"]
    assert len({spec.env["MASTER_PORT"] for spec in plan.specs}) == 2
