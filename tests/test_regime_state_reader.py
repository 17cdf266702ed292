"""One strict reader of a checkpoint's regime state, shared by the launcher's check and the worker (issue 93,
class 4): a state the worker would refuse (``Infinity``, a number beyond a float's range, a dtype HACPO does not
keep) is one the launcher passes over for the checkpoint before it, and the worker's refusal is one line naming
the file and the checkpoint to set aside, never a bare ``--resume`` that would choose the same checkpoint again.
In process, on hand-built checkpoints; no torch adapter is built."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mutualrl.errors import UsageError
from mutualrl.launch.rundir.resume import common_checkpoint
from mutualrl.ops.checkpoint_files import checkpoint_problem, write_manifest
from mutualrl.regimes.core.state_file import RegimeStateError, read_regime_state
from mutualrl.run_folder import RunPaths
from mutualrl.training.regime_state import REGIME_STATE_NAME, load_regime_state
from test_checkpoint_integrity import build_checkpoint

SGT_STATE = {"rescues_total": 4, "rescues_by_prompt": {"p1": 2, "p2": 2}}
HACPO_STATE = {"policies": ["a", "b"], "dtype": "float32", "capability_history": [[0.5, None], [0.25, 0.75]]}


def state_text(regime: str, state: dict, policy: str = "a") -> str:
    return json.dumps({"format": "mutualrl-regime-state", "version": 1, "regime": regime, "policy": policy,
                       "step": 2, "state": state})


# (regime, the file's text, words of the refusal): each the adversarial pass's, and their kin
REFUSED = [
    ("sgt", state_text("sgt", SGT_STATE).replace('"rescues_total": 4', '"rescues_total": Infinity'), "Infinity"),
    ("sgt", state_text("sgt", SGT_STATE).replace('"rescues_total": 4', '"rescues_total": NaN'), "NaN"),
    ("sgt", state_text("sgt", SGT_STATE).replace('"rescues_total": 4', '"rescues_total": 1e999'), "finite"),
    ("sgt", state_text("sgt", {**SGT_STATE, "rescues_total": 2.5}), "rescues_total 2.5"),
    ("sgt", state_text("sgt", {**SGT_STATE, "rescues_by_prompt": {"p1": -1}}), "rescues_by_prompt"),
    ("hacpo", state_text("hacpo", {**HACPO_STATE, "dtype": "complex64"}), "dtype 'complex64'"),
    ("hacpo", state_text("hacpo", {**HACPO_STATE, "dtype": "load"}), "dtype 'load'"),
    ("hacpo", state_text("hacpo", {**HACPO_STATE, "capability_history": [[0.5]]}), "capability_history[0]"),
    ("hacpo", state_text("hacpo", HACPO_STATE).replace("0.25", "-Infinity"), "Infinity"),
]


@pytest.mark.parametrize(("regime", "text", "words"), REFUSED)
def test_the_launcher_and_the_worker_refuse_the_same_state_in_one_line_naming_it(tmp_path, regime, text, words):
    path = tmp_path / REGIME_STATE_NAME
    path.write_text(text)
    with pytest.raises(RegimeStateError) as err:
        read_regime_state(path)
    assert str(err.value).startswith(f"{path}: ") and words in str(err.value) and "\n" not in str(err.value)

    adapter = SimpleNamespace(name=regime, policy="a", load_state_dict=lambda state: None)
    with pytest.raises(UsageError) as refused:
        load_regime_state(tmp_path, adapter)
    said = str(refused.value)
    assert said.startswith(f"{path}: ") and words in said and "\n" not in said
    assert f"move {tmp_path} out of" in said and "checkpoint before it" in said  # not a --resume taking it again


@pytest.mark.parametrize(("regime", "state"), [("sgt", SGT_STATE), ("hacpo", HACPO_STATE)])
def test_a_state_as_the_adapters_save_it_is_read_back(tmp_path, regime, state):
    path = tmp_path / REGIME_STATE_NAME
    path.write_text(state_text(regime, state))
    assert read_regime_state(path, regime, "a") == state
    with pytest.raises(RegimeStateError, match="the state of policy 'a', not 'b'"):
        read_regime_state(path, regime, "b")


def test_resume_passes_over_a_checkpoint_whose_state_the_worker_would_refuse(tmp_path):
    """The launcher's choice of checkpoint reads the state as the worker does: the newest one, whose SGT counter is
    Infinity, is named and the one before it taken."""
    paths = RunPaths(tmp_path)
    for step in (2, 4):
        folder = paths.policy_dir("a") / f"checkpoint-{step}"
        build_checkpoint(folder, "full", step, manifest=False)
        text = state_text("sgt", SGT_STATE)
        (folder / REGIME_STATE_NAME).write_text(text if step == 2 else text.replace(": 4,", ": Infinity,", 1))
        write_manifest(folder, step)
    newest = paths.policy_dir("a") / "checkpoint-4"
    assert checkpoint_problem(newest) is not None and REGIME_STATE_NAME in checkpoint_problem(newest)
    assert checkpoint_problem(paths.policy_dir("a") / "checkpoint-2") is None
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a"], damaged=damaged) == 2
    assert len(damaged) == 1 and "Infinity" in damaged[0] and str(Path(newest) / REGIME_STATE_NAME) in damaged[0]


def test_a_regime_state_its_manifest_does_not_list_is_not_what_was_saved(tmp_path):
    """The worker reads the state file by its name: one added beside a manifest that does not list it would be
    loaded unchecked by the launcher, so the checkpoint is refused as not what was saved."""
    folder = build_checkpoint(tmp_path / "checkpoint-2", "full", 2)  # its manifest lists no regime state
    assert checkpoint_problem(folder) is None
    (folder / REGIME_STATE_NAME).write_text(state_text("sgt", SGT_STATE))
    problem = checkpoint_problem(folder)
    assert problem is not None and REGIME_STATE_NAME in problem and "not what was saved" in problem
