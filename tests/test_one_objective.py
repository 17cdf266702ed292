"""One objective on a GPU and on a CPU: TRL's vLLM importance-sampling correction (on by default in TRL 1.16 on a
GPU, off in the CPU plan) is stated by the paper recipes, so both plans resolve it the same; a recipe that leaves it
unset gets a note in its GPU plan. And a regime's GRPO defaults (HACPO's sequence-level ratio) reach the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.config import load_run_config
from mutualrl.config.typed import ConfigError
from mutualrl.launch.plan.commands import GPU_VLLM_CORRECTION
from mutualrl.launch.plan.launch_plan import make_launch_plan

IS_FIELDS = ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode", "vllm_importance_sampling_cap")


def plan_of(recipe: str, *overrides: str):
    config = load_run_config(recipe, overrides=list(overrides)).config
    return make_launch_plan(config, Path("/tmp/unused-run"), simulate=True, vllm_available=True, dry_run=True)


def correction_fields(plan) -> list[dict]:
    return [{key: policy.grpo.get(key) for key in IS_FIELDS} for policy in plan.policies]


@pytest.mark.parametrize("recipe", ["prp-corrected-2qwen", "hacpo-qwen3-1.7b-4b"])
def test_a_paper_recipe_resolves_the_same_correction_on_8_gpus_and_on_the_cpu(recipe):
    gpu = plan_of(recipe, "launch.gpus=8", "launch.gpu_memory_gib=80")
    cpu = plan_of(recipe, "launch.gpus=0")
    assert correction_fields(gpu) == correction_fields(cpu)
    assert all(fields["vllm_importance_sampling_correction"] is False for fields in correction_fields(gpu))
    assert not any(GPU_VLLM_CORRECTION in note for policy in gpu.policies for note in policy.notes)


def test_a_recipe_silent_on_the_correction_is_told_the_difference_on_a_gpu():
    gpu = plan_of("smol", "launch.gpus=2", "launch.gpu_memory_gib=80", "grpo.use_vllm=true")
    assert any(GPU_VLLM_CORRECTION in note for policy in gpu.policies for note in policy.notes)


def test_hacpo_runs_gspos_sequence_ratio_where_the_recipe_is_silent_and_refuses_token_level():
    plan = plan_of("tiny", "regime.name=hacpo")
    assert {policy.grpo["importance_sampling_level"] for policy in plan.policies} == {"sequence"}
    with pytest.raises(ConfigError, match="importance_sampling_level.*must be 'sequence' under regime hacpo"):
        load_run_config("tiny", overrides=["regime.name=hacpo", "grpo.importance_sampling_level=token"])
