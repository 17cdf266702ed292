"""Run length and cadence: recipe counts in paper steps -> TRL's optimizer steps.

Paper, App. "Implementation details": "each GRPO update sees a global batch of 1024
prompts, split into four mini-batches of 256 prompts ...; checkpoints are saved every 20
steps, validation runs every 5 steps". A *step* there is one GRPO update of 1024 prompts
(VERL's ``global_steps``); TRL's ``global_step`` counts optimizer steps, and one paper
step is ``mini_batches_per_step`` of them (x ``num_iterations`` when a generation is
reused, VERL's ``ppo_epochs``). With the paper batch::

    1 paper step        = 1024 prompts = 4 optimizer steps
    validate every 5    = every 20 optimizer steps
    checkpoint every 20 = every 80 optimizer steps
    log every 1         = every 4 optimizer steps (one row per paper step)
    max_steps 50        = 200 optimizer steps (and a cosine schedule 200 steps long)

The learning-rate schedule: TRL steps it once per optimizer step over ``max_steps``
optimizer steps; VERL steps it once per paper step over the paper steps. Both span the
same run; TRL's is the smooth version of VERL's four-step staircase.

:func:`resolve_cadence` is the one conversion (pure, hand-checked in the tests); the plan
merges the fields it decides (:func:`apply_cadence`) into each policy's GRPO fields and the worker
takes the validation interval from it. A recipe without ``schedule`` keeps its ``grpo`` / ``validation`` counts as written.
The dry-run plan shows the schedule in both units (:func:`describe`, :func:`render_schedule`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mutualrl.config.schema import SCHEDULE_GRPO_FIELDS as GRPO_FIELDS
from mutualrl.config.schema import BatchConfig, ScheduleConfig
from mutualrl.errors import UsageError

DEFAULT_VALIDATE_EVERY = 5
"""Validation interval, in optimizer steps, of a recipe that sets neither schedule nor validation."""

@dataclass(frozen=True)
class Cadence:
    """Every schedule count in both units; ``None``: the recipe leaves it to TRL / the defaults."""

    unit: str
    optimizer_steps_per_unit: int
    counts: dict[str, int | None]
    """The recipe's counts in ``unit`` (keys: the ScheduleConfig count fields)."""
    prompts_per_unit: int | None = None
    """Prompts of one paper step (``batch.prompts_per_step``); None for optimizer steps."""

    def optimizer(self, name: str) -> int | None:
        value = self.counts[name]
        return None if value is None else value * self.optimizer_steps_per_unit

    def grpo_fields(self) -> dict[str, int]:
        """The GRPOConfig fields this schedule sets, in optimizer steps."""
        return {trl: self.optimizer(ours) for ours, trl in GRPO_FIELDS.items() if self.counts[ours] is not None}


def optimizer_steps_per_paper_step(mini_batches_per_step: int, num_iterations: int = 1) -> int:
    """Optimizer steps of one paper step: one per mini-batch, per pass over the generation."""
    if mini_batches_per_step < 1 or num_iterations < 1:
        raise ValueError(f"mini_batches_per_step and num_iterations must be >= 1, got "
                         f"{mini_batches_per_step} and {num_iterations}")
    return mini_batches_per_step * num_iterations


def resolve_cadence(schedule: ScheduleConfig | None, batch: BatchConfig | None,
                    num_iterations: int = 1) -> Cadence | None:
    """The schedule in optimizer steps (None without a schedule).

    ``unit: paper`` needs ``batch`` (it defines the paper step); raises :class:`UsageError`
    naming the field otherwise.
    """
    if schedule is None:
        return None
    counts = {name: getattr(schedule, name) for name in (*GRPO_FIELDS, "validate_every")}
    if schedule.unit == "optimizer":
        return Cadence(unit="optimizer", optimizer_steps_per_unit=1, counts=counts)
    if batch is None:
        raise UsageError("schedule.unit: 'paper' counts paper steps, which `batch` defines (prompts_per_step, "
                         "mini_batches_per_step); set `batch`, or schedule.unit: optimizer")
    per = optimizer_steps_per_paper_step(batch.mini_batches_per_step, num_iterations)
    return Cadence(unit="paper", optimizer_steps_per_unit=per, counts=counts, prompts_per_unit=batch.prompts_per_step)


def validation_interval(cadence: Cadence | None, every_steps: int | None) -> int:
    """Optimizer steps between validations: ``validation.every_steps``, else the schedule's, else 5."""
    if every_steps is not None:
        return every_steps
    if cadence is not None and cadence.counts["validate_every"] is not None:
        return int(cadence.optimizer("validate_every") or 0)
    return DEFAULT_VALIDATE_EVERY


def apply_cadence(grpo: Mapping[str, Any], cadence: Cadence | None) -> tuple[dict[str, int], list[str]]:
    """The GRPOConfig fields the schedule decides (optimizer steps), over ``grpo`` (the recipe's fields); a note
    where one replaces a value the recipe set.

    The conversions themselves are shown in the dry run's "Run length and cadence" table.
    """
    if cadence is None:
        return {}, []
    fields = cadence.grpo_fields()
    notes = [f"grpo.{name}={grpo[name]} (a policy override) replaced by the schedule's {value}"
             for name, value in fields.items() if grpo.get(name) is not None and grpo[name] != value]
    return fields, notes


def policy_cadence(schedule: ScheduleConfig | None, batch: BatchConfig | None,
                   grpo: Mapping[str, Any]) -> Cadence | None:
    """:func:`resolve_cadence` for a policy whose merged GRPO fields are ``grpo`` (its ``num_iterations``)."""
    return resolve_cadence(schedule, batch, int(grpo.get("num_iterations") or 1))


