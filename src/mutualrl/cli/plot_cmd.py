"""``mutualrl plot``: PNG figures from training runs."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from mutualrl.cli.common import check_output_path, console, report_errors
from mutualrl.evaluation.results import NO_VALUE, fmt_number


@report_errors
def plot(
    run_dirs: list[Path] = typer.Argument(..., help="One or more run folders (overlaid for comparison)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Folder for the PNG files (default: first run's plots/)."),
    smooth: float = typer.Option(
        0.3, "--smooth", min=0.0, max=1.0, help="EMA weight for training curves with more than 20 points (0 or 1: raw only)."),
    allow_mixed: bool = typer.Option(
        False, "--allow-mixed",
        help="Draw runs of different pools or tasks together (refused by default: their curves are not comparable)."),
    group_by: str | None = typer.Option(
        None, "--group-by", help="One figure for a paper: runs (or sweep folders) grouped by these settings "
        "(regime, or any dotted setting, comma-separated; as `mutualrl report --by`), seeds aggregated: the mean and "
        "the report's 95% interval as a band, n in the legend, a caption line beside it.", show_default=False),
    fmt: str = typer.Option("pdf", "--format", help="--group-by: pdf, svg or png (300 dpi)."),
    width: str = typer.Option("two", "--width", help="--group-by: 'one' column (3.35 in) or 'two' (6.9 in)."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace figures of the same names in the --out folder (the default folder, the "
        "first run's plots/, holds plot's own figures: they are always redrawn)."),
    full_caption: bool = typer.Option(
        False, "--full-caption", help="--group-by: every caveat line in the caption, naming its runs (default: each "
        "cause once, short enough for a paper)."),
) -> None:
    """Plot validation reward@1, training reward, entropy, KL and regime metrics per policy.

    Figures follow the paper's: validation reward@1 and training reward per policy with one line per run
    (regime), entropy and KL ("optimization signatures"), and regime metrics such as the SGT gate rate.
    Runs of different pools or tasks are refused unless --allow-mixed. A figure of the same name in an --out
    folder is replaced only with --overwrite; nothing is written through a link found in a run folder.
    """
    from mutualrl.evaluation.plots import plot_runs, summary_rows

    out_dir = figure_folder(run_dirs, out)
    replace = overwrite or out is None  # the default folder holds plot's own figures, redrawn as a run goes on
    if group_by is not None:
        plot_grouped_figure(run_dirs, out_dir, group_by, fmt, width, replace, full_caption)
        return
    alpha = smooth if 0 < smooth < 1 else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = plot_runs(run_dirs, out_dir, smooth=alpha, allow_mixed=allow_mixed, overwrite=replace)
        rows = summary_rows(run_dirs)
    say_warnings(caught)
    console.print(summary_table(rows))
    if not written:
        console.print("[yellow]no metrics to plot yet[/]")
    for path in written:
        console.print(f"wrote {path}", highlight=False)


def figure_folder(run_dirs: list[Path], out: Path | None) -> Path:
    """The folder the figures go to: ``--out`` as the user named it, else the first run's (or sweep's) ``plots/``,
    which must be a real folder inside it: a run folder is data, and a link planted there is refused."""
    from mutualrl.output_guards import folder_inside

    if out is not None:
        out_dir = check_output_path(out, "--out", kind="folder")
        out_dir.mkdir(parents=True, exist_ok=True)
        return out_dir
    check_output_path(run_dirs[0] / "plots", "--out", kind="folder")
    if not run_dirs[0].is_dir():
        return run_dirs[0] / "plots"  # nothing to plot: reading the run says so, in its own words
    return folder_inside(run_dirs[0], "plots")


def plot_grouped_figure(run_dirs: list[Path], out_dir: Path, group_by: str, fmt: str, width: str,
                        overwrite: bool, full_caption: bool = False) -> None:
    from mutualrl.errors import UsageError
    from mutualrl.evaluation.grouped_plot import FORMATS, WIDTHS, grouped_outputs, plot_grouped
    from mutualrl.output_guards import refuse_existing

    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    if width not in WIDTHS:
        raise UsageError(f"--width {width}: expected one or two (columns)")
    keys = [key.strip() for key in group_by.split(",") if key.strip()] or ["regime"]
    if not overwrite:
        refuse_existing(grouped_outputs(out_dir, keys, fmt), "--out")
    figure, caption = plot_grouped(run_dirs, out_dir, keys, fmt, width, full_caption=full_caption)
    console.print(f"wrote {figure}", highlight=False)
    console.print(f"caption ({figure.with_suffix('.caption.txt').name}): {caption}", highlight=False, soft_wrap=True)


def summary_table(rows: list[dict[str, Any]]) -> Table:
    """First / final / best validation reward@1 per run and policy. The run and policy columns are as wide as
    their longest value (up to 32 columns) and fold beyond: on 80 columns the numbers' columns narrow, and a name
    is never cut to "tiny-…"."""
    table = Table(title="Validation reward@1 (greedy)", title_justify="left")
    for col in ("run", "policy"):
        longest = min(max((len(str(row[col])) for row in rows), default=len(col)), 32)
        table.add_column(col, justify="left", overflow="fold", min_width=longest)
    for col in ("No Train (step)", "final (step)", "best", "last train reward"):
        table.add_column(col, justify="right")
    for row in rows:
        first = f"{fmt_number(row['first'])} ({row['first_step']})" if row["first"] is not None else NO_VALUE
        final = f"{fmt_number(row['final'])} ({row['final_step']})" if row["final"] is not None else NO_VALUE
        table.add_row(row["run"], row["policy"], first, final, fmt_number(row["best"]),
                      fmt_number(row["last_train_reward"]))
    return table


def say_warnings(caught: list[warnings.WarningMessage]) -> None:
    """mutualrl's own warnings (damaged metric lines, runs drawn although they differ) as one line each, once;
    a library's warning as Python shows it."""
    ours = []
    for warning in caught:
        if "mutualrl" in Path(warning.filename).parts:
            ours.append(str(warning.message))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    for message in dict.fromkeys(ours):
        console.print(f"[yellow]warning:[/] {message}", highlight=False)
