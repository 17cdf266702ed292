"""Checks of a launch plan across its policies: identical prompts for the sharing regimes, and model memory."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.config.schema import RunConfig
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.batching import BatchSizeError, trl_generation_batch
from mutualrl.launch.plan.colocated_vllm import size_engines
from mutualrl.launch.plan.mwra import DeviceType, Placement
from mutualrl.regimes.core.registry import get_regime


def check_same_prompts(config: RunConfig, plans: list[Any]) -> list[str]:
    """Sharing regimes need every policy to draw the same prompts per step (docs/launch.md)."""
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
    engine_problems = size_engines(config, placement, plans, gpu_memory_gib)
    # Sleep mode or not: while the engine generates, it holds its whole share next to the trainer's state, which
    # stays resident (TRL wakes the engine before each generation); asleep, it leaves the card to training.
    engines = [p for p in plans if p.engine is not None and p.engine.gpu_memory_utilization is not None]
    reserved = {p.name: float(p.engine.gpu_memory_utilization) for p in engines}
    asleep = {p.name for p in engines if p.grpo.get("vllm_enable_sleep_mode")}
    warnings = check_memory(placement, estimates, gpu_memory_gib, ram_gib, reserved, asleep_while_training=asleep)
    if engine_problems:  # the model states fit (check_memory refuses first what does not): the engines do not
        raise PlacementError(engine_problems[0])
    states = sum(e.gib_per_device for e in estimates.values()) if placement.device_type == "cpu" else 0.0
    return warnings + admission_check(placement, states, ram_gib, config.launch.force)


# Admission on a CPU machine: beyond this many policy processes per core a pool makes no step
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


# ----------------------------------------------------------------------------------------
# Memory sanity check
# ----------------------------------------------------------------------------------------

# Total parameter counts (embeddings included) from the model cards of the paper's pools.
KNOWN_PARAM_COUNTS: dict[str, float] = {
    "Qwen/Qwen2.5-Math-1.5B": 1.54e9,
    "Qwen/Qwen2.5-1.5B-Instruct": 1.54e9,
    "Qwen/Qwen2.5-Coder-1.5B": 1.54e9,
    "Qwen/Qwen3-1.7B-Base": 1.7e9,
    "Qwen/Qwen3-4B-Base": 4.0e9,
    "meta-llama/Llama-3.2-3B-Instruct": 3.21e9,
    "microsoft/Phi-4-mini-instruct": 3.84e9,
    # Its card states none: counted from its config.json (model_shapes.KNOWN_SHAPES; 14 layers x 218.1M + 2 x 32000 x
    # 4096 untied embeddings), as its 6.63 GB of bf16 safetensors confirm.
    "ministral/Ministral-3b-instruct": 3.32e9,
}
_SIZE_IN_NAME = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")


def param_count_for(model: str, hint: float | None = None) -> tuple[float | None, str]:
    """(parameter count, where it came from) for a model id; ``(None, "unknown")`` if no clue."""
    if hint is not None:
        return float(hint), "hint"
    if model in KNOWN_PARAM_COUNTS:
        return KNOWN_PARAM_COUNTS[model], "model card"
    local = local_param_count(model)
    if local[0] is not None:
        return local
    matches = _SIZE_IN_NAME.findall(model.rsplit("/", 1)[-1])
    if matches:
        return float(matches[-1]) * 1e9, "model name"
    return None, "unknown"


def local_param_count(model: str) -> tuple[float | None, str]:
    """The parameters of a model whose folder is on this machine (a local folder, a built builtin, the hub cache):
    counted from its safetensors headers (exact, nothing loaded), else estimated from its ``config.json``."""
    from mutualrl.pools.loading import cached_model_config

    found = cached_model_config(model)
    if found is None:
        return None, "unknown"
    config, config_file = found
    counted = safetensors_param_count(Path(config_file).parent)
    if counted:
        return float(counted), "weights"
    from mutualrl.launch.plan.model_shapes import shape_from_config

    shape = shape_from_config(config, config_file)
    hidden, inner = config.get("hidden_size") or config.get("n_embd"), config.get("intermediate_size")
    if shape is None or not isinstance(hidden, int):
        return None, "unknown"
    inner = inner if isinstance(inner, int) else 4 * hidden
    attention = hidden * hidden * 2 + 2 * hidden * shape.kv_heads * shape.head_dim  # q, o; k, v
    embeddings = shape.vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    return float(embeddings + shape.layers * (attention + 3 * hidden * inner)), "config"


def safetensors_param_count(folder: Path) -> int:
    """Elements of every tensor in the folder's ``*.safetensors`` headers (0 when there are none or one is bad)."""
    import json
    import math

    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with open(path, "rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                header = json.loads(fh.read(size)) if 0 < size < 100_000_000 else None
        except (OSError, ValueError):
            return 0
        if not isinstance(header, dict):
            return 0
        total += sum(math.prod(entry.get("shape", [])) for name, entry in header.items()
                     if name != "__metadata__" and isinstance(entry, dict))
    return total


@dataclass(frozen=True)
class MemoryEstimate:
    """Model-state memory of one policy on each of its devices (activations NOT included)."""

    policy: str
    params: float
    source: str
    bytes_per_device: float
    breakdown: dict[str, float]
    """Component name -> bytes per device."""

    @property
    def gib_per_device(self) -> float:
        return self.bytes_per_device / 2**30


def estimate_training_memory(
    policy: str,
    params: float,
    *,
    device_type: DeviceType,
    num_devices: int,
    zero_stage: int,
    lora: bool = False,
    reference_model: bool = False,
    source: str = "",
) -> MemoryEstimate:
    """Bytes of model state per device, the ZeRO paper's accounting (Rajbhandari et al., 2020).

    GPU under DeepSpeed, bf16 mixed precision with AdamW: bf16 weights 2 B/param, bf16 gradients
    2 B/param, fp32 master weights + Adam m + v 12 B/param (16 B/param in all). ZeRO-1/2/3
    partition optimizer states / + gradients / + weights over the policy's ``num_devices``.
    Without DeepSpeed (DDP) and on the CPU the weights are fp32 (TRL's loading dtype; bf16 is
    autocast only): 4 + 4 + 8 = 16 B/param on every device. A reference model (``beta > 0``)
    adds its weights, partitioned under ZeRO-3. LoRA trains ~nothing: frozen weights only.
    Activations, the KV cache, vLLM and allocator overhead are NOT counted, so this is a
    lower bound: it tells you when a placement surely cannot fit.
    """
    n = max(1, num_devices)
    if device_type == "cpu":
        weight_b, grad_b, optim_b = 4.0, 4.0, 8.0
        zero_stage, n = 0, 1
    elif zero_stage == 0:
        weight_b, grad_b, optim_b = 4.0, 4.0, 8.0
    else:
        weight_b, grad_b, optim_b = 2.0, 2.0, 12.0
    if lora:
        grad_b = optim_b = 0.0
    parts = {
        "weights": weight_b * params / (n if zero_stage >= 3 else 1),
        "gradients": grad_b * params / (n if zero_stage >= 2 else 1),
        "optimizer": optim_b * params / (n if zero_stage >= 1 else 1),
    }
    if reference_model and not lora:
        parts["reference model"] = weight_b * params / (n if zero_stage >= 3 else 1)
    return MemoryEstimate(policy, params, source, sum(parts.values()), parts)


def check_memory(
    placement: Placement,
    estimates: Mapping[str, MemoryEstimate],
    gpu_memory_gib: float | None,
    ram_gib: float | None = None,
    reserved_fraction: Mapping[str, float] | None = None,
    warn_above: float = 0.75,
    asleep_while_training: Collection[str] = (),
) -> list[str]:
    """Compare estimates with device memory; returns warnings, raises PlacementError if it cannot fit.

    GPU: policies sharing a GPU (explicit map) add up. ``reserved_fraction[policy]`` is
    the part of each GPU kept by something else while training (vLLM colocate without
    sleep mode keeps ``vllm_gpu_memory_utilization``). CPU: every policy's state adds up
    in RAM. An estimate above the memory raises; above ``warn_above`` of what training has
    warns (the estimate leaves out activations): an engine in ``asleep_while_training``
    (sleep mode) leaves its share to training.
    """
    if placement.device_type == "cpu":
        return _check_ram(estimates, ram_gib, warn_above)
    if gpu_memory_gib is None:
        return []
    warnings: list[str] = []
    for gpu, users in sorted(_users_per_gpu(placement, estimates).items()):
        warnings += _check_gpu(gpu, users, gpu_memory_gib, reserved_fraction or {}, warn_above, asleep_while_training)
    return warnings


def _check_ram(estimates: Mapping[str, MemoryEstimate], ram_gib: float | None, warn_above: float) -> list[str]:
    """A CPU pool: every policy's state adds up in RAM (see :func:`check_memory`)."""
    if ram_gib is None or not estimates:
        return []
    need = sum(e.gib_per_device for e in estimates.values())
    who = ", ".join(f"{e.policy} {e.gib_per_device:.1f}" for e in estimates.values())
    if need > ram_gib:
        raise PlacementError(
            f"the pool needs at least {need:.1f} GiB of RAM for weights, gradients and Adam states in fp32 "
            f"({who} GiB) but this machine has {ram_gib:.1f} GiB; use smaller models, LoRA, or a GPU machine"
        )
    if need > warn_above * ram_gib:
        return [f"model states alone take {need:.1f} of {ram_gib:.1f} GiB RAM ({who} GiB)"]
    return []


def _users_per_gpu(placement: Placement, estimates: Mapping[str, MemoryEstimate]) -> dict[int, list[tuple[str, float]]]:
    """GPU -> (policy, GiB of its state on each of its devices) of every policy with an estimate that uses it."""
    per_gpu: dict[int, list[tuple[str, float]]] = {}
    for placed in placement.policies:
        estimate = estimates.get(placed.name)
        if estimate is None:
            continue
        for gpu in placed.devices:
            per_gpu.setdefault(gpu, []).append((placed.name, estimate.gib_per_device))
    return per_gpu


def _check_gpu(gpu: int, users: list[tuple[str, float]], gpu_memory_gib: float, reserved_fraction: Mapping[str, float],
               warn_above: float, asleep_while_training: Collection[str]) -> list[str]:
    """One GPU: its users' model states against what the colocated vLLM engines leave (see :func:`check_memory`)."""
    need = sum(g for _, g in users)
    # Every colocated engine on this GPU takes its own share of the card (vLLM's gpu_memory_utilization).
    shares = {name: reserved_fraction[name] for name, _ in users if reserved_fraction.get(name)}
    usable = gpu_memory_gib * (1.0 - sum(shares.values()))
    who = " + ".join(f"{name} {g:.1f}" for name, g in users)
    if need > usable:
        raise PlacementError(_does_not_fit(gpu, who, usable, gpu_memory_gib, shares, len(users)))
    awake = {name: share for name, share in shares.items() if name not in asleep_while_training}
    training = gpu_memory_gib * (1.0 - sum(awake.values()))
    if not need > warn_above * training:
        return []
    engines = "".join(f"; {name}'s vLLM engine holds {share:g} of the card" for name, share in awake.items())
    return [
        f"GPU {gpu}: model state alone ({who} GiB) takes {need / training:.0%} of the {training:.1f} GiB "
        f"available{engines}; activations may not fit (lower grpo.vllm_gpu_memory_utilization or use more "
        f"GPUs)" if awake else
        f"GPU {gpu}: model state alone ({who} GiB) takes {need / training:.0%} of the {training:.1f} GiB "
        f"available; activations may not fit"
    ]


def _does_not_fit(gpu: int, who: str, usable: float, gpu_memory_gib: float, shares: Mapping[str, float],
                  users: int) -> str:
    """The one-line refusal of a GPU whose model states and vLLM shares exceed its memory, with what to change."""
    engines = ", ".join(f"{name}'s vLLM engine {share:g} ({share * gpu_memory_gib:.1f} GiB)"
                        for name, share in shares.items())
    vllm = (f" after {engines} (grpo.vllm_gpu_memory_utilization, held next to the trainer while it generates)"
            if shares else "")
    fixes = "lower grpo.vllm_gpu_memory_utilization, " if shares else ""
    return (f"GPU {gpu}: {who} GiB of model state (weights, gradients, Adam states; activations not even counted) "
            f"does not fit in the {max(usable, 0.0):.1f} GiB left of its {gpu_memory_gib:.1f} GiB{vllm}; {fixes}give "
            f"the polic{'y' if users == 1 else 'ies'} more GPUs to shard over (--gpus / --device-map, with "
            f"--set launch.deepspeed=zero3), or train LoRA adapters")


def check_model_context(config: RunConfig) -> None:
    """A prompt of ``task.max_prompt_tokens`` plus a completion of ``grpo.max_completion_length`` must fit each
    policy's model context (its position embedding): the dry run and the run refuse, before anything is written,
    what would otherwise die as an IndexError inside the model. A model whose context is not known here passes."""
    from mutualrl.pools.loading import model_context

    for policy in config.pool.policies:
        known = model_context(policy.model)
        if known is None:
            continue
        positions, source = known
        completion = {**config.grpo, **policy.grpo}.get("max_completion_length")
        completion = completion if isinstance(completion, int) else 0  # unset: the prompt alone must fit
        needed = config.task.max_prompt_tokens + completion
        if needed > positions:
            raise PlacementError(
                f"task.max_prompt_tokens={config.task.max_prompt_tokens} + grpo.max_completion_length={completion} "
                f"= {needed} tokens: more than policy {policy.name!r}'s model holds ({policy.model}: {positions} "
                f"positions, {source}); lower them")


def check_ports(config: RunConfig) -> None:
    """Policy i meets its ranks on ``launch.main_process_port + i``: the last one must still be a port (<= 65535),
    or every launch of that policy fails inside torch.distributed."""
    last = config.launch.main_process_port + len(config.pool.policies) - 1
    if last > 65535:
        raise PlacementError(f"launch.main_process_port={config.launch.main_process_port}: policy i uses that port "
                             f"+ i, and {len(config.pool.policies)} policies reach {last}, past 65535; lower it")

