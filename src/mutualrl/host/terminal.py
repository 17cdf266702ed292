"""The console that a command's progress displays share, and how a command's console writes where no terminal is.

rich nests live displays on one console only: the tiny models' build bar, shown inside ``mutualrl assets fetch``'s
status line, has to draw on the CLI's console, not on a second one writing to the same terminal. The CLI shares its
console here; without the CLI (the Python API, a test) progress goes to standard error.

Piped to a file, CI or ``nohup``, rich would wrap every line at 80 columns (a status line split mid-field, a table's
header broken over two lines): :func:`command_console` writes lines whole there, as TRL's and transformers' loggers
do, and draws tables at their own width up to :data:`PLAIN_WIDTH` (``COLUMNS``, when set, still decides).
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

PLAIN_WIDTH = 200
"""The width tables may take where no terminal is (a log file is read with a pager or an editor, not at 80)."""


def command_console(stderr: bool = False) -> Console:
    """A command's console: rich's own on a terminal; elsewhere one that never wraps a printed line and draws tables
    up to :data:`PLAIN_WIDTH` columns (or ``COLUMNS``)."""
    stream = sys.stderr if stderr else sys.stdout
    if stream is not None and stream.isatty():
        return Console(stderr=stderr)
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, soft_wrap=True, width=int(columns) if columns.isdigit() else PLAIN_WIDTH)

_shared: Console | None = None


def share_console(console: Console) -> None:
    """Make ``console`` the one progress displays draw on (the CLI's, set as it starts)."""
    global _shared
    _shared = console


def progress_console() -> Console:
    """The shared console, else a console on standard error."""
    return _shared if _shared is not None else Console(stderr=True)
