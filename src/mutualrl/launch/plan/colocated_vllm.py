"""The colocated vLLM engine each policy will build: its scheduler caps, as the worker will pass them, and its
memory: its share of the card and the KV cache that share holds, in sequences of the recipe's length.

TRL builds the engine inside ``GRPOTrainer.__init__`` with ``max_num_seqs = per-device batch x TP x
steps_per_generation`` and a fixed ``max_num_batched_tokens=4096``; vLLM refuses a token budget below
``max_num_seqs`` (``SchedulerConfig.verify_max_model_len``), which the paper recipes reach with one GPU per
policy (5120). The worker caps them (:func:`mutualrl.training.vllm_engine.engine_caps`); the plan shows the
same numbers, computed by the same function from the planned GRPO fields, so a dry run shows what the
engine will get.

The share (``grpo.vllm_gpu_memory_utilization``) is the recipe's when it sets one. Otherwise, with sleep mode, it is
derived from the memory model: while the engine generates, the trainer's state stays resident next to it (TRL
wakes the engine, the trainer keeps its weights, gradients and Adam states), so the engine gets the card minus that
state minus :data:`ENGINE_MARGIN_GIB`, split between the engines sharing a GPU. A LoRA policy under ZeRO-3 also
leaves its whole model in torch's cache: TRL 1.16's adapter sync (``trl/generation/vllm_generation.py:
_iter_named_params``) gathers every parameter at once to merge the adapters, and empties torch's cache before waking
the engine's weights but not before waking its KV cache, so those blocks (:func:`sync_gather_gib`) sit beside the
engine while it generates. vLLM then fills its share with its
weights, its runtime and the KV cache (``vllm/v1/worker/gpu_worker.py: determine_available_memory``: KV = share x
card - weights - profiled peak), and refuses to start unless that share of the card is free
(``vllm/v1/worker/utils.py: request_memory``). Without sleep mode the engine keeps its share while the trainer
computes its activations, so TRL's default stands unless the recipe sets one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mutualrl.config.grpo_schema import grpo_default
from mutualrl.config.schema import LaunchConfig, RunConfig
from mutualrl.launch.plan.configs import ZERO_STAGES
from mutualrl.launch.plan.grpo_decisions import GRPODecision
from mutualrl.launch.plan.mwra import Placement
from mutualrl.launch.plan.model_shapes import ModelShape, model_shape
from mutualrl.training.vllm_engine import TRL_MAX_NUM_BATCHED_TOKENS, engine_caps, trl_max_num_seqs


@dataclass(frozen=True)
class EngineCaps:
    """One policy's colocated engine caps: TRL's wish and what the engine gets."""

    trl_max_num_seqs: int
    max_num_seqs: int
    max_num_batched_tokens: int


def planned_engine(grpo: dict[str, Any], launch: LaunchConfig) -> EngineCaps | None:
    """The caps of the colocated engine the planned ``grpo`` fields build (None: no colocated vLLM)."""
    if not grpo.get("use_vllm") or grpo.get("vllm_mode", "colocate") != "colocate":
        return None
    steps = grpo.get("steps_per_generation") or grpo.get("gradient_accumulation_steps", 1)  # TRL's default
    wish = trl_max_num_seqs(int(grpo.get("per_device_train_batch_size", 8)),
                            int(grpo.get("vllm_tensor_parallel_size", 1) or 1), int(steps))
    seqs, tokens = engine_caps(wish, launch.vllm_max_num_seqs, launch.vllm_max_num_batched_tokens)
    return EngineCaps(wish, seqs, tokens)


def engine_length(recipe: Mapping[str, Any], device_type: str, max_prompt_tokens: int,
                  validation_tokens: int | None = None, context: int | None = None) -> GRPODecision:
    """``vllm_max_model_length`` for a policy generating with vLLM on GPUs where the recipe leaves it unset: the
    longest sequence the run makes (``task.max_prompt_tokens``, which no kept prompt exceeds, + the longer of the
    completion and ``validation.max_new_tokens``: validation generates with the same engine), at most the model's
    ``context`` where known (what vLLM takes unset). Unset, TRL passes none and vLLM takes the model's whole context
    (131,072 tokens for Llama-3.2-3B) and refuses to start unless its KV cache holds one such sequence
    (``vllm/v1/core/kv_cache_utils.py: check_enough_kv_cache_memory``): on 40 GiB cards it does not. A sequence
    reaching the length is cut there without a word (``FINISHED_LENGTH_CAPPED``), hence the validation length. On a
    CPU the worker sizes the KV cache for the model's context itself (``training/worker.py: prepare_cpu_vllm``), so
    the CPU plan is unchanged."""
    if device_type != "cuda" or not recipe.get("use_vllm") or recipe.get("vllm_max_model_length") is not None:
        return GRPODecision()
    completion = int(recipe.get("max_completion_length") or grpo_default("max_completion_length"))
    longest = max_prompt_tokens + max(completion, validation_tokens or 0)
    return GRPODecision({"vllm_max_model_length": min(longest, context) if context else longest})


def engine_note(name: str, caps: EngineCaps | None) -> list[str]:
    """The dry run's line about a policy's engine caps, when they differ from what TRL would pass."""
    if caps is None or (caps.max_num_seqs == caps.trl_max_num_seqs and caps.max_num_batched_tokens == TRL_MAX_NUM_BATCHED_TOKENS):
        return []
    capped = (f" (TRL's {caps.trl_max_num_seqs} capped: vLLM needs max_num_seqs <= max_num_batched_tokens; the "
              f"rest queue)" if caps.max_num_seqs < caps.trl_max_num_seqs else "")
    return [f"{name}: vLLM engine max_num_seqs {caps.max_num_seqs}{capped}, max_num_batched_tokens "
            f"{caps.max_num_batched_tokens} (launch.vllm_max_num_seqs / launch.vllm_max_num_batched_tokens)"]


# What the trainer holds during generation beyond the model states the memory model counts: its CUDA context and
# NCCL buffers (~1.5 GiB), DeepSpeed's persistent buckets (~1 GiB in bf16 at its default 5e8 elements), one gathered
# parameter of the weight sync (~1 GiB for a 150k-token embedding) and the allocator's fragmentation.
ENGINE_MARGIN_GIB = 6.0
# vLLM's runtime inside its share besides weights and KV: the profiled forward of max_num_batched_tokens tokens and
# CUDA graphs (~1 GiB for 1.5-4B models), plus the sampler's fp32 logits over max_num_seqs rows, counted twice (the
# logits and the processed log-probs TRL asks for).
ENGINE_RUNTIME_GIB = 1.0
SAMPLER_LOGIT_COPIES = 2
MAX_ENGINE_SHARE = 0.9  # vLLM's own default share of a card
ENGINE_DTYPE_BYTES = 2  # bf16 weights and KV cache, as the paper recipes load the models on a GPU


@dataclass(frozen=True)
class PlannedEngine:
    """One policy's colocated engine as the plan sizes it (``--save-plan`` JSON: ``policies[].engine``)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    trl_max_num_seqs: int
    tensor_parallel_size: int
    gpu_memory_utilization: float | None
    """The share of each card it takes (None on a CPU: vLLM's CPU backend reads VLLM_CPU_KVCACHE_SPACE)."""
    share_source: str
    sequence_tokens: int
    """A sequence of the recipe's length: task.max_prompt_tokens + grpo.max_completion_length."""
    max_model_len: int | None = None
    """The ``max_model_len`` the engine gets (``grpo.vllm_max_model_length``; None: the model's whole context)."""
    engine_gib: float | None = None
    weights_gib: float | None = None
    kv_cache_gib: float | None = None
    kv_capacity_sequences: int | None = None
    """How many sequences of ``sequence_tokens`` its KV cache holds at once (None: the model's shape is unknown)."""


