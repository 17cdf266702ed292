"""A run folder that holds files but no config.yaml (a copy cut short) is told what is wrong and what to do, in one
line, by sweep, train and train --resume alike (issue 68: sweep said "the same command resumes them", which failed
the same way, and train and --resume each sent the user to the other)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mutualrl.cli.main import run


@pytest.fixture
def cut_short(tmp_path: Path) -> Path:
    folder = tmp_path / "SW" / "standalone-seed1"
    folder.mkdir(parents=True)
    (folder / ".mutualrl-run").write_text(json.dumps({"run_id": "x"}))
    (folder / "run.json").write_text(json.dumps({"status": "done"}))
    (folder / "metrics.jsonl").write_text("")
    return folder


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("argv", [
    ["sweep", "-o", "{sweep}", "--regimes", "standalone", "--seeds", "1", "--pool", "tiny", "--dry-run"],
    ["train", "--pool", "tiny", "--regime", "standalone", "-o", "{run}", "--max-steps", "1"],
    ["train", "--resume", "-o", "{run}"],
])
def test_a_run_folder_without_config_is_told_what_is_wrong(argv: list[str], cut_short: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.name for p in cut_short.iterdir())
    code = run([a.format(sweep=cut_short.parent, run=cut_short) for a in argv])
    line = error_line(capsys)
    assert code == 2 and "no config.yaml" in line and "run.json" in line and "move the folder away" in line
    assert "--overwrite (which deletes it)" in line and "resumes" not in line
    assert sorted(p.name for p in cut_short.iterdir()) == before  # nothing written, nothing deleted
