"""What report and plot read from a run folder is bounded (issue 68): a sparse file (``truncate -s``) or one over
the size a run can reach is refused in one line naming it, unread, as data copies and module files already are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from report_fakes import write_finished_run
from typer.testing import CliRunner

from mutualrl import run_folder
from mutualrl.cli.main import app


def one_line(output: str) -> str:
    return " ".join(output.split())


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    return [write_finished_run(tmp_path / "sw" / f"standalone-seed{seed}", "standalone", seed,
                               {"tiny-bpe": [1, 0, seed % 2, 0], "tiny-sp": [0, 1, 0, 0]}) for seed in (1, 2)]


@pytest.mark.parametrize("command", [["report"], ["plot"]])
def test_a_sparse_metrics_file_is_refused_unread(runs: list[Path], command: list[str]) -> None:
    metrics = runs[1] / "metrics.jsonl"
    os.truncate(metrics, 96 * 1024 * 1024)  # holes: read whole, 96 MB of zeros (8 GiB made report hold 16.8 GB)
    done = CliRunner().invoke(app, [*command, *map(str, runs)])
    assert done.exit_code != 0 and "Traceback" not in done.output
    assert f"{metrics}:" in one_line(done.output) and "sparse" in done.output


def test_a_metrics_file_over_the_limit_is_refused_unread(runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_folder, "METRICS_MAX_BYTES", 100)
    done = CliRunner().invoke(app, ["report", *map(str, runs)])
    assert done.exit_code == 2 and "more than such a file ever holds" in one_line(done.output)
    assert str(runs[0] / "metrics.jsonl") in one_line(done.output)


def test_the_limit_is_beyond_what_a_run_writes() -> None:
    row = 4000  # bytes: a train row with every per-source diagnostic of an 8-policy pool
    assert run_folder.METRICS_MAX_BYTES > 50_000 * 8 * row
