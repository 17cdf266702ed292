"""`mutualrl pools show NAME > recipe.yaml` writes YAML that loads back to the same resolved recipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mutualrl.config import list_pool_recipes, load_run_config
from mutualrl.config.typed import to_plain


EXPERIMENTS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "recipes" / "experiments").glob("*.yaml"))
RECIPES = sorted(path.stem for path in list_pool_recipes()) + EXPERIMENTS

# The CLI's `run` (what `mutualrl` runs) once per recipe in one process, each command's stdout caught as a pipe
# would: {name: [exit code, stdout, stderr]}. One launch for every recipe: a process start costs more than a recipe.
SHOW_EACH = """
import contextlib, io, json, sys
from mutualrl.cli.main import run
shown = {}
for name in sys.argv[2:]:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = run(["pools", "show", name])
    shown[name] = [code, out.getvalue(), err.getvalue()]
with open(sys.argv[1], "w") as fh:
    json.dump(shown, fh)
"""


@pytest.fixture(scope="module")
def shown(tmp_path_factory) -> dict[str, list]:
    """``mutualrl pools show NAME`` of every recipe, printed in a narrow terminal (rich used to wrap)."""
    path = tmp_path_factory.mktemp("pools-show") / "shown.json"
    done = subprocess.run([sys.executable, "-c", SHOW_EACH, str(path), *RECIPES], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "COLUMNS": "40"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(path.read_text())


@pytest.mark.slow  # over 5 s on the 2-core box: the full suite, not the fast tier
@pytest.mark.parametrize("pool", RECIPES)
def test_pools_show_output_loads_back_as_the_same_recipe(pool, shown, tmp_path):
    code, stdout, stderr = shown[pool]
    assert code == 0, stderr
    saved = tmp_path / "resolved.yaml"
    saved.write_text(stdout)
    assert isinstance(yaml.safe_load(stdout), dict)
    expected = to_plain(load_run_config(pool, check_grpo=False).config)
    assert to_plain(load_run_config(str(saved), check_grpo=False).config) == expected
