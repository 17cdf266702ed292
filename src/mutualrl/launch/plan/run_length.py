"""A run's length against its train prompts: the prompts one step draws, the optimizer steps an epoch holds, and the
refusal of a run no step of which could train.

TRL's sampler (``RepeatSampler``) hands out whole generation batches of ``generation_batch_size / num_generations``
prompts and drops the rest of each epoch; each process's dataloader then holds ``floor(prompts / batch) x
steps_per_generation x num_iterations`` batches, and transformers' ``Trainer`` makes an optimizer step of every
``gradient_accumulation_steps`` of them. With fewer train prompts than one batch the dataloader is empty: with
``max_steps`` transformers stops at step 0 ("not a single sample in your epoch_iterator", exit 0), with
``num_train_epochs`` it raises ``ValueError`` ("args.max_steps must be set to a positive value"). The plan refuses
both before anything starts.
"""

from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Mapping, Sequence
from typing import Any

from mutualrl.config.grpo_schema import grpo_default
from mutualrl.config.schema import BatchConfig
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.batching import fits, trl_generation_batch


class TooFewPromptsError(PlacementError):
    """The train prompts cannot fill one step's batch (raised before anything starts)."""


def _field(grpo: Mapping[str, Any], name: str) -> int:
    value = grpo.get(name)
    return int(value if value is not None else grpo_default(name))


def steps_per_generation(grpo: Mapping[str, Any], world_size: int) -> int:
    """Per-device batches one generation covers, as TRL derives it (from ``generation_batch_size`` where set)."""
    completions, _ = trl_generation_batch(grpo, world_size)
    return max(1, completions // (_field(grpo, "per_device_train_batch_size") * world_size))


def optimizer_steps_per_epoch(grpo: Mapping[str, Any], world_size: int, train_prompts: int) -> int:
    """Optimizer steps in one pass over ``train_prompts``, as transformers counts them (0: no whole batch)."""
    _, prompts = trl_generation_batch(grpo, world_size)
    generations = train_prompts // max(prompts, 1)
    batches = generations * steps_per_generation(grpo, world_size) * _field(grpo, "num_iterations")
    accumulation = _field(grpo, "gradient_accumulation_steps")
    return batches // accumulation + int(batches % accumulation > 0)


def run_steps(grpo: Mapping[str, Any], world_size: int, train_prompts: int | None) -> int | None:
    """The run's optimizer steps: ``max_steps``, else ``ceil(num_train_epochs x steps per epoch)`` where the train
    prompts are known (None where they are not)."""
    max_steps = grpo.get("max_steps")
    if max_steps is not None and int(max_steps) > 0:
        return int(max_steps)
    if train_prompts is None:
        return None
    epochs = float(grpo.get("num_train_epochs") or grpo_default("num_train_epochs"))
    return math.ceil(epochs * optimizer_steps_per_epoch(grpo, world_size, train_prompts))


def plan_steps(grpo: Mapping[str, Any], world_size: int, train_prompts: int | None) -> tuple[int, int, int | None]:
    """(sequences one generation step makes, optimizer steps it feeds, the run's optimizer steps or None)."""
    completions, _ = trl_generation_batch(grpo, world_size)
    per_generation = steps_per_generation(grpo, world_size) * _field(grpo, "num_iterations")
    accumulation = _field(grpo, "gradient_accumulation_steps")
    return completions, max(1, per_generation // accumulation), run_steps(grpo, world_size, train_prompts)


def check_train_prompts(plans: Sequence[Any], train_prompts: int | None, batch: BatchConfig | None,
                        where: str) -> list[str]:
    """Refuse a run no step of which could train; warn where ``max_steps`` outruns explicit epochs.

    ``plans``: the policies' plans (their final GRPO fields, world sizes); ``train_prompts``: the prompts training will
    read (None: not known here, nothing checked); ``where``: the prompts' source in words. Raises
    :class:`TooFewPromptsError`, one line with the prompts one step draws and the fix; returns the warnings.
    """
    if train_prompts is None:
        return []
    warnings = []
    policies = [(plan.name, plan.grpo, plan.placement.world_size) for plan in plans]
    # a recipe without `batch` on CPU ranks gives one rank's batch, which the plan split over the ranks
    split = batch is None and any(getattr(plan.placement, "device_type", "") == "cpu" for plan in plans)
    for name, grpo, world_size in policies:
        _, needed = trl_generation_batch(grpo, world_size)
        if train_prompts < needed:
            raise TooFewPromptsError(
                f"{where}: {train_prompts:,} train prompts, fewer than the {needed:,} one step of {name} draws, so no "
                f"step could train (transformers would find no batch); "
                f"{_fix(grpo, world_size, train_prompts, batch, [p[2] for p in policies], split)}")
        epochs, max_steps = grpo.get("num_train_epochs"), grpo.get("max_steps")
        if epochs is not None and max_steps is not None and int(max_steps) > 0:
            per_epoch = optimizer_steps_per_epoch(grpo, world_size, train_prompts)
            if int(max_steps) > math.ceil(float(epochs) * per_epoch):
                warnings.append(
                    f"{name}: max_steps {max_steps} is more than grpo.num_train_epochs {epochs:g} reach "
                    f"({math.ceil(float(epochs) * per_epoch)} optimizer steps of {per_epoch} an epoch over "
                    f"{train_prompts:,} prompts); max_steps wins: the run goes over the prompts "
                    f"{int(max_steps) / per_epoch:.1f} times")
    return warnings


def _fix(grpo: Mapping[str, Any], world_size: int, train_prompts: int, batch: BatchConfig | None,
         world_sizes: Sequence[int], split: bool = False) -> str:
    """How to make one step draw at most ``train_prompts`` prompts: the largest batch that still splits (``split``:
    the recipe's per-device batch is one CPU rank's whole batch, split over the ranks by the plan)."""
    more = "or train on more prompts (more rows, or a larger task.train_limit)"
    if batch is not None:
        fitting = [p for p in range(train_prompts, 0, -1)
                   if all(fits(replace(batch, prompts_per_step=p), n) for n in world_sizes)]
        if fitting:
            return f"lower batch.prompts_per_step to {fitting[0]} (--set batch.prompts_per_step={fitting[0]}), {more}"
        return f"lower batch.prompts_per_step and batch.micro_batch_prompts_per_device, {more}"
    k = _field(grpo, "num_generations")
    passes = (1 if split else world_size) * steps_per_generation(grpo, world_size)
    per_device = k * (train_prompts // passes)
    if per_device >= k:
        return (f"lower grpo.per_device_train_batch_size to {per_device} (--set "
                f"grpo.per_device_train_batch_size={per_device}), {more}")
    return f"lower grpo.steps_per_generation or grpo.gradient_accumulation_steps, {more}"
