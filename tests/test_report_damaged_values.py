"""report and plot --group-by on type-damaged run folders (issue 68): a non-finite or non-numeric score or task-group
value, a step file's field of the wrong JSON type: one line naming the file and the field, exit 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_fakes import write_finished_run
from typer.testing import CliRunner

from mutualrl.cli.main import app


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    return [write_finished_run(tmp_path / "sw" / f"standalone-seed{seed}", "standalone", seed,
                               {"tiny-bpe": [1, 0, seed % 2, 0], "tiny-sp": [0, 1, 0, 0]}) for seed in (1, 2, 3)]


def refused(runs: list[Path], *commands: list[str]) -> list[str]:
    lines = []
    for command in commands:
        done = CliRunner().invoke(app, [*command, *map(str, runs)])
        assert done.exit_code == 2 and "Traceback" not in done.output, done.output
        lines.append(" ".join(done.output.split()))
    return lines


def edit_step_file(run: Path, change: dict) -> Path:
    path = run / "eval" / "tiny-bpe" / "step-000003.json"
    data = json.loads(path.read_text())
    data.update(change)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("value", ["NaN", '"abc"', "Infinity", "null"])
def test_a_task_group_value_that_is_no_finite_number(runs: list[Path], value: str) -> None:
    metrics = runs[1] / "metrics.jsonl"
    metrics.write_text(metrics.read_text().replace('"eval/group/add/reward@1": 1.0', f'"eval/group/add/reward@1": {value}')
                       .replace('"eval/group/add/reward@1": 0.5', f'"eval/group/add/reward@1": {value}'))
    for line in refused(runs, ["report"], ["plot", "--group-by", "regime", "-o", str(runs[0].parent / "figs")]):
        assert f"{metrics}:" in line and "eval/group/add/reward@1" in line and "is not a finite number" in line


@pytest.mark.parametrize(("change", "field"), [
    ({"records": [{"prompt_id": "p0", "task": "dataset", "score": float("nan")}]}, "record 0: score nan"),
    ({"records": 5}, "records: a JSON int"),
    ({"step": "3"}, "step: '3'"),
    ({"settings": [1, 2]}, "settings: '[1, 2]'"),
])
def test_a_step_file_of_the_wrong_types(runs: list[Path], change: dict, field: str) -> None:
    path = edit_step_file(runs[2], change)
    (line,) = refused(runs, ["report"])
    assert f"{path}:" in line and field in line
