"""The console that a command's progress displays share, and how a command's console writes where no terminal is.

rich nests live displays on one console only: the tiny models' build bar, shown inside ``mutualrl assets fetch``'s
status line, has to draw on the CLI's console, not on a second one writing to the same terminal. The CLI shares its
console here; without the CLI (the Python API, a test) progress goes to standard error.

Piped to a file, CI or ``nohup``, rich would wrap every line at 80 columns (a status line split mid-field, a table's
header broken over two lines): :func:`command_console` writes lines whole there, as TRL's and transformers' loggers
do, and draws tables at their own width up to :data:`PLAIN_WIDTH` (``COLUMNS``, when set, still decides).

Console output is best effort (:func:`best_effort_console`): standard output and error redirected to a full disk,
piped into ``head`` that has exited, or closed, never stop a command; a run's own logs in its folder stay its record.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from rich.console import Console, ConsoleDimensions

PLAIN_WIDTH = 200
"""The width tables may take where no terminal is (a log file is read with a pager or an editor, not at 80)."""


class CommandConsole(Console):
    """rich's console on a terminal; where none is (looked at as each line is written: a test swaps the stream), one
    that never wraps a printed line and draws tables up to :data:`PLAIN_WIDTH` columns (``COLUMNS``, when set, still
    decides)."""

    def __init__(self, **kwargs: Any):
        self._given_soft_wrap = False
        super().__init__(**kwargs)

    def on_broken_pipe(self) -> None:
        """A reader that went away (``| head``): the console falls quiet; the command goes on (rich would exit 1)."""
        self.quiet = True

    @property  # type: ignore[override]
    def soft_wrap(self) -> bool:
        return self._given_soft_wrap or not self.is_terminal

    @soft_wrap.setter
    def soft_wrap(self, value: bool) -> None:
        self._given_soft_wrap = value

    @property  # type: ignore[override]
    def size(self) -> ConsoleDimensions:
        measured = super().size
        if self.is_terminal or os.environ.get("COLUMNS", "").isdigit() or self._width is not None:
            return measured
        return ConsoleDimensions(PLAIN_WIDTH, measured.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


def command_console(stderr: bool = False) -> Console:
    """A command's console (:class:`CommandConsole`)."""
    return CommandConsole(stderr=stderr)


_shared: Console | None = None


def share_console(console: Console) -> None:
    """Make ``console`` the one progress displays draw on (the CLI's, set as it starts)."""
    global _shared
    _shared = console


def progress_console() -> Console:
    """The shared console, else a console on standard error."""
    return _shared if _shared is not None else Console(stderr=True)


class BestEffortStream:
    """A console stream (standard output or error) whose failed writes are dropped: a full disk, a closed pipe or a
    closed file stops the console, never the command. Its first failure is kept in :attr:`failed`; everything
    else is the wrapped stream's."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.failed: BaseException | None = None

    def write(self, text: str) -> int:
        if self.failed is None:
            try:
                return self.stream.write(text)
            except (OSError, ValueError) as err:  # ENOSPC, EPIPE, EIO; ValueError: a closed file
                self.failed = err
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.failed is None:
            try:
                self.stream.flush()
            except (OSError, ValueError) as err:
                self.failed = err

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def best_effort_console() -> Iterator[None]:
    """Inside, ``sys.stdout`` and ``sys.stderr`` are :class:`BestEffortStream` s (rich's consoles, ``print`` and
    logging's handlers write through them when they write); outside, the streams they were."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (stream if isinstance(stream, BestEffortStream) or stream is None
                              else BestEffortStream(stream) for stream in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
