"""``mutualrl report``: a paper's table from finished runs or sweeps."""

from __future__ import annotations

from pathlib import Path

import typer

from mutualrl.cli.common import check_output_path, console, report_errors


@report_errors
def report(
    runs: list[Path] = typer.Argument(..., help="Run folders, or sweep folders (every run folder in them)."),
    by: str = typer.Option("regime", "--by", help="Group runs by these settings, comma-separated: regime, seed, "
                           "pool, task, or any dotted setting (grpo.learning_rate, regime.prp.denominator). Runs of "
                           "one group must differ in nothing else but the seed."),
    baseline: str | None = typer.Option(None, "--baseline", help="A group every other is compared with, seed by "
                                        "seed; or a regime: each group against that regime's group with the same "
                                        "other --by settings (default: standalone).", show_default=False),
    fmt: str = typer.Option("table", "--format", "-f", help="table (terminal), markdown, csv, latex or json. Every "
                            "format carries every note: under the markdown table, as '#' lines after the CSV's rows "
                            "(pandas: read_csv(path, comment='#')), in the LaTeX caption, in the JSON's notes."),
    min_effect: float | None = typer.Option(None, "--min-effect", show_default=False,
                                            help="The smallest Δ that would matter (0.05: five points of "
                                            "reward@1): each comparison gets the seeds its own test needs for 80% "
                                            "power to detect ±it at Holm's level, from the observed variance "
                                            "(seed, prompt, seed x prompt) and from its 90% upper confidence "
                                            "limits (a range, 12-25), and each headline comparison a plan "
                                            "of seeds x prompts. No power is computed from the observed Δ. A "
                                            "finite number above 0."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write to this file instead of standard output.",
                                    show_default=False),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out file."),
    full_notes: bool = typer.Option(False, "--full-notes", help="Under the terminal table and in the LaTeX caption, "
                                    "every note in full (what each interval covers, Holm's families, each caveat's "
                                    "runs) instead of the short form, a line each, to paste. Markdown, CSV and JSON "
                                    "always carry every note."),
) -> None:
    """Final held-out reward@1 per group, policy and task group: mean, sample SD, n, a 95% interval and the IQM
    (rliable); against the baseline Δ, paired by seed, with one test per row behind its interval, p, Holm's p and
    power. Each row says its claim: "task" (task group all: seeds and prompts crossed, covering new seeds and new
    prompts) or "prompts" (task groups: a t over seeds, covering these prompts). Holm adjusts the headline
    comparisons (all) and the task-group ones apart; P(improve) is on the same seed pairs. Caveats are marked per
    cause (†a, †b ...) and said in every format. Runs that differ in more than the seed are not pooled unless --by
    names the setting.

    mutualrl report sweeps/mine; mutualrl report sweeps/mine --format latex -o table.tex
    """
    from mutualrl.errors import UsageError
    from mutualrl.evaluation.report.build import build_report
    from mutualrl.evaluation.report.formats import FORMATS, render
    from mutualrl.evaluation.report.notes import notes
    from mutualrl.evaluation.report.short_notes import short_notes
    from mutualrl.evaluation.report.terminal_table import narrow_note, rich_table

    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    keys = [key.strip() for key in by.split(",") if key.strip()]
    if not keys:
        raise UsageError("--by: name at least one setting (e.g. regime)")
    if min_effect is not None:
        from mutualrl.evaluation.seed_plan import check_effect

        check_effect(min_effect)
    if out is not None:
        check_output_path(out, "--out", kind="file", overwrite=overwrite)
    built = build_report(runs, keys, baseline, min_effect=min_effect)
    if fmt == "table" and out is None:
        table = rich_table(built, console.width)
        console.print(table)
        for line in [*filter(None, [narrow_note(built, table)]), *(notes(built) if full_notes else short_notes(built))]:
            console.print(line, highlight=False, soft_wrap=True)
        return
    text = render(built, "markdown" if fmt == "table" else fmt, full_notes=full_notes)
    if out is None:
        typer.echo(text, nl=False)
        return
    from mutualrl.atomic_io import write_text_atomic

    write_text_atomic(out, text)
    console.print(f"wrote {out}", highlight=False)
