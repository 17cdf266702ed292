"""A run folder as the figures read it: its metric rows, its pool, task and policies, and whether several runs
may be drawn on one figure.

Runs on different pools or tasks are refused unless the caller allows it: overlaid, their lines looked
comparable, and the panel averaged over policies averaged over different models.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError, RunFolderError
from mutualrl.run_folder import RunPaths, read_bytes, read_json, read_metric_rows

#: The recipe's ``task`` fields that decide what a reward measures: runs that differ in one are different tasks.
TASK_IDENTITY = ("name", "source", "verifier", "reward_funcs")


@dataclass
class RunData:
    path: Path
    info: dict[str, Any]
    train: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    label: str = ""
    beta: float | None = None  # grpo.beta of the run's config.yaml (None: no config to read)
    task: dict[str, Any] = field(default_factory=dict)  # TASK_IDENTITY fields of config.yaml (or run.json's name)
    data: dict[str, str] | None = None  # inputs.json's sha256 of each data file: the data by content, not by path
    settings: Any = None  # run_settings.RunSettings (None: no readable config.yaml)

    @property
    def regime(self) -> str:
        if self.info.get("regime"):
            return str(self.info["regime"])
        regimes = [line.get("regime") for line in self.train + self.evals if line.get("regime")]
        return max(set(regimes), key=regimes.count) if regimes else "run"

    @property
    def pool(self) -> str:
        return str(self.info.get("pool") or "")

    @property
    def task_name(self) -> str:
        return str(self.task.get("name") or "")

    def policies(self) -> list[str]:
        named = [p.get("name") for p in self.info.get("policies", []) if isinstance(p, dict) and p.get("name")]
        seen = list(dict.fromkeys(named + [line["policy"] for line in self.train + self.evals if "policy" in line]))
        return seen


def load_run(path: str | Path) -> RunData:
    """A run folder's metrics. Damaged lines (a run still writing, or one cut by a kill) are skipped with a
    warning (:func:`mutualrl.run_folder.read_metric_rows`)."""
    path = Path(path)
    paths = RunPaths(path)
    if not paths.metrics.is_file():
        raise DataError(f"{path}: no {paths.metrics.name} (is it a run folder written by `mutualrl train`?)")
    info: dict[str, Any] = {}
    if paths.run_json.exists():
        info = read_json(paths.run_json)  # damaged: one line naming it
    recipe = read_recipe(paths.config)
    run = RunData(path=path, info=info, beta=recipe_beta(recipe), task=task_identity(recipe, info),
                  data=data_digests(paths), settings=readable_settings(path))
    rows, damaged = read_metric_rows(paths.metrics)
    if damaged:
        warnings.warn(f"{paths.metrics}: skipping {damaged} damaged line{'s' if damaged > 1 else ''}", stacklevel=2)
    for _, row in rows:
        kind = row.get("kind")
        if kind not in ("train", "eval"):
            continue  # other kinds may appear later; they are not plotted
        for key in ("policy", "step"):
            if key not in row:
                raise DataError(f"{paths.metrics}: a {kind} line has no {key!r}")
        (run.train if kind == "train" else run.evals).append(row)
    return run


def data_digests(paths: RunPaths) -> dict[str, str] | None:
    """The sha256 of each data file the run recorded (``inputs.json``); None for a run without the record."""
    from mutualrl.inputs_record_reader import recorded_inputs

    record = recorded_inputs(paths)  # each entry's type checked: a damaged one is one line naming it
    return dict(record["data"]) if record is not None and record["data"] else None


def readable_settings(path: Path) -> Any:
    from mutualrl.errors import MutualRLError
    from mutualrl.evaluation.run_settings import read_settings

    try:
        return read_settings(path)
    except MutualRLError:
        return None


def read_recipe(config: Path) -> dict[str, Any] | None:
    """A run's resolved recipe (``config.yaml``); None if it is missing or cannot be read."""
    import yaml

    try:  # read_bytes: bounded, so a sparse or huge config.yaml is refused, not read into memory
        recipe = yaml.safe_load(read_bytes(config).decode("utf-8", errors="replace"))
    except (OSError, yaml.YAMLError, ValueError, RunFolderError):
        return None
    return recipe if isinstance(recipe, dict) else None


