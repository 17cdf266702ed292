"""The sizes a run derives from its recipe, estimated before it starts against the memory there is.

A recipe's numbers multiply: ``grpo.num_generations=10000`` makes a per-device batch of 10,000 completions, and one
forward over it holds ``rows x completion tokens x vocabulary`` logits. Each policy process goes through three
phases, one at a time, each with its own peak (lower bounds: activations other than these are not counted):

- training: TRL's logits over a micro-batch (``per_device_train_batch_size`` rows x ``max_completion_length``
  tokens x vocabulary), twice (the logits and their log-softmax or gradient);
- generation: the KV cache of the rank's generation batch (``per_device_train_batch_size x steps_per_generation``
  rows x prompt + completion tokens; a colocated engine's at most ``max_num_seqs`` at once) and the next-token
  logits of those rows; on a GPU a colocated engine's memory is its share of the card (the engine table);
- validation: the KV cache and logits of ``validation.batch_size`` prompts of prompt + new tokens (through a
  colocated engine: the engine's).

On a CPU every process's peak adds up in RAM with the model states and the processes' baseline: more than the RAM
is refused (``--force``: a warning); on a GPU a policy's peak beside its model state above the card is a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mutualrl.config.grpo_schema import grpo_default
from mutualrl.config.schema import RunConfig
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.checks import PROCESS_BASELINE_GIB
from mutualrl.launch.plan.model_shapes import ModelShape, model_shape
from mutualrl.launch.plan.mwra import Placement

LOGIT_COPIES = 2


@dataclass(frozen=True)
class PhasePeak:
    """The estimated peak of one phase of a policy process, with how it was counted."""

    phase: str
    gib: float
    how: str


def _field(grpo: dict[str, Any], name: str) -> int:
    value = grpo.get(name)
    return int(value if value is not None else grpo_default(name))


def phase_peaks(config: RunConfig, plan: Any, shape: ModelShape) -> list[PhasePeak]:
    """Training, generation and validation peaks of one process of ``plan`` (module docstring)."""
    grpo, gib = plan.grpo, 2**30
    dtype = 4 if plan.placement.device_type == "cpu" or not (grpo.get("bf16") or grpo.get("fp16")) else 2
    rows, completion = _field(grpo, "per_device_train_batch_size"), _field(grpo, "max_completion_length")
    prompt = config.task.max_prompt_tokens
    kv_token = shape.kv_bytes_per_token(dtype)
    train = rows * completion * shape.vocab * dtype * LOGIT_COPIES
    peaks = [PhasePeak("training logits", train / gib, f"{rows} rows x {completion} completion tokens x "
                       f"{shape.vocab} vocabulary x {dtype} B x {LOGIT_COPIES}")]
    steps = grpo.get("steps_per_generation") or grpo.get("gradient_accumulation_steps") or 1
    generated = rows * int(steps)
    engine = getattr(plan, "engine", None)
    if engine is not None:
        generated = min(generated, engine.max_num_seqs)
    if engine is None or plan.placement.device_type == "cpu":  # a GPU engine's memory is its share (engine table)
        kv = generated * (prompt + completion) * kv_token
        logits = generated * shape.vocab * 4
        peaks.append(PhasePeak("generation", (kv + logits) / gib, f"KV cache of {generated} sequences x "
                               f"{prompt + completion} tokens x {kv_token} B + their next-token logits"))
    if engine is not None:  # validation generates through the engine: its KV cache is the engine's
        return peaks
    val_rows = config.validation.batch_size
    val_tokens = prompt + (config.validation.max_new_tokens or completion)
    validation = val_rows * (val_tokens * kv_token + shape.vocab * 4)
    peaks.append(PhasePeak("validation", validation / gib, f"KV cache of {val_rows} prompts x {val_tokens} tokens "
                           f"x {kv_token} B + their next-token logits"))
    return peaks


def check_bounds(config: RunConfig, placement: Placement, plans: list[Any], ram_gib: float | None,
                 gpu_memory_gib: float | None) -> list[str]:
    """Every policy's peak against the memory there is (module docstring); returns warnings, raises
    :class:`~mutualrl.errors.PlacementError` when a CPU pool cannot hold it (unless ``launch.force``)."""
    peaks: dict[str, PhasePeak] = {}
    for plan in plans:
        shape = model_shape(plan.model)
        if shape is not None:
            peaks[plan.name] = max(phase_peaks(config, plan, shape), key=lambda p: p.gib)
    if placement.device_type == "cpu":
        return _check_ram(config, plans, peaks, ram_gib)
    warnings = []
    for plan in plans:
        peak = peaks.get(plan.name)
        if peak is None or gpu_memory_gib is None or plan.memory is None:
            continue
        awake = (plan.engine.gpu_memory_utilization or 0.0) if plan.engine is not None and not plan.grpo.get(
            "vllm_enable_sleep_mode") else 0.0
        need = plan.memory.gib_per_device + peak.gib + awake * gpu_memory_gib
        if need > gpu_memory_gib:
            warnings.append(f"{plan.name}: its {peak.phase} take about {peak.gib:.1f} GiB per GPU ({peak.how}) beside "
                            f"{plan.memory.gib_per_device:.1f} GiB of model state: more than the {gpu_memory_gib:g} GiB "
                            f"card; lower grpo.per_device_train_batch_size (batch.micro_batch_prompts_per_device) or "
                            f"the lengths")
    return warnings


def _check_ram(config: RunConfig, plans: list[Any], peaks: dict[str, PhasePeak], ram_gib: float | None) -> list[str]:
    """A CPU pool: every process's state, baseline and peak together against the RAM."""
    if ram_gib is None or not peaks:
        return []
    processes = sum(p.placement.num_processes for p in plans)
    states = sum(p.memory.gib_per_device for p in plans if p.memory is not None)
    working = {p.name: peaks[p.name].gib * p.placement.num_processes for p in plans if p.name in peaks}
    need = states + processes * PROCESS_BASELINE_GIB + sum(working.values())
    if need <= ram_gib:
        return []
    biggest = max(working, key=lambda name: working[name])
    peak = peaks[biggest]
    text = (f"this machine cannot hold the run's working memory: about {need:.1f} GiB of RAM needed, "
            f"{ram_gib:.1f} GiB here; {biggest}'s {peak.phase} alone take {peak.gib:.1f} GiB ({peak.how})")
    if config.launch.force:
        return [text + " (starting anyway: --force)"]
    raise PlacementError(text + "; lower grpo.num_generations, grpo.per_device_train_batch_size, the lengths or "
                         "validation.batch_size, or --force")
