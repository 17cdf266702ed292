"""`mutualrl sweep` takes its grid file strictly (issue 68): a seed that is not a whole number, a regime that is not
a name, a setting that is not KEY=VALUE: one line naming the file, the field and the item, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import UsageError
from mutualrl.launch.sweep.grid import read_grid_file
from user_folders import USER_TASK, make_user_folder


@pytest.mark.parametrize(("text", "field", "item"), [
    ("seeds: [abc]\n", "seeds", "'abc' (str)"),
    ("seeds: [1.7]\n", "seeds", "'1.7' (float)"),  # int(1.7) ran seed 1
    ("seeds: [true]\n", "seeds", "'True' (bool)"),
    ("seeds: 3\n", "seeds", "expected a list"),
    ("regimes: [[sgt]]\n", "regimes", "(list)"),
    ("set: [{grpo.beta: 0}]\n", "set", "(dict)"),
    ("grid: {grpo.beta: [[0]]}\n", "grid.grpo.beta", "(list)"),
])
def test_a_grid_file_of_the_wrong_types_is_one_line(tmp_path: Path, text: str, field: str, item: str) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(text)
    with pytest.raises(UsageError) as caught:
        read_grid_file(grid)
    assert str(caught.value).startswith(f"--grid-file {grid}: {field}: ") and item in str(caught.value)
    done = CliRunner().invoke(app, ["sweep", "--grid-file", str(grid), "-o", str(tmp_path / "sw"), "--dry-run"])
    assert done.exit_code == 2 and "Traceback" not in done.output and field in done.output


SETS = [x for s in USER_TASK for x in ("--set", s)]


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A researcher's folder outside the clone: data/ and my_rewards.py, the working directory."""
    return make_user_folder(tmp_path, monkeypatch, "def exact(completions, answer, **kwargs):\n    return [0.0] * len(answer)\n")


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("slurm", [[], ["--slurm", "--slurm-local"]])
def test_a_dry_run_writes_nothing(user_folder: Path, slurm: list[str]) -> None:
    sweep = user_folder / "sw"
    sweep.mkdir()
    (sweep / "sweep.json").write_text('{"format": 1, "mine": true}')
    args = ["sweep", "--regimes", "standalone", "--seeds", "1,2", "--max-steps", "2", "-o", "sw", "--dry-run"]
    done = CliRunner().invoke(app, [*args, *slurm, *SETS], terminal_width=400)
    assert done.exit_code == 0, done.output
    assert "2 to train" in done.output
    assert (sweep / "sweep.json").read_text() == '{"format": 1, "mine": true}'  # not rewritten
    assert [p.name for p in sweep.iterdir()] == ["sweep.json"]


@pytest.mark.parametrize("slurm", [[], ["--slurm", "--slurm-local"]])
def test_a_setting_train_refuses_is_refused_by_the_sweep_naming_the_run(user_folder: Path, slurm: list[str]) -> None:
    args = ["sweep", "--regimes", "standalone", "--seeds", "1", "--max-steps", "2", "-o", "sw", "--dry-run",
            "--grid", "grpo.num_generations=4,3"]
    done = CliRunner().invoke(app, [*args, *slurm, *SETS], terminal_width=400)
    assert done.exit_code == 2 and "Traceback" not in done.output and "to train" not in done.output
    message = " ".join(done.output.split())
    assert "sweep run standalone-num_generations3-seed1 (mutualrl train" in message
    assert "must be divisible by grpo.num_generations (3)" in message
    assert not (user_folder / "sw").exists()
