"""``--resume`` of a run with no checkpoint yet starts it again from step 0 and forgets its exchange; a ``see.dir``
outside the run folder is any folder its config names (a shared one, a tampered run folder's choice: a home), so
only what an exchange writes there goes, never the rest of the folder."""

from __future__ import annotations

from pathlib import Path

from mutualrl.launch.rundir.resume import clear_training_outputs
from mutualrl.run_folder import RunPaths


def test_forgetting_an_outside_exchange_removes_only_what_an_exchange_writes(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run")
    (paths.root / "policies" / "a").mkdir(parents=True)
    shared = tmp_path / "home"
    for folder in ("step-000001/a", "_failed", "_heartbeat", "_consumed", "notes", "work/step-000002"):
        (shared / folder).mkdir(parents=True)
    (shared / "thesis.tex").write_text("years of work")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "kept.txt").write_text("x")
    (shared / "step-000003").symlink_to(outside, target_is_directory=True)  # a link is removed, never followed
    clear_training_outputs(paths, shared)
    assert sorted(p.name for p in shared.iterdir()) == ["notes", "thesis.tex", "work"]
    assert (shared / "work" / "step-000002").is_dir() and (outside / "kept.txt").read_text() == "x"
    assert not (paths.root / "policies").exists()


def test_the_run_folders_own_exchange_is_removed_whole(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run")
    (paths.root / "see" / "step-000001").mkdir(parents=True)
    (paths.root / "see" / "anything").write_text("x")
    clear_training_outputs(paths, paths.root / "see")
    assert not (paths.root / "see").exists()
