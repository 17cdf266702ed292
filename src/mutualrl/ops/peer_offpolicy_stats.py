"""How off-policy the samples each policy took from each peer through the exchange were: the per-source diagnostics
(``<regime>/from/<peer>/<figure>``, :data:`mutualrl.metric_labels.SOURCE_FIGURES`: ESS, log importance ratio, truncated,
filtered and used shares; docs/regimes.md)
that the run's policies logged in its merged ``metrics.jsonl``, per (learner, peer), at the last step and averaged
over the steps. ``mutualrl see inspect`` shows them beside the exchange."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mutualrl.metric_labels import SOURCE_FIGURE_NAMES, source_figure_key
from mutualrl.run_folder import RunPaths, read_metric_rows


def run_folder_of(path: Path | str, see_root: Path) -> Path | None:
    """The run folder whose metrics describe the exchange ``see_root``: ``path`` when it is the run folder, else the
    exchange's parent when its metrics file is there (an exchange inside a run folder); None: neither."""
    for folder in (Path(path), see_root.parent):
        if RunPaths(folder).metrics.is_file():
            return folder
    return None


def offpolicy_stats_by_peer(run: Path | None) -> list[dict[str, Any]]:
    """Per (learner, peer), in the order first logged: ``regime``, ``steps`` (how many logged a figure),
    ``last_step``, ``last`` (each figure at the last step that logged it) and ``mean`` (over the steps, NaN left
    out). Empty without a run folder or per-source figures."""
    if run is None:
        return []
    rows, _ = read_metric_rows(RunPaths(run).metrics)
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for _, row in rows:
        if row.get("kind") != "train":
            continue
        for key, value in row.items():
            source = source_figure_key(key)
            if source is None:
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                continue
            regime, peer, figure = source
            entry = found.setdefault((row["policy"], peer), {"regime": regime, "points": {}})
            entry["points"].setdefault(figure, {})[row["step"]] = float(value)
    return [_summary(learner, peer, entry) for (learner, peer), entry in found.items()]


def _summary(learner: str, peer: str, entry: dict[str, Any]) -> dict[str, Any]:
    points: dict[str, dict[int, float]] = entry["points"]
    figures = [f for f in SOURCE_FIGURE_NAMES if f in points]
    steps = sorted({step for f in figures for step in points[f]})
    return {
        "learner": learner, "peer": peer, "regime": entry["regime"], "steps": len(steps), "last_step": steps[-1],
        "last": {f: points[f][max(points[f])] for f in figures},
        "mean": {f: sum(points[f].values()) / len(points[f]) for f in figures},
    }
