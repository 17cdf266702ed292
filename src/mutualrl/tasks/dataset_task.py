"""Shared loading logic of the benchmark tasks (MATH, GSM8K, the QA suite).

A :class:`DatasetTask` knows, for each of its splits, the hub dataset it comes from and
the offline-package split that stands in for it; subclasses only turn one native row into
a :class:`~mutualrl.tasks.base.TaskExample` (:meth:`DatasetTask.make_example`) and check
answers (:meth:`~mutualrl.tasks.base.Task.score`).

``prompt_id`` is ``"<task>/<split>/<key>"`` where ``key`` is the dataset's own id when it
has one (ARC, OpenBookQA) and the zero-padded row index otherwise -- stable across runs,
machines and policies for a given source.
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any

from mutualrl.assets.hub import hub_reachable
from mutualrl.errors import DataError, UsageError
from mutualrl.tasks.base import Task, TaskExample
from mutualrl.tasks.sources import (
    HubSpec,
    Rows,
    local_has_split,
    parse_hub_id,
    read_hub,
    read_local,
    warn_evaluation_split,
)
from mutualrl.tasks.row_checks import check_text, where
from mutualrl.tasks.verifiers import VERIFIER_MODES

BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
"""The instruction every template ends with (paper, App. "Prompt Templates for Evaluation")."""
BOXED_FMT = BOXED_INSTRUCTION.replace("{", "{{").replace("}", "}}")
""":data:`BOXED_INSTRUCTION` escaped for use inside ``str.format`` templates."""


def check_unique_ids(examples: list[TaskExample], origin: str) -> None:
    """Prompt ids key the SEE and the complementarity analysis: a duplicate is a data error."""
    seen: dict[str, int] = {}
    for i, ex in enumerate(examples):
        if ex.prompt_id in seen:
            raise DataError(
                f"{origin}: rows {seen[ex.prompt_id]} and {i} have the same id ({ex.prompt_id!r}); "
                "prompt ids must be unique"
            )
        seen[ex.prompt_id] = i


class DatasetTask(Task):
    """A task whose rows come from a hub dataset, local files or the offline package."""

    verifier_modes = VERIFIER_MODES
    #: split -> hub dataset split it is read from.
    hub: dict[str, HubSpec] = {}
    #: name of the dataset in the offline package (:data:`mutualrl.assets.data.OFFLINE_SPLITS`).
    offline_dataset: str = ""
    #: split -> offline-package split standing in for it. The package holds evaluation splits only,
    #: so loading "train" from it raises an :class:`EvaluationSplitWarning`.
    offline: dict[str, str] = {}
    #: what the offline "train" stand-in is, for the warning.
    offline_train_note: str = ""

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise UsageError(f"task {self.name!r} has no split {split!r}; its splits: {', '.join(self.splits)}")

    def read_rows(self, split: str, source: str | None) -> Rows:
        """The raw rows of ``split`` from ``source`` (see :mod:`mutualrl.tasks.sources`)."""
        self.check_split(split)
        if source is None or source == "auto":
            source = "hub" if (split in self.hub and hub_reachable()) else "offline"
        if source == "offline":
            return self._offline_rows(split)
        if source == "hub":
            if split not in self.hub:
                raise UsageError(f"task {self.name!r} has no hub dataset for split {split!r}")
            return read_hub(self.hub[split])
        path = Path(source).expanduser()
        if path.exists():
            # A folder laid out like the hub dataset may name the split as the hub does
            # (BoolQ's "test" is its "validation").
            hub_split = self.hub[split].split if split in self.hub else split
            if path.is_dir() and hub_split != split and not local_has_split(path, split) and local_has_split(
                path, hub_split
            ):
                return read_local(path, hub_split)
            return read_local(path, split)
        if "/" in source and not source.startswith((".", "/", "~")):
            default_split = self.hub[split].split if split in self.hub else split
            return read_hub(parse_hub_id(source, default_split))
        raise UsageError(
            f"task {self.name!r}: source {source!r} is not 'auto', 'offline', 'hub', an existing file or folder, "
            "or a hub dataset id (owner/name[:config])"
        )

    def _offline_rows(self, split: str) -> Rows:
        from mutualrl.assets.data import offline_file, offline_rows

        used = self.offline.get(split)
        if used is None:
            raise UsageError(f"task {self.name!r}: the offline package has no data for split {split!r}")
        if split == "train":
            warn_evaluation_split(self.name, f"{self.offline_dataset}/{used}{self.offline_train_note}")
        return Rows(offline_rows(self.offline_dataset, used), f"offline {self.offline_dataset}/{used} "
                    f"({offline_file(self.offline_dataset, used)})")

    def load(self, split: str, source: str | None = None, limit: int | None = None) -> list[TaskExample]:
        """The first ``limit`` examples of ``split`` (all when ``limit`` is None), in dataset order."""
        if limit is not None and limit < 0:
            raise UsageError(f"limit must be >= 0, got {limit}")
        data = self.read_rows(split, source)
        rows = data.rows if limit is None else data.rows[:limit]
        examples = [self.make_example(row, i, split, data.origin) for i, row in enumerate(rows)]
        for i, example in enumerate(examples):  # a local file's text is the user's: bounded before tokenization
            check_text(example.prompt, where(data.origin, i, "prompt"), self.max_prompt_chars)
        self.after_load(examples, data.origin)
        check_unique_ids(examples, data.origin)
        return examples

    def after_load(self, examples: list[TaskExample], origin: str) -> None:
        """Hook for one-per-load notices (e.g. a template field the source lacks)."""

    def prompt_id(self, split: str, key: Any) -> str:
        if isinstance(key, int):
            key = f"{key:05d}"
        return f"{self.name}/{split}/{key}"

    @abstractmethod
    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str) -> TaskExample:
        """One native dataset row -> a prompt in the paper's template and its gold answer."""