def recipe_share(config: RunConfig, policy: str) -> float | None:
    """``grpo.vllm_gpu_memory_utilization`` as the recipe sets it for ``policy`` (None: unset)."""
    spec = next(p for p in config.pool.policies if p.name == policy)
    value = {**config.grpo, **spec.grpo}.get("vllm_gpu_memory_utilization")
    return float(value) if value is not None else None


def sync_gather_gib(config: RunConfig, plan: Any) -> float:
    """GiB the adapter sync leaves in torch's cache on each GPU of ``plan`` (module docstring): the whole model in
    bf16 for a LoRA policy under ZeRO-3, nothing otherwise (without ZeRO-3 the weights are resident and counted in the
    model state; ZeRO-3 without LoRA gathers one parameter at a time, within the margin)."""
    spec = next(p for p in config.pool.policies if p.name == plan.name)
    if spec.lora is None or ZERO_STAGES.get(plan.deepspeed, 0) < 3 or plan.memory is None:
        return 0.0
    return plan.memory.params * ENGINE_DTYPE_BYTES / 2**30


def derived_shares(placement: Placement, state_gib: Mapping[str, float], fixed_shares: Mapping[str, float],
                   derive: set[str], gpu_memory_gib: float) -> dict[str, float]:
    """{policy: share} for the engines in ``derive``: on every GPU, the card minus the model states resident there,
    the fixed shares of the other engines there and :data:`ENGINE_MARGIN_GIB`, split evenly between the engines to
    derive; a policy's share is its smallest over its GPUs, rounded down to 0.01 and at most :data:`MAX_ENGINE_SHARE`."""
    users: dict[tuple[int, int], list[str]] = {}
    for placed in placement.policies:
        for machine in placed.machines:
            for gpu in placed.devices:
                users.setdefault((machine, gpu), []).append(placed.name)
    shares: dict[str, float] = {}
    for names in users.values():
        here = [n for n in names if n in derive]
        if not here:
            continue
        room = (gpu_memory_gib - sum(state_gib.get(n, 0.0) for n in names) - ENGINE_MARGIN_GIB
                - sum(fixed_shares.get(n, 0.0) for n in names) * gpu_memory_gib)
        each = room / (len(here) * gpu_memory_gib)
        for name in here:
            shares[name] = min(shares.get(name, MAX_ENGINE_SHARE), each)
    return {name: math.floor(share * 100) / 100 for name, share in shares.items()}


