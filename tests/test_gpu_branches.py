"""The GPU-only branches of issue 38, exercised on the CPU: each test runs the branch a GPU node takes, against
the library's own contract (vLLM's scheduler validation and sleep/wake code, TRL's engine arguments), with
CUDA mocked where only a dtype or a memory decision depends on it.

The ZeRO-3 branches (resume after finish, catch-up's LR schedule) run in a real DeepSpeed process:
tests/test_zero3_branches.py.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

from mutualrl.config.loader import load_run_config
from mutualrl.errors import MutualRLError
from mutualrl.launch.plan.colocated_vllm import planned_engine
from mutualrl.launch.plan.launch_plan import make_launch_plan
from mutualrl.training.vllm_engine import TRL_MAX_NUM_BATCHED_TOKENS, awake_engine, engine_caps, trl_max_num_seqs
from recipe_paths import recipe_params

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
PAPER_RECIPES = sorted(p.stem for folder in ("pools", "experiments") for p in (RECIPES / folder).glob("*.yaml")
                       if not p.stem.startswith(("tiny", "smol")))


# -- a sleeping engine: vLLM's own sleep/wake code decides whether a request would ever be scheduled -------------

class EngineHang(RuntimeError):
    """What vLLM does with a request while its scheduler is paused: queue it forever (``LLM._run_engine`` spins)."""


class SleepingLLM:
    """A ``vllm.LLM`` whose sleep/wake state is run by vLLM's own ``EngineCore`` and ``Executor`` methods."""

    def __init__(self):
        from vllm.v1.core.sched.interface import PauseState
        from vllm.v1.engine.core import EngineCore
        from vllm.v1.executor.abstract import Executor

        executor = SimpleNamespace(is_sleeping=False, sleeping_tags=set(), collective_rpc=lambda *a, **k: None)
        executor.sleep = lambda level: Executor.sleep(executor, level)
        executor.wake_up = lambda tags=None: Executor.wake_up(executor, tags)
        scheduler = SimpleNamespace(pause_state=PauseState.UNPAUSED, finish_requests=lambda *a: None)
        scheduler.set_pause_state = lambda state: setattr(scheduler, "pause_state", state)
        core = SimpleNamespace(model_executor=executor, scheduler=scheduler, _finish_pause=lambda clear: None)
        for name in ("sleep", "wake_up", "pause_scheduler", "resume_scheduler", "is_scheduler_paused"):
            setattr(core, name, getattr(EngineCore, name).__get__(core))
        self.core, self.weights_loaded, self.generated = core, True, 0

    def sleep(self, level=1):
        self.core.sleep(level)
        self.weights_loaded = self.weights_loaded and level < 2  # level 2 discards the weights

    def wake_up(self, tags=None):
        self.core.wake_up(tags)

    def generate(self, prompts, params, use_tqdm=False):
        if self.core.is_scheduler_paused():
            raise EngineHang(f"scheduler paused (sleeping tags {sorted(self.core.model_executor.sleeping_tags)})")
        assert self.weights_loaded, "generating from discarded weights"
        self.generated += len(prompts)
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[7])]) for _ in prompts]


class SleepModeGeneration:
    """TRL's ``VLLMGeneration`` in colocate mode with sleep mode on, as far as validation touches it: asleep at
    level 2 after start-up and after each generation; ``sync_weights`` wakes the ``weights`` tag only and pushes
    the weights (trl/generation/vllm_generation.py, checked by :func:`test_trl_sleep_contract_is_what_the_fake_does`)."""

    mode, enable_sleep_mode = "colocate", True

    def __init__(self):
        self.llm = SleepingLLM()
        self.llm.sleep(level=2)
        self._llm_weights_sleeping = True

    def sync_weights(self):
        self.llm.wake_up(tags=["weights"])
        self._llm_weights_sleeping = False
        self.llm.weights_loaded = True


