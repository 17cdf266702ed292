"""``mutualrl report``'s formats: markdown, CSV, LaTeX (booktabs) and JSON, every one with the same columns and
the same notes (:mod:`.notes`: what each number is and covers, Holm's families, every caveat): under the
markdown table, as ``#`` lines after the CSV's rows, in the LaTeX caption (ASCII, every symbol escaped), in the
JSON's ``notes``; the terminal table (:mod:`.terminal_table`) keeps the identifying columns at any width."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import re

from mutualrl.evaluation.power import POWER, seeds_text
from mutualrl.evaluation.report.build import Report, ReportRow
from mutualrl.evaluation.report.notes import CAVEAT_MARK, caveat_causes, notes, row_letters, shown
from mutualrl.evaluation.report.stats import INTERVAL_KIND
from mutualrl.evaluation.results import NO_VALUE

FORMATS = ("table", "markdown", "csv", "latex", "json")


def headers(report: Report) -> list[str]:
    base = [group_header(report), "policy", "task group", "n", "claim", "mean", "SD", "95% CI"]
    if has_iqm(report):
        base.append("IQM")
    if report.compared:
        base += [f"Δ vs {report.baseline or 'baseline'}", "95% CI of Δ", "p", "p (Holm)", "P(improve)"]
        if report.min_effect is not None:
            base.append(power_header(report))
    return [shown(header) for header in base]


def power_header(report: Report) -> str:
    return f"seeds for {POWER:.0%} power, ±{report.min_effect:g}"


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


def p_text(value: float | None) -> str:
    """A p with 3 decimals, or ``< 0.001`` (never a p of "0.000")."""
    return NO_VALUE if value is None else "< 0.001" if value < 0.0005 else f"{value:.3f}"


def policy_cell(row: ReportRow, report: Report) -> str:
    """The policy, with a † and the footnote letter of each cause of its caveats (``tiny-bpe †a,c``)."""
    letters = row_letters(row, report)
    return f"{row.policy} {CAVEAT_MARK}{letters}" if letters else row.policy


def comparison_cells(row: ReportRow, report: Report) -> list[str]:
    """Δ and what goes with it, all from the row's one test; a baseline's own row says so, a group without a
    baseline too."""
    width = 6 if report.min_effect is not None else 5
    if row.vs_baseline is None:
        return ["(baseline)" if row.group in report.baselines.values() else "(no baseline)"] + [""] * (width - 1)
    delta, ci, p = row.delta
    out = [signed(delta), interval(ci), p_text(p), p_text(row.p_holm),
           number(row.vs_baseline.probability_of_improvement, 2)]
    return out + [seeds_text(row.seeds_needed, row.seeds_needed_upper)] * (width - 5)


def cells(row: ReportRow, report: Report) -> list[str]:
    out = [row.group, policy_cell(row, report), row.task_group, str(row.stats.n), row.claim, number(row.stats.mean),
           number(row.stats.sd), interval(row.mean_ci)]
    if has_iqm(report):
        out.append(number(row.stats.iqm))
    if report.compared:
        out += comparison_cells(row, report)
    return [shown(cell) for cell in out]  # a group or policy named with a newline stays in its cell


def render(report: Report, fmt: str, full_notes: bool = True) -> str:
    """The report as ``markdown``, ``csv``, ``latex`` or ``json`` text (the terminal's ``table`` is
    :func:`.terminal_table.rich_table`; written to a file, the CLI gives it as markdown). ``full_notes`` False: the
    LaTeX caption carries the short notes (:mod:`.short_notes`); the other formats always carry every note."""
    if fmt == "json":
        return json.dumps(to_json(report), indent=1) + "\n"
    if fmt == "csv":
        return to_csv(report)
    if fmt == "latex":
        return to_latex(report, full_notes)
    if fmt == "markdown":
        return to_markdown(report)
    raise ValueError(fmt)


def to_json(report: Report) -> dict[str, Any]:
    causes = caveat_causes(report)
    return {"format": "mutualrl-report", "version": 3, "by": report.by, "baseline": report.baseline,
            "baselines": report.baselines, "comparisons": len(report.comparisons),
            "interval": {"task": "crossed seeds x prompts: sqrt(t(s-1)^2 v_seed + t(p-1)^2 v_prompt); from 3 seeds, "
                                 "where v_prompt >= v_seed, the narrower of it and the variance-analysis form "
                                 "t(Satterthwaite df) sqrt(components' sum)",
                         "prompts": INTERVAL_KIND},
            "holm_families": {name: len(report.family(name)) for name in ("headline", "task groups")},
            "min_effect": report.min_effect, "context": report.context,
            "groups": {label: [str(m.settings.path) for m in members] for label, members in report.groups.items()},
            "rows": [json_row(r, report) for r in report.rows],
            "caveat_letters": {letter: words for letter, words in causes.values()},
            "between_groups": report.between_groups, "left_out": report.left_out, "notes": notes(report)}


def json_row(row: ReportRow, report: Report) -> dict[str, Any]:
    """One row: the seed-level figures (``vs_baseline``: these prompts), the crossed ones (``task_mean``,
    ``task_delta``: the task) and, under ``claim``/``ci95_of_claim``/``test``, the ones the table shows."""
    delta, ci, p = row.delta
    test = None if row.vs_baseline is None else {
        "claim": row.claim, "mean_difference": delta, "ci95": list(ci) if ci else None, "p": p,
        "p_holm": row.p_holm, "holm_family": row.family, "seeds_needed": row.seeds_needed,
        "seeds_needed_upper": row.seeds_needed_upper}
    return {"group": row.group, "policy": row.policy, "task_group": row.task_group, "seeds": row.seeds,
            "values": row.values, **row.stats.to_json(), "claim": row.claim,
            "ci95_of_claim": list(row.mean_ci) if row.mean_ci else None, "baseline": row.baseline, "test": test,
            "vs_baseline": row.vs_baseline.to_json() if row.vs_baseline else None,
            "task_mean": row.task_mean.to_json() if row.task_mean else None,
            "task_delta": row.task_delta.to_json() if row.task_delta else None,
            "caveats": row.caveats, "caveat_letters": row_letters(row, report)}


def to_csv(report: Report) -> str:
    """The table, then every note as a ``#`` line (``pandas.read_csv(path, comment="#")`` skips them)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(headers(report))
    for row in report.rows:
        writer.writerow(cells(row, report))
    return out.getvalue() + "".join(f"# {line}\n" for line in notes(report))


