"""What a researcher sees (issue 27): recipe discovery and config errors that name what changed the recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.cli.main import run
from mutualrl.config.loader import list_experiment_recipes, recipes_dir


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_pools_lists_the_experiment_recipes_and_each_shows(capsys):
    assert run(["pools"]) == 0
    listing = capsys.readouterr().out
    experiments = [path.stem for path in list_experiment_recipes()]
    assert {"commonsense-3qwen", "prp-naive-2qwen", "xgrpo-2qwen"} <= set(experiments)
    pools_at = listing.index("Pools")
    experiments_at = listing.index("Experiments")
    assert pools_at < listing.index("\ntiny ") < experiments_at
    for name in experiments:
        assert f"\n{name} " in listing[experiments_at:], listing
        assert run(["pools", "show", name]) == 0
        shown = capsys.readouterr().out
        assert "regime:" in shown and "pool:" in shown


def test_each_experiment_recipe_describes_itself_in_the_listing(capsys):
    assert run(["pools"]) == 0
    listing = capsys.readouterr().out
    naive_line = next(line for line in listing.splitlines() if line.startswith("prp-naive-2qwen "))
    assert "naive arm" in naive_line and "prp" in naive_line


@pytest.fixture()
def bad_recipe(tmp_path: Path) -> Path:
    path = tmp_path / "bad_lr.yaml"
    path.write_text(f"extends: {recipes_dir() / 'pools' / 'tiny.yaml'}\ngrpo:\n  learning_rate: -1\n")
    return path


def config_error(argv: list[str], capsys) -> str:
    assert run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "grpo.learning_rate" in err, err
    return err


def test_config_error_without_set_does_not_blame_set_overrides(bad_recipe, capsys):
    err = config_error(["train", "--pool", str(bad_recipe), "--dry-run"], capsys)
    assert f"error: {bad_recipe}: grpo.learning_rate" in err and "--set" not in err, err


def test_config_error_names_the_options_that_changed_the_recipe(bad_recipe, tmp_path, capsys):
    err = config_error(["train", "--pool", str(bad_recipe), "--seed", "3", "--max-steps", "2", "-o",
                        str(tmp_path / "run"), "--dry-run"], capsys)
    assert "(with --seed, --output-dir, --max-steps)" in err and "--set" not in err, err


def test_config_error_after_set_says_so(capsys):
    err = config_error(["train", "--set", "grpo.learning_rate=-1", "--dry-run"], capsys)
    assert "(with --set overrides)" in err, err
