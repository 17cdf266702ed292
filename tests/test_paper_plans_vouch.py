"""Every paper recipe, planned as a GPU node would plan it (40 / 80 / 141 GiB cards, 1 / 2 / 4 / 8 GPUs), hands each
worker the digest of the settings file it will read, and bounds vLLM's model length by the run's longest sequence.

A GPU plan changes the settings after the batch is derived (the vLLM share from the card's memory, a micro-batch
lowered to fit the card); a digest taken before those stages made every worker of every paper recipe refuse its own
file on a real node, which no CPU plan could show."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest

from mutualrl.config.loader import list_named_recipes, load_run_config
from mutualrl.config.schema import RunConfig
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.launch_plan import LaunchPlan, make_launch_plan
from mutualrl.run_folder import RunPaths
from mutualrl.training.grpo_args import PLANNED_GRPO_ENV, planned_grpo_args
from recipe_paths import recipe_params

CPU_POOLS = {"tiny", "smol", "smol-arith", "smol-qa", "smol-lexicon"}
PAPER_RECIPES = sorted(path.stem for path in list_named_recipes() if path.stem not in CPU_POOLS)
CARDS_GIB = (40.0, 80.0, 141.0)
GPU_COUNTS = (1, 2, 4, 8)


def gpu_plan(recipe: str, gpus: int, gpu_memory_gib: float, run_dir: Path, config: RunConfig | None = None
             ) -> LaunchPlan | None:
    """The plan ``mutualrl train`` makes on a node of ``gpus`` cards of ``gpu_memory_gib`` (vLLM installed there);
    None where the planner refuses the node (too small for the pool). ``config``: the recipe already loaded with
    ``launch.gpus`` (a copy is planned)."""
    config = copy.deepcopy(config) if config is not None else gpu_config(recipe, gpus)
    try:
        return make_launch_plan(config, run_dir, gpus=gpus, simulate=True, gpu_memory_gib=gpu_memory_gib,
                                ram_gib=2048.0, vllm_available=True, dry_run=True)
    except PlacementError:
        return None


def gpu_config(recipe: str, gpus: int) -> RunConfig:
    return load_run_config(recipe, overrides=[f"launch.gpus={gpus}"]).config


def check_vouched(plan: LaunchPlan, max_prompt_tokens: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """What each worker reads is what its launcher vouched for, read by the worker's own reader."""
    plan.write()
    paths = RunPaths(Path(plan.run_dir))
    for policy in plan.policies:
        written = paths.planned_grpo(policy.name).read_bytes()
        assert json.loads(written) == policy.grpo
        for command in policy.commands:
            assert command.env[PLANNED_GRPO_ENV] == hashlib.sha256(written).hexdigest(), policy.name
            monkeypatch.setenv(PLANNED_GRPO_ENV, command.env[PLANNED_GRPO_ENV])
            assert planned_grpo_args(paths, policy.name, lambda: pytest.fail("the plan is there")) == policy.grpo
        if policy.grpo.get("use_vllm"):
            completion = policy.grpo["max_completion_length"]
            assert policy.grpo["vllm_max_model_length"] == max_prompt_tokens + completion, policy.name
            assert policy.engine.max_model_len == policy.grpo["vllm_max_model_length"]
    saved = LaunchPlan.read(paths.root)  # plan.json records the same commands
    assert [c.env for c in saved.specs] == [c.env for c in plan.specs]


@pytest.mark.slow  # ~6 s of CPU: every recipe x 3 cards x 4 GPU counts
@pytest.mark.parametrize("recipe", recipe_params(PAPER_RECIPES))
def test_every_worker_is_handed_the_digest_of_the_bytes_it_reads(recipe, tmp_path, monkeypatch):
    configs = {gpus: gpu_config(recipe, gpus) for gpus in GPU_COUNTS}  # read once per GPU count, not per card: the
    max_prompt_tokens = configs[1].task.max_prompt_tokens  # recipe's YAML was two thirds of this test's CPU
    accepted = []
    for memory in CARDS_GIB:
        for gpus in GPU_COUNTS:
            plan = gpu_plan(recipe, gpus, memory, tmp_path / f"{gpus}x{memory:g}", configs[gpus])
            if plan is not None:
                check_vouched(plan, max_prompt_tokens, monkeypatch)
                accepted.append((gpus, memory))
    assert {(8, 80.0), (8, 141.0)} <= set(accepted), accepted  # the nodes the paper's recipes are written for


def test_a_gpu_plan_changes_the_settings_after_the_batch_and_still_vouches_for_them(tmp_path, monkeypatch):
    """The stages after the batch (the engine's share derived from the card, a micro-batch lowered on 40 GiB) are
    the ones a digest taken early misses: here both change the settings, and the digest follows."""
    plan = gpu_plan("hacpo-qwen3-1.7b-4b", 8, 40.0, tmp_path / "run")
    big = plan.policy("qwen3-4b-base")
    assert big.engine.share_source == "memory model" and "vllm_gpu_memory_utilization" in big.grpo
    assert any("micro-batch" in note for note in big.notes)  # lowered to fit the card
    check_vouched(plan, 1024, monkeypatch)


def test_a_cpu_plan_leaves_the_model_length_to_the_worker(tmp_path):
    """On a CPU the worker sizes vLLM's KV cache for the model's context (training/worker.py prepare_cpu_vllm)."""
    config = load_run_config("tiny", overrides=["grpo.use_vllm=true"]).config
    plan = make_launch_plan(config, tmp_path / "run", gpus=0, cpu_cores=2, ram_gib=1000.0, vllm_available=True,
                            dry_run=True)
    assert all("vllm_max_model_length" not in p.grpo for p in plan.policies)


def test_a_model_length_the_recipe_sets_is_kept(tmp_path):
    config = load_run_config("2qwen", overrides=["launch.gpus=8", "grpo.vllm_max_model_length=8192"]).config
    plan = make_launch_plan(config, tmp_path / "run", gpus=8, simulate=True, gpu_memory_gib=80.0, ram_gib=2048.0,
                            vllm_available=True, dry_run=True)
    assert {p.grpo["vllm_max_model_length"] for p in plan.policies} == {8192}


def test_validation_longer_than_a_completion_fits_the_engine_it_generates_with(tmp_path, monkeypatch):
    """Validation generates through the same colocated engine, ``validation.max_new_tokens`` tokens: a length
    bounded by the completion alone cut its answers short without a word (vLLM ends a sequence at the length,
    FINISHED_LENGTH_CAPPED); where the model's context is known it is the bound, as when no length is given."""
    from mutualrl.pools import loading

    def plan(*overrides):
        config = load_run_config("2qwen", overrides=["launch.gpus=8", *overrides]).config
        return make_launch_plan(config, tmp_path / "run", gpus=8, simulate=True, gpu_memory_gib=80.0, ram_gib=2048.0,
                                vllm_available=True, dry_run=True)

    monkeypatch.setattr(loading, "model_context", lambda model: None)  # not in this machine's cache
    assert {p.grpo["vllm_max_model_length"] for p in plan("validation.max_new_tokens=4096").policies} == {1024 + 4096}
    assert {p.grpo["vllm_max_model_length"] for p in plan("validation.max_new_tokens=512").policies} == {1024 + 3072}
    monkeypatch.setattr(loading, "model_context", lambda model: (4608, "config.json max_position_embeddings"))
    assert {p.grpo["vllm_max_model_length"] for p in plan("validation.max_new_tokens=4096").policies} == {4608}
