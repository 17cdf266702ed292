"""``mutualrl plot --group-by``: one figure for a paper, seeds aggregated.

Runs are grouped as ``mutualrl report`` groups them (same refusal of runs differing in more than the seed), and each
group draws the mean over its runs of the held-out reward@1 at each validation step, with a 95 % Student t interval
of the mean over seeds (from n = 2) as a band, hatched and edged its own way so overlapping bands stay apart, and at
the last step a bar: the report's interval of the cell (its claim's, over seeds x prompts for the task), which the
legend tells from the band. One panel per policy and task group; the legend
(labels from what differs, n per group) sits under the panels; the title names pool, task and steps; a caption
line says what the line, the band and the smoothing are, and carries the report's caveats (small n, a method that
used few peer samples, a restarted policy). Sized for a paper's one or two columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_text_atomic
from mutualrl.evaluation.plot_style import colors, line_kwargs, pyplot, run_styles, save_figure
from mutualrl.evaluation.report.build import ALL, FinalValues, Report, build_report
from mutualrl.evaluation.report.notes import caption_caveats, caveat_causes, shown
from mutualrl.evaluation.report.stats import FEW_RUNS, INTERVAL_KIND, MIN_RUNS_FOR_INTERVAL, t_interval
from mutualrl.evaluation.results import group_rewards, metric_value
from mutualrl.run_folder import RunPaths, read_metric_rows

#: Figure widths in inches: a two-column paper's single column and its full text width (ACL, NeurIPS, ICML).
WIDTHS = {"one": 3.35, "two": 6.9}
FORMATS = ("pdf", "svg", "png")


@dataclass
class Band:
    """One group's aggregated curve in one panel."""

    steps: list[int]
    mean: list[float]
    low: list[float] | None
    high: list[float] | None
    n: int
    runs_range: tuple[float, float] = (0.0, 1.0)  # the lowest and highest value any of its runs had
    clipped: bool = False  # the interval was cut to the reward's range (:func:`clip_bands`)


REWARD_RANGE = (0.0, 1.0)
"""The range of held-out reward@1 where every run's value lies in it (a 0/1 verifier's, most rewards'): a mean over
seeds cannot leave it, so neither does its band (a t interval on 2-3 seeds runs past it)."""