def recipe_beta(recipe: dict[str, Any] | None) -> float | None:
    """``grpo.beta`` of a run's resolved recipe (TRL's default 0 when unset); None if it cannot be read."""
    if recipe is None:
        return None
    try:
        return float((recipe.get("grpo") or {}).get("beta", 0.0))
    except (AttributeError, TypeError, ValueError):
        return None


def task_identity(recipe: dict[str, Any] | None, info: dict[str, Any]) -> dict[str, Any]:
    """The :data:`TASK_IDENTITY` fields of the recipe's task; only the task's name (run.json) without a recipe."""
    task = (recipe or {}).get("task")
    if isinstance(task, dict):
        return {key: task.get(key) for key in TASK_IDENTITY}
    return {"name": info.get("task")} if info.get("task") else {}


def setup_differences(runs: Sequence[RunData]) -> list[str]:
    """What makes the runs' curves incomparable: ``"pool: A (tiny), B (smol)"``-style lines; empty when none."""
    differences = []
    pools = {(run.pool, tuple(run.policies())) for run in runs}
    if len(pools) > 1:
        differences.append("pool: " + ", ".join(f"{run.path} ({run.pool or '?'}: {', '.join(run.policies())})"
                                                for run in runs))
    for key in TASK_IDENTITY:
        values = [run.task.get(key) for run in runs]
        if key == "source" and all(run.data for run in runs):  # the same data under two paths is the same data
            values = [run.data for run in runs]
        if any(run.task for run in runs) and len({repr(v) for v in values}) > 1:
            differences.append(f"task.{key}: " + ", ".join(f"{run.path} ({value})"
                                                          for run, value in zip(runs, values, strict=True)))
    return differences


def setting_differences(runs: Sequence[RunData]) -> list[str]:
    """The trained settings that differ between the runs, beyond their regime and seed (``grpo.beta: 0 (a), 0.04
    (b)``), to say under a figure that draws them together."""
    from mutualrl.evaluation.run_settings import describe_difference, differing_keys

    settings = [run.settings for run in runs]
    if len(runs) < 2 or any(s is None for s in settings):
        return []
    return [describe_difference(key, settings) for key in differing_keys(settings, ignore=["regime.name"])
            if not key.startswith("data:") and key != "task.source (no inputs.json)"]


#: A label names at most this many differing settings beside the regime; beyond, the folder name says which run.
LABEL_SETTINGS = 2


def label_runs(runs: Sequence[RunData]) -> None:
    """Legend labels: the regime, with what else differs (``prp (peer)``, ``sgt (lr 0.0001)``); with the pool (and
    task) when they differ; with the folder name when still ambiguous."""
    from mutualrl.evaluation.run_settings import differing_keys, is_inactive, short_setting

    pools, tasks = {r.pool for r in runs}, {r.task_name for r in runs}
    readable = len(runs) > 1 and all(r.settings is not None for r in runs)
    keys = differing_keys([r.settings for r in runs], ignore=["regime.name"]) if readable else []
    keys = [key for key in keys if not key.startswith(("data:", "code:", "pool.", "task."))]
    for r in runs:
        prefix = [part for part, several in ((r.pool, len(pools) > 1), (r.task_name, len(tasks) > 1))
                  if several and part]
        extra = [short_setting(key, r.settings) for key in keys[:LABEL_SETTINGS] if not is_inactive(key, r.regime)]
        shown = f"{r.regime} ({', '.join(extra)})" if extra else r.regime
        r.label = "/".join([*prefix, shown])
    labels = [r.label for r in runs]
    for r in runs:
        if labels.count(r.label) > 1:
            r.label = f"{r.label} ({r.path.name})"


def series(lines: list[dict[str, Any]], policy: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` for ``policy``, sorted by step; the last value wins for a repeated step."""
    points: dict[int, float] = {}
    for line in lines:
        if line.get("policy") != policy or key not in line:
            continue
        value = line[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            points[int(line["step"])] = float(value)
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def mean_series(lines: list[dict[str, Any]], policies: list[str], key: str) -> tuple[list[int], list[float]]:
    """Mean over policies at the steps every policy logged (the paper's averaged panel)."""
    per = [dict(zip(*series(lines, p, key), strict=True)) for p in policies]
    per = [p for p in per if p]
    if len(per) < 2:
        return [], []
    common = sorted(set.intersection(*(set(p) for p in per)))
    return common, [sum(p[s] for p in per) / len(per) for s in common]
