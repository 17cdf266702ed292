"""Task mixtures: several tasks' prompts in one training stream (``qa-mix``, ``math-qa-mix``).

Paper, App. "MATH and Commonsense Reasoning with Regime 3": "We combine MATH with six
datasets ... We aggregate these training sets into a unified mixture and evaluate on their
respective test sets", every input in the unified chain-of-thought template that asks for
the answer in ``\\boxed{}`` (App. "Prompt Templates for Evaluation"); ``math-qa-mix`` is
that mixture, ``qa-mix`` the six QA tasks alone. Every example keeps its own task name in
``TaskExample.task`` (and its own ``prompt_id`` prefix), so the reward function and the
evaluation dispatch each row to its own verifier, and results are reported per task.
"""

from __future__ import annotations

import math
from typing import Any

from mutualrl.errors import DataError, UsageError
from mutualrl.tasks.base import Task, TaskExample
from mutualrl.tasks.qa import LETTERS, QA_TASKS
from mutualrl.tasks.sources import NAMED_SOURCES
from mutualrl.tasks.verifiers import VERIFIER_MODES, extract_boxed, score_choice, score_math, score_yes_no


class MixtureTask(Task):
    """Round-robin interleaving of component tasks' examples."""

    name = "mixture"
    components: tuple[str, ...] = ()
    splits = ("train", "validation", "test")
    verifier_modes = VERIFIER_MODES

    @property
    def train_rows(self) -> int | None:  # type: ignore[override]
        """The components' train rows together (the mixture uses every row once per epoch)."""
        from mutualrl.tasks.registry import get_task

        rows = [get_task(name).train_rows for name in self.components]
        return None if any(r is None for r in rows) else sum(rows)  # type: ignore[arg-type]

    def component_tasks(self) -> list[Task]:
        from mutualrl.tasks.registry import get_task

        return [get_task(name).with_verifier(self.verifier) for name in self.components]

    def load(self, split: str, source: str | None = None, limit: int | None = None) -> list[TaskExample]:
        """Each component's ``split`` from ``source``, interleaved (a, b, c, a, b, c, ...).

        ``limit`` bounds the total; it is shared evenly across components (a local source: its first ``limit``
        rows). A local ``source`` is one file or folder whose rows each name their task in a ``task`` column.
        """
        if split not in self.splits:
            raise UsageError(f"task {self.name!r} has no split {split!r}; its splits: {', '.join(self.splits)}")
        if source is not None and source not in NAMED_SOURCES:
            return self._load_tagged(split, source, limit)
        per_task = None if limit is None else math.ceil(limit / len(self.components))
        streams = [task.load(split, source, per_task) for task in self.component_tasks()]
        mixed: list[TaskExample] = []
        for i in range(max((len(s) for s in streams), default=0)):
            mixed.extend(s[i] for s in streams if i < len(s))
        return mixed if limit is None else mixed[:limit]

    def _load_tagged(self, split: str, source: str, limit: int | None) -> list[TaskExample]:
        from pathlib import Path

        from mutualrl.tasks.dataset_task import DatasetTask, check_unique_ids
        from mutualrl.tasks.sources import read_local

        path = Path(source).expanduser()
        if not path.exists():
            raise UsageError(
                f"task {self.name!r}: source {source!r} must be 'auto', 'offline', 'hub' or a local file/folder whose "
                "rows carry a 'task' column"
            )
        data = read_local(path, split)
        tasks: dict[str, Any] = {t.name: t for t in self.component_tasks()}
        rows = data.rows if limit is None else data.rows[:limit]
        examples = []
        for i, row in enumerate(rows):
            name = row.get("task") if isinstance(row, dict) else None
            if name is None:
                raise DataError(f"{data.origin}: row {i} has no field 'task' (a mixture row names its task)")
            if name not in tasks:
                raise DataError(f"{data.origin}: row {i}: task {name!r} is not part of {self.name} "
                                f"({', '.join(self.components)})")
            task = tasks[name]
            assert isinstance(task, DatasetTask)
            examples.append(task.make_example(row, i, split, data.origin))
        check_unique_ids(examples, data.origin)
        return examples

    def score(self, completion: str, answer: str) -> float:
        """Without the row's task name: yes/no for ``Yes``/``No`` golds, option letters otherwise.

        Prefer dispatching on ``TaskExample.task`` (as the reward function and evaluation do).
        """
        mode = "exact" if self.verifier == "exact" else "equiv"
        if str(answer).strip() in ("Yes", "No"):
            return score_yes_no(completion, answer, mode)
        return score_choice(completion, answer, mode)

    def extract(self, completion: str) -> str | None:
        return extract_boxed(completion, strict=self.verifier == "exact")


class QAMixTask(MixtureTask):
    """``qa-mix``: AI2-ARC (Challenge), OpenBookQA, BoolQ, PIQA, HellaSwag and Social IQa, mixed."""

    name = "qa-mix"
    components = QA_TASKS


class MathQAMixTask(MixtureTask):
    """``math-qa-mix``: MATH plus the six QA tasks, the paper's 50-step commonsense experiment.

    Each row keeps its own task's template and verifier: MATH's answer is checked against its
    label (exactly under ``verifier: exact``, the paper's rule), the QA tasks' option letter
    (``Yes``/``No`` for BoolQ). Splits are the ones every component has: ``train`` and ``test``
    (MATH's full 5,000-problem test set; the QA tasks' test or validation sets, docs/tasks.md).
    """

    name = "math-qa-mix"
    components = ("math", *QA_TASKS)
    splits = ("train", "test")

    def score(self, completion: str, answer: str) -> float:
        """Without the row's task name: a letter or Yes/No is a choice, anything else a MATH answer.

        Prefer dispatching on ``TaskExample.task`` (as the reward function and evaluation do).
        """
        gold = str(answer).strip()
        if gold in ("Yes", "No") or (len(gold) == 1 and gold in LETTERS):
            return super().score(completion, answer)
        return score_math(completion, answer, "exact" if self.verifier == "exact" else "equiv")
