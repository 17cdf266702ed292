"""Where a task's rows come from: the hub, local files, or the offline package.

A task's ``source`` (recipe field ``task.source``, ``mutualrl eval --source``) is one of:

- ``None`` / ``"auto"``: the task's hub dataset when the hub is reachable, else the
  offline package (:mod:`mutualrl.assets.data`);
- ``"offline"``: the offline package (evaluation splits only, see below);
- ``"hub"``: the task's default hub dataset;
- a local path: a ``.jsonl`` / ``.json`` / ``.parquet`` / ``.arrow`` file, or a folder
  (a ``datasets.save_to_disk`` folder, or files named after the split:
  ``test.jsonl``, ``test-00000-of-00001.parquet``, ``data/test-*.parquet``, ``test/*.arrow``);
- any other ``owner/name`` string: a hub dataset id, optionally ``id:config`` (e.g. ``allenai/ai2_arc:ARC-Easy``);
  anything else is refused.

Rows are plain dicts in the dataset's native schema; each task turns them into
:class:`~mutualrl.tasks.base.TaskExample` and fails on a missing field with the row index
and the field name (:func:`require`).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError, UsageError

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow")

#: The sources that name no file: the task's hub dataset or the offline package (``None`` is ``"auto"``).
NAMED_SOURCES = ("auto", "offline", "hub")


def existing_local_source(source: str | None) -> Path | None:
    """The file or folder ``source`` names where it is one that exists; None for a named source, a hub id, or a
    path that does not exist (the task's own reader says which of those it is)."""
    if not source or source in NAMED_SOURCES:
        return None
    path = Path(source).expanduser()
    return path if path.exists() else None


class EvaluationSplitWarning(UserWarning):
    """Training prompts come from an evaluation split (the offline package has no training splits)."""


@dataclass(frozen=True)
class HubSpec:
    """A split of a hub dataset: ``load_dataset(path, config, split=split, revision=revision)``."""

    path: str
    config: str | None = None
    split: str = "test"
    revision: str | None = None

    def describe(self) -> str:
        cfg = f":{self.config}" if self.config else ""
        rev = f"@{self.revision}" if self.revision else ""
        return f"hub {self.path}{cfg}{rev} [{self.split}]"


@dataclass
class Rows:
    """Rows of one split and a human-readable description of where they came from (for errors)."""

    rows: list[dict[str, Any]]
    origin: str


def require(row: dict[str, Any], index: int, field: str, origin: str) -> Any:
    """``row[field]``, or a :class:`DataError` naming the row index and the field."""
    if not isinstance(row, dict):
        raise DataError(f"{origin}: row {index} is not a mapping (got {type(row).__name__})")
    value = row.get(field)
    if value is None:
        present = ", ".join(sorted(map(str, row))) or "none"
        raise DataError(f"{origin}: row {index} has no field {field!r} (fields present: {present})")
    return value


# ---------------------------------------------------------------------------------------
# Local files
# ---------------------------------------------------------------------------------------


def _read_json_file(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if path.suffix == ".json" and stripped.startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            if stripped.startswith("["):
                raise DataError(f"{path}: not valid JSON ({err})") from None
        else:
            if isinstance(data, list):
                return data
            if isinstance(data, dict) and isinstance(data.get("data"), list):
                return data["data"]
            if isinstance(data, dict) and "\n" not in text.strip():
                return [data]
    rows = []
    for lineno, line in enumerate(text.split("\n"), start=1):  # JSON Lines end lines at \n only (U+2028 is text)
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise DataError(f"{path}: line {lineno} is not valid JSON ({err.msg})") from None
    return rows


def _read_arrow_file(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa

    data = path.read_bytes()
    for opener in (pa.ipc.open_stream, pa.ipc.open_file):
        try:
            with opener(data) as reader:
                return reader.read_all().to_pylist()
        except pa.ArrowInvalid:
            continue
    raise DataError(f"{path}: not an Arrow IPC file or stream")


def read_local_file(path: Path) -> list[dict[str, Any]]:
    """Rows of one local data file (JSONL, JSON list, Parquet, Arrow IPC)."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".json"):
            return _read_json_file(path)
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        if suffix == ".arrow":
            return _read_arrow_file(path)
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err})") from None
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 - pyarrow raises many types for corrupt files
        raise DataError(f"{path}: cannot read as {suffix[1:]} ({type(err).__name__}: {err})") from None
    raise DataError(f"{path}: unsupported file type {suffix!r}; use one of {', '.join(LOCAL_SUFFIXES)}")


def _split_files(folder: Path, split: str) -> list[Path]:
    patterns = [f"{split}{s}" for s in LOCAL_SUFFIXES]
    patterns += [f"{split}-*{s}" for s in LOCAL_SUFFIXES]
    patterns += [f"data/{split}-*{s}" for s in LOCAL_SUFFIXES]
    patterns += [f"{split}/*{s}" for s in LOCAL_SUFFIXES]
    matched = [found for found in (sorted(folder.glob(pattern)) for pattern in patterns) if found]
    if len(matched) > 1:  # train.jsonl beside train.parquet: which one is meant is not ours to guess
        raise DataError(f"{folder}: two kinds of data files for split {split!r}: {matched[0][0].name} and "
                        f"{matched[1][0].relative_to(folder)}; keep one (or put the other elsewhere)")
    return matched[0] if matched else []


def local_has_split(folder: Path, split: str) -> bool:
    """Whether a local data folder holds ``split`` (split-named files, or a DatasetDict with that split)."""
    if (folder / "dataset_dict.json").is_file():
        try:
            return split in json.loads((folder / "dataset_dict.json").read_text()).get("splits", [])
        except (OSError, ValueError):
            return False
    return bool(_split_files(folder, split))


def read_local(path: Path, split: str) -> Rows:
    """Rows of ``split`` from a local file or folder (see the module docstring for the layouts)."""
    if path.is_file():
        return non_empty(Rows(read_local_file(path), str(path)))
    if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
        import datasets

        try:
            loaded = datasets.load_from_disk(str(path))
        except Exception as err:  # noqa: BLE001
            raise DataError(f"{path}: cannot load with datasets.load_from_disk ({err})") from None
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise DataError(f"{path}: no split {split!r} (splits: {', '.join(loaded)})")
            loaded = loaded[split]
        return non_empty(Rows(loaded.to_list(), f"{path} [{split}]"))
    files = _split_files(path, split)
    if not files:
        raise DataError(
            f"{path}: no data for split {split!r} (looked for {split}.jsonl/.json/.parquet/.arrow, "
            f"{split}-*.parquet, data/{split}-*.parquet, {split}/*.arrow, or a datasets.save_to_disk folder)"
        )
    rows: list[dict[str, Any]] = []
    for f in files:
        rows.extend(read_local_file(f))
    origin = str(files[0]) if len(files) == 1 else f"{path} [{split}: {len(files)} files]"
    return non_empty(Rows(rows, origin))


def non_empty(rows: Rows) -> Rows:
    """An empty local file is a mistake (a failed export, the wrong file): said so, not later as "no prompt fits"."""
    if not rows.rows:
        raise DataError(f"{rows.origin}: holds no rows (the file is empty); point task.source at the data")
    return rows


# ---------------------------------------------------------------------------------------
# Hub
# ---------------------------------------------------------------------------------------


def read_hub(spec: HubSpec) -> Rows:
    import datasets

    try:
        ds = datasets.load_dataset(spec.path, spec.config, split=spec.split, revision=spec.revision)
    except Exception as err:  # noqa: BLE001 - network, auth, missing split... all user-facing
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(
            f"cannot load {spec.describe()} ({first}). Without hub access use source 'offline' or a local file."
        ) from None
    return Rows(ds.to_list(), spec.describe())


def parse_hub_id(source: str, default_split: str) -> HubSpec:
    """``"owner/name"`` or ``"owner/name:config"`` -> a :class:`HubSpec`."""
    path, _, config = source.partition(":")
    return HubSpec(path=path, config=config or None, split=default_split)


def warn_evaluation_split(task: str, used: str) -> None:
    """Warn that training prompts of ``task`` come from the offline package's evaluation data ``used``."""
    warnings.warn(
        EvaluationSplitWarning(
            f"task {task!r}: the offline package has no training split; 'train' reads {used}, which is "
            "EVALUATION data (see docs/tasks.md). Validation on the same benchmark is then not held-out; "
            "use a hub dataset or local files to train for real."
        ),
        stacklevel=4,
    )
