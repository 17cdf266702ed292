"""``mutualrl report``'s notes short enough to paste (issue 95): a line of what the table shows and a line per caveat
cause under the terminal table and in the LaTeX caption; the long form behind ``--full-notes``."""

from __future__ import annotations

from pathlib import Path

from report_fakes import write_sweep
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.evaluation.report.build import build_report
from mutualrl.evaluation.report.formats import render
from mutualrl.evaluation.report.notes import notes
from mutualrl.evaluation.report.short_notes import short_notes

SCORES = {"standalone": [[1, 0, 0, 0], [1, 1, 0, 0]], "sgt": [[1, 1, 1, 0], [1, 1, 0, 1]]}


def test_the_short_notes_are_a_few_short_lines_and_name_the_long_form(tmp_path: Path):
    report = build_report([write_sweep(tmp_path / "sw", SCORES)])
    short, full = short_notes(report), notes(report)
    assert len(short) < len(full) and max(map(len, short)) <= 300 < max(map(len, full))
    assert short[0].startswith("Final held-out reward@1 (greedy), pool tiny, task data (reward exact), step 3")
    assert short[-1] == "(every note in full, and each caveat's runs: --full-notes)"
    assert any(line.startswith("n = 2: a t interval over 2 seeds") for line in short)  # the cells' caveats stay
    assert "every note in full" in render(report, "latex", full_notes=False)
    assert "every note in full" not in render(report, "latex")  # the file formats carry every note


def test_the_terminal_table_prints_the_short_notes_unless_told(tmp_path: Path):
    sweep = write_sweep(tmp_path / "sw", SCORES)
    short = CliRunner().invoke(app, ["report", str(sweep)], env={"COLUMNS": "200"})
    full = CliRunner().invoke(app, ["report", str(sweep), "--full-notes"], env={"COLUMNS": "200"})
    assert short.exit_code == 0 and full.exit_code == 0, short.output + full.output
    assert "--full-notes" in short.output and "Holm's step-down adjustment" not in short.output
    assert "Holm's step-down adjustment" in full.output
