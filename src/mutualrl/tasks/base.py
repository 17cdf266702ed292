"""The task interface: dataset rows -> prompts with a gold answer, and a verifier.

In the paper rewards come only from verifiers ("Experimental Setup"); a recipe's ``task.reward_funcs`` add to a
task's verifier, or are all there is for a task without one (:mod:`mutualrl.tasks.reward_funcs`). A task turns raw dataset
rows into :class:`TaskExample` (a stable ``prompt_id`` shared by every policy, the
prompt text in the paper's unified template, the gold answer) and owns the function
that scores a completion against the gold answer.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from mutualrl.tasks.row_checks import DEFAULT_MAX_PROMPT_CHARS

@dataclass(frozen=True)
class TaskExample:
    """One verifiable prompt. ``prompt_id`` keys everything in the SEE, for every policy."""

    prompt_id: str
    prompt: str
    answer: str
    task: str
    meta: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        """The dataset row handed to TRL (``prompt`` plus columns the reward functions read).

        A ``dataset`` task's rows keep every column of the source (``meta["columns"]``), and only those: TRL passes
        each to the reward functions by name, as ``GRPOTrainer`` does with a user's own dataset (a row without
        ``answer`` gets none, never an empty one).
        """
        if "columns" in self.meta:
            return {**self.meta["columns"], "prompt_id": self.prompt_id, "prompt": self.prompt, "task": self.task}
        return {"prompt_id": self.prompt_id, "prompt": self.prompt, "answer": self.answer, "task": self.task}

    def for_policy(self, chat: bool) -> str | list[dict[str, str]]:
        """What a policy is prompted with: chat messages under its chat template, else the text."""
        return self.chat_prompt() if chat else self.prompt

    def chat_prompt(self) -> list[dict[str, str]]:
        """The prompt as chat messages: the source's own (TRL's conversational format), else one user turn."""
        return self.meta.get("messages") or [{"role": "user", "content": self.prompt}]


class Task(ABC):
    """A verifiable task. Subclasses set ``name`` and implement :meth:`load` and :meth:`score`."""

    name: str = ""
    #: Splits this task can load (e.g. ("train", "test")).
    splits: tuple[str, ...] = ("train", "test")
    #: The split `mutualrl eval` uses when none is given.
    default_eval_split: str = "test"
    #: Answer checks this task supports (see :mod:`mutualrl.tasks.verifiers`); "default" is the task's own.
    verifier_modes: tuple[str, ...] = ("default",)
    #: The answer check in use ("default", "exact" or "equiv"); set with :meth:`with_verifier`.
    verifier: str = "default"
    #: Rows of the default (hub) ``train`` split, for the dry run's run-length estimate (None: unknown).
    train_rows: int | None = None
    #: Whether :meth:`score` checks answers; a task without one is scored by ``task.reward_funcs`` only.
    has_verifier: bool = True
    #: New tokens a completion gets where no recipe says (``mutualrl eval`` of models named alone); None: 1024.
    completion_tokens: int | None = None
    #: Longest text a row may hold, in characters (``task.max_prompt_chars``: :mod:`mutualrl.tasks.row_checks`).
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS

    def configure(self, train_split: str, eval_split: str, eval_fraction: float | None, split_seed: int) -> None:
        """Take the recipe's ``task`` split settings; only tasks that derive splits themselves need them."""

    def check_source(self, source: str | None) -> None:
        """Refuse, before a launch (and in a dry run), a ``task.source`` this task cannot read; loading stays lazy."""

    def check_load(self, split: str, source: str | None, limit: int | None) -> None:
        """Refuse, in one line, a ``load`` of a split this task lacks, a source it cannot read, or a negative limit."""
        from mutualrl.errors import UsageError

        if split not in self.splits:
            raise UsageError(f"task {self.name!r} has no split {split!r}; it has: {', '.join(self.splits)}")
        self.check_source(source)
        if limit is not None and limit < 0:
            raise UsageError(f"task {self.name!r}: limit must be >= 0, got {limit}")

    def with_verifier(self, mode: str) -> Task:
        """A copy of this task that checks answers with ``mode`` (recipe field ``task.verifier``)."""
        if mode == "default":
            return self
        if mode not in self.verifier_modes:
            from mutualrl.errors import UsageError

            raise UsageError(
                f"task {self.name!r} has no {mode!r} verifier; it supports: {', '.join(self.verifier_modes)}"
            )
        clone = copy.copy(self)
        clone.verifier = mode
        return clone

    def extract(self, completion: str) -> str | None:
        """The answer a completion gives (shown in eval results); boxed tasks take the last ``\\boxed{}``.

        With the ``exact`` verifier only ``\\boxed{...}`` counts (the paper's rule). Tasks whose
        answers are not boxed override this.
        """
        from mutualrl.tasks.verifiers import extract_boxed

        return extract_boxed(completion, strict=self.verifier == "exact")

    @abstractmethod
    def load(self, split: str, source: str | None = None, limit: int | None = None) -> list[TaskExample]:
        """Load ``split`` from ``source`` (hub id, local file/folder, 'offline', or the task default)."""

    def answer_text(self, answer: str) -> str:
        """How a correct completion writes ``answer`` right after the prompt (few-shot demonstrations)."""
        return f" \\boxed{{{answer}}}"

    def group_of(self, example: TaskExample) -> str | None:
        """A sub-population of the task to report accuracy for (e.g. a problem family), or None."""
        return None

    @abstractmethod
    def score(self, completion: str, answer: str) -> float:
        """Verifier reward of ``completion`` against the gold ``answer`` (1.0 correct, 0.0 wrong)."""
