"""The benchmarks-and-recipes tier: what its digest covers decides when .ci/run runs it (.ci/tier_digest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tier_digest():
    spec = importlib.util.spec_from_file_location("tier_digest", ROOT / ".ci" / "tier_digest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_digest_covers_scripts_recipes_and_the_tiers_tests_not_results():
    covered = {str(p.relative_to(ROOT)) for p in tier_digest().covered_files()}
    assert {"benchmarks/step_profile.py", "recipes/pools/2qwen.yaml", "recipes/base/paper.yaml",
            "tests/test_benchmarks_smoke.py", "tests/test_preflight.py", "tests/recipe_paths.py",
            "tests/bench_helpers.py"} <= covered
    assert not [name for name in covered if name.startswith("benchmarks/results/") or name.endswith(".md")]
    assert "tests/test_architecture.py" not in covered  # a test of the default suite alone


def test_the_digest_moves_with_a_covered_file(tmp_path, monkeypatch):
    module = tier_digest()
    (tmp_path / "recipes").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "tests").mkdir()
    for name in ("tests/bench_helpers.py", "pyproject.toml"):
        (tmp_path / name).write_text("")
    recipe = tmp_path / "recipes" / "a.yaml"
    recipe.write_text("pool: {}\n")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "RECORDED", tmp_path / "recorded.sha256")
    assert module.main(["--check"]) == 1  # nothing recorded: the tier runs
    assert module.main(["--write"]) == 0 and module.main(["--check"]) == 0
    (tmp_path / "benchmarks" / "results").mkdir()
    (tmp_path / "benchmarks" / "results" / "x.json").write_text("{}")
    assert module.main(["--check"]) == 0  # a result is not what the tier checks
    recipe.write_text("pool: {name: b}\n")
    assert module.main(["--check"]) == 1