def engine_memory(caps: EngineCaps, tp: int, share: float, gpu_memory_gib: float, params: float | None,
                  shape: ModelShape | None, sequence_tokens: int) -> tuple[float, float | None, float | None, int | None]:
    """(engine GiB, weights GiB, KV cache GiB, sequences of ``sequence_tokens`` the KV cache holds) of one engine
    over its ``tp`` GPUs; None where the model's size or shape is unknown."""
    engine = share * gpu_memory_gib * tp
    if params is None or shape is None:
        return engine, None, None, None
    weights = params * ENGINE_DTYPE_BYTES / 2**30
    sampler = SAMPLER_LOGIT_COPIES * caps.max_num_seqs * shape.vocab * 4 / 2**30
    kv = engine - weights - tp * ENGINE_RUNTIME_GIB - sampler
    per_sequence = shape.kv_bytes_per_token(ENGINE_DTYPE_BYTES) * sequence_tokens / 2**30
    return engine, weights, kv, max(0, math.floor(kv / per_sequence))


def size_engines(config: RunConfig, placement: Placement, plans: list[Any], gpu_memory_gib: float | None) -> list[str]:
    """Give every colocated engine its share (derived into ``plan.grpo`` where the recipe leaves it unset and sleep
    mode is on) and set ``plan.engine``; returns the refusals of engines that cannot hold one sequence of the recipe
    or leave no room for a LoRA policy's gathered model (the caller raises them once the model states themselves
    were found to fit)."""
    problems: list[str] = []
    engines = {p.name: caps for p in plans if (caps := planned_engine(p.grpo, config.launch)) is not None}
    on_gpu = placement.device_type == "cuda" and gpu_memory_gib is not None
    fixed = {p.name: recipe_share(config, p.name) for p in plans if p.name in engines}
    derive = {p.name for p in plans if p.name in engines and fixed[p.name] is None and on_gpu
              and p.memory is not None and p.grpo.get("vllm_enable_sleep_mode")}
    trl_share = float(grpo_default("vllm_gpu_memory_utilization"))
    fixed = {n: (trl_share if s is None else s) for n, s in fixed.items() if n not in derive}
    states = {p.name: p.memory.gib_per_device + sync_gather_gib(config, p) for p in plans if p.memory is not None}
    derived = derived_shares(placement, states, fixed, derive, gpu_memory_gib) if derive and gpu_memory_gib else {}
    for plan in plans:
        if plan.name in engines:
            if plan.name in derived:
                plan.grpo["vllm_gpu_memory_utilization"] = derived[plan.name]
            plan.engine = _planned(config, plan, engines[plan.name], gpu_memory_gib if on_gpu else None,
                                   "memory model" if plan.name in derived else _fixed_source(config, plan), problems)
            plan.notes.extend(kv_capacity_note(plan.name, plan.engine))
    return problems


FAR_FEWER = 0.5
"""A KV cache holding less than this share of ``max_num_seqs`` full-length sequences is said in the plan's notes."""


def kv_capacity_note(name: str, engine: PlannedEngine) -> list[str]:
    """The note when ``engine``'s KV cache holds far fewer sequences of the recipe's length than its scheduler runs at
    once: vLLM admits a sequence only while KV blocks are free and preempts running ones (recomputed later) when a
    growing sequence needs a block none can give, so most of ``max_num_seqs`` wait -- slower, not wrong."""
    held = engine.kv_capacity_sequences
    if held is None or held >= FAR_FEWER * engine.max_num_seqs:
        return []
    return [f"{name}: its vLLM KV cache ({engine.kv_cache_gib:.1f} GiB) holds {held} sequences of "
            f"{engine.sequence_tokens} tokens against max_num_seqs {engine.max_num_seqs}: once completions grow long, "
            f"vLLM runs about {held} at a time and preempts the rest (recomputed later): generation is slower, not "
            f"wrong; more GPUs for the policy or a shorter grpo.max_completion_length raise the capacity"]


def _fixed_source(config: RunConfig, plan: Any) -> str:
    if recipe_share(config, plan.name) is not None:
        return "recipe"
    if not plan.grpo.get("vllm_enable_sleep_mode"):
        return "TRL default: without sleep mode the engine keeps its share while training"
    return "derived at launch from the card; --gpu-memory GIB shows it"