def test_trl_sleep_contract_is_what_the_fake_does():
    from trl.generation.vllm_generation import VLLMGeneration

    sync, generate, init = (inspect.getsource(f) for f in (VLLMGeneration.sync_weights, VLLMGeneration.generate,
                                                           VLLMGeneration._init_vllm))
    assert 'wake_up(tags=["weights"])' in sync and "kv_cache" not in sync
    assert 'wake_up(tags=["kv_cache"])' in generate and "sleep(level=2)" in generate
    assert "self.llm.sleep(level=2)" in init
    assert f"max_num_batched_tokens={TRL_MAX_NUM_BATCHED_TOKENS}" in init


def test_the_fake_engine_hangs_where_vllm_would():
    generation = SleepModeGeneration()
    generation.sync_weights()  # what validation did before issue 38: weights awake, KV cache asleep
    with pytest.raises(EngineHang, match="kv_cache"):
        generation.llm.generate([{"prompt_token_ids": [1]}], None)


def test_validation_through_a_sleeping_engine_wakes_it_and_puts_it_back_to_sleep(tmp_path):
    from mutualrl.tasks.base import TaskExample
    from mutualrl.training.callbacks import ValidationCallback
    from mutualrl.run_folder import RunPaths
    from mutualrl.assets.tokenizers import load_tokenizer

    generation = SleepModeGeneration()
    trainer = SimpleNamespace(vllm_generation=generation, state=SimpleNamespace(global_step=3), _last_loaded_step=-1)
    examples = [TaskExample(prompt_id=f"p{i}", prompt=f"{i}+1=", answer=str(i + 1), task="synthetic-arith") for i in range(5)]
    callback = ValidationCallback(RunPaths(tmp_path), "p", "sgt", examples, load_tokenizer("gpt2"), False,
                                  every_steps=1, max_new_tokens=4, batch_size=2, at_start=False)
    seen: list[int] = []
    result = callback.validate_with_vllm(trainer, examples, 3, seen.append)
    assert len(result.records) == 5 and generation.llm.generated == 5 and seen[-1] == 5
    assert generation.llm.core.is_scheduler_paused() and generation._llm_weights_sleeping  # as TRL leaves it
    with awake_engine(generation) as llm:  # and the next generation wakes it again
        assert llm.generate([{"prompt_token_ids": [1]}], None)


# -- the engine's scheduler caps: vLLM's own SchedulerConfig validation of what the plan and the worker pass --------

def scheduler_accepts(seqs: int, tokens: int, max_model_len: int) -> None:
    from vllm.config.scheduler import SchedulerConfig

    SchedulerConfig(max_model_len=max_model_len, is_encoder_decoder=False, max_num_seqs=seqs,
                    max_num_batched_tokens=tokens)


def test_trls_own_caps_are_refused_by_vllm_with_one_gpu_per_policy():
    # paper recipe, one GPU per policy: 1024 prompts x K=5 over 1 rank, per-device 10 x 512 steps per generation
    wish = trl_max_num_seqs(10, 1, 512)
    assert wish == 5120
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        scheduler_accepts(wish, TRL_MAX_NUM_BATCHED_TOKENS, 4096)
    scheduler_accepts(*engine_caps(wish), 4096)
    assert engine_caps(wish, 1024, 8192) == (1024, 8192)
    assert engine_caps(16) == (16, TRL_MAX_NUM_BATCHED_TOKENS)


def plan_or_refusal(recipe: str, gpus: int, nodes: int, device_map: str | None, gpu_memory: float, *more: str):
    return plan_of(layout_config(recipe, gpus, nodes, gpu_memory, *more), gpus, device_map)


def layout_config(recipe: str, gpus: int, nodes: int, gpu_memory: float, *more: str):
    sets = [f"launch.gpus={gpus}", f"launch.nodes={nodes}", f"launch.gpu_memory_gib={gpu_memory}", *more]
    return load_run_config(recipe, overrides=sets).config


def plan_of(config, gpus: int, device_map: str | None):
    """(plan or its one-line refusal, config) of ``config`` with ``device_map`` (None, "shared" or "one-each")."""
    if device_map:
        names = [p.name for p in config.pool.policies]
        mapping = {n: [0] for n in names} if device_map == "shared" else {n: [i % gpus] for i, n in enumerate(names)}
        config.launch.device_map = mapping
    try:
        return make_launch_plan(config, Path("/tmp/unused-run"), simulate=True, vllm_available=True), config
    except MutualRLError as err:
        return str(err), config


