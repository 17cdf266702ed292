"""``mutualrl report``'s terminal table: every column of the other formats where the terminal is wide enough, and
on a narrow one (80 columns) the identifying columns (group, policy, task group, n) kept whole, the claim a letter
under n (T: the task, P: these prompts), a policy's caveat letters under it, each interval under its value in the
same cell, and SD, IQM and the power
column left to the other formats (a line under the table says so). Rows of two policies must never look
identical."""

from __future__ import annotations

from typing import Any

from mutualrl.evaluation.report.build import Report, ReportRow
from mutualrl.evaluation.report.formats import cells, comparison_cells, group_header, headers, interval, number
from mutualrl.evaluation.report.formats import p_text, policy_cell, signed
from mutualrl.evaluation.report.notes import CAVEAT_MARK

#: A name column is as wide as its longest value up to this many characters, and folds beyond.
NAME_WIDTH = 24


def rich_table(report: Report, width: int = 80) -> Any:
    """The widest table that fits ``width`` columns: the full one, else the stacked one."""
    from rich.console import Console
    from rich.measure import Measurement

    full = build_table(report, headers(report), [cells(row, report) for row in report.rows])
    console = Console(width=max(width, 40))
    unbounded = console.options.update_width(10_000)  # measured at the given width, every table "fits" it
    if Measurement.get(console, unbounded, full).maximum <= width:
        return full
    return build_table(report, narrow_headers(report), [narrow_cells(row, report) for row in report.rows])


def narrow_note(report: Report, table: Any) -> str | None:
    """The line that says what the stacked table left out (None for the full table)."""
    if [column.header for column in table.columns] == headers(report):
        return None
    return ("narrow terminal: under n the row's claim, T the task, P these prompts; each interval is under its "
            "value; SD, IQM and the seeds for power are in --format markdown, csv, latex or json (or a wider terminal)")


def narrow_headers(report: Report) -> list[str]:
    base = [group_header(report), "policy", "task\ngroup", "n", "mean\n95% CI"]
    if report.compared:
        base += [f"Δ vs\n{report.baseline or 'baseline'}\n95% CI", "p\n(Holm)", "P\n(imp)"]
    return base


def narrow_cells(row: ReportRow, report: Report) -> list[str]:
    out = [row.group, policy_cell(row, report).replace(f" {CAVEAT_MARK}", f"\n{CAVEAT_MARK}"), row.task_group,
           f"{row.stats.n}\n{row.claim[0].upper()}",
           f"{number(row.stats.mean)}\n{interval(row.mean_ci, 2)}"]
    if not report.compared:
        return out
    if row.vs_baseline is None:
        return [*out, comparison_cells(row, report)[0], "", ""]
    delta, ci, p = row.delta
    return [*out, f"{signed(delta)}\n{interval(ci, 2)}", f"{p_text(p)}\n({p_text(row.p_holm)})",
            number(row.vs_baseline.probability_of_improvement, 2)]


def build_table(report: Report, head: list[str], rows: list[list[str]]) -> Any:
    """A rich table: the three name columns as wide as their longest value (up to :data:`NAME_WIDTH`, folded
    beyond), n and the numbers never wrapped, a group's label only on its first row."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"final held-out reward@1 by {', '.join(report.by)}", title_justify="left",
                  box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False)
    for index, title in enumerate(head):
        names = index < 3
        widest = min(max((len(line) for row in rows for line in row[index].split("\n")), default=1),
                     NAME_WIDTH) if names else None
        table.add_column(title, justify="left" if names else "right", overflow="fold", no_wrap=not names,
                         min_width=widest)
    last = None
    for row, shown in zip(report.rows, rows, strict=True):
        if row.group == last:
            shown = ["", *shown[1:]]
        last = row.group
        table.add_row(*shown, end_section=False)
    return table
