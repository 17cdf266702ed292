"""PNG figures of training runs, in the style of the paper's figures.

Read from each run folder's merged metrics (train and eval lines, see
docs/run-layout.md), ``run.json`` and ``config.yaml``; several runs are overlaid, one colour, dash pattern
and marker per run (labelled by regime, e.g. standalone / prp / xgrpo / sgt; :mod:`.plot_style`):

- ``validation_reward.png`` -- validation reward@1 vs step, one panel per policy plus
  their average (paper Fig. "probe comparison", top row); step 0 is "No Train";
- ``validation_reward_by_task.png`` -- the same per task, when runs validate on several;
- ``validation_reward_by_group.png`` -- the same per task group (e.g. the tiny pool's families);
- ``training_reward.png`` -- mean training reward per policy (bottom row of that figure);
- ``optimization.png`` -- entropy and KL per policy (Fig. "optimization signatures"); with β = 0 the KL
  panels say so;
- ``regime_metrics.png`` -- regime metrics such as ``sgt/gate_rate`` when present, a panel per metric.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError
from mutualrl.evaluation.plot_style import (
    colors,
    empty_panel,
    line_kwargs,
    panel_grid,
    run_legend,
    run_styles,
    save_with_legend,
    short_title,
)
from mutualrl.evaluation.results import GROUP_KEY_PREFIX, REWARD_KEY_SUFFIX, group_rewards
from mutualrl.regimes.registry import all_regimes
from mutualrl.run_folder import RunPaths, read_json, read_metric_rows

OPTIMIZATION_KEYS = (("entropy", "entropy"), ("kl", "KL"))


@dataclass
class RunData:
    path: Path
    info: dict[str, Any]
    train: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    label: str = ""
    beta: float | None = None  # grpo.beta of the run's config.yaml (None: no config to read)

    @property
    def regime(self) -> str:
        if self.info.get("regime"):
            return str(self.info["regime"])
        regimes = [line.get("regime") for line in self.train + self.evals if line.get("regime")]
        return max(set(regimes), key=regimes.count) if regimes else "run"

    @property
    def pool(self) -> str:
        return str(self.info.get("pool") or "")

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
    run = RunData(path=path, info=info, beta=recipe_beta(paths.config))
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


def recipe_beta(config: Path) -> float | None:
    """``grpo.beta`` of a run's resolved recipe (TRL's default 0 when unset); None if it cannot be read."""
    import yaml

    try:
        grpo = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("grpo") or {}
        return float(grpo.get("beta", 0.0))
    except (OSError, yaml.YAMLError, AttributeError, TypeError, ValueError):
        return None


def label_runs(runs: Sequence[RunData]) -> None:
    """Legend labels: the regime; with the pool when pools differ; with the folder name when still ambiguous."""
    pools = {r.pool for r in runs}
    for r in runs:
        r.label = f"{r.pool}/{r.regime}" if len(pools) > 1 and r.pool else r.regime
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


def ema(values: list[float], alpha: float) -> list[float]:
    out: list[float] = []
    for v in values:
        out.append(v if not out else alpha * v + (1 - alpha) * out[-1])
    return out


def _panel_policies(runs: Sequence[RunData]) -> list[str]:
    return list(dict.fromkeys(p for r in runs for p in r.policies()))


def plot_metric_panels(
    runs: Sequence[RunData],
    out: Path,
    *,
    kind: str,
    key: str,
    title: str,
    ylabel: str,
    average: bool = True,
    smooth: float | None = None,
    markers: bool = True,
) -> Path | None:
    """One panel per policy (plus the mean over policies), one line per run, of metric ``key``."""
    policies = _panel_policies(runs)
    if not any(series(getattr(r, kind), p, key)[0] for r in runs for p in policies):
        return None
    panels: list[str | None] = list(policies)
    if average and len(policies) > 1:
        panels.append(None)
    fig, axes = panel_grid(1, len(panels), title)
    palette, styles = colors(len(runs)), run_styles(len(runs))
    drawn: set[int] = set()
    for ax, policy in zip(axes[0], panels, strict=True):
        for r, run in enumerate(runs):
            lines = getattr(run, kind)
            steps, values = series(lines, policy, key) if policy else mean_series(lines, run.policies(), key)
            if steps:
                drawn.add(r)
                _draw_series(ax, steps, values, line_kwargs(palette[r], styles[r], marker=markers, markersize=3.5),
                             smooth)
        if not ax.lines:
            empty_panel(ax)
        ax.set_title(policy if policy else "average over policies")
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
    return save_with_legend(fig, run_legend([r.label for r in runs], palette, styles, sorted(drawn), markers), out)


def _draw_series(ax: Any, steps: list[int], values: list[float], kwargs: dict[str, Any],
                 smooth: float | None) -> None:
    """One run's line; long series smoothed (EMA) over a faint raw line."""
    if smooth and len(values) > 20:
        ax.plot(steps, values, color=kwargs["color"], alpha=0.25, lw=1)
        ax.plot(steps, ema(values, smooth), **{k: v for k, v in kwargs.items() if not k.startswith("marker")
                                               and k != "ms"})
    else:
        ax.plot(steps, values, **kwargs)


