"""Paper-style batch sizes (in prompts) -> TRL GRPOConfig batch fields, per policy world size.

The paper (App. "Implementation details") describes its batch in prompts: "each GRPO
update sees a global batch of 1024 prompts, split into four mini-batches of 256 prompts
and micro-batches of two prompts per GPU", with K = 5 responses per prompt. TRL counts
*completions per device* instead:

- ``per_device_train_batch_size`` = completions in one forward/backward on one device
  = micro prompts x K;
- ``steps_per_generation`` = how many of those per-device batches one generation covers,
  so one generation step produces ``per_device x world x steps_per_generation`` =
  prompts_per_step x K completions (TRL's ``generation_batch_size``);
- ``gradient_accumulation_steps`` = micro-batches per optimizer update, so one
  generation yields ``steps_per_generation / gradient_accumulation_steps`` =
  ``mini_batches_per_step`` optimizer updates.

Worked example (the paper's numbers, K = 5)::

    prompts_per_step=1024, mini_batches_per_step=4, micro_batch_prompts_per_device=2
    per_device_train_batch_size = 2 x 5                 = 10 completions
    world size 1: steps_per_generation = 1024 x 5 / 10  = 512, GA = 512 / 4 = 128
    world size 2: steps_per_generation = 1024 x 5 / 20  = 256, GA = 256 / 4 = 64
    world size 8: steps_per_generation = 1024 x 5 / 80  = 64,  GA = 64 / 4  = 16

Every policy then draws the same ``prompts_per_step`` prompts per generation step
whatever its world size, which the mutual-RL regimes rely on (identical prompts at every
step). With ``num_iterations`` = mu > 1, TRL reuses each generation
for mu passes, i.e. mu x mini_batches_per_step updates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mutualrl.config.grpo_schema import grpo_default
from mutualrl.config.schema import BatchConfig
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.grpo_decisions import GRPODecision


class BatchSizeError(PlacementError):
    """The batch cannot be split evenly over a policy's devices (raised before anything starts)."""


@dataclass(frozen=True)
class DerivedBatch:
    """TRL batch fields for one policy, and what they mean in prompts."""

    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int
    world_size: int
    num_generations: int
    prompts_per_step: int
    mini_batches_per_step: int

    @property
    def generation_batch_size(self) -> int:
        """Completions per generation step (TRL derives the same number)."""
        return self.per_device_train_batch_size * self.world_size * self.steps_per_generation

    @property
    def optimizer_steps_per_generation(self) -> int:
        return self.steps_per_generation // self.gradient_accumulation_steps

    def grpo_fields(self) -> dict[str, int]:
        return {
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "steps_per_generation": self.steps_per_generation,
        }


def derive_batch(batch: BatchConfig, num_generations: int, world_size: int, policy: str = "") -> DerivedBatch:
    """TRL fields for ``batch`` with K = ``num_generations`` on ``world_size`` processes.

    Raises :class:`BatchSizeError` naming the fields when the numbers do not divide.
    """
    who = f"policy {policy!r}: " if policy else ""
    for name, value in (
        ("batch.prompts_per_step", batch.prompts_per_step),
        ("batch.mini_batches_per_step", batch.mini_batches_per_step),
        ("batch.micro_batch_prompts_per_device", batch.micro_batch_prompts_per_device),
    ):
        if value < 1:
            raise BatchSizeError(f"{who}{name} must be >= 1, got {value}")
    if num_generations < 2:
        raise BatchSizeError(f"{who}grpo.num_generations must be >= 2 for group advantages, got {num_generations}")
    if world_size < 1:
        raise BatchSizeError(f"{who}world size must be >= 1, got {world_size}")
    micro = batch.micro_batch_prompts_per_device
    prompts_per_pass = micro * world_size
    if batch.prompts_per_step % prompts_per_pass:
        raise BatchSizeError(
            f"{who}batch.prompts_per_step ({batch.prompts_per_step}) must be divisible by "
            f"batch.micro_batch_prompts_per_device ({micro}) x {world_size} device(s) = {prompts_per_pass} prompts "
            f"per forward pass; {_suggest(batch, world_size)}"
        )
    steps_per_generation = batch.prompts_per_step // prompts_per_pass
    if steps_per_generation % batch.mini_batches_per_step:
        raise BatchSizeError(
            f"{who}batch.mini_batches_per_step ({batch.mini_batches_per_step}) must divide the "
            f"{steps_per_generation} micro-batches per device of one step (steps_per_generation = "
            f"batch.prompts_per_step {batch.prompts_per_step} / ({micro} x {world_size})); {_suggest(batch, world_size)}"
        )
    return DerivedBatch(
        per_device_train_batch_size=micro * num_generations,
        gradient_accumulation_steps=steps_per_generation // batch.mini_batches_per_step,
        steps_per_generation=steps_per_generation,
        world_size=world_size,
        num_generations=num_generations,
        prompts_per_step=batch.prompts_per_step,
        mini_batches_per_step=batch.mini_batches_per_step,
    )


