"""Verifiable tasks and their answer checkers (paper: "Experimental Setup", App. "Prompt Templates")."""

from mutualrl.tasks.base import Task, TaskExample
from mutualrl.tasks.registry import get_task, register_task, task_names

__all__ = ["Task", "TaskExample", "get_task", "register_task", "task_names"]
