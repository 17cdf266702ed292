"""An exchange folder belongs to one run (``--set see.dir=S`` given to two runs): a unique run id, written in the
folder and checked on every open; a second live run on it is refused, a stopped one's folder is taken over."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from mutualrl.config.loader import load_run_config
from mutualrl.errors import UsageError
from mutualrl.launch.rundir.lock import RunLock, mark_run_folder
from mutualrl.launch.rundir.prepare import prepare_launch
from mutualrl.launch.rundir.see_owner import claim_exchange
from mutualrl.run_folder import RunPaths, run_id
from mutualrl.see import ExperienceExchange
from mutualrl.trust.exchange_binding import exchange_owner


def new_run(folder: Path) -> RunPaths:
    mark_run_folder(folder)
    return RunPaths(folder)


def test_two_runs_of_one_name_have_different_ids_and_an_old_run_keeps_its_name(tmp_path: Path) -> None:
    first, second = new_run(tmp_path / "a" / "run"), new_run(tmp_path / "b" / "run")
    assert run_id(first) != run_id(second) and run_id(first).startswith("run-")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / ".mutualrl-run").write_text('{"mutualrl": "0.9"}\n')
    assert run_id(RunPaths(tmp_path / "old")) == "old"  # its exchange records were keyed by the folder's name
    (tmp_path / "old" / ".mutualrl-run").write_text('{"run_id": "x\\ny"}')
    assert run_id(RunPaths(tmp_path / "old")) == "old"


def test_a_second_live_run_on_one_exchange_is_refused_and_a_stopped_ones_is_taken_over(tmp_path: Path) -> None:
    shared = tmp_path / "S"
    first, second = new_run(tmp_path / "a" / "run"), new_run(tmp_path / "b" / "run")
    with RunLock(first.root).acquire("train"):
        assert claim_exchange(shared, first) is False
        assert claim_exchange(shared, first) is False  # its own again: nothing to say
        with pytest.raises(UsageError, match=f"see.dir {shared} is in use by the live run {first.root}"):
            claim_exchange(shared, second)
        assert exchange_owner(shared)["run_id"] == run_id(first)
        ExperienceExchange(shared, run_id(first), "p")
        with pytest.raises(UsageError, match="belongs to run .* two runs cannot share one see.dir"):
            ExperienceExchange(shared, run_id(second), "p")
    assert claim_exchange(shared, second) is True  # the first run stopped: its lock is gone
    with pytest.raises(UsageError, match=f"belongs to run {second.root}"):
        ExperienceExchange(shared, run_id(first), "p")  # the stopped run's workers never write there again
    ExperienceExchange(shared, run_id(second), "p")


def test_the_launcher_refuses_a_live_runs_exchange_before_touching_anything(tmp_path: Path) -> None:
    shared = tmp_path / "S"
    first, second = new_run(tmp_path / "a" / "run"), RunPaths(tmp_path / "b" / "run")
    config = load_run_config("tiny", overrides=[f"see.dir={shared}"]).config
    with RunLock(first.root).acquire("train"):
        claim_exchange(shared, first)
        with pytest.raises(UsageError, match="in use by the live run"):
            prepare_launch(second, config, "tiny", resume=False, allowed=[], console=Console(quiet=True))
    assert not second.root.exists() and sorted(p.name for p in shared.iterdir()) == [".mutualrl-see-owner"]


def test_an_unbound_exchange_opens_for_any_run(tmp_path: Path) -> None:
    """A folder made by hand or by an older version, and the library used directly (docs/see.md), stay as they were."""
    ExperienceExchange(tmp_path / "S", "one", "p")
    ExperienceExchange(tmp_path / "S", "two", "p")
    assert exchange_owner(tmp_path / "S") is None