def curves_of(run: FinalValues) -> dict[tuple[str, str], dict[int, float]]:
    """``(policy, task group) -> {step: held-out reward@1}`` from the run's validation rows."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    metrics = RunPaths(run.settings.path).metrics
    for _, row in read_metric_rows(metrics)[0]:
        if row.get("kind") != "eval" or "eval/reward@1" not in row:
            continue
        for group, value in {ALL: metric_value(row, "eval/reward@1", metrics), **group_rewards(row, metrics)}.items():
            out.setdefault((str(row["policy"]), group), {})[int(row["step"])] = value
    return out


def band(per_run: list[dict[int, float]]) -> Band:
    """Mean and interval at each step every run validated at."""
    steps = sorted(set.intersection(*(set(curve) for curve in per_run)))
    columns = [[curve[step] for curve in per_run] for step in steps]
    mean = [sum(column) / len(column) for column in columns]
    values = [v for column in columns for v in column]
    spread = (min(values), max(values)) if values else REWARD_RANGE
    if len(per_run) < MIN_RUNS_FOR_INTERVAL:
        return Band(steps, mean, None, None, len(per_run), spread)
    bounds = [t_interval(column) for column in columns]
    return Band(steps, mean, [b[0] for b in bounds], [b[1] for b in bounds], len(per_run), spread)


def reward_range(panels: dict[tuple[str, str], dict[str, Band]]) -> tuple[float, float] | None:
    """:data:`REWARD_RANGE` when every run's value in every panel lies in it, else None (a reward of another
    range: nothing is clipped)."""
    spreads = [b.runs_range for by_label in panels.values() for b in by_label.values()]
    inside = all(REWARD_RANGE[0] <= low and high <= REWARD_RANGE[1] for low, high in spreads)
    return REWARD_RANGE if spreads and inside else None


def clip_bands(panels: dict[tuple[str, str], dict[str, Band]], bounds: tuple[float, float] | None) -> bool:
    """Cut every band to ``bounds`` (the reward's range), marking each band cut; whether any was."""
    if bounds is None:
        return False
    for b in (b for by_label in panels.values() for b in by_label.values() if b.low is not None and b.high is not None):
        low = [max(v, bounds[0]) for v in b.low]  # type: ignore[union-attr]
        high = [min(v, bounds[1]) for v in b.high]  # type: ignore[union-attr]
        b.clipped = low != b.low or high != b.high
        b.low, b.high = low, high
    return any(b.clipped for by_label in panels.values() for b in by_label.values())


def panel_bands(groups: dict[str, list[FinalValues]]) -> dict[tuple[str, str], dict[str, Band]]:
    """Every panel's bands, by group label, in the groups' order."""
    panels: dict[tuple[str, str], dict[str, Band]] = {}
    curves = {label: [curves_of(run) for run in members] for label, members in groups.items()}
    keys = list(dict.fromkeys(key for per_run in curves.values() for curve in per_run for key in curve))
    for key in keys:
        for label, per_run in curves.items():
            present = [curve[key] for curve in per_run if key in curve]
            if present:
                panels.setdefault(key, {})[label] = band(present)
    return panels


def caption(report: Report, clipped: tuple[float, float] | None = None, full: bool = True) -> str:
    """What the figure shows, n per group, the band's kind (``clipped``: cut to that range somewhere), and the
    report's caveats: every caveat line, naming its runs, or (``full`` False: the figure's default) each cause
    once, short enough for a paper's caption."""
    context = report.context
    sizes = ", ".join(f"{label} n = {len(members)}" for label, members in report.groups.items())
    text = (f"Held-out reward@1 (greedy) at each validation step; pool {context['pool']}, task {context['task']}, "
            f"{context['steps']} steps. Line: mean over runs (seeds) of each group ({sizes}); band: 95% "
            f"{INTERVAL_KIND} of the mean, for these held-out prompts over new seeds, not for the task (none where "
            f"n < {MIN_RUNS_FOR_INTERVAL}); no smoothing.")
    if any(row.mean_ci is not None for row in report.rows):
        text += (" Bar at the last step: the report's 95% interval of the cell, from the test of its claim (over seeds "
                 "x prompts where it claims the task), as mutualrl report gives it.")
    if clipped is not None:
        text += (f" Bands clipped to [{clipped[0]:g}, {clipped[1]:g}], the range of every run's value (the interval "
                 "ran past it where n is small).")
    caveats = caption_caveats(report) if full else short_caveats(report)
    return shown(text + ("".join(f" Note: {line.rstrip('.')}." for line in caveats) if caveats else ""))


def short_caveats(report: Report) -> list[str]:
    """The caption's caveats in short: few runs behind a band, then every cause of a † once (which runs:
    ``mutualrl report``, or ``--full-caption``)."""
    few = sorted({len(members) for members in report.groups.values() if len(members) < FEW_RUNS})
    causes = [words for _, words in caveat_causes(report).values()]
    return ([f"n = {', '.join(map(str, few))}: a band from so few runs is wide for that reason"] if few else []) + (
        [f"{'; '.join(causes)} (which runs: mutualrl report, or plot --full-caption)"] if causes else [])


def plot_grouped(run_dirs: Sequence[Path], out_dir: Path, by: Sequence[str], fmt: str = "pdf", width: str = "two",
                 baseline: str | None = None, full_caption: bool = False) -> tuple[Path, str]:
    """Write ``heldout_reward_by_<by>.<fmt>`` and its caption (``.caption.txt``; ``full_caption``: every caveat line);
    returns the figure and the caption."""
    report = build_report(run_dirs, by, baseline, option="--group-by")
    panels = panel_bands(report.groups)
    bounds = reward_range(panels)
    clipped = clip_bands(panels, bounds)
    labels = list(report.groups)
    palette, styles = colors(len(labels)), run_styles(len(labels))
    policies = list(dict.fromkeys(row.policy for row in report.rows))  # the report's order: the pool's
    task_groups = list(dict.fromkeys(row.task_group for row in report.rows))
    # a row per policy, a column per task group; without task groups the policies side by side
    grid = [[(p, g) for g in task_groups] for p in policies] if len(task_groups) > 1 else [[(p, ALL) for p in policies]]
    plt = pyplot()
    plt.rcParams.update({"font.size": 7, "axes.titlesize": 7, "legend.fontsize": 7})
    rows, cols = len(grid), len(grid[0])
    fig_width = WIDTHS[width]
    fig, axes = plt.subplots(rows, cols, squeeze=False, sharex=True, sharey=True,
                             figsize=(fig_width, 0.3 + rows * min(1.9, fig_width / cols * 0.8)))
    for r, line in enumerate(grid):
        for c, (policy, group) in enumerate(line):
            draw_panel(axes[r][c], panels.get((policy, group), {}), labels, palette, styles)
            draw_report_bars(axes[r][c], panels.get((policy, group), {}), report_intervals(report, policy, group),
                             labels, palette)
            axes[r][c].set_title(f"{policy}: {group}", pad=2)
    fig.supxlabel("training step", fontsize=7)
    fig.supylabel("held-out reward@1", fontsize=7)  # once: a label per row overprinted its neighbours
    fit_axes(axes[0][0], panels, bounds, [v for row in report.rows if row.mean_ci is not None for v in row.mean_ci])
    context = report.context
    fig.suptitle(f"{context['pool']} pool, task {context['task']}, {context['steps']} steps", fontsize=8)
    entries = [(f"{label} (n = {len(report.groups[label])})", paper_line(palette[i], styles[i]))
               for i, label in enumerate(labels)]
    entries += legend_keys(any(report_intervals(report, policy, group) for line in grid for policy, group in line))
    out = save_figure(fig, entries, grouped_outputs(out_dir, by, fmt)[0])
    text = caption(report, bounds if clipped else None, full_caption)
    write_text_atomic(out.with_suffix(".caption.txt"), text + "\n")  # a link planted there is replaced, not followed
    return out, text


def grouped_outputs(out_dir: Path, by: Sequence[str], fmt: str) -> tuple[Path, Path]:
    """The figure and the caption file :func:`plot_grouped` writes."""
    name = "heldout_reward_by_" + "_".join(key.replace(".", "-") for key in by)
    figure = Path(out_dir) / f"{name}.{fmt}"
    return figure, figure.with_suffix(".caption.txt")


def paper_line(color: Any, style: Any) -> dict[str, Any]:
    """A group's line at a paper's scale: the styles of ``mutualrl plot``, thinner, smaller markers."""
    kwargs = line_kwargs(color, style, marker=True, markersize=3)
    kwargs["lw"] = kwargs["lw"] * 0.6
    kwargs["markeredgewidth"] = 0.8
    return kwargs


HATCHES = ("////", "\\\\\\\\", "....", "xxxx", "----", "||||")
"""Each group's band hatched its own way and edged with thin lines in its colour: where bands overlap, their tints
blend into a colour no legend shows, the hatches and edges still tell them apart."""
BAND_KEY = "band: 95% t interval over seeds (these prompts)"
BAR_KEY = "bar at the last step: the report's 95% interval of the cell"


def draw_panel(ax: Any, bands: dict[str, Band], labels: list[str], palette: list[Any], styles: list[Any]) -> None:
    from matplotlib.colors import to_rgba

    for index, label in enumerate(labels):
        curve = bands.get(label)
        if curve is None:
            continue
        ax.plot(curve.steps, curve.mean, **paper_line(palette[index], styles[index]))
        if curve.low is not None and curve.high is not None:
            ax.fill_between(curve.steps, curve.low, curve.high, facecolor=to_rgba(palette[index], 0.12),
                            edgecolor=to_rgba(palette[index], 0.5), hatch=HATCHES[index % len(HATCHES)], linewidth=0)
            for edge in (curve.low, curve.high):
                ax.plot(curve.steps, edge, color=palette[index], lw=0.4, ls=(0, (1, 1)))


def report_intervals(report: Report, policy: str, group: str) -> dict[str, tuple[float, float]]:
    """Each group's 95% interval of ``(policy, group)``'s cell as ``mutualrl report`` gives it (its claim's: over
    seeds x prompts for a task-level row), by group label; groups without one left out."""
    return {row.group: row.mean_ci for row in report.rows
            if row.policy == policy and row.task_group == group and row.mean_ci is not None}


def draw_report_bars(ax: Any, bands: dict[str, Band], intervals: dict[str, tuple[float, float]], labels: list[str],
                     palette: list[Any]) -> None:
    """The report's interval of each group's cell, a capped bar at the last step drawn (side by side, a little
    apart): the number a reader finds in the report's table, where the band is the figure's own."""
    last = max((curve.steps[-1] for curve in bands.values() if curve.steps), default=None)
    first = min((curve.steps[0] for curve in bands.values() if curve.steps), default=None)
    if last is None or first is None:
        return
    gap = max(last - first, 1) * 0.02
    shown = [label for label in labels if label in intervals and label in bands]
    for place, label in enumerate(shown):
        x = last + (place - (len(shown) - 1) / 2) * gap
        low, high = intervals[label]
        ax.plot([x, x], [low, high], color=palette[labels.index(label)], lw=0.9, marker="_", markersize=4,
                markeredgewidth=0.9)


def legend_keys(bars: bool) -> list[tuple[str, dict[str, Any]]]:
    """The legend's entries that say what a band and (``bars``: drawn) a bar are."""
    keys = [(BAND_KEY, {"color": "0.55", "lw": 5, "alpha": 0.35})]
    if bars:
        keys.append((BAR_KEY, {"color": "0.2", "lw": 0, "marker": "|", "markersize": 7, "markeredgewidth": 0.9}))
    return keys


#: At most this many step labels on the x axis: more collide at a column's width.
MAX_STEP_TICKS = 5


def fit_axes(ax: Any, panels: dict[tuple[str, str], dict[str, Band]],
             bounds: tuple[float, float] | None = None, bars: Sequence[float] = ()) -> None:
    """The shared axes fitted to what is drawn: y from the lowest to the highest line, band or bar (a Δ of 0.05 is
    invisible on a fixed 0-1 axis), never past ``bounds`` (the reward's range), x ticks at validation steps (every
    k-th when there are many)."""
    from matplotlib.ticker import FixedLocator, MaxNLocator

    bands = [band for by_label in panels.values() for band in by_label.values()]
    values = [v for b in bands for v in [*b.mean, *(b.low or []), *(b.high or [])]] + list(bars)
    if values:
        low, high = min(values), max(values)
        pad = max(high - low, 0.02) * 0.06
        floor, ceiling = bounds if bounds is not None else (-float("inf"), float("inf"))
        ax.set_ylim(max(low - pad, floor), min(high + pad, ceiling))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4))
    steps = sorted({step for b in bands for step in b.steps})
    if steps:
        every = -(-len(steps) // MAX_STEP_TICKS)  # ceiling: the first and every k-th step after it
        ax.xaxis.set_major_locator(FixedLocator(steps[::every]))
