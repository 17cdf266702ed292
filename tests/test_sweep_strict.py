"""`mutualrl sweep` takes its grid file strictly (issue 68): a seed that is not a whole number, a regime that is not
a name, a setting that is not KEY=VALUE: one line naming the file, the field and the item, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import UsageError
from mutualrl.launch.sweep import read_grid_file


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
