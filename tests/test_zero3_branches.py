"""ZeRO-3-only branches of the real trainer (issue 38), in a real DeepSpeed ZeRO-3 rank on the CPU.

One policy, planned by ``make_launch_plan`` for ZeRO-3 on the CPU and run with exactly that environment, as
tests/test_launch_cpu_deepspeed.py does; tests/_zero3_branches.py does the work:

- a round skipped under ``see.catch_up`` advances the learning-rate schedule under DeepSpeed too (there the
  Trainer's scheduler step is a no-op; the engine steps it in ``backward``, which a skipped round never calls);
- ``--resume`` of a run stopped after its last checkpoint loads that checkpoint into weights that ``zero.Init``
  partitioned to shape [0] (``worker.finish_from_checkpoint``).
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
from mutualrl.launch.plan.launch_plan import make_launch_plan

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).with_name("_zero3_branches.py")


@pytest.fixture(scope="module")
def zero3_result(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("zero3")
    model = build_tiny_lm("mistral-sp", tmp_path / "llama", seed=3)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"""
pool:
  name: zero3
  policies:
    - {{name: llama, model: '{model}'}}
regime: {{name: standalone}}
batch: {{prompts_per_step: 4, mini_batches_per_step: 2, micro_batch_prompts_per_device: 1}}
grpo: {{num_generations: 4, max_completion_length: 6, beta: 0.0, report_to: [], seed: 7}}
launch: {{deepspeed: zero3, main_process_port: {free_ports(1)}}}
""")
    run_dir = tmp_path / "run"
    plan = make_launch_plan(load_run_config(str(recipe)).config, run_dir, gpus=0, cpu_cores=2)
    plan.write()
    spec = plan.specs[0]
    assert spec.env["ACCELERATE_USE_DEEPSPEED"] == "true"
    run(spec)
    # A DeepSpeed file with its own scheduler: DeepSpeed's engine steps the schedule (in backward), the Trainer's
    # scheduler step is a no-op (accelerate's DeepSpeedSchedulerWrapper).
    own = {**plan.specs[0].env}
    with_scheduler = tmp_path / "ds-scheduler.json"
    config = json.loads(Path(own["ACCELERATE_DEEPSPEED_CONFIG_FILE"]).read_text())
    config["scheduler"] = {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": "auto",
                                                               "warmup_num_steps": "auto", "total_num_steps": "auto"}}
    with_scheduler.write_text(json.dumps(config))
    run(spec, {"ACCELERATE_DEEPSPEED_CONFIG_FILE": str(with_scheduler)}, "--skip-only")
    return {**json.loads((run_dir / "zero3-branches.json").read_text()),
            "skip_ds_scheduler": json.loads((run_dir / "zero3-skip.json").read_text())["skip"]}


def run(spec, env: dict[str, str] | None = None, *extra: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *spec.argv[3:], *extra],
                          env={**os.environ, **spec.env, **(env or {})}, cwd=spec.cwd, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_zero3_branches_skipped_rounds_advance_the_learning_rate_and_a_finish_loads_the_checkpoint(zero3_result):
    """One test for the fixture's two DeepSpeed runs: tests of one module fixture were spread over both xdist
    workers (each then ran the fixture, ~55 s), so its checks are one test's.

    Skipped rounds: mutualrl's own DeepSpeed file has no scheduler (transformers builds and steps one itself); a
    user's file with one makes DeepSpeed's engine step it, which a skipped round must do by hand."""
    for which in ("skip", "skip_ds_scheduler"):
        skip = zero3_result[which]
        assert skip["zero_stage"] == 3, which
        rates = skip["learning_rates"]
        if which == "skip":  # transformers' linear decay over 3 steps, as without DeepSpeed
            assert len(rates) == 3 and rates[0] > rates[1] > rates[2], rates
        else:  # DeepSpeed's WarmupDecayLR: log warm-up over its minimum of 2 steps, then linear decay to step 3
            assert rates == pytest.approx([0.0, 0.01, 0.01])
        assert skip["moved"] == [], which  # no gradient: no weight moved

    # Finishing from a checkpoint loads it into partitioned ZeRO-3 weights.
    finish = zero3_result["finish"]
    assert finish["partitioned_shapes"] == [[0]]  # zero.Init: every parameter is a shard of shape [0] here
    assert finish["max_abs_diff"] < 1e-2  # the checkpoint's weights (saved in bf16: 16-bit gather on save)
    assert finish["validated_steps"] == [2]
