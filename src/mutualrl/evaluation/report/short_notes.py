"""The report's notes short enough to paste under a table or into a caption: what the numbers are in one line, each
caveat's cause in one line (its letter, as the table marks rows), and where the long form is.

The long form (:func:`mutualrl.evaluation.report.notes.notes`: what each interval covers, Holm's families, the
power plan, every caveat's runs) is what markdown, CSV and JSON carry, and what ``mutualrl report --full-notes``
prints under the terminal table and puts in the LaTeX caption.
"""

from __future__ import annotations

from mutualrl.evaluation.report.build import Report
from mutualrl.evaluation.report.notes import CAVEAT_MARK, caveat_causes, cell_notes, power_notes, row_letters

FULL_NOTES_FLAG = "--full-notes"


def short_notes(report: Report) -> list[str]:
    """A line of what the table shows, the cells' caveats (few seeds, SD 0: each a line), with ``--min-effect`` the
    plan of each headline comparison, a line per caveat cause,
    the groups' other differences and runs left out counted, and the flag that gives the long form."""
    context = report.context
    lines = [f"Final held-out reward@1 (greedy), pool {context['pool']}, task {context['task']}, step "
             f"{context['steps']}; n: seeds per cell; 95% CI over seeds x prompts (task rows) or seeds (prompts rows)"
             + (f"; Δ vs {report.baseline or 'each baseline'} paired by seed, p Holm-adjusted"
                if report.compared else "") + ".",
             "A task interval covers a method whose runs look like the runs seen, not a failure no seed showed."]
    lines += cell_notes(report)
    if report.min_effect is not None:  # asked for: the plan of each headline comparison, without the definition
        lines += power_notes(report)[1:]
    marked = [row_letters(row, report) for row in report.rows]
    for letter, words in caveat_causes(report).values():
        every = " (every row)" if all(letter in found.split(",") for found in marked) else ""
        lines.append(f"{CAVEAT_MARK}{letter}: {words}{every}.")
    if report.between_groups:
        lines.append(f"The groups also differ in {len(report.between_groups)} setting(s).")
    if report.left_out:
        lines.append(f"{len(report.left_out)} run(s) left out.")
    lines.append(f"(every note in full, and each caveat's runs: {FULL_NOTES_FLAG})")
    return lines
