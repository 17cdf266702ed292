"""Progress of a long step that runs models in this process (the go/no-go's loading and scoring): what it is doing
and how far, as ``mutualrl eval`` says it.

In a terminal: ``eval``'s bars (one per model, rows done, time spent and left) and a dim line per phase. Piped to a
file or a CI log, where a bar draws nothing until it ends: a line per phase and, while a phase lasts, a line every
:data:`ALIVE_S` seconds with the rows done and the time spent, so the output is never silent for longer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

ALIVE_S = 8.0
"""Piped: the longest a phase goes without a line."""

StatusSink = Callable[[str], None]
BarFactory = Callable[[str, int], Callable[[int], None]]


class PlainProgress:
    """Lines for piped output: each phase as it starts, how far the model being scored is, and the time since the
    start; again every :data:`ALIVE_S` seconds while nothing else was said."""

    def __init__(self, console: Any, label: str, unit: str, clock: Callable[[], float] = time.monotonic):
        self.console, self.label, self.unit, self.clock = console, label, unit, clock
        self.phase, self.name, self.done, self.total = "", "", 0, 0
        self.start = self.last = clock()
        self.lock = threading.Lock()

    def status(self, message: str) -> None:
        """A new phase (``loading tiny-bpe (tiny-bpe) on cpu``)."""
        with self.lock:
            self.phase = message
            self.say()

    def bar(self, name: str, total: int) -> Callable[[int], None]:
        """The next model to score, ``total`` items; the callback counts the items done (each batch)."""
        with self.lock:
            self.name, self.total, self.done = name, total, 0

        def advance(count: int) -> None:
            with self.lock:
                self.phase = f"scoring with {name}"
                self.done += count
                if self.done >= self.total or self.clock() - self.last >= ALIVE_S:
                    self.say()

        return advance

    def say(self) -> None:
        """The current phase, how far the model is (``tiny-bpe: 12/32 rows``) and the time since the start (the lock
        held)."""
        far = f"; {self.name}: {self.done}/{self.total} {self.unit}" if self.total else ""
        self.console.print(f"{self.label}: {self.phase}{far} ({self.clock() - self.start:.0f} s)",
                           highlight=False, soft_wrap=True, markup=False)
        self.last = self.clock()

    def tick(self) -> None:
        """Say the phase again when nothing was said for :data:`ALIVE_S` seconds."""
        with self.lock:
            if self.phase and self.clock() - self.last >= ALIVE_S:
                self.say()


def progress_bars(console: Any, unit: str) -> tuple[Any, BarFactory]:
    """A rich progress display on ``console`` (a terminal) and a factory of per-model bars counting ``unit``
    (``advance`` callbacks)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)

    def factory(name: str, total: int) -> Callable[[int], None]:
        task_id = progress.add_task(name, total=total)
        return lambda n: progress.advance(task_id, n)

    return progress, factory


@contextmanager
def said_progress(console: Any, label: str, unit: str) -> Iterator[tuple[StatusSink, BarFactory]]:
    """``(on_status, progress_factory)`` for :func:`mutualrl.evaluation.runner.run_eval`, shown on ``console``:
    bars in a terminal, lines when piped (module docstring)."""
    if console.is_terminal:
        bars, factory = progress_bars(console, unit)
        with bars:
            yield (lambda message: bars.console.print(f"[dim]{label}: {message}[/]", highlight=False)), factory
        return
    plain = PlainProgress(console, label, unit)
    stop = threading.Event()

    def keep_saying() -> None:
        while not stop.wait(1.0):
            plain.tick()

    thread = threading.Thread(target=keep_saying, name=f"{label} progress", daemon=True)
    thread.start()
    try:
        yield plain.status, plain.bar
    finally:
        stop.set()
        thread.join()
