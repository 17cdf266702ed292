"""The TRL reward function: verifier rewards for a batch of completions.

The paper's rewards come only from verifiers ("Experimental Setup"). TRL's ``GRPOTrainer``
calls each reward function with ``prompts`` and ``completions`` plus every other dataset
column as a keyword argument; our dataset rows (:meth:`TaskExample.as_row`) carry
``answer`` and ``task``, so each completion is checked by the verifier of its own row's
task -- which is what a mixture like ``qa-mix`` needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mutualrl.errors import DataError
from mutualrl.tasks.base import Task
from mutualrl.tasks.verifiers import completion_text

RewardFunction = Callable[..., list[float]]
log = logging.getLogger("mutualrl.reward")
MIN_TOKEN_CHARS = 16


def max_completion_chars(tokenizer: Any, max_tokens: int) -> int:
    """The most characters ``max_tokens`` tokens of ``tokenizer`` can decode to: that many of its longest token
    (as the vocabulary spells it, which is never shorter than its decoded text), at least 16 characters each."""
    longest = max((len(token) for token in tokenizer.get_vocab()), default=MIN_TOKEN_CHARS)
    return int(max_tokens) * max(longest, MIN_TOKEN_CHARS)


def _expand(task_or_tasks: str | Task | Iterable[str | Task], verifier: str) -> dict[str, Task]:
    from mutualrl.tasks.mixture import MixtureTask
    from mutualrl.tasks.registry import get_task

    items = [task_or_tasks] if isinstance(task_or_tasks, (str, Task)) else list(task_or_tasks)
    tasks: dict[str, Task] = {}
    for item in items:
        task = get_task(item) if isinstance(item, str) else item
        task = task.with_verifier(verifier) if verifier != "default" else task
        tasks[task.name] = task
        if isinstance(task, MixtureTask):
            for component in task.component_tasks():
                tasks.setdefault(component.name, component)
    return tasks


def make_reward_function(
    task_or_tasks: str | Task | Iterable[str | Task], verifier: str = "default", max_chars: int | None = None
) -> RewardFunction:
    """A TRL reward function scoring each completion with its row's task verifier.

    ``task_or_tasks``: a task name, a :class:`Task`, or several (a mixture brings its
    components). ``verifier``: ``default``, ``exact`` or ``equiv`` for every task.

    The returned callable has the TRL signature ``f(prompts, completions, answer, task,
    **kwargs) -> list[float]``; ``completions`` may be strings or chat message lists. A row
    whose ``task`` is not among the given tasks is a :class:`~mutualrl.errors.DataError`.

    ``max_chars`` bounds each call in size: a completion of at most ``max_completion_length`` tokens
    cannot be longer than that many of its tokenizer's longest tokens (:func:`max_completion_chars`),
    so a longer one is pathological (a bug, a hand-fed batch): it scores 0 with a warning, unread.
    """
    tasks = _expand(task_or_tasks, verifier)
    if not tasks:
        raise ValueError("make_reward_function needs at least one task")
    only = next(iter(tasks.values())) if len(tasks) == 1 else None

    def verifier_reward(
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        answer: Sequence[str] | None = None,
        task: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        if answer is None:
            raise DataError("reward function: the dataset has no 'answer' column")
        if len(answer) != len(completions):
            raise DataError(f"reward function: {len(completions)} completions but {len(answer)} answers")
        rewards = []
        for i, (completion, gold) in enumerate(zip(completions, answer, strict=True)):
            name = task[i] if task is not None else None
            if name is None:
                if only is None:
                    raise DataError(f"reward function: row {i} has no 'task' and several tasks are possible")
                checker = only
            else:
                checker = tasks.get(name)
                if checker is None:
                    raise DataError(
                        f"reward function: row {i} has task {name!r}, which this reward function does not score "
                        f"(it scores: {', '.join(tasks)})"
                    )
            text = completion_text(completion)
            if max_chars is not None and len(text) > max_chars:
                log.warning("reward function: completion %d is %d characters, more than a completion within the "
                            "length cap can decode to (%d characters): scored 0, not read", i, len(text), max_chars)
                rewards.append(0.0)
                continue
            rewards.append(float(checker.score(text, str(gold))))
        return rewards

    verifier_reward.__name__ = "verifier"  # TRL logs rewards/<__name__>/mean
    verifier_reward.__qualname__ = "verifier"
    return verifier_reward