def gathered_model_problem(config: RunConfig, plan: Any, share: float, gpu_memory_gib: float, source: str) -> str:
    """The refusal of a share (set by the recipe) that leaves no room for the whole model a LoRA policy's adapter
    sync gathers under ZeRO-3 (:func:`sync_gather_gib`); "" when it fits or nothing is gathered."""
    gather = sync_gather_gib(config, plan)
    state = plan.memory.gib_per_device if plan.memory is not None else 0.0
    # the margin the derived shares keep (CUDA context, NCCL, fragmentation) holds for a set share too
    if not gather or share * gpu_memory_gib + state + gather + ENGINE_MARGIN_GIB <= gpu_memory_gib:
        return ""
    most = math.floor((gpu_memory_gib - state - gather - ENGINE_MARGIN_GIB) / gpu_memory_gib * 100) / 100
    return (f"{plan.name}: its vLLM engine's share {share:g} of the {gpu_memory_gib:g} GiB card ({source}) beside "
            f"{state:.1f} GiB of model state and the {gather:.1f} GiB whole model TRL's adapter sync gathers (LoRA "
            f"under ZeRO-3, left in torch's cache when the KV cache wakes) leaves less than the {ENGINE_MARGIN_GIB:g} GiB "
            f"margin of the card; set "
            f"grpo.vllm_gpu_memory_utilization to at most {max(most, 0.0):.2f} or leave it unset with sleep mode")


def _planned(config: RunConfig, plan: Any, caps: EngineCaps, gpu_memory_gib: float | None, source: str,
             problems: list[str]) -> PlannedEngine:
    """The engine of ``plan`` with its memory (on a GPU whose size is known) or its caps alone; an engine that cannot
    hold one sequence of the recipe adds its refusal to ``problems``."""
    tp = int(plan.grpo.get("vllm_tensor_parallel_size", 1) or 1)
    completion = plan.grpo.get("max_completion_length") or grpo_default("max_completion_length")
    sequence = config.task.max_prompt_tokens + int(completion)
    base = dict(max_num_seqs=caps.max_num_seqs, max_num_batched_tokens=caps.max_num_batched_tokens,
                trl_max_num_seqs=caps.trl_max_num_seqs, tensor_parallel_size=tp, sequence_tokens=sequence,
                max_model_len=plan.grpo.get("vllm_max_model_length"))
    if plan.placement.device_type != "cuda":
        return PlannedEngine(**base, gpu_memory_utilization=None, share_source="CPU: VLLM_CPU_KVCACHE_SPACE")
    share = float(plan.grpo.get("vllm_gpu_memory_utilization", grpo_default("vllm_gpu_memory_utilization")))
    if gpu_memory_gib is None:
        derived_later = recipe_share(config, plan.name) is None and plan.grpo.get("vllm_enable_sleep_mode")
        return PlannedEngine(**base, gpu_memory_utilization=None if derived_later else share, share_source=source)
    if share <= 0:
        problems.append(
            f"{plan.name}: no room for its vLLM engine: each of its {gpu_memory_gib:g} GiB GPUs holds its model state "
            f"({plan.memory.gib_per_device if plan.memory else 0.0:.1f} GiB), the other policies' there and a "
            f"{ENGINE_MARGIN_GIB:g} GiB margin; give the policy more GPUs (--gpus, --device-map, with --set "
            f"launch.deepspeed=zero3) or train LoRA adapters")
        return PlannedEngine(**base, gpu_memory_utilization=0.0, share_source=source)
    gather_problem = gathered_model_problem(config, plan, share, gpu_memory_gib, source)
    if gather_problem:
        problems.append(gather_problem)
    params = plan.memory.params if plan.memory is not None else None
    engine, weights, kv, seqs = engine_memory(caps, tp, share, gpu_memory_gib, params, model_shape(plan.model),
                                              sequence)
    if seqs == 0:
        problems.append(
            f"{plan.name}'s vLLM engine: its share {share:g} of the {gpu_memory_gib:g} GiB card ({engine:.1f} GiB, "
            f"{source}) is too small for its weights ({weights:.1f} GiB), its runtime and the KV cache of one sequence "
            f"of {sequence} tokens; give the policy more GPUs (--gpus, --device-map), set "
            f"grpo.vllm_gpu_memory_utilization, or shorten task.max_prompt_tokens + grpo.max_completion_length")
    return PlannedEngine(**base, gpu_memory_utilization=share, share_source=source, engine_gib=round(engine, 2),
                         weights_gib=None if weights is None else round(weights, 2),
                         kv_cache_gib=None if kv is None else round(kv, 2), kv_capacity_sequences=seqs)
