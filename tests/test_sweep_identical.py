"""Two identical sweeps started together: the second finds the run it was about to train taken by the first (the
first's launch took the run folder's lock after the second had looked) and says the run is live, left to that
launch, never "did not finish ... the same command resumes them". In process: the second sweep's launch is a process
that exits as ``train`` does on a live run's lock, while this process (the first sweep) holds that lock."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import mutualrl.launch.sweep.grid as grid
from mutualrl.launch.rundir.lock import RunLock
from test_sweep_live import invoke, user_folder  # noqa: F401 - the fixture
from user_folders import USER_TASK

ARGS = ["sweep", "--regimes", "standalone", "--seeds", "1", "--max-steps", "2", "-o", "sw",
        *[x for s in USER_TASK for x in ("--set", s)]]


def test_the_second_of_two_identical_sweeps_says_the_first_has_the_run(user_folder: Path,  # noqa: F811
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    locks: list[RunLock] = []

    def start_taken(spec, point, resume, jobs, console):
        locks.append(RunLock(spec.folder / point.name).acquire("train into"))  # the first sweep's launch, now
        refused = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])  # train: "the run is live"
        return grid.Started(point, refused, time.perf_counter(), None)

    monkeypatch.setattr(grid, "start_point", start_taken)
    try:
        code, out = invoke(ARGS)
    finally:
        for lock in locks:
            lock.release()
    flat = " ".join(out.split())
    assert locks and code == 1, out
    assert "sweep run standalone-seed1: live (its folder is held by pid" in flat, out
    assert "did not finish" not in flat and "1 live, left to the launch that has it (standalone-seed1)" in flat


def test_a_run_that_fails_on_its_own_is_still_a_failure(user_folder: Path,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def start_failing(spec, point, resume, jobs, console):
        return grid.Started(point, subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"]),
                            time.perf_counter(), None)

    monkeypatch.setattr(grid, "start_point", start_failing)
    code, out = invoke(ARGS)
    assert code == 1 and "1 run(s) did not finish: standalone-seed1" in " ".join(out.split()), out
