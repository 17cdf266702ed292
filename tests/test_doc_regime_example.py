"""docs/architecture.md's "Adding a regime" example, built from the doc's own code blocks: written as a regime folder,
registered, and run for one step of two policies through the fake trainer of tests/test_regimes_seam.py."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
import torch

import mutualrl.regimes
from mutualrl.regimes.core.regime_spec import unregister_regime
from mutualrl.regimes.core.registry import builtin_spec_modules
from test_architecture import regime_folder_imports
from test_regimes_seam import peer_then_learner, pool_of

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
BLOCK = re.compile(r"```python\n# regimes/(\w+)/(\w+\.py)\n(.*?)```", re.S)


def example_files() -> dict[str, dict[str, str]]:
    """``{regime folder: {file name: code}}`` of the python blocks in "## Adding a regime" that start with
    ``# regimes/<folder>/<file>.py``."""
    text = DOC.read_text()
    section = text[text.index("## Adding a regime\n"):]
    section = section[:section.index("\n### A regime variant")]  # the variant: tests/test_doc_regime_variant.py
    files: dict[str, dict[str, str]] = {}
    for folder, name, code in BLOCK.findall(section):
        files.setdefault(folder, {})[name] = code
    return files


@pytest.fixture
def example_regime(tmp_path):
    """The doc's folder as ``mutualrl.regimes.<folder>`` (tmp_path joins the package's path), registered; undone."""
    [(folder, files)] = example_files().items()
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "__init__.py").write_text("")
    for name, code in files.items():
        (tmp_path / folder / name).write_text(code)
    builtin_spec_modules()  # the built-ins found (once a process) before the example joins the package's path
    mutualrl.regimes.__path__.append(str(tmp_path))
    try:
        spec = importlib.import_module(f"mutualrl.regimes.{folder}.spec")
        yield tmp_path / folder, spec
    finally:
        mutualrl.regimes.__path__.remove(str(tmp_path))
        for module in [m for m in sys.modules if m.startswith(f"mutualrl.regimes.{folder}")]:
            del sys.modules[module]
        unregister_regime(folder)


def test_the_doc_shows_a_regime_in_three_files():
    assert {folder: sorted(files) for folder, files in example_files().items()} == {
        "peerbase": ["adapter.py", "maths.py", "spec.py"]}


def test_the_doc_example_imports_only_itself_and_the_regime_api(example_regime):
    folder, _ = example_regime
    assert regime_folder_imports(folder) == []


@pytest.mark.slow
def test_the_doc_example_runs_a_step_through_the_fake_trainer(example_regime, thl_tokenizers, tmp_path):
    adapters = pool_of(tmp_path / "see", thl_tokenizers, "peerbase", peer_weight=0.5)
    learner, peer = adapters["tiny-bpe"], adapters["tiny-sp"]
    # The learner's rewards are 0, 0 (prompt p0) and 1, 0 (p1); the peer's 1, 1 and 0, 0.
    out = peer_then_learner(learner, peer, [" 4", " 4", " 5", " 3"], [1.0, 1.0, 0.0, 0.0])
    # p0: baseline 0.5 * 0 + 0.5 * 1 = 0.5; p1: 0.5 * 0.5 + 0.5 * 0 = 0.25. Shifts from the own means: 0.5, -0.25.
    assert torch.allclose(out["advantages"], torch.tensor([-0.5, -0.5, 0.75, -0.25]))
    assert learner.trainer.recorded[("train", "peerbase/baseline_shift")] == [pytest.approx(0.375)]
