"""Report and preflight inputs (issue 93, class 6): a folder name with a newline or another control character in a
shared sweep folder forges no CSV row, no markdown line, no raw newline in a LaTeX caption or a figure's caption;
a hidden folder a SIGKILLed preflight left is no run to ``report`` and the next preflight sweeps it up; the
preflight refuses an ``-o`` the run would refuse, with the run's own check. In process."""

from __future__ import annotations

import csv
import fcntl
import io
import os
from pathlib import Path

import pytest
from report_fakes import write_finished_run
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.evaluation.report.build import build_report
from mutualrl.evaluation.report.formats import render
from mutualrl.launch.preflight import PREFLIGHT_LOCK, held_by_this_preflight, sweep_stale_preflights

FORGED = "x\nsgt,tiny-bpe,all,3,task,1.000\r\u2028\x1b[31m"


@pytest.fixture
def shared_sweep(tmp_path: Path) -> Path:
    """A sweep whose folder holds a finished run per seed of two regimes, and an unfinished run whose name carries
    newlines and control characters (its note names the folder)."""
    sweep = tmp_path / "sweep"
    for regime in ("standalone", "sgt"):
        for seed in (1, 2):
            write_finished_run(sweep / f"{regime}-seed{seed}", regime, seed,
                               {"tiny-bpe": [1, seed % 2, 0, 1], "tiny-sp": [0, 1, 1, seed % 2]})
    write_finished_run(sweep / f"sgt-seed3{FORGED}", "sgt", 3, {"tiny-bpe": [1, 1, 1, 1]}, status="running")
    return sweep


def test_no_folder_name_forges_a_row_or_a_line_in_any_format(shared_sweep: Path) -> None:
    report = build_report([shared_sweep])
    assert any("not finished" in reason for reason in report.left_out)  # the forged name is in a note
    text = render(report, "csv")
    rows = list(csv.reader(io.StringIO(text)))
    table = [row for row in rows if row and not row[0].startswith("#")]
    assert len(table) == 1 + len(report.rows)  # the header and the real rows: nothing forged
    assert "\r" not in text.replace("\r\n", "\n") and "\u2028" not in text and "\x1b" not in text
    assert "sgt-seed3x\\nsgt,tiny-bpe" in text  # the name said, escaped, on its note's line

    markdown = render(report, "markdown")
    assert all(line.startswith(("|", "- ")) or not line for line in markdown.splitlines())
    latex = render(report, "latex")
    caption = next(line for line in latex.splitlines() if line.startswith(r"\caption{"))
    assert caption.endswith("}") and "not finished" in caption  # the whole caption on its line
    assert not any(0 < ord(char) < 32 for char in latex.replace("\n", ""))


def test_a_hidden_folder_a_killed_preflight_left_is_no_run_to_report(shared_sweep: Path) -> None:
    left = shared_sweep / ".sgt-seed9.preflight-abc123"
    write_finished_run(left, "sgt", 9, {"tiny-bpe": [1, 1, 1, 1]}, status="running")
    report = build_report([shared_sweep])
    assert not any(".preflight-" in reason for reason in report.left_out)
    assert all(9 not in row.seeds for row in report.rows)


def test_the_next_preflight_sweeps_up_a_killed_ones_folder_and_keeps_a_live_ones(tmp_path: Path) -> None:
    killed = tmp_path / ".run.preflight-killed1"
    (killed / "policies").mkdir(parents=True)
    (killed / PREFLIGHT_LOCK).write_text("")  # its holder is gone: nobody holds the lock
    live = tmp_path / ".run.preflight-live0001"
    live.mkdir()
    other = tmp_path / ".run.preflight-notours"  # no lock file: not a preflight's, left alone
    other.mkdir()
    with held_by_this_preflight(live):
        assert sweep_stale_preflights(tmp_path) == [killed]
        assert live.is_dir() and other.is_dir() and not killed.exists()
    fd = os.open(live / PREFLIGHT_LOCK, os.O_RDONLY)  # once its preflight ended, the lock is free again
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_the_preflight_refuses_an_output_folder_the_run_would_refuse(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    finished = write_finished_run(tmp_path / "runs" / "done", "sgt", 1, {"tiny-bpe": [1, 0]})
    before = sorted(p.name for p in finished.parent.iterdir())
    result = CliRunner().invoke(app, ["train", "--preflight", "-o", str(finished)])
    assert result.exit_code != 0
    said = " ".join(result.output.split())
    assert "already exists" in said and "--resume" in said
    assert sorted(p.name for p in finished.parent.iterdir()) == before  # no preflight folder was made beside it
