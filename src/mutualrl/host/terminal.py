"""The console that a command's progress displays share.

rich nests live displays on one console only: the tiny models' build bar, shown inside ``mutualrl assets fetch``'s
status line, has to draw on the CLI's console, not on a second one writing to the same terminal. The CLI shares its
console here; without the CLI (the Python API, a test) progress goes to standard error.
"""

from __future__ import annotations

from rich.console import Console

_shared: Console | None = None


def share_console(console: Console) -> None:
    """Make ``console`` the one progress displays draw on (the CLI's, set as it starts)."""
    global _shared
    _shared = console


def progress_console() -> Console:
    """The shared console, else a console on standard error."""
    return _shared if _shared is not None else Console(stderr=True)
