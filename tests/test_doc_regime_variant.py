"""docs/architecture.md's "A regime variant in three files", built from the doc's own code blocks: a folder that
imports only itself and the regime API, whose settings take the tiny recipe's values for its parent (SGT), and which
trains two steps of the tiny pool through the launcher."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mutualrl.regimes
from mutualrl.regimes.core.regime_spec import unregister_regime
from mutualrl.regimes.core.registry import ENV_VAR, builtin_spec_modules
from test_architecture import regime_folder_imports

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
BLOCK = re.compile(r"```python\n# regimes/(\w+)/(\w+\.py)\n(.*?)```", re.S)
HEADING = "### A regime variant in three files\n"


def variant_files() -> dict[str, dict[str, str]]:
    """``{regime folder: {file name: code}}`` of the python blocks of the doc's variant section."""
    text = DOC.read_text()
    section = text[text.index(HEADING):]
    section = section[:section.index("\n## ", 1)]
    files: dict[str, dict[str, str]] = {}
    for folder, name, code in BLOCK.findall(section):
        files.setdefault(folder, {})[name] = code
    return files


def write_variant(root: Path) -> tuple[str, Path]:
    """The doc's folder under ``root`` with an empty ``__init__.py``: (its name, its path)."""
    [(folder, files)] = variant_files().items()
    (root / folder).mkdir()
    (root / folder / "__init__.py").write_text("")
    for name, code in files.items():
        (root / folder / name).write_text(code)
    return folder, root / folder


@pytest.fixture
def variant(tmp_path):
    """The doc's folder as ``mutualrl.regimes.<folder>`` (tmp_path joins the package's path), registered; undone."""
    folder, path = write_variant(tmp_path)
    builtin_spec_modules()  # the built-ins found (once a process) before the example joins the package's path
    mutualrl.regimes.__path__.append(str(tmp_path))
    try:
        spec = importlib.import_module(f"mutualrl.regimes.{folder}.spec")
        yield path, spec
    finally:
        mutualrl.regimes.__path__.remove(str(tmp_path))
        for module in [m for m in sys.modules if m.startswith(f"mutualrl.regimes.{folder}")]:
            del sys.modules[module]
        unregister_regime(spec.SGT_HALF.name)


def test_the_doc_shows_a_variant_in_three_files():
    assert {folder: sorted(files) for folder, files in variant_files().items()} == {
        "sgthalf": ["adapter.py", "maths.py", "spec.py"]}


def test_the_variant_imports_only_itself_and_the_regime_api(variant):
    folder, _ = variant
    assert regime_folder_imports(folder) == []


def test_the_parents_recipe_values_reach_the_variant_and_its_own_win(variant):
    """The tiny recipe sets ``regime.sgt.lam: 0.3``: the variant's settings read 0.3 and its adapter trains with half
    of it; ``regime.sgt_half.lam`` overrides the parent's value, and SGT's own settings stay SGT's."""
    from mutualrl.config import load_run_config

    _, spec = variant
    adapter_class = importlib.import_module("mutualrl.regimes.sgthalf.adapter").SGTHalfAdapter
    for overrides, recipe_lam in (([], 0.3), (["regime.sgt.lam=0.4"], 0.4), (["regime.sgt_half.lam=0.2"], 0.2)):
        config = load_run_config("tiny", regime="sgt-half", overrides=overrides, check_grpo=False).config
        assert config.regime.sgt_half.lam == recipe_lam
        assert config.regime.sgt_half.max_rescues_per_prompt == config.regime.sgt.max_rescues_per_prompt == 1
        adapter = adapter_class(config, "tiny-sp", exchange=None, spec=spec.SGT_HALF)
        assert adapter.settings.lam == pytest.approx(recipe_lam / 2) and adapter.name == "sgt-half"
    assert config.regime.sgt.lam == 0.3


@pytest.mark.slow  # a launch of the tiny pool, two steps
def test_the_doc_variant_trains_two_steps_of_the_tiny_pool(tmp_path):
    """Every process imports the doc's folder as ``mutualrl.regimes.sgthalf`` (a module named in ``MUTUALRL_REGIMES``
    adds it to the package's path), and both policies log the variant's SGT metrics at steps 1 and 2."""
    from e2e_helpers import TINY, child_env, metric_lines

    folder, _ = write_variant(tmp_path)
    bootstrap = tmp_path / "variant_path.py"
    bootstrap.write_text(f"import mutualrl.regimes\n\nmutualrl.regimes.__path__.append({str(tmp_path)!r})\n"
                         f"import mutualrl.regimes.{folder}.spec  # noqa: E402\n")
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "mutualrl", "train", *TINY, "--regime", "sgt-half", "--max-steps", "2",
               "--set", "validation.at_start=false", "-o", str(run_dir)]
    done = subprocess.run(command, env={**child_env(), ENV_VAR: str(bootstrap)}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    train = metric_lines(run_dir)
    for policy in ("tiny-bpe", "tiny-sp"):
        rows = [line for line in train if line["policy"] == policy]
        assert [line["step"] for line in rows] == [1, 2]
        assert all("sgt-half/gate_rate" in line and "sgt-half/rescues_total" in line for line in rows)
