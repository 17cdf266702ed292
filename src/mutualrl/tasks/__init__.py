"""Verifiable tasks and their answer checkers (paper: "Experimental Setup", App. "Prompt Templates").

Public API:

- :func:`get_task`, :func:`task_names`, :func:`register_task`, :func:`resolve_suite` -- the registry
- :class:`Task`, :class:`TaskExample` -- the interface (``Task.load``, ``Task.score``)
- :func:`extract_boxed`, :func:`math_equivalent` -- answer extraction and equivalence
- :func:`make_reward_function` -- the TRL reward function (dispatches on each row's task)
"""

from mutualrl.tasks.base import Task, TaskExample
from mutualrl.tasks.registry import SUITES, get_task, register_task, resolve_suite, task_names
from mutualrl.tasks.reward import make_reward_function
from mutualrl.tasks.sources import EvaluationSplitWarning
from mutualrl.tasks.verifiers import extract_boxed, math_equivalent

__all__ = [
    "SUITES",
    "EvaluationSplitWarning",
    "Task",
    "TaskExample",
    "extract_boxed",
    "get_task",
    "make_reward_function",
    "math_equivalent",
    "register_task",
    "resolve_suite",
    "task_names",
]
