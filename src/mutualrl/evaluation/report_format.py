"""``mutualrl report``'s formats: a terminal table, markdown, CSV, LaTeX (booktabs) and JSON, every one with the
same columns and the same notes (what the interval is, when n is too small, what differs between the groups)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from mutualrl.evaluation.report import Report, ReportRow
from mutualrl.evaluation.report_stats import BOOTSTRAP_REPS, MIN_RUNS_FOR_INTERVAL, MIN_RUNS_FOR_IQM
from mutualrl.evaluation.results import NO_VALUE

FORMATS = ("table", "markdown", "csv", "latex", "json")


def headers(report: Report) -> list[str]:
    base = [report.by[0] if len(report.by) == 1 else "group", "policy", "task group", "n", "mean", "SD", "95% CI"]
    if has_iqm(report):
        base.append("IQM")
    if report.baseline:
        base += [f"Δ vs {report.baseline}", "95% CI of Δ", "P(improve)"]
    return base


def has_iqm(report: Report) -> bool:
    """The IQM column only where some cell has enough runs to trim (elsewhere it is the mean again)."""
    return any(row.stats.iqm is not None for row in report.rows)


def number(value: float | None, digits: int = 3) -> str:
    return NO_VALUE if value is None else f"{value:.{digits}f}"


def interval(ci: tuple[float, float] | None) -> str:
    return NO_VALUE if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def cells(row: ReportRow, report: Report) -> list[str]:
    out = [row.group, row.policy, row.task_group, str(row.stats.n), number(row.stats.mean), number(row.stats.sd),
           interval(row.stats.ci95)]
    if has_iqm(report):
        out.append(number(row.stats.iqm))
    if report.baseline:
        paired = row.vs_baseline
        if paired is None:
            out += ["(baseline)", "", ""]
        else:
            diff = NO_VALUE if paired.mean_difference is None else f"{paired.mean_difference:+.3f}"
            out += [diff, interval(paired.ci95), number(paired.probability_of_improvement, 2)]
    return out


def notes(report: Report) -> list[str]:
    """The lines under every format's table."""
    lines = [f"final held-out reward@1 (greedy) of each run's last validation; pool {report.context['pool']}, task "
             f"{report.context['task']}, step {report.context['steps']}",
             f"SD: sample standard deviation over runs (n - 1); 95% CI: percentile bootstrap of the mean over runs "
             f"(rliable's stratified bootstrap, {BOOTSTRAP_REPS} resamples), none below n = {MIN_RUNS_FOR_INTERVAL}; "
             f"IQM (interquartile mean) from n = {MIN_RUNS_FOR_IQM}"]
    if report.baseline:
        lines.append(f"Δ: paired difference, the mean over seeds of (run − {report.baseline} run of the same seed); "
                     f"P(improve): rliable's "
                     f"probability that a run beats a {report.baseline} run (Mann-Whitney over runs)")
    small = sorted({row.stats.note for row in report.rows if row.stats.note})
    lines += [f"note: {text}" for text in small]
    if report.between_groups:
        lines.append("the groups also differ in: " + "; ".join(report.between_groups))
    lines += [f"left out: {reason}" for reason in report.left_out]
    return lines


def render(report: Report, fmt: str) -> str:
    """The report in ``fmt`` (one of :data:`FORMATS`; ``table`` is for a terminal: see :func:`rich_table`)."""
    if fmt == "json":
        return json.dumps(to_json(report), indent=1) + "\n"
    if fmt == "csv":
        return to_csv(report)
    if fmt == "latex":
        return to_latex(report)
    if fmt == "markdown":
        return to_markdown(report)
    raise ValueError(fmt)


def to_json(report: Report) -> dict[str, Any]:
    return {"format": "mutualrl-report", "version": 1, "by": report.by, "baseline": report.baseline,
            "context": report.context,
            "groups": {label: [str(m.settings.path) for m in members] for label, members in report.groups.items()},
            "rows": [{"group": r.group, "policy": r.policy, "task_group": r.task_group, "seeds": r.seeds,
                      "values": r.values, **r.stats.to_json(),
                      "vs_baseline": r.vs_baseline.to_json() if r.vs_baseline else None} for r in report.rows],
            "between_groups": report.between_groups, "left_out": report.left_out, "notes": notes(report)}


def to_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(headers(report))
    for row in report.rows:
        writer.writerow(cells(row, report))
    return out.getvalue()


def to_markdown(report: Report) -> str:
    head = headers(report)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join([" --- "] * 3 + [" ---: "] * (len(head) - 3)) + "|"]
    lines += ["| " + " | ".join(cells(row, report)) + " |" for row in report.rows]
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {line}" for line in notes(report)) + "\n"


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                 "Δ": r"$\Delta$", "−": "-", "β": r"$\beta$"}


def latex_text(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(char, char) for char in text)


def to_latex(report: Report) -> str:
    """A booktabs table (``\\usepackage{booktabs}``), the notes as comments above it."""
    head = headers(report)
    spec = "lll" + "r" * (len(head) - 3)
    lines = [f"% {latex_text(line)}" for line in notes(report)]
    lines += [r"\begin{tabular}{" + spec + "}", r"\toprule", " & ".join(latex_text(h) for h in head) + r" \\",
              r"\midrule"]
    lines += [" & ".join(latex_text(c) for c in cells(row, report)) + r" \\" for row in report.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def rich_table(report: Report) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(title=f"final held-out reward@1 by {', '.join(report.by)}", title_justify="left",
                  box=box.SIMPLE_HEAD)
    names = [[row.group, row.policy, row.task_group] for row in report.rows]
    for index, head in enumerate(headers(report)):
        # names as wide as the longest (up to 32 columns), numbers never wrapped: the table narrows elsewhere
        widest = min(max((len(n[index]) for n in names), default=1), 32) if index < 3 else None
        table.add_column(head, justify="left" if index < 3 else "right", overflow="fold", no_wrap=index >= 3,
                         min_width=widest)
    last = None
    for row in report.rows:
        shown = cells(row, report)
        if row.group == last:
            shown[0] = ""
        last = row.group
        table.add_row(*shown)
    return table