@pytest.mark.parametrize("recipe", recipe_params(PAPER_RECIPES))
def test_every_paper_recipe_plans_an_engine_vllm_accepts_and_a_memory_model_that_counts_it(recipe):
    planned = 0
    for gpus in (1, 2, 4, 8):
        for nodes in (1, 2):
            for memory in (40.0, 80.0):
                # One load per layout, a copy per device map: loading the recipe is most of this test's time.
                loaded = layout_config(recipe, gpus, nodes, memory)
                for device_map in (None, "shared", "one-each"):
                    plan, config = plan_of(copy.deepcopy(loaded), gpus, device_map)
                    if isinstance(plan, str):
                        assert "\n" not in plan and plan, (recipe, gpus, nodes, device_map)
                        continue
                    check_plan(plan, config, memory)
                    planned += 1
    assert planned, f"{recipe}: every layout refused, so no plan was checked"


def check_plan(plan, config, memory: float) -> None:
    per_gpu: dict[tuple[int, int], float] = {}
    for policy in plan.policies:
        caps = planned_engine(policy.grpo, config.launch)
        share = 0.0
        if caps is not None:
            length = config.task.max_prompt_tokens + policy.grpo["max_completion_length"]
            scheduler_accepts(caps.max_num_seqs, caps.max_num_batched_tokens, length)
            share = policy.grpo["vllm_gpu_memory_utilization"] * memory
        state = policy.memory.gib_per_device if policy.memory else 0.0
        for machine in policy.placement.machines:
            for gpu in policy.placement.devices:
                per_gpu[(machine, gpu)] = per_gpu.get((machine, gpu), 0.0) + state + share
    assert all(need <= memory for need in per_gpu.values()), per_gpu


def test_commonsense_3qwen_on_40_gib_cards_sizes_the_engine_or_refuses_naming_the_policy_and_vllm():
    plan, _ = plan_or_refusal("commonsense-3qwen", 8, 1, None, 40.0)
    assert not isinstance(plan, str), plan
    engine = plan.policy("qwen3-4b-base").engine  # 4 GPUs: 16.8 GiB of ZeRO-3 state, so (40 - 16.8 - 6) / 40
    assert engine.gpu_memory_utilization == 0.43 and engine.share_source == "memory model"
    assert engine.kv_capacity_sequences > 0
    # on two GPUs for the 4B (an even split), the same card cannot hold the engine beside the state
    refused, _ = plan_or_refusal("commonsense-3qwen", 6, 1, None, 40.0)
    assert isinstance(refused, str) and "qwen3-4b-base" in refused and "vLLM engine" in refused
    # nor the share a recipe sets
    refused, _ = plan_or_refusal("commonsense-3qwen", 6, 1, None, 40.0, "grpo.vllm_gpu_memory_utilization=0.5")
    assert isinstance(refused, str) and "qwen3-4b-base" in refused and "vLLM engine 0.5" in refused


def test_policies_sharing_a_gpu_add_up_their_vllm_shares():
    from mutualrl.errors import PlacementError
    from mutualrl.launch.plan.checks import MemoryEstimate, check_memory
    from mutualrl.launch.plan.mwra import plan_placement

    placement = plan_placement([("a", 1.0), ("b", 1.0)], gpus=1, device_map={"a": [0], "b": [0]})
    small = {n: MemoryEstimate(n, 1e9, "hint", 10 * 2**30, {}) for n in "ab"}
    check_memory(placement, small, 80.0, reserved_fraction={"a": 0.3, "b": 0.3})  # 20 GiB next to 48 GiB of vLLM
    with pytest.raises(PlacementError, match="a's vLLM engine 0.4.*b's vLLM engine 0.4"):
        check_memory(placement, small, 80.0, reserved_fraction={"a": 0.4, "b": 0.4})  # 20 GiB next to 64


