"""Checks of a launch plan across its policies: identical prompts for the sharing regimes, and model memory."""

from __future__ import annotations

from typing import Any

from mutualrl.config.schema import RunConfig
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.batching import BatchSizeError, trl_generation_batch
from mutualrl.launch.plan.mwra import MemoryEstimate, Placement, check_memory, estimate_training_memory, param_count_for
from mutualrl.regimes.registry import get_regime


def check_same_prompts(config: RunConfig, plans: list[Any]) -> list[str]:
    """Sharing regimes need every policy to draw the same prompts per step (design notes)."""
    per_step = {p.name: trl_generation_batch(p.grpo, p.placement.world_size)[1] for p in plans}
    seeds = {p.name: p.grpo.get("seed", 42) for p in plans}
    problems = []
    if len(set(per_step.values())) > 1:
        listing = ", ".join(f"{n}: {k}" for n, k in per_step.items())
        problems.append(
            f"policies draw different numbers of prompts per generation step ({listing}); set `batch` "
            f"(prompts per step) so mutualrl derives per-device sizes for each policy's devices"
        )
    if len(set(seeds.values())) > 1:
        listing = ", ".join(f"{n}: {s}" for n, s in seeds.items())
        problems.append(f"policies use different grpo.seed values ({listing}), so their prompt order differs")
    if problems and get_regime(config.regime.name).needs_peers:
        raise BatchSizeError(
            f"regime {config.regime.name!r} needs identical prompts at every step for every policy: "
            + "; ".join(problems)
        )
    return problems


def memory_check(
    config: RunConfig,
    placement: Placement,
    plans: list[Any],
    gpu_memory_gib: float | None,
    ram_gib: float | None,
    hints: dict[str, float],
    stage: int,
) -> list[str]:
    estimates: dict[str, MemoryEstimate] = {}
    reserved: dict[str, float] = {}
    policies = {p.name: p for p in config.pool.policies}
    for plan in plans:
        params, source = param_count_for(plan.model, hints.get(plan.name))
        if params is None:
            continue
        estimate = estimate_training_memory(
            plan.name,
            params,
            device_type=plan.placement.device_type,
            num_devices=plan.placement.num_processes,
            zero_stage=stage,
            lora=policies[plan.name].lora is not None,
            reference_model=float(plan.grpo.get("beta", 0.0) or 0.0) > 0,
            source=source,
        )
        plan.memory = estimate
        estimates[plan.name] = estimate
        grpo = plan.grpo
        if grpo.get("use_vllm") and grpo.get("vllm_mode", "colocate") == "colocate":
            if not grpo.get("vllm_enable_sleep_mode"):
                reserved[plan.name] = float(grpo.get("vllm_gpu_memory_utilization", 0.3))
    warnings = check_memory(placement, estimates, gpu_memory_gib, ram_gib, reserved)
    states = sum(e.gib_per_device for e in estimates.values()) if placement.device_type == "cpu" else 0.0
    return warnings + admission_check(placement, states, ram_gib, config.launch.force)


# Admission on a CPU machine (issue 26): beyond this many policy processes per core a pool makes no step
# in minutes (50 policies on 2 cores: 51 processes, ~14 GB, no step in 4 min); each process also holds
# torch + transformers + TRL before its model (~0.3 GiB measured for the tiny pool's workers).
MAX_PROCESSES_PER_CORE = 4
PROCESS_BASELINE_GIB = 0.3


def admission_check(placement: Placement, estimates_gib: float, ram_gib: float | None, force: bool) -> list[str]:
    """Refuse a CPU pool the machine cannot hold (processes per core, RAM with each process's baseline).

    ``estimates_gib``: the pool's model states (the memory check's sum). With ``force`` the refusal
    becomes a warning (``--force``).
    """
    if placement.device_type != "cpu":
        return []
    processes = sum(p.processes_per_machine for p in placement.policies)
    cores = max(placement.cpu_cores, 1)
    problems = []
    if processes > MAX_PROCESSES_PER_CORE * cores:
        problems.append(f"{processes} policy processes on {cores} CPU cores (at most {MAX_PROCESSES_PER_CORE} per "
                        f"core make progress)")
    need = estimates_gib + processes * PROCESS_BASELINE_GIB
    if ram_gib is not None and need > ram_gib:
        problems.append(f"about {need:.1f} GiB of RAM needed ({processes} processes x {PROCESS_BASELINE_GIB} GiB "
                        f"+ {estimates_gib:.1f} GiB of model states) but this machine has {ram_gib:.1f} GiB")
    if not problems:
        return []
    text = "this machine cannot hold the pool: " + "; ".join(problems)
    if force:
        return [text + " (starting anyway: --force)"]
    raise PlacementError(text + "; use fewer policies or launch.cpu_processes, a bigger machine, or --force")
