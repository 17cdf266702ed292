"""``mutualrl report``'s formats: markdown, CSV, LaTeX (booktabs) and JSON, every one with the same columns and
the same notes (:mod:`.report_notes`: what each number is, how many comparisons, every caveat); the terminal
table (:mod:`.report_table`) keeps the identifying columns at any width."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from mutualrl.evaluation.report import Report, ReportRow
from mutualrl.evaluation.report_notes import CAVEAT_MARK, notes
from mutualrl.evaluation.report_stats import INTERVAL_KIND, MAX_POWER_SEEDS
from mutualrl.evaluation.results import NO_VALUE

FORMATS = ("table", "markdown", "csv", "latex", "json")


def headers(report: Report) -> list[str]:
    base = [group_header(report), "policy", "task group", "n", "mean", "SD", "95% CI"]
    if has_iqm(report):
        base.append("IQM")
    if report.compared:
        base += [f"Δ vs {report.baseline or 'baseline'}", "95% CI of Δ", "p", "p (Holm)", "P(improve)",
                 "95% CI of Δ, seeds × prompts", "seeds for 80% power"]
    return base


def group_header(report: Report) -> str:
    return report.by[0] if len(report.by) == 1 else "group"


def has_iqm(report: Report) -> bool:
    """The IQM column only where some cell has enough runs to trim (elsewhere it is the mean again)."""
    return any(row.stats.iqm is not None for row in report.rows)


def number(value: float | None, digits: int = 3) -> str:
    return NO_VALUE if value is None else f"{value:.{digits}f}"


def interval(ci: tuple[float, float] | None, digits: int = 3) -> str:
    return NO_VALUE if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def signed(value: float | None) -> str:
    return NO_VALUE if value is None else f"{value:+.3f}"


def power_seeds(seeds: int | None) -> str:
    if seeds is None:
        return "n/a"
    return f"> {MAX_POWER_SEEDS}" if seeds > MAX_POWER_SEEDS else str(seeds)


def policy_cell(row: ReportRow) -> str:
    return f"{row.policy} {CAVEAT_MARK}" if row.caveats else row.policy


def comparison_cells(row: ReportRow, report: Report) -> list[str]:
    """Δ and what goes with it; a baseline's own row says so, a group without a baseline too."""
    paired = row.vs_baseline
    if paired is None:
        return ["(baseline)" if row.group in report.baselines.values() else "(no baseline)"] + [""] * 6
    prompts = row.prompt_paired
    return [signed(paired.mean_difference), interval(paired.ci95), number(paired.p_sign_flip),
            number(paired.p_holm), number(paired.probability_of_improvement, 2),
            interval(prompts.ci95) if prompts else NO_VALUE, power_seeds(paired.seeds_for_power)]


def cells(row: ReportRow, report: Report) -> list[str]:
    out = [row.group, policy_cell(row), row.task_group, str(row.stats.n), number(row.stats.mean),
           number(row.stats.sd), interval(row.stats.ci95)]
    if has_iqm(report):
        out.append(number(row.stats.iqm))
    if report.compared:
        out += comparison_cells(row, report)
    return out


def render(report: Report, fmt: str) -> str:
    """The report as ``markdown``, ``csv``, ``latex`` or ``json`` text (the terminal's ``table`` is
    :func:`.report_table.rich_table`; written to a file, the CLI gives it as markdown)."""
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
    return {"format": "mutualrl-report", "version": 2, "by": report.by, "baseline": report.baseline,
            "baselines": report.baselines, "interval": INTERVAL_KIND, "comparisons": len(report.comparisons),
            "context": report.context,
            "groups": {label: [str(m.settings.path) for m in members] for label, members in report.groups.items()},
            "rows": [{"group": r.group, "policy": r.policy, "task_group": r.task_group, "seeds": r.seeds,
                      "values": r.values, **r.stats.to_json(), "baseline": r.baseline,
                      "vs_baseline": r.vs_baseline.to_json() if r.vs_baseline else None,
                      "prompt_paired": r.prompt_paired.to_json() if r.prompt_paired else None,
                      "caveats": r.caveats} for r in report.rows],
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
                 "Δ": r"$\Delta$", "−": "-", "β": r"$\beta$", "α": r"$\alpha$", "×": r"$\times$",
                 "→": r"$\to$", "≥": r"$\geq$", "±": r"$\pm$", "…": r"\ldots{}", "ⁿ": r"$^n$",
                 CAVEAT_MARK: r"\textsuperscript{\dag}"}


def latex_text(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(char, char) for char in text)


def to_latex(report: Report) -> str:
    """A booktabs table (``\\usepackage{booktabs}``) in a ``table`` float whose caption carries the notes: a
    caveat in a ``%`` comment is gone from the compiled paper."""
    head = headers(report)
    spec = "lll" + "r" * (len(head) - 3)
    lines = [r"\begin{table}[t]", r"\centering", r"\scriptsize", r"\begin{tabular}{" + spec + "}", r"\toprule",
             " & ".join(latex_text(h) for h in head) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_text(c) for c in cells(row, report)) + r" \\" for row in report.rows]
    lines += [r"\bottomrule", r"\end{tabular}",
              r"\caption{" + " ".join(latex_text(line.rstrip(".")) + "." for line in notes(report)) + "}",
              r"\label{tab:mutualrl-report}", r"\end{table}"]
    return "\n".join(lines) + "\n"