def max_optimizer_steps(config: Any) -> int | None:
    """A run's length in optimizer steps (``schedule.max_steps`` converted, else ``grpo.max_steps``)."""
    cadence = policy_cadence(config.schedule, config.batch, config.grpo)
    if cadence is not None and cadence.counts["max_steps"] is not None:
        return cadence.optimizer("max_steps")
    return config.grpo.get("max_steps")


# -- the schedule as the dry-run plan shows it: both units, epoch lengths from the task's size ---------------
def epoch_length(epochs: float, train_prompts: int, cadence: Cadence) -> tuple[int, int]:
    """(paper steps per epoch, optimizer steps of the run) for an epoch-based paper-unit run, as TRL counts.

    TRL's sampler drops the last incomplete batch of prompts in every epoch, and Trainer runs
    ``ceil(epochs x optimizer steps per epoch)`` steps.
    """
    per_epoch = train_prompts // int(cadence.prompts_per_unit or 1)
    return per_epoch, math.ceil(epochs * per_epoch * cadence.optimizer_steps_per_unit)


def describe(cadence: Cadence | None, grpo: dict[str, Any], validate_every: int,
             train_prompts: int | None = None, epoch_steps: int | None = None) -> list[tuple[str, str, str]]:
    """Rows (setting, recipe value, optimizer steps) for the dry-run plan; ``epoch_steps``: the optimizer steps one
    pass over the ``train_prompts`` holds (the plan counts them as TRL does), which turns every run length into a
    step count."""
    unit = cadence.unit if cadence is not None else "optimizer"

    def row(label: str, ours: str, optimizer_value: Any) -> tuple[str, str, str]:
        if isinstance(optimizer_value, float) and optimizer_value.is_integer():
            optimizer_value = int(optimizer_value)
        recipe = "-" if optimizer_value is None else "(as optimizer steps)"
        if cadence is not None and cadence.counts[ours] is not None:
            count = cadence.counts[ours]
            recipe = f"{count} {unit} step{'s' if count != 1 else ''}"
        shown = "-" if optimizer_value is None else str(optimizer_value)
        if ours == "validate_every" and optimizer_value == 0:
            shown = "0 (at the start and the end only)"
        return label, recipe, shown

    length = run_length_words(cadence, grpo, train_prompts, epoch_steps)
    head = []
    if cadence is not None and cadence.unit == "paper":
        head = [("1 paper step", f"{cadence.prompts_per_unit} prompts",
                 f"{cadence.optimizer_steps_per_unit} (mini-batches x num_iterations)")]
    run_length = row("run length (max_steps; LR schedule length)", "max_steps", length)
    if grpo.get("max_steps") is None or int(grpo["max_steps"]) <= 0:  # epochs set the length, not a step count
        epochs = grpo.get("num_train_epochs")
        recipe = f"{3 if epochs is None else epochs:g} epochs (grpo.num_train_epochs)"
        run_length = (run_length[0], recipe, run_length[2])
    return [
        *head,
        run_length,
        row("LR warm-up (warmup_steps)", "warmup_steps", grpo.get("warmup_steps")),
        row("checkpoint every (save_steps)", "save_every", grpo.get("save_steps")),
        row("log every (logging_steps)", "log_every", grpo.get("logging_steps")),
        row("validate every", "validate_every", validate_every),
    ]


def run_length_words(cadence: Cadence | None, grpo: dict[str, Any], train_prompts: int | None,
                     epoch_steps: int | None) -> Any:
    """The run length in optimizer steps, with the epochs or steps it stands for where the prompts are known."""
    epochs = grpo.get("num_train_epochs")
    length = grpo.get("max_steps")
    paper = cadence is not None and cadence.unit == "paper"
    if length is not None and int(length) > 0:
        if epoch_steps and train_prompts:
            return f"{int(length)} (= {int(length) / epoch_steps:.3g} epochs of {train_prompts:,} train prompts)"
        return length
    epochs = 3 if epochs is None else epochs
    if epoch_steps is not None and train_prompts:
        total = math.ceil(float(epochs) * epoch_steps)
        if paper:
            per_unit = cadence.optimizer_steps_per_unit  # type: ignore[union-attr]
            paper_steps = epoch_steps // per_unit
            return (f"{total} (= {epochs:g} epochs x {paper_steps} paper step{'s' if paper_steps != 1 else ''} of "
                    f"{train_prompts:,} train prompts, {total // per_unit} paper steps)")
        return f"{total} (= {epochs:g} epochs x {epoch_steps} optimizer steps of {train_prompts:,} train prompts)"
    if paper and train_prompts:
        per_epoch, total = epoch_length(float(epochs), train_prompts, cadence)  # type: ignore[arg-type]
        return (f"{total} (= {epochs:g} epochs x {per_epoch} paper steps of {train_prompts:,} train prompts, "
                f"{total // cadence.optimizer_steps_per_unit} paper steps)")  # type: ignore[union-attr]
    return f"{epochs:g} epochs (optimizer steps unknown here: the launch counts the train prompts)"


def render_schedule(rows_by_policy: list[tuple[str, list[list[str]]]], console: Any) -> None:
    """The dry run's "Run length and cadence" table; one per distinct schedule when policies differ."""
    from rich.table import Table

    groups: dict[tuple[tuple[str, ...], ...], list[str]] = {}
    for name, rows in rows_by_policy:
        groups.setdefault(tuple(tuple(r) for r in rows), []).append(name)
    for rows, names in groups.items():
        if not rows:
            continue
        who = "" if len(groups) == 1 else f" ({', '.join(names)})"
        table = Table(title=f"Run length and cadence{who}")
        for col in ("setting", "recipe", "optimizer steps"):
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
