"""Task ``dataset``: your own rows, scored by your reward functions (``task.reward_funcs``), the TRL way.

TRL's ``GRPOTrainer(train_dataset=..., reward_funcs=[...])`` takes any dataset with a ``prompt`` column
and passes every other column to the reward functions by name; this task does the same for a pool.
``task.source`` is a local ``.jsonl`` / ``.json`` / ``.parquet`` / ``.arrow`` file, a folder with split
files (``train.jsonl``, ``test.jsonl``, ...) or a ``datasets.save_to_disk`` folder
(:func:`mutualrl.tasks.sources.read_local`), or a hub id ``owner/name[:config]`` (``datasets.load_dataset``).
``prompt`` is text or a list of chat messages (TRL's conversational format).

Held-out rows: the ``eval_split`` when the source has it; else, or whenever ``task.eval_fraction`` is
set, a seeded draw of ``eval_fraction`` (default :data:`DEFAULT_EVAL_FRACTION`) of the training split's
rows -- the same rows in every process, since the draw depends only on the row count and the seed.

``prompt_id`` is ``dataset/<id>`` when rows have an ``id`` column, else ``dataset/<split>/<row index>``
(the index in the source split, before any hold-out): stable across runs, machines and policies.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError, UsageError
from mutualrl.tasks.base import Task, TaskExample
from mutualrl.tasks.row_checks import ColumnTypes, check_carried_columns, check_cell, prompt_text, where
from mutualrl.tasks.sources import (NAMED_SOURCES, Rows, existing_local_source, local_has_split, parse_hub_id, read_hub,
                                    read_local, require)

DEFAULT_EVAL_FRACTION = 0.1
RESERVED_COLUMNS = ("prompt_id", "task")
"""Columns mutualrl sets on every row (the SEE keys records by ``prompt_id``); a dataset may not bring them."""


def found_files_hint(folder: Path) -> str:
    """What a folder without the training split holds instead: up to 5 of its data files and, for a file
    directly in it whose name says train (or test), the ``--set`` that reads it as that split."""
    from mutualrl.tasks.sources import LOCAL_SUFFIXES

    files = sorted(p for p in folder.rglob("*") if p.suffix in LOCAL_SUFFIXES and p.is_file())
    if not files:
        return f"; {folder} holds no {'/'.join(LOCAL_SUFFIXES)} file"
    shown = ", ".join(str(p.relative_to(folder)) for p in files[:5]) + (" ..." if len(files) > 5 else "")
    hint = f"; its data files: {shown}"
    for field, word in (("train_split", "train"), ("eval_split", "test")):
        match = next((p for p in files if p.parent == folder and word in p.stem.lower()), None)
        if match is not None:
            hint += f"; to read {match.name} as the {word} split: --set task.{field}={match.stem}"
    return hint


class UserDatasetTask(Task):
    """Rows with a ``prompt`` column and any others; no built-in verifier (``task.reward_funcs`` score it)."""

    name = "dataset"
    splits: tuple[str, ...] = ()  # whatever the source holds
    has_verifier = False
    train_split = "train"
    eval_split = "test"
    eval_fraction: float | None = None
    split_seed = 0
    completion_tokens = 64  # as the smol pool generates for one's own text; longer answers: --max-new-tokens

    def configure(self, train_split: str, eval_split: str, eval_fraction: float | None, split_seed: int) -> None:
        """The recipe's ``task`` settings this task needs to tell training rows from held-out ones."""
        self.train_split, self.eval_split = train_split, eval_split
        self.eval_fraction, self.split_seed = eval_fraction, split_seed

    @property
    def default_eval_split(self) -> str:  # type: ignore[override]
        return self.eval_split

    def score(self, completion: str, answer: str) -> float:
        raise UsageError("task 'dataset' has no built-in verifier: name your reward functions in task.reward_funcs")

    def extract(self, completion: str) -> str | None:
        return None

    def holds_out(self, source: str | None) -> bool:
        """Whether held-out rows are drawn from the training split (rather than read from ``eval_split``)."""
        if self.eval_fraction is not None:
            return True
        path = Path(source).expanduser() if source else None
        if path is not None and path.is_file():
            return True
        if path is not None and path.is_dir():
            return not local_has_split(path, self.eval_split)
        return False

    def check_source(self, source: str | None) -> None:
        """A source that is set and exists (a hub id is checked when it is read); a folder holds the train split."""
        path = self._local_path(source)
        if path is not None and path.is_dir() and not local_has_split(path, self.train_split):
            raise DataError(f"task.source: {path} has no split {self.train_split!r} (task.train_split): expected "
                            f"{self.train_split}.jsonl/.json/.parquet, data/{self.train_split}-*.parquet or a "
                            f"datasets.save_to_disk folder{found_files_hint(path)}")

    def _local_path(self, source: str | None) -> Path | None:
        """The local file or folder ``source`` names; None for a hub id; refuses anything else."""
        if not source or source in NAMED_SOURCES:
            raise UsageError("task 'dataset' needs task.source: a .jsonl/.json/.parquet file, a folder of split "
                             "files or a datasets.save_to_disk folder, or a hub id owner/name[:config]")
        path = existing_local_source(source)
        if path is not None:
            return path
        if "/" in source and not source.startswith((".", "/", "~")) and not Path(source).suffix:
            return None
        raise UsageError(f"task.source: {source!r} is neither an existing file or folder nor a hub id owner/name")

    def read(self, split: str, source: str | None) -> Rows:
        path = self._local_path(source)
        return read_local(path, split) if path is not None else read_hub(parse_hub_id(str(source), split))

    def reward_columns(self, source: str | None) -> list[tuple[set[str], str]] | None:
        """The columns each split the run reads hands the reward functions (every column but ``prompt``, as TRL
        does, plus mutualrl's ``prompt_id`` and ``task``), with where they come from; None for a hub dataset (not
        read before the launch)."""
        if self._local_path(source) is None:
            return None
        splits = [self.train_split] if self.holds_out(source) else [self.train_split, self.eval_split]
        found = []
        for split in splits:
            data = self.read(split, source)
            names = {str(k) for row in data.rows if isinstance(row, dict) for k in row} - {"prompt"}
            found.append((names | set(RESERVED_COLUMNS), data.origin))
        return found

    def load(self, split: str, source: str | None = None, limit: int | None = None) -> list[TaskExample]:
        holding_out = self.holds_out(source)
        read_split = self.train_split if holding_out else split
        data = self.read(read_split, source)
        columns = ColumnTypes(data.origin)
        examples = [self.make_example(row, i, read_split, data.origin, columns) for i, row in enumerate(data.rows)]
        check_carried_columns(data.rows, data.origin)
        if holding_out:
            if split not in (self.train_split, self.eval_split):
                raise UsageError(f"task 'dataset': {data.origin} has one split; use {self.train_split!r} (training "
                                 f"rows) or {self.eval_split!r} (the held-out rows), not {split!r}")
            held = held_out_indices(len(examples), self.eval_fraction or DEFAULT_EVAL_FRACTION, self.split_seed)
            keep_held = split == self.eval_split
            examples = [ex for i, ex in enumerate(examples) if (i in held) == keep_held]
        from mutualrl.tasks.dataset_task import check_unique_ids

        check_unique_ids(examples, data.origin)
        return examples if limit is None else examples[:limit]

    def make_example(self, row: dict[str, Any], index: int, split: str, origin: str,
                     columns: ColumnTypes | None = None) -> TaskExample:
        """One row, checked before anything tokenizes it (:mod:`mutualrl.tasks.row_checks`)."""
        prompt = require(row, index, "prompt", origin)
        for column in RESERVED_COLUMNS:
            if column in row:
                raise DataError(f"{origin}: row {index} has a column {column!r}, which mutualrl sets itself; "
                                "rename it")
        text, messages = prompt_text(prompt, where(origin, index, "prompt"), self.max_prompt_chars)
        for column, value in row.items():
            if column != "prompt":
                check_cell(value, where(origin, index, str(column)), self.max_prompt_chars)
        (columns or ColumnTypes(origin)).check(row, index)
        columns = {k: v for k, v in row.items() if k != "prompt"}
        key = row.get("id")
        prompt_id = f"dataset/{key}" if key is not None else f"dataset/{split}/{index:05d}"
        meta: dict[str, Any] = {"columns": columns}
        if messages is not None:
            meta["messages"] = messages
        answer = row.get("answer", row.get("solution", ""))
        return TaskExample(prompt_id=prompt_id, prompt=text, answer="" if answer is None else str(answer),
                           task=self.name, meta=meta)


def held_out_indices(rows: int, fraction: float, seed: int) -> set[int]:
    """The row indices held out for validation: ``round(fraction * rows)`` (at least 1, and 1 row left to
    train on), drawn with ``random.Random(seed)`` -- the same set in the launcher, workers and ``eval``."""
    if rows < 2:
        raise DataError(f"task 'dataset': {rows} row(s) cannot be split into training and held-out rows")
    count = min(rows - 1, max(1, round(fraction * rows)))
    return set(random.Random(seed).sample(range(rows), count))