def plot_grid(
    runs: Sequence[RunData],
    out: Path,
    *,
    kind: str,
    keys: list[tuple[str, str]],
    title: str,
    smooth: float | None,
    ylabel: str | None = None,
    empty_notes: dict[str, str] | None = None,
) -> Path | None:
    """Rows = metrics (``(key, label)``), columns = policies, one line per run; ``ylabel`` defaults to the label.

    A metric no run logged is left out, unless ``empty_notes`` names it: then its row stays, with the note
    saying why it is empty (a figure titled "entropy and KL" with no KL row hid that β was 0)."""
    policies = _panel_policies(runs)
    notes = empty_notes or {}
    logged = [(k, lab) for k, lab in keys if any(series(getattr(r, kind), p, k)[0] for r in runs for p in policies)]
    if not logged:
        return None
    keys = [(k, lab) for k, lab in keys if (k, lab) in logged or k in notes]
    fig, axes = panel_grid(len(keys), len(policies), title)
    palette, styles = colors(len(runs)), run_styles(len(runs))
    drawn: set[int] = set()
    for row, (key, label) in enumerate(keys):
        for col, policy in enumerate(policies):
            ax = axes[row][col]
            for r, run in enumerate(runs):
                steps, values = series(getattr(run, kind), policy, key)
                if steps:
                    drawn.add(r)
                    _draw_series(ax, steps, values, line_kwargs(palette[r], styles[r], marker=True, markersize=3),
                                 smooth)
            if not ax.lines:
                empty_panel(ax, notes.get(key, "no data"))
            ax.set_title(f"{policy}: {label}")
            ax.set_xlabel("step")
            ax.set_ylabel(ylabel or label)
    return save_with_legend(fig, run_legend([r.label for r in runs], palette, styles, sorted(drawn)), out)


