"""Task registry: names -> task factories (imported lazily)."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

from mutualrl.errors import UnknownNameError
from mutualrl.tasks.base import Task

# name -> "module:attribute" of a zero-argument factory returning a Task (an answer-line variant below:
# "mutualrl.tasks.answer_line:<base task>"), or a callable given to register_task.
_TASKS: dict[str, str] = {
    "synthetic-arith": "mutualrl.tasks.synthetic:SyntheticArithTask",
    "invented-lexicon": "mutualrl.tasks.invented_lexicon:InventedLexiconTask",
    "math": "mutualrl.tasks.math:MathTask",
    "gsm8k": "mutualrl.tasks.gsm8k:GSM8KTask",
    "arc": "mutualrl.tasks.qa:ARCTask",
    "arc-easy": "mutualrl.tasks.qa:ARCEasyTask",
    "openbookqa": "mutualrl.tasks.qa:OpenBookQATask",
    "boolq": "mutualrl.tasks.qa:BoolQTask",
    "piqa": "mutualrl.tasks.qa:PIQATask",
    "hellaswag": "mutualrl.tasks.qa:HellaSwagTask",
    "siqa": "mutualrl.tasks.qa:SocialIQaTask",
    "qa-mix": "mutualrl.tasks.mixture:QAMixTask",
    "math-qa-mix": "mutualrl.tasks.mixture:MathQAMixTask",
    "dataset": "mutualrl.tasks.user_dataset:UserDatasetTask",
}
# Answer-line variants of the QA tasks (``arc-easy-line``, ...): same questions, no \boxed{} (tasks/answer_line.py).
_LINE_BASES = ("arc", "arc-easy", "openbookqa", "boolq", "piqa", "hellaswag", "siqa")
for _base in _LINE_BASES:
    _TASKS[f"{_base}-line"] = f"mutualrl.tasks.answer_line:{_base}"


def register_task(name: str, target: str | Callable[[], Task]) -> None:
    """Register a task factory (``"package.module:Factory"`` or a callable)."""
    _TASKS[name] = target  # type: ignore[assignment]


def task_names() -> list[str]:
    return sorted(_TASKS)


def known_task(name: str) -> bool:
    """Whether ``name`` is a registered task or a few-shot variant ``<task>-<k>shot`` of one."""
    from mutualrl.tasks.few_shot import parse_few_shot

    few_shot = parse_few_shot(name)
    return name in _TASKS or ":" in name or (few_shot is not None and few_shot[0] in _TASKS)


def task_class_by_path(name: str) -> Task:
    """``task.name: package.module:Class`` -> an instance, registered under its own ``name`` too (rows carry
    that name, and scoring looks tasks up by it); imported in every process that reads the config."""
    from mutualrl.config.plugins import import_object

    factory = import_object(name, "task.name", sep=":")
    if not (isinstance(factory, type) and issubclass(factory, Task)):  # never call anything else a name finds
        raise UnknownNameError(f"task.name: {name!r} is not a mutualrl.tasks.base.Task subclass (it is a "
                               f"{type(factory).__name__}); nothing of it was called")
    task = factory()
    if task.name and task.name not in _TASKS:
        _TASKS[task.name] = name
    return task


def task_from_config(task_config: Any) -> Task:
    """The task of a recipe's ``task`` section, with the split settings a task that derives splits needs."""
    task = get_task(task_config.name)
    task.configure(task_config.train_split, task_config.eval_split, task_config.eval_fraction, task_config.split_seed)
    task.max_prompt_chars = task_config.max_prompt_chars
    return task


def get_task(name: str) -> Task:
    """The task called ``name`` (or ``<task>-<k>shot``); raises :class:`UnknownNameError` with the known names."""
    from mutualrl.tasks.few_shot import FewShotTask, parse_few_shot

    few_shot = parse_few_shot(name)
    if name not in _TASKS and few_shot is not None and few_shot[0] in _TASKS:
        return FewShotTask(get_task(few_shot[0]), few_shot[1])
    target = _TASKS.get(name)
    if target is None and ":" in name:
        return task_class_by_path(name)
    if target is None:
        close = difflib.get_close_matches(name, list(_TASKS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownNameError(f"unknown task {name!r}; known tasks: {', '.join(task_names())}.{hint}")
    if callable(target):
        return target()
    module_name, attr = target.split(":")
    if module_name == "mutualrl.tasks.answer_line":
        from mutualrl.tasks.answer_line import AnswerLineTask

        return AnswerLineTask(get_task(attr))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise
        raise UnknownNameError(f"task {name!r} is registered, but its module {module_name} is not available") from None
    return getattr(module, attr)()


# Suites of `mutualrl eval --suite`: the paper's MATH benchmark, its six-task QA suite, or both plus GSM8K.
SUITES: dict[str, tuple[str, ...]] = {
    "math": ("math",),
    "qa": ("arc", "openbookqa", "boolq", "piqa", "hellaswag", "siqa"),
    "all": ("math", "gsm8k", "arc", "openbookqa", "boolq", "piqa", "hellaswag", "siqa"),
    "qa-line": tuple(f"{name}-line" for name in ("arc", "openbookqa", "boolq", "piqa", "hellaswag", "siqa")),
}


def resolve_suite(suite: str) -> list[str]:
    """``math`` / ``qa`` / ``all`` or comma-separated task names (suites may be mixed in) -> task names."""
    names: list[str] = []
    for part in (p.strip() for p in suite.split(",")):
        if not part:
            continue
        expanded = SUITES.get(part, (part,))
        for name in expanded:
            if not known_task(name):
                close = difflib.get_close_matches(name, list(_TASKS) + list(SUITES), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise UnknownNameError(
                    f"unknown task or suite {name!r}; suites: {', '.join(SUITES)}; "
                    f"tasks: {', '.join(task_names())}.{hint}"
                )
            if name not in names:
                names.append(name)
    if not names:
        raise UnknownNameError(f"empty suite {suite!r}; suites: {', '.join(SUITES)}; tasks: {', '.join(task_names())}")
    return names


def task_groups(task_name: str, examples: list, column: str | None = None) -> dict[str, str]:
    """``prompt_id -> group`` for the examples of a task that reports groups (empty if it has none); with ``column``
    (``task.group_column``), each row's value of that column instead (rows without it are in no group)."""
    task = get_task(task_name)
    groups = {}
    for example in examples:
        value = example.as_row().get(column) if column else None
        group = (None if value is None else str(value)) if column else task.group_of(example)
        if group is not None:
            groups[example.prompt_id] = group
    return groups


def known_train_prompts(task: Any) -> int | None:
    """Training prompts of a recipe's ``task`` section when the task knows its hub train size, else None."""
    if task.source not in (None, "auto", "hub") or task.train_split != "train":
        return None
    rows = get_task(task.name).train_rows
    if rows is None:
        return task.train_limit
    return min(rows, task.train_limit) if task.train_limit else rows