def fits(batch: BatchConfig, world_size: int) -> bool:
    """Whether ``batch`` splits evenly over ``world_size`` processes (K does not matter)."""
    micro = batch.micro_batch_prompts_per_device
    if micro < 1 or batch.mini_batches_per_step < 1 or batch.prompts_per_step % (micro * world_size):
        return False
    return (batch.prompts_per_step // (micro * world_size)) % batch.mini_batches_per_step == 0


def valid_world_sizes(batch: BatchConfig, upto: int) -> list[int]:
    return [n for n in range(1, upto + 1) if fits(batch, n)]


def _suggest(batch: BatchConfig, world_size: int) -> str:
    sizes = valid_world_sizes(batch, max(8, world_size))
    return (
        f"device counts that work with this batch: {', '.join(map(str, sizes)) or 'none'}; or change "
        f"`batch` (e.g. --set batch.prompts_per_step=...)"
    )


def apply_batch(
    grpo: Mapping[str, Any], batch: BatchConfig | None, world_size: int, policy: str = ""
) -> tuple[GRPODecision, DerivedBatch | None]:
    """The batch fields decided for ``world_size`` from ``batch``, over ``grpo`` (the recipe's fields).

    ``batch`` None: nothing decided (the recipe's fields only checked, see :func:`check_trl_batch`).
    Otherwise the derived fields replace the recipe's, each one it changes noted; ``generation_batch_size`` is
    dropped (TRL refuses it together with ``steps_per_generation``). Returns (decided, derived).
    """
    if batch is None:
        check_trl_batch(grpo, world_size, policy)
        return GRPODecision(), None
    num_generations = int(grpo.get("num_generations", grpo_default("num_generations")))
    derived = derive_batch(batch, num_generations, world_size, policy)
    fields = derived.grpo_fields()
    notes = [f"grpo.{key}={grpo[key]} replaced by {value} (derived from `batch` for {world_size} device(s))"
             for key, value in fields.items() if key in grpo and grpo[key] != value]
    if grpo.get("generation_batch_size") is not None:
        notes.append("grpo.generation_batch_size dropped: `batch.prompts_per_step` sets the generation batch")
    return GRPODecision(fields, dropped=("generation_batch_size",), notes=notes), derived


def trl_generation_batch(grpo: Mapping[str, Any], world_size: int) -> tuple[int, int]:
    """(completions, prompts) per generation step that TRL will use for these fields."""
    per_device = int(grpo.get("per_device_train_batch_size", grpo_default("per_device_train_batch_size")))
    k = int(grpo.get("num_generations", grpo_default("num_generations")))
    if grpo.get("generation_batch_size") is not None:
        completions = int(grpo["generation_batch_size"])
    else:
        steps = grpo.get("steps_per_generation")
        if steps is None:
            steps = grpo.get("gradient_accumulation_steps", grpo_default("gradient_accumulation_steps"))
        completions = per_device * world_size * int(steps)
    return completions, completions // k if k else 0


def check_trl_batch(grpo: Mapping[str, Any], world_size: int, policy: str = "") -> None:
    """The checks of ``GRPOConfig.__post_init__`` on batch fields, with our field names, before launch."""
    who = f"policy {policy!r}: " if policy else ""
    per_device = int(grpo.get("per_device_train_batch_size", grpo_default("per_device_train_batch_size")))
    k = int(grpo.get("num_generations", grpo_default("num_generations")))
    if k < 2:
        raise BatchSizeError(f"{who}grpo.num_generations must be >= 2 for group advantages, got {k}")
    if grpo.get("generation_batch_size") is not None and grpo.get("steps_per_generation") is not None:
        raise BatchSizeError(
            f"{who}grpo.generation_batch_size and grpo.steps_per_generation cannot both be set (TRL); keep one"
        )
    if grpo.get("generation_batch_size") is not None and int(grpo["generation_batch_size"]) % (per_device * world_size):
        raise BatchSizeError(
            f"{who}grpo.generation_batch_size ({grpo['generation_batch_size']}) must be divisible by "
            f"grpo.per_device_train_batch_size ({per_device}) x {world_size} device(s)"
        )
    completions, _ = trl_generation_batch(grpo, world_size)
    if completions % k:
        raise BatchSizeError(
            f"{who}the generation batch ({completions} completions = grpo.per_device_train_batch_size {per_device} "
            f"x {world_size} device(s) x steps per generation) must be divisible by grpo.num_generations ({k}); "
            f"set `batch` (prompts per step) instead and mutualrl derives the per-device sizes"
        )


def split_across_cpu_ranks(grpo: Mapping[str, Any], ranks: int, policy: str = "") -> GRPODecision:
    """A recipe without ``batch`` (its fields ``grpo``) run on ``ranks`` CPU ranks: each rank takes 1/ranks of the
    per-device batch, the one field decided.

    So a step draws the same prompts as on one rank (``launch.cpu_processes`` exists to check
    exactly that equivalence).
    """
    if ranks <= 1:
        return GRPODecision()
    per_device = int(grpo.get("per_device_train_batch_size") or grpo_default("per_device_train_batch_size"))
    if per_device % ranks:
        raise BatchSizeError(f"policy {policy!r}: per_device_train_batch_size={per_device} does not split over "
                             f"launch.cpu_processes={ranks} ranks; choose a divisor of it")
    return GRPODecision({"per_device_train_batch_size": per_device // ranks},
                   notes=[f"{policy}: {ranks} CPU ranks x per_device_train_batch_size {per_device // ranks} "
                          f"(= {per_device} on one rank)"])
