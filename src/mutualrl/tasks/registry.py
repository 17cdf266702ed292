"""Task registry: names -> task factories (imported lazily)."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable

from mutualrl.errors import UnknownNameError
from mutualrl.tasks.base import Task

# name -> "module:attribute" of a zero-argument factory returning a Task.
_TASKS: dict[str, str] = {
    "synthetic-arith": "mutualrl.tasks.synthetic:SyntheticArithTask",
}


def register_task(name: str, target: str | Callable[[], Task]) -> None:
    """Register a task factory (``"package.module:Factory"`` or a callable)."""
    _TASKS[name] = target  # type: ignore[assignment]


def task_names() -> list[str]:
    return sorted(_TASKS)


def get_task(name: str) -> Task:
    """The task called ``name``; raises :class:`UnknownNameError` with the known names."""
    target = _TASKS.get(name)
    if target is None:
        close = difflib.get_close_matches(name, list(_TASKS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownNameError(f"unknown task {name!r}; known tasks: {', '.join(task_names())}.{hint}")
    if callable(target):
        return target()
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(module_name), attr)()
