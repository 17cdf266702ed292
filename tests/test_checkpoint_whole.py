"""A checkpoint is used only when whole: this version's save cut short (transformers' files there, no regime state, no
manifest: a full disk or a kill between them) is passed over for the checkpoint before it and named, never taken for
an older version's checkpoint; every value of a regime state is checked for its range where it is read, naming the
file; a save never writes a number that is not finite. In process, on hand-built checkpoints."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from mutualrl.errors import UsageError
from mutualrl.launch.rundir.resume import common_checkpoint
from mutualrl.ops.checkpoint_files import MANIFEST_NAME, checkpoint_problem, write_manifest
from mutualrl.regimes.core.state_file import RegimeStateError, read_regime_state
from mutualrl.regimes.hacpo.spec import check_hacpo_state
from mutualrl.run_folder import RUN_MARKER, RunPaths
from mutualrl.training.regime_state import REGIME_STATE_NAME, save_regime_state
from test_checkpoint_integrity import build_checkpoint
from test_regime_state_reader import HACPO_STATE, state_text


def saved(paths: RunPaths, step: int, manifest: bool, regime_state: bool = True):
    folder = build_checkpoint(paths.policy_dir("a") / f"checkpoint-{step}", "full", step, manifest=False)
    if regime_state:
        (folder / REGIME_STATE_NAME).write_text(state_text("hacpo", HACPO_STATE))
    if manifest:
        write_manifest(folder, step)
    return folder


def test_a_save_cut_before_its_manifest_is_passed_over_for_the_whole_one_before(tmp_path):
    paths = RunPaths(tmp_path)
    saved(paths, 2, manifest=True)
    cut = saved(paths, 4, manifest=False, regime_state=False)  # full disk after transformers' files
    problem = checkpoint_problem(cut)
    assert problem is not None and "save did not finish" in problem and str(cut) in problem and "\n" not in problem
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a"], damaged=damaged) == 2  # prepare_resume prints each on the console
    assert damaged == [problem]


def test_the_run_folders_release_says_whether_a_checkpoint_without_manifest_is_an_older_versions(tmp_path):
    paths = RunPaths(tmp_path)
    only = saved(paths, 2, manifest=False)
    assert checkpoint_problem(only) is None  # no record of who saved it: judged by its files, as before
    paths.marker.write_text(json.dumps({"mutualrl": "0.2.0", "run_id": "x"}))
    assert checkpoint_problem(only) is None  # an older version's run: it wrote no manifests
    paths.marker.write_text(json.dumps({"mutualrl": "0.4.0.dev0", "run_id": "x"}))
    assert "save did not finish" in checkpoint_problem(only) and "0.4.0" in checkpoint_problem(only)
    assert paths.marker.name == RUN_MARKER


def test_a_checkpoint_without_the_regime_state_an_earlier_one_has_is_not_whole(tmp_path):
    paths = RunPaths(tmp_path)
    saved(paths, 2, manifest=False)
    without = saved(paths, 4, manifest=False, regime_state=False)
    assert "regime state" in checkpoint_problem(without)
    assert common_checkpoint(paths, ["a"]) == 2
    assert not (without / MANIFEST_NAME).exists()


@pytest.mark.parametrize(("history", "words"), [
    ([[1e300, 0.5]], "1e+300"), ([[-7, 0.5]], "-7"), ([[0.5, 1.5]], "1.5")])
def test_a_hacpo_capability_outside_0_1_is_refused_naming_the_file(tmp_path, history, words):
    path = tmp_path / REGIME_STATE_NAME
    path.write_text(state_text("hacpo", {**HACPO_STATE, "capability_history": history}))
    with pytest.raises(RegimeStateError) as caught:
        read_regime_state(path)
    assert str(caught.value).startswith(f"{path}: ") and words in str(caught.value) and "[0, 1]" in str(caught.value)


def test_a_mean_reward_window_takes_any_finite_float32_mean_and_nothing_else():
    state = {**HACPO_STATE, "measure": "mean-reward"}
    assert check_hacpo_state({**state, "capability_history": [[-7, 2.5]]}) is None
    assert "finite mean reward" in check_hacpo_state({**state, "capability_history": [[1e300, 0.0]]})
    assert "measure" in check_hacpo_state({**HACPO_STATE, "measure": "median"})


def hacpo_self(measure: str = "success-share"):
    return SimpleNamespace(settings=SimpleNamespace(capability=measure, capability_window=4), pool_order=["a", "b"])


@pytest.mark.parametrize("state", [
    {**HACPO_STATE, "dtype": "complex64"}, {**HACPO_STATE, "dtype": "int64"}, {**HACPO_STATE, "dtype": ["float32"]},
    {**HACPO_STATE, "capability_history": [[1e300, 0.5]]}, {**HACPO_STATE, "capability_history": [[-7, 0.5]]}])
def test_the_adapter_checks_the_window_where_it_reads_it(state):
    from mutualrl.regimes.hacpo.adapter import HACPOAdapter

    with pytest.raises(UsageError, match="regime 'hacpo': the checkpoint's capability window"):
        HACPOAdapter.load_state_dict(hacpo_self(), state)
    fine = hacpo_self()
    HACPOAdapter.load_state_dict(fine, HACPO_STATE)
    assert len(fine.capability_history) == 2


def test_the_adapter_refuses_a_window_of_another_measure():
    from mutualrl.regimes.hacpo.adapter import HACPOAdapter

    with pytest.raises(UsageError, match="measures 'mean-reward'"):
        HACPOAdapter.load_state_dict(hacpo_self(), {**HACPO_STATE, "measure": "mean-reward"})


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_a_save_never_writes_a_number_that_is_not_finite(tmp_path, bad):
    regime = SimpleNamespace(name="sgt", policy="a", state_dict=lambda: {"rescues_total": 1, "x": [1.0, bad]})
    with pytest.raises(UsageError) as caught:
        save_regime_state(tmp_path, regime, 3)
    said = str(caught.value)
    assert said.startswith(f"{tmp_path / REGIME_STATE_NAME}: not saved") and "\n" not in said and ".x[1]" in said
    assert not (tmp_path / REGIME_STATE_NAME).exists()
