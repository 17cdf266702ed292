"""Few-shot variants of any task: ``<task>-<k>shot`` prefixes every prompt with ``k`` solved examples.

A few-shot prefix is one of the formats to try where a small model cannot
follow the paper's template (docs/pools.md, "Real pretrained models on a
paper benchmark"). The prefix is fixed: the first
``k`` examples of the base task's ``train`` split, each followed by its gold answer written
as a correct completion would write it (:meth:`Task.answer_text`), separated by blank
lines, then the prompt itself::

    2+7+1=10

    4+0-3=1

    3+8+4=

The same prefix is used for every prompt, policy and regime. The demonstrations are dropped
from every split, so they are neither training prompts nor held out (this matters where an
offline package's ``train`` reads the evaluation rows, as GSM8K's does).
Prompt ids are the base task's under the variant's name (``synthetic-arith-4shot/arith-add-384``),
gold answers and the verifier are the base task's.
"""

from __future__ import annotations

import re
from dataclasses import replace

from mutualrl.errors import UsageError
from mutualrl.tasks.base import Task, TaskExample

#: ``synthetic-arith-4shot`` -> (``synthetic-arith``, 4).
FEW_SHOT_NAME = re.compile(r"^(?P<base>.+)-(?P<shots>[1-9][0-9]?)shot$")
#: Between two demonstrations, and between the last one and the prompt.
SEPARATOR = "\n\n"


def parse_few_shot(name: str) -> tuple[str, int] | None:
    """``(base task name, shots)`` for a ``<task>-<k>shot`` name, else None."""
    match = FEW_SHOT_NAME.match(name)
    return (match["base"], int(match["shots"])) if match else None


class FewShotTask(Task):
    """``<base>-<k>shot``: the base task with a fixed prefix of ``k`` solved training examples."""

    def __init__(self, base: Task, shots: int) -> None:
        if "train" not in base.splits:
            raise UsageError(f"task {base.name!r} has no train split to take few-shot examples from")
        self.base = base
        self.shots = shots
        self.name = f"{base.name}-{shots}shot"
        self.splits = base.splits
        self.default_eval_split = base.default_eval_split
        self.verifier_modes = base.verifier_modes
        self.train_rows = None if base.train_rows is None else base.train_rows - shots

    def with_verifier(self, mode: str) -> Task:
        return FewShotTask(self.base.with_verifier(mode), self.shots)

    def demonstrations(self, source: str | None) -> list[TaskExample]:
        """The first ``shots`` examples of the base task's ``train`` split."""
        demos = self.base.load("train", source, self.shots)
        if len(demos) < self.shots:
            raise UsageError(f"task {self.name!r}: the train split has only {len(demos)} examples")
        return demos

    def load(self, split: str, source: str | None = None, limit: int | None = None) -> list[TaskExample]:
        demos = self.demonstrations(source)
        prefix = "".join(d.prompt + self.base.answer_text(d.answer) + SEPARATOR for d in demos)
        # Dropped from every split by their text: where an offline package's train split reads the
        # evaluation rows (GSM8K), a demonstration must not be held out either.
        shown = {d.prompt for d in demos}
        rows = self.base.load(split, source, None if limit is None else limit + self.shots)
        rows = [ex for ex in rows if ex.prompt not in shown]
        rows = rows if limit is None else rows[:limit]
        return [replace(ex, prompt_id=f"{self.name}/{ex.prompt_id}", prompt=prefix + ex.prompt, task=self.name,
                        meta={**ex.meta, "base_prompt_id": ex.prompt_id}) for ex in rows]

    def group_of(self, example: TaskExample) -> str | None:
        base_id = example.meta.get("base_prompt_id", example.prompt_id.split("/", 1)[-1])
        return self.base.group_of(replace(example, prompt_id=base_id))

    def answer_text(self, answer: str) -> str:
        return self.base.answer_text(answer)

    def extract(self, completion: str) -> str | None:
        return self.base.extract(completion)

    def score(self, completion: str, answer: str) -> float:
        return self.base.score(completion, answer)
