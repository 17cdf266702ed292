"""`mutualrl pools show NAME > recipe.yaml` writes YAML that loads back to the same resolved recipe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mutualrl.config import list_pool_recipes, load_run_config
from mutualrl.config.typed import to_plain


EXPERIMENTS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "recipes" / "experiments").glob("*.yaml"))


@pytest.mark.slow  # over 5 s on the 2-core box: the full suite, not the fast tier
@pytest.mark.parametrize("pool", sorted(path.stem for path in list_pool_recipes()) + EXPERIMENTS)
def test_pools_show_output_loads_back_as_the_same_recipe(pool, tmp_path):
    done = subprocess.run([sys.executable, "-m", "mutualrl", "pools", "show", pool], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "40"})  # narrow: rich used to wrap
    assert done.returncode == 0, done.stderr
    saved = tmp_path / "resolved.yaml"
    saved.write_text(done.stdout)
    assert isinstance(yaml.safe_load(done.stdout), dict)
    expected = to_plain(load_run_config(pool, check_grpo=False).config)
    assert to_plain(load_run_config(str(saved), check_grpo=False).config) == expected