def test_sleep_mode_does_not_hide_the_engine_share_from_the_memory_check():
    # 2qwen on 8 x 12 GiB: ~7 GiB of ZeRO-3 state per GPU fits the card, not beside the engine's 6 GiB (the paper
    # recipes run vLLM in sleep mode, which the check used to take for "no engine memory")
    half = "grpo.vllm_gpu_memory_utilization=0.5"  # set by the recipe (unset, the plan derives it: test_engine_plan.py)
    plan, _ = plan_or_refusal("2qwen", 8, 1, None, 12.0, half)
    assert isinstance(plan, str) and "vLLM engine 0.5 (6.0 GiB)" in plan
    with_more_room, _ = plan_or_refusal("2qwen", 8, 1, None, 16.0, half)
    assert not isinstance(with_more_room, str)


# -- the placement of 3qwen -------------------------------------------------------------------------------------

def test_3qwen_on_8_gpus_uses_every_gpu_and_gives_the_4b_model_the_most():
    plan, _ = plan_or_refusal("3qwen", 8, 1, None, 80.0)
    assert not isinstance(plan, str), plan
    sizes = {p.name: p.placement.num_processes for p in plan.policies}
    assert sum(sizes.values()) == 8 and sizes["qwen3-4b-base"] == max(sizes.values()) == 4


# -- dtype on a CUDA machine ---------------------------------------------------------------------------------------

def test_training_loads_float32_weights_on_cuda_as_trl_does(monkeypatch):
    import torch

    from mutualrl.pools.loading import load_model
    from mutualrl.training.worker import training_dtype

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    model = load_model("builtin:tiny-bpe", training_dtype("auto"), device=None)
    assert next(model.parameters()).dtype == torch.float32
    assert training_dtype("bfloat16") == "bfloat16"  # a dtype the recipe forces is kept
    assert load_model("builtin:tiny-bpe", "auto", device=None).dtype == torch.bfloat16  # inference keeps bf16


def test_a_master_port_in_the_launchers_shell_never_reaches_the_policies(monkeypatch, tmp_path):
    """Single-process CPU policies each pick their engine's port: an inherited MASTER_PORT=29500 (a user's shell,
    or a test that let TRL write it into os.environ) would give two colocated engines the same port."""
    from mutualrl.launch.run import TrainOptions, plan_without_launch, resolve_config, run_dir_for
    from mutualrl.training import worker

    monkeypatch.setenv("MASTER_PORT", "29500")
    config, _ = resolve_config(TrainOptions(pool="tiny", overrides=["grpo.use_vllm=true"], output_dir=tmp_path / "run",
                                            dry_run=True))
    plan = plan_without_launch(config, run_dir_for(config))
    assert {p.launch.env.get("MASTER_PORT") for p in plan.policies} == {"auto"}
    monkeypatch.setenv("MASTER_PORT", "auto")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # set: prepare_cpu_vllm returns after the port
    args = SimpleNamespace(use_vllm=True, use_cpu=True, vllm_mode="colocate")
    model = SimpleNamespace(config=SimpleNamespace(head_dim=64, hidden_size=256, num_attention_heads=4))
    worker.prepare_cpu_vllm(args, model, None, [], False, "p")
    import os

    assert os.environ["MASTER_PORT"].isdigit() and os.environ["MASTER_PORT"] != "29500"


def test_vllm_validation_in_chunks_reports_each_chunk_as_the_transformers_path_reports_each_batch():
    from mutualrl.assets.tokenizers import load_tokenizer
    from mutualrl.evaluation.generate import evaluate_examples_llm
    from mutualrl.tasks.base import TaskExample
    from mutualrl.training.callbacks import running_total

    examples = [TaskExample(prompt_id=f"p{i}", prompt=f"{i}+1=", answer=str(i + 1), task="synthetic-arith")
                for i in range(5)]
    heard, done = [], []
    llm = SleepingLLM()
    result = evaluate_examples_llm(llm, load_tokenizer("gpt2"), examples, max_new_tokens=4, chat_template=False,
                                   model_name="p", progress=heard.append, chunk=2)
    assert heard == [2, 2, 1] and llm.generated == 5 and len(result.records) == 5
    total = running_total(done.append)
    for n in heard:
        total(n)
    assert done == [2, 4, 5]