def plot_metric_mosaic(
    runs: Sequence[RunData],
    out: Path,
    *,
    kind: str,
    keys: list[tuple[str, str]],
    title: str,
    smooth: float | None,
    columns: int = 4,
) -> Path | None:
    """One panel per metric in a grid of ``columns``; a line per policy (colour) and run, each with its own dash
    pattern and marker.

    For the many regime metrics: a row per metric and a column per policy made a 1056x5316 px strip."""
    policies = _panel_policies(runs)
    keys = [(k, lab) for k, lab in keys if any(series(getattr(r, kind), p, k)[0] for r in runs for p in policies)]
    if not keys:
        return None
    cols = min(columns, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = panel_grid(rows, cols, title, width=3.6, height=2.7)
    # Each (run, policy) line that has a regime metric gets its own style, so equal values stay visible.
    lines = [(run, policy) for run in runs for policy in policies
             if any(series(getattr(run, kind), policy, k)[0] for k, _ in keys)]
    palette, styles = colors(len(policies)), run_styles(len(lines))
    drawn: set[int] = set()
    for n, (key, label) in enumerate(keys):
        ax = axes[n // cols][n % cols]
        for k, (run, policy) in enumerate(lines):
            steps, values = series(getattr(run, kind), policy, key)
            if steps:
                drawn.add(k)
                _draw_series(ax, steps, values, line_kwargs(palette[policies.index(policy)], styles[k], marker=True,
                                                            markersize=3), smooth)
        ax.set_title(short_title(label), fontsize=9)
        ax.set_xlabel("step")
    for n in range(len(keys), rows * cols):
        axes[n // cols][n % cols].set_visible(False)
    several_runs = len({id(lines[k][0]) for k in drawn}) > 1
    labels = [f"{run.label}: {policy}" if several_runs else policy for run, policy in lines]
    return save_with_legend(fig, run_legend(labels, [palette[policies.index(p)] for _, p in lines], styles,
                                            sorted(drawn)), out)


def kl_note(runs: Sequence[RunData]) -> str:
    """Why the KL panels are empty: TRL computes the KL term (and logs ``kl``) only when β > 0."""
    betas = {run.beta for run in runs}
    if betas == {0.0}:
        return "no KL logged: β = 0 (grpo.beta), so there is no KL term"
    return "no KL logged (TRL logs kl only when grpo.beta > 0)"


def _task_keys(runs: Sequence[RunData]) -> list[str]:
    """Per-task validation keys; none when there is a single task (it would repeat the overall figure)."""
    keys = []
    for r in runs:
        for line in r.evals:
            for k in line:
                if (k.startswith("eval/") and k.endswith("/reward@1") and k != "eval/reward@1"
                        and not k.startswith(GROUP_KEY_PREFIX) and k not in keys):
                    keys.append(k)
    return keys if len(keys) > 1 else []


def _group_keys(runs: Sequence[RunData]) -> list[tuple[str, str]]:
    """``(eval/group/<g>/reward@1, g)`` for every task group the runs validated (e.g. the tiny pool's families)."""
    groups = sorted({g for r in runs for line in r.evals for g in group_rewards(line)})
    return [(f"{GROUP_KEY_PREFIX}{g}{REWARD_KEY_SUFFIX}", g) for g in groups]


def regime_metric_label(key: str) -> str:
    """``sgt/gate_rate`` -> ``SGT gate rate`` (the regime's ``titles``); unknown keys are shown as logged."""
    return next((spec.title_keys[key] for spec in all_regimes() if key in spec.title_keys), key)


def regime_prefixes() -> tuple[str, ...]:
    """``<name>/`` and ``<settings_key>/`` of every registered regime: the keys of regime metrics."""
    names = {part for spec in all_regimes() for part in (spec.name, spec.settings_key) if part}
    return tuple(sorted(f"{part}/" for part in names))


def _regime_keys(runs: Sequence[RunData]) -> list[str]:
    keys = []
    prefixes = regime_prefixes()
    for r in runs:
        for line in r.train:
            for k, v in line.items():
                if k.startswith(prefixes) and isinstance(v, (int, float)) and k not in keys:
                    keys.append(k)
    return keys


def plot_runs(run_dirs: Sequence[str | Path], out_dir: str | Path, smooth: float | None = 0.3) -> list[Path]:
    """Write every figure that the runs have data for into ``out_dir``; returns the files written."""
    runs = [load_run(d) for d in run_dirs]
    if not runs:
        raise DataError("no run folders given")
    label_runs(runs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [
        plot_metric_panels(runs, out_dir / "validation_reward.png", kind="evals", key="eval/reward@1",
                           title="Validation reward@1 (greedy; step 0 = No Train)", ylabel="reward@1"),
        plot_grid(runs, out_dir / "validation_reward_by_task.png", kind="evals",
                  keys=[(k, k[len("eval/"):-len("/reward@1")]) for k in _task_keys(runs)],
                  title="Validation reward@1 per task", smooth=None, ylabel="reward@1"),
        plot_grid(runs, out_dir / "validation_reward_by_group.png", kind="evals",
                  keys=_group_keys(runs),
                  title="Validation reward@1 per task group", smooth=None, ylabel="reward@1"),
        plot_metric_panels(runs, out_dir / "training_reward.png", kind="train", key="reward_mean",
                           title="Training reward (mean over rollouts)", ylabel="reward", smooth=smooth,
                           markers=False),
        plot_grid(runs, out_dir / "optimization.png", kind="train", keys=list(OPTIMIZATION_KEYS),
                  title="Optimization signatures: entropy and KL", smooth=smooth, empty_notes={"kl": kl_note(runs)}),
        plot_metric_mosaic(runs, out_dir / "regime_metrics.png", kind="train",
                           keys=[(k, regime_metric_label(k)) for k in _regime_keys(runs)],
                           title="Regime metrics", smooth=smooth),
    ]
    return [p for p in written if p is not None]


def summary_rows(run_dirs: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Per run and policy: No-Train (first) / final / best validation reward@1 and the last training reward."""
    runs = [load_run(d) for d in run_dirs]
    label_runs(runs)
    rows = []
    for run in runs:
        for policy in run.policies():
            steps, values = series(run.evals, policy, "eval/reward@1")
            tsteps, tvalues = series(run.train, policy, "reward_mean")
            rows.append(
                {
                    "run": run.label,
                    "policy": policy,
                    "first_step": steps[0] if steps else None,
                    "first": values[0] if values else None,
                    "final_step": steps[-1] if steps else None,
                    "final": values[-1] if values else None,
                    "best": max(values) if values else None,
                    "train_steps": tsteps[-1] if tsteps else None,
                    "last_train_reward": tvalues[-1] if tvalues else None,
                }
            )
    return rows
