"""PNG figures of training runs, in the style of the paper's figures.

Read from each run folder's merged metrics (train and eval lines, see
docs/run-layout.md), ``run.json`` and ``config.yaml`` (:mod:`.plotted_runs`); several runs of one pool and
task are overlaid. In every figure a panel is a policy (and a metric), and colour, dash pattern and marker mean
the run (labelled by regime, e.g. standalone / prp / xgrpo / sgt; :mod:`.plot_style`); panels of one quantity
share a y range, and titles and y labels are words (:mod:`.plot_labels`):

- ``validation_reward.png`` -- validation reward@1 vs step, one panel per policy plus
  their mean (paper Fig. "probe comparison", top row); step 0 is "No Train";
- ``validation_reward_by_task.png`` -- the same per task, when runs validate on several;
- ``validation_reward_by_group.png`` -- the same per task group (e.g. the tiny pool's families);
- ``training_reward.png`` -- mean training reward per policy (bottom row of that figure);
- ``optimization.png`` -- entropy and KL per policy (Fig. "optimization signatures"); with β = 0 the KL
  panels say so;
- ``regime_metrics.png`` -- regime metrics such as the SGT gate rate when present, a panel per metric and
  policy;
- ``sources_<learner>.png`` -- one per learner that trains on peers' samples: its per-source diagnostics
  (``<regime>/from/<peer>/<figure>``: ESS, log importance ratio, truncated / filtered / used shares), a row per
  figure and a column per peer, on the same y range in every learner's figure.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError
from mutualrl.evaluation.plot_labels import axis_range, metric_label
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
from mutualrl.evaluation.plotted_runs import (
    RunData,
    label_runs,
    load_run,
    mean_series,
    series,
    setting_differences,
    setup_differences,
)
from mutualrl.evaluation.results import GROUP_KEY_PREFIX, REWARD_KEY_SUFFIX, group_rewards
from mutualrl.metric_labels import SOURCE_FIGURES, UNIT, MetricWords, source_figure_key
from mutualrl.output_guards import refuse_existing
from mutualrl.regimes.core.registry import all_regimes
from mutualrl.run_folder import RunPaths

__all__ = ["RunData", "load_run", "mean_series", "plot_runs", "series", "summary_rows"]

OPTIMIZATION_KEYS = ("entropy", "kl")
REWARD_AT_1 = "reward@1 (greedy)"


def ema(values: list[float], alpha: float) -> list[float]:
    out: list[float] = []
    for v in values:
        out.append(v if not out else alpha * v + (1 - alpha) * out[-1])
    return out


def _panel_policies(runs: Sequence[RunData]) -> list[str]:
    return list(dict.fromkeys(p for r in runs for p in r.policies()))


def _averaged_policies(runs: Sequence[RunData]) -> list[str]:
    """The policies a mean panel averages: every run's, when all runs have the same ones; else none (a mean over
    different models drawn as one line per run compared nothing)."""
    sets = {tuple(sorted(r.policies())) for r in runs}
    return list(runs[0].policies()) if len(sets) == 1 and len(runs[0].policies()) > 1 else []


def _share_range(panels: Sequence[tuple[Any, list[float]]], scale: str) -> None:
    """One y range over panels showing the same quantity (each panel with the values drawn on it)."""
    drawn = [(ax, values) for ax, values in panels if ax.lines]
    limits = axis_range([v for _, values in drawn for v in values], scale)
    for ax, _ in drawn:
        ax.set_ylim(*limits)


def plot_metric_panels(
    runs: Sequence[RunData],
    out: Path,
    *,
    kind: str,
    key: str,
    title: str,
    smooth: float | None = None,
    markers: bool = True,
) -> Path | None:
    """One panel per policy (plus, titled as such, the mean over the policies at the steps all of them logged),
    one line per run, of metric ``key``; every panel on the same y range."""
    policies, words = _panel_policies(runs), metric_label(key)
    if not any(series(getattr(r, kind), p, key)[0] for r in runs for p in policies):
        return None
    averaged = _averaged_policies(runs)
    panels: list[str | None] = [*policies, None] if averaged else list(policies)
    fig, axes = panel_grid(1, len(panels), title)
    palette, styles = colors(len(runs)), run_styles(len(runs))
    drawn: set[int] = set()
    shown: list[tuple[Any, list[float]]] = []
    for ax, policy in zip(axes[0], panels, strict=True):
        curves = ((r, series(getattr(run, kind), policy, key) if policy else
                   mean_series(getattr(run, kind), averaged, key)) for r, run in enumerate(runs))
        shown.append((ax, _draw_curves(ax, len(runs), curves, smooth, drawn, marker=markers, markersize=3.5)))
        _label_panel(ax, policy if policy else f"mean of the {len(averaged)} policies", words.ylabel)
    _share_range(shown, words.scale)
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


def _logged(runs: Sequence[RunData], kind: str, policies: Sequence[str], key: str) -> bool:
    return any(series(getattr(r, kind), p, key)[0] for r in runs for p in policies)


def _draw_curves(ax: Any, n_runs: int, curves: Iterable[tuple[int, tuple[list[int], list[float]]]],
                 smooth: float | None, drawn: set[int], *, marker: bool = True,
                 markersize: float = 3) -> list[float]:
    """Each ``(r, (steps, values))`` of ``curves`` on ``ax`` in run ``r``'s colour and style (of ``n_runs``), a run
    with no steps skipped; the runs drawn added to ``drawn``; the values drawn."""
    palette, styles = colors(n_runs), run_styles(n_runs)
    values_here: list[float] = []
    for r, (steps, values) in curves:
        if steps:
            drawn.add(r)
            values_here += values
            _draw_series(ax, steps, values, line_kwargs(palette[r], styles[r], marker=marker, markersize=markersize),
                         smooth)
    return values_here


def _draw_runs(ax: Any, runs: Sequence[RunData], kind: str, policy: str, key: str, smooth: float | None,
               drawn: set[int]) -> list[float]:
    """Every run's line of ``key`` for ``policy`` on ``ax``, in the run's colour and style; the values drawn."""
    return _draw_curves(ax, len(runs), ((r, series(getattr(run, kind), policy, key)) for r, run in enumerate(runs)),
                        smooth, drawn)


def _label_panel(ax: Any, title: str, ylabel: str, empty_note: str = "no data") -> None:
    """Title and axis labels of a panel of steps; ``empty_note`` where no line was drawn on it."""
    if not ax.lines:
        empty_panel(ax, empty_note)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)


def _share_by_quantity(panels: Sequence[tuple[MetricWords, Any, list[float]]]) -> None:
    """Panels whose metrics have the same y label and scale show one quantity: they share a y range."""
    for quantity in dict.fromkeys((w.ylabel, w.scale) for w, _, _ in panels):
        _share_range([(ax, values) for w, ax, values in panels if (w.ylabel, w.scale) == quantity], quantity[1])


def plot_grid(
    runs: Sequence[RunData],
    out: Path,
    *,
    kind: str,
    keys: list[tuple[str, MetricWords]],
    title: str,
    smooth: float | None,
    empty_notes: dict[str, str] | None = None,
) -> Path | None:
    """Rows = metrics, columns = policies, one line per run; panels of one quantity share a y range.

    A metric no run logged is left out, unless ``empty_notes`` names it: then its row stays, with the note
    saying why it is empty (a figure titled "entropy and KL" with no KL row hid that β was 0)."""
    policies = _panel_policies(runs)
    notes = empty_notes or {}
    if not any(_logged(runs, kind, policies, k) for k, _ in keys):
        return None
    keys = [(k, w) for k, w in keys if _logged(runs, kind, policies, k) or k in notes]
    fig, axes = panel_grid(len(keys), len(policies), title)
    drawn: set[int] = set()
    panels: list[tuple[MetricWords, Any, list[float]]] = []
    for row, (key, words) in enumerate(keys):
        for col, policy in enumerate(policies):
            ax = axes[row][col]
            panels.append((words, ax, _draw_runs(ax, runs, kind, policy, key, smooth, drawn)))
            _label_panel(ax, f"{policy}: {words.title}", words.ylabel, notes.get(key, "no data"))
    _share_by_quantity(panels)
    return save_with_legend(fig, run_legend([r.label for r in runs], colors(len(runs)), run_styles(len(runs)),
                                            sorted(drawn)), out)


def plot_metric_mosaic(
    runs: Sequence[RunData],
    out: Path,
    *,
    kind: str,
    keys: list[tuple[str, MetricWords]],
    title: str,
    smooth: float | None,
) -> Path | None:
    """A panel per (metric, policy), the policies of one metric side by side on one y range, a few metrics to a
    row; one line per run, in the run's colour and style as in every other figure.

    For the many regime metrics: a row per metric made a 1056x5316 px strip, and a line per policy gave the line
    styles a second meaning."""
    policies = _panel_policies(runs)
    keys = [(k, w) for k, w in keys if _logged(runs, kind, policies, k)]
    if not keys:
        return None
    per_row = max(1, 6 // len(policies)) if len(policies) > 1 else 4
    cols = len(policies) * min(per_row, len(keys))
    rows = -(-len(keys) // per_row)
    fig, axes = panel_grid(rows, cols, title, width=3.6, height=2.8)
    drawn: set[int] = set()
    panels: list[tuple[MetricWords, Any, list[float]]] = []
    for n, (key, words) in enumerate(keys):
        shown = []
        for j, policy in enumerate(policies):
            ax = axes[n // per_row][(n % per_row) * len(policies) + j]
            shown.append((ax, _draw_runs(ax, runs, kind, policy, key, smooth, drawn)))
            if not ax.lines:
                empty_panel(ax)
            ax.set_title(short_title(f"{policy}: {words.title}"), fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel(short_title(words.ylabel, 26), fontsize=8)
        _share_range(shown, words.scale)  # per metric: two metrics may share a label, not a meaning
    for n in range(len(keys) * len(policies), rows * cols):
        axes[n // cols][n % cols].set_visible(False)
    return save_with_legend(fig, run_legend([r.label for r in runs], colors(len(runs)), run_styles(len(runs)),
                                            sorted(drawn)), out)


def kl_note(runs: Sequence[RunData]) -> str:
    """Why the KL panels are empty: TRL computes the KL term (and logs ``kl``) only when β > 0."""
    betas = {run.beta for run in runs}
    if betas == {0.0}:
        return "no KL logged: β = 0 (grpo.beta), so there is no KL term"
    return "no KL logged (TRL logs kl only when grpo.beta > 0)"


def _task_keys(runs: Sequence[RunData]) -> list[tuple[str, MetricWords]]:
    """Per-task validation keys; none when there is a single task (it would repeat the overall figure)."""
    keys: list[str] = []
    for r in runs:
        for line in r.evals:
            for k in line:
                if (k.startswith("eval/") and k.endswith("/reward@1") and k != "eval/reward@1"
                        and not k.startswith(GROUP_KEY_PREFIX) and k not in keys):
                    keys.append(k)
    if len(keys) < 2:
        return []
    return [(k, MetricWords(f"task {k[len('eval/'):-len('/reward@1')]}", REWARD_AT_1, UNIT)) for k in keys]


def _group_keys(runs: Sequence[RunData]) -> list[tuple[str, MetricWords]]:
    """``eval/group/<g>/reward@1`` for every task group the runs validated (e.g. the tiny pool's families)."""
    groups = sorted({g for r in runs for line in r.evals for g in group_rewards(line, RunPaths(r.path).metrics)})
    return [(f"{GROUP_KEY_PREFIX}{g}{REWARD_KEY_SUFFIX}", MetricWords(f"group {g}", REWARD_AT_1, UNIT))
            for g in groups]


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
                if (k.startswith(prefixes) and "/from/" not in k  # per-source figures: sources_<learner>.png
                        and isinstance(v, (int, float)) and k not in keys):
                    keys.append(k)
    return keys


def _source_keys(runs: Sequence[RunData]) -> dict[str, dict[tuple[str, str], dict[int, str]]]:
    """learner -> (peer, figure) -> run index -> the key that run logged it under (``<regime>/from/<peer>/<figure>``:
    runs of different regimes meet in one panel)."""
    found: dict[str, dict[tuple[str, str], dict[int, str]]] = {}
    for r, run in enumerate(runs):
        for line in run.train:
            for key in line:
                source = source_figure_key(key)
                if source is not None and line.get("policy"):
                    found.setdefault(str(line["policy"]), {}).setdefault(source[1:], {})[r] = key
    return found


def plot_sources(runs: Sequence[RunData], out_dir: Path, smooth: float | None) -> list[Path]:
    """``sources_<learner>.png`` per learner with per-source diagnostics: a panel per (figure, peer), the peers of a
    figure side by side, a few figures to a row; one line per run; a figure's panels share one y range across every
    learner's file."""
    found = _source_keys(runs)
    words_of = {f.name: f.words for f in SOURCE_FIGURES}
    figures = [f for f in words_of if any(f == fig for keys in found.values() for _, fig in keys)]
    palette, styles = colors(len(runs)), run_styles(len(runs))
    drawn_panels: list[tuple[str, Any, list[float]]] = []
    pending = []
    for learner, keys in found.items():
        peers = list(dict.fromkeys(peer for peer, _ in keys))
        per_row = max(1, min(3, 6 // len(peers), len(figures)))
        cols, rows = per_row * len(peers), -(-len(figures) // per_row)
        fig, axes = panel_grid(rows, cols, f"{learner}: how off-policy each peer's samples are")
        for n in range(len(figures) * len(peers), rows * cols):
            axes[n // cols][n % cols].set_visible(False)
        drawn: set[int] = set()
        for n, figure in enumerate(figures):
            words = words_of[figure]
            for j, peer in enumerate(peers):
                ax = axes[n // per_row][(n % per_row) * len(peers) + j]
                curves = ((r, series(runs[r].train, learner, key)) for r, key in keys.get((peer, figure), {}).items())
                drawn_panels.append((figure, ax, _draw_curves(ax, len(runs), curves, smooth, drawn)))
                _label_panel(ax, f"from {peer}: {words.title}", words.ylabel)
        pending.append((fig, sorted(drawn), out_dir / f"sources_{learner}.png"))
    for figure in figures:
        _share_range([(ax, values) for f, ax, values in drawn_panels if f == figure], words_of[figure].scale)
    labels = [r.label for r in runs]
    return [save_with_legend(fig, run_legend(labels, palette, styles, drawn), out) for fig, drawn, out in pending]


def check_comparable(runs: Sequence[RunData], allow_mixed: bool) -> list[str]:
    """Refuse runs on different pools or tasks (their curves are not comparable) unless ``allow_mixed``; then
    return the differences, for the caller to say."""
    differences = setup_differences(runs)
    if differences and not allow_mixed:
        raise DataError(f"the runs differ in {'; '.join(differences)}: their curves are not comparable "
                        "(pass --allow-mixed to draw them together anyway)")
    return differences


#: The figures every plot may write (besides ``sources_<learner>.png``), in the order written.
FIGURE_NAMES = ("validation_reward.png", "validation_reward_by_task.png", "validation_reward_by_group.png",
                "training_reward.png", "optimization.png", "regime_metrics.png")


def plot_runs(run_dirs: Sequence[str | Path], out_dir: str | Path, smooth: float | None = 0.3,
              allow_mixed: bool = False, overwrite: bool = True) -> list[Path]:
    """Write every figure that the runs have data for into ``out_dir``; returns the files written.

    Runs on different pools or tasks raise :class:`DataError` unless ``allow_mixed`` (then a warning); with
    ``overwrite`` False, a figure's name that exists in ``out_dir`` is a :class:`UsageError`, before any is drawn."""
    runs = [load_run(d) for d in run_dirs]
    if not runs:
        raise DataError("no run folders given")
    if not overwrite:
        refuse_existing([Path(out_dir) / name for name in FIGURE_NAMES]
                        + [Path(out_dir) / f"sources_{learner}.png" for learner in _source_keys(runs)], "--out")
    for difference in check_comparable(runs, allow_mixed):
        warnings.warn(f"drawing runs that differ in {difference}", stacklevel=2)
    for difference in setting_differences(runs):  # drawn, but not without a word
        warnings.warn(f"the runs also differ in {difference}", stacklevel=2)
    label_runs(runs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [
        plot_metric_panels(runs, out_dir / "validation_reward.png", kind="evals", key="eval/reward@1",
                           title="Validation reward@1 (greedy; step 0 = No Train)"),
        plot_grid(runs, out_dir / "validation_reward_by_task.png", kind="evals", keys=_task_keys(runs),
                  title="Validation reward@1 per task", smooth=None),
        plot_grid(runs, out_dir / "validation_reward_by_group.png", kind="evals", keys=_group_keys(runs),
                  title="Validation reward@1 per task group", smooth=None),
        plot_metric_panels(runs, out_dir / "training_reward.png", kind="train", key="reward_mean",
                           title="Training reward (mean over the step's rollouts)", smooth=smooth, markers=False),
        plot_grid(runs, out_dir / "optimization.png", kind="train",
                  keys=[(k, metric_label(k)) for k in OPTIMIZATION_KEYS],
                  title="Optimization signatures: entropy and KL", smooth=smooth, empty_notes={"kl": kl_note(runs)}),
        plot_metric_mosaic(runs, out_dir / "regime_metrics.png", kind="train",
                           keys=[(k, metric_label(k)) for k in _regime_keys(runs)],
                           title="Regime metrics", smooth=smooth),
        *plot_sources(runs, out_dir, smooth),
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
