"""The live progress display of a pool: one line per policy whose step (``20/200``) and time estimate stay in
view at any terminal width; the figures after them (phase, reward, held-out reward@1, regime metrics) are cut
first, with an ellipsis."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Column


def progress_display(console: Console) -> Progress:
    """The policies' progress lines: name, step, estimate, bar, then the figures (cut to the width left)."""
    fixed = {"no_wrap": True, "overflow": "ellipsis"}
    return Progress(
        TextColumn("[bold cyan]{task.description}", table_column=Column(max_width=18, **fixed)),
        MofNCompleteColumn(table_column=Column(**fixed)),
        TextColumn("{task.fields[eta]}", table_column=Column(**fixed)),
        BarColumn(bar_width=12, table_column=Column(**fixed)),
        TextColumn("{task.fields[info]}", table_column=Column(ratio=1, min_width=1, **fixed)),
        console=console, transient=False, disable=not console.is_terminal, expand=True,
    )


def format_eta(seconds: float | None) -> str:
    """``eta 1:05`` (``eta 1:02:05`` past an hour); ``eta ?`` before there is a rate to go by."""
    if seconds is None:
        return "eta ?"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"eta {hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"eta {rest // 60}:{rest % 60:02d}"


class StepClock:
    """Each policy's time left, from the steps it made since the launcher first saw it step: a resumed run's
    earlier steps and the workers' start-up are not counted as speed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._first: dict[str, tuple[float, int]] = {}
        self._last: dict[str, int] = {}

    def eta(self, policy: str, step: int, total: int | None) -> str:
        now = self.clock()
        if policy not in self._last or step < self._last[policy]:  # first look, or a restart from a checkpoint
            self._last[policy] = step
            self._first.pop(policy, None)
            return format_eta(None)
        if step > self._last[policy] and policy not in self._first:  # the first step seen made: the clock starts
            self._first[policy] = (now, step)
        self._last[policy] = step
        if not total or step >= total:
            return format_eta(0.0) if total else ""
        first = self._first.get(policy)
        if first is None or step <= first[1]:
            return format_eta(None)
        rate = (step - first[1]) / max(now - first[0], 1e-9)
        return format_eta((total - step) / rate)
