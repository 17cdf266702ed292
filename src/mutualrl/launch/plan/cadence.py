"""The schedule as the dry-run plan shows it: both units, epoch lengths from the task's size.

The conversion itself (paper steps -> optimizer steps) is :mod:`mutualrl.config.cadence`.
"""

from __future__ import annotations

import math
from typing import Any

from mutualrl.config.cadence import Cadence


def known_train_prompts(task: Any) -> int | None:
    """Training prompts of a recipe's ``task`` section when the task knows its hub train size, else None."""
    from mutualrl.tasks.registry import get_task

    if task.source not in (None, "auto", "hub") or task.train_split != "train":
        return None
    rows = get_task(task.name).train_rows
    if rows is None:
        return task.train_limit
    return min(rows, task.train_limit) if task.train_limit else rows


def epoch_length(epochs: float, train_prompts: int, cadence: Cadence) -> tuple[int, int]:
    """(paper steps per epoch, optimizer steps of the run) for an epoch-based paper-unit run, as TRL counts.

    TRL's sampler drops the last incomplete batch of prompts in every epoch, and Trainer runs
    ``ceil(epochs x optimizer steps per epoch)`` steps.
    """
    per_epoch = train_prompts // int(cadence.prompts_per_unit or 1)
    return per_epoch, math.ceil(epochs * per_epoch * cadence.optimizer_steps_per_unit)


def describe(cadence: Cadence | None, grpo: dict[str, Any], validate_every: int,
             train_prompts: int | None = None) -> list[tuple[str, str, str]]:
    """Rows (setting, recipe value, optimizer steps) for the dry-run plan."""
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

    epochs = grpo.get("num_train_epochs")
    length = grpo.get("max_steps")
    if length is None or int(length) <= 0:
        epochs = 3 if epochs is None else epochs
        length = f"{epochs:g} epochs"
        if cadence is not None and cadence.unit == "paper" and train_prompts:
            per_epoch, total = epoch_length(float(epochs), train_prompts, cadence)
            length = (f"{total} (= {epochs:g} epochs x {per_epoch} paper steps of {train_prompts:,} train prompts, "
                      f"{total // cadence.optimizer_steps_per_unit} paper steps)")
    head = []
    if cadence is not None and cadence.unit == "paper":
        head = [("1 paper step", f"{cadence.prompts_per_unit} prompts",
                 f"{cadence.optimizer_steps_per_unit} (mini-batches x num_iterations)")]
    return [
        *head,
        row("run length (max_steps; LR schedule length)", "max_steps", length),
        row("LR warm-up (warmup_steps)", "warmup_steps", grpo.get("warmup_steps")),
        row("checkpoint every (save_steps)", "save_every", grpo.get("save_steps")),
        row("log every (logging_steps)", "log_every", grpo.get("logging_steps")),
        row("validate every", "validate_every", validate_every),
    ]


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
