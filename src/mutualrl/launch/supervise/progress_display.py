"""The live progress display of a pool: one line per policy whose step (``20/200``) and time estimate stay in
view at any terminal width; the figures after them (phase, reward, held-out reward@1, regime metrics) are cut
first, with an ellipsis. Its detail view: under a policy that trains on peers' samples, one line per peer with
that peer's per-source diagnostics (``<regime>/from/<peer>/<figure>``), in a few words."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.table import Column
from rich.text import Text

from mutualrl.metric_labels import SOURCE_FIGURES, source_figure_key



class MainRowOnly(ProgressColumn):
    """``inner`` on a policy's own line; nothing on its detail lines (a peer's figures have no step or bar)."""

    def __init__(self, inner: ProgressColumn):
        super().__init__(table_column=inner.get_table_column())
        self.inner = inner

    def render(self, task: Task) -> Any:
        return Text("") if task.fields.get("detail") else self.inner.render(task)


def progress_display(console: Console) -> Progress:
    """The policies' progress lines: name, step, estimate, bar, then the figures (cut to the width left)."""
    fixed = {"no_wrap": True, "overflow": "ellipsis"}
    return Progress(
        TextColumn("[bold cyan]{task.description}", table_column=Column(max_width=18, **fixed)),
        MainRowOnly(MofNCompleteColumn(table_column=Column(**fixed))),
        TextColumn("{task.fields[eta]}", table_column=Column(**fixed)),
        MainRowOnly(BarColumn(bar_width=12, table_column=Column(**fixed))),
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


def source_details(figures: Mapping[str, Any]) -> dict[str, str]:
    """Per peer with per-source figures among ``figures`` (a status or a metrics row): ``ess 0.91  log w -0.02
    max +1.30  trunc 3%  filt 0%  used 100%`` (only the figures its regime logs)."""
    by_peer: dict[str, dict[str, float]] = {}
    for key, value in figures.items():
        source = source_figure_key(key)
        if source is not None and isinstance(value, (int, float)) and value == value:
            by_peer.setdefault(source[1], {})[source[2]] = value
    return {peer: "  ".join(f"{f.label} {f.form.format(shown[f.name])}" for f in SOURCE_FIGURES if f.name in shown)
            for peer, shown in by_peer.items()}


class PolicyRows:
    """Each policy's line of the display and, under it, its detail lines: one per peer, hidden until the policy's
    status carries figures from that peer."""

    def __init__(self, progress: Progress, policies: Sequence[str]):
        self.progress = progress
        self.main: dict[str, TaskID] = {}
        self.details: dict[tuple[str, str], TaskID] = {}
        for name in policies:
            self.main[name] = progress.add_task(name, total=None, info="starting", eta="")
            for peer in policies:
                if peer != name:
                    self.details[(name, peer)] = progress.add_task(f"  from {peer}", total=None, info="", eta="",
                                                                   detail=True, visible=False)

    def show_sources(self, name: str, status: Mapping[str, Any]) -> None:
        """``name``'s detail lines from its status (a peer without figures stays hidden)."""
        for peer, text in source_details(status).items():
            task = self.details.get((name, peer))
            if task is not None:
                self.progress.update(task, info=text, visible=True)