def markdown_cell(text: str) -> str:
    """A cell of a markdown table: a ``|`` in a name is escaped, not a column of its own."""
    return text.replace("|", "\\|")


def to_markdown(report: Report) -> str:
    head = [markdown_cell(h) for h in headers(report)]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join([" --- "] * 3 + [" ---: "] * (len(head) - 3)) + "|"]
    lines += ["| " + " | ".join(markdown_cell(c) for c in cells(row, report)) + " |" for row in report.rows]
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {line}" for line in notes(report)) + "\n"


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                 "<": r"$<$", ">": r"$>$", "|": r"\textbar{}",
                 "Δ": r"$\Delta$", "−": "-", "β": r"$\beta$", "α": r"$\alpha$", "σ": r"$\sigma$",
                 "×": r"$\times$", "→": r"$\to$", "≥": r"$\geq$", "≤": r"$\leq$", "±": r"$\pm$", "…": r"\ldots{}",
                 "ⁿ": r"$^n$", "²": r"$^2$", "·": r"$\cdot$", "√": r"$\surd$", "≈": r"$\approx$", "—": "---", "–": "--",
                 "‘": "`", "’": "'", "“": "``", "”": "''", "é": r"\'e", "ö": r'\"o', "ü": r'\"u'}
#: A row's mark, † and its footnote letters (``†a,c``): one superscript.
LATEX_MARK = re.compile(CAVEAT_MARK + r"([a-z](?:,[a-z])*)?")


def caption_notes(report: Report, full: bool) -> list[str]:
    """Every note, or the short ones (:func:`.short_notes.short_notes`) for a caption to paste."""
    from mutualrl.evaluation.report.short_notes import short_notes

    return notes(report) if full else short_notes(report)


def latex_text(text: str) -> str:
    """``text`` as LaTeX: special characters escaped, every symbol the report writes spelled in ASCII (any other
    non-ASCII character as ``?``, so the file always compiles), a † with its letters as one superscript."""
    parts = []
    for index, piece in enumerate(LATEX_MARK.split(text)):
        if index % 2:  # a mark's letters (or None: a bare †)
            parts.append(r"\textsuperscript{\dag" + (f" {piece}" if piece else "") + "}")
        elif piece:
            parts.append("".join(LATEX_SPECIAL.get(char, char if char.isascii() else "?") for char in piece))
    return "".join(parts)


def to_latex(report: Report, full_notes: bool = True) -> str:
    """A booktabs table (``\\usepackage{booktabs}``) in a ``table`` float whose caption carries the notes (the short
    form unless ``full_notes``): a caveat in a ``%`` comment is gone from the compiled paper."""
    head = headers(report)
    spec = "lll" + "r" * (len(head) - 3)
    lines = [r"\begin{table}[t]", r"\centering", r"\scriptsize", r"\begin{tabular}{" + spec + "}", r"\toprule",
             " & ".join(latex_text(h) for h in head) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_text(c) for c in cells(row, report)) + r" \\" for row in report.rows]
    lines += [r"\bottomrule", r"\end{tabular}",
              r"\caption{" + " ".join(latex_text(line.rstrip(".")) + "." for line in caption_notes(report, full_notes))
              + "}",
              r"\label{tab:mutualrl-report}", r"\end{table}"]
    return "\n".join(lines) + "\n"
