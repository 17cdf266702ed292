"""The suite's guard on its own launches (issue 70): every policy worker a test starts appends its pid to the file
``worker.START_LOG_ENV`` names (set by ``tests/conftest.py``), and a session that started more than
``POLICY_PROCESS_BUDGET`` fails; every launch of workers appends a line to the file
``machine_workers.LAUNCH_LOG_ENV`` names, and a session over ``LAUNCH_BUDGET`` launches fails too (issue 96)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from conftest import (LAUNCH_BUDGET, POLICY_PROCESS_BUDGET, POLICY_START_KEY, count_launches, count_policy_starts,
                      launch_budget_line, launch_log, policy_budget_line, policy_starts, pytest_sessionfinish)
from mutualrl.launch.supervise import machine_workers
from mutualrl.launch.supervise.machine_workers import LAUNCH_LOG_ENV
from mutualrl.training.worker import START_LOG_ENV


def test_this_session_logs_the_starts_of_the_workers_its_tests_start(tmp_path, monkeypatch):
    assert os.environ[START_LOG_ENV]  # what every process a test starts inherits
    log = tmp_path / "starts.log"
    monkeypatch.setenv(START_LOG_ENV, str(log))
    # A worker of a run folder that does not exist: it fails at once, after logging its start.
    worker = subprocess.run([sys.executable, "-m", "mutualrl.training.worker", "--run-dir", str(tmp_path / "nosuch"),
                             "--policy", "a"], capture_output=True, text=True, timeout=120)
    assert worker.returncode != 0
    assert count_policy_starts(log) == 1
    subprocess.run([sys.executable, "-m", "mutualrl", "--help"], capture_output=True, check=True, timeout=120)
    assert count_policy_starts(log) == 1  # a CLI command is not a policy process


def test_the_summary_line_names_the_count_the_budget_and_the_wall_time():
    line, over = policy_budget_line(12, 150, 754.5, 9)
    assert (line, over) == ("policy processes: 12, 9 forked from a zygote (budget 150); wall time 12:34.5", False)
    line, over = policy_budget_line(151, 150, 60.0)
    assert over and line.startswith("policy processes: 151, 0 forked from a zygote (budget 150); wall time 1:00.0 -- "
                                    "OVER BUDGET by 1")


def test_a_worker_is_one_start_and_forked_where_its_forked_child_said_so(tmp_path):
    """A forked child writes ``PID forked`` before the worker's own ``PID`` (``zygotes.child.note_forked``); one
    that restarted as a fresh interpreter (13) and a worker the product started (12) write ``PID`` alone."""
    log = tmp_path / "starts.log"
    log.write_text("11 forked\n11\n12\n13\n14 forked\n")
    assert policy_starts(log) == {"11": True, "12": False, "13": False, "14": True}
    assert count_policy_starts(log) == 4 and count_policy_starts(tmp_path / "none.log") == 0


@pytest.mark.parametrize("starts, launches, failed", [
    (POLICY_PROCESS_BUDGET, LAUNCH_BUDGET, False), (POLICY_PROCESS_BUDGET + 1, 0, True), (0, LAUNCH_BUDGET + 1, True)])
def test_a_session_over_a_budget_fails_even_when_every_test_passed(tmp_path, starts, launches, failed):
    log = tmp_path / "starts.log"
    log.write_text("".join(f"{pid}\n" for pid in range(starts)))
    launch_log(log).write_text("".join(f'{pid} "run-{pid}"\n' for pid in range(launches)))
    config = SimpleNamespace(stash=pytest.Stash())
    config.stash[POLICY_START_KEY] = (log, time.monotonic())
    session = SimpleNamespace(config=config, exitstatus=pytest.ExitCode.OK)
    pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert session.exitstatus == (pytest.ExitCode.TESTS_FAILED if failed else pytest.ExitCode.OK)


def test_a_machines_launch_of_its_workers_is_one_line_in_the_launch_log(tmp_path, monkeypatch):
    """``run_machine_workers`` (machine 0's launch and each other machine's) notes its launch before any worker starts;
    a run folder whose name holds a newline is still one line."""
    assert os.environ[LAUNCH_LOG_ENV]  # what every process a test starts inherits
    log = tmp_path / "launches.log"
    monkeypatch.setenv(LAUNCH_LOG_ENV, str(log))

    class NoWorkers:
        def __init__(self, processes, *args, **kwargs):
            assert count_launches(log) == 1 and processes == []  # noted before the runner starts anything

        def run(self):
            return SimpleNamespace(ok=True)

    monkeypatch.setattr(machine_workers, "PoolRunner", NoWorkers)
    monkeypatch.setattr(machine_workers, "watch_settings", lambda *args, **kwargs: None)
    from mutualrl.run_folder import RunPaths

    lock = SimpleNamespace(forget_workers=lambda: None)
    outcome = machine_workers.run_machine_workers(None, SimpleNamespace(specs=[]), RunPaths(tmp_path / "run\nfolder"),
                                                  None, lock, console=None)
    assert outcome.ok and count_launches(log) == 1
    machine_workers.note_launch(tmp_path / "again")
    assert count_launches(log) == 2 and count_launches(tmp_path / "none.log") == 0


def test_the_launch_line_names_the_count_and_the_budget():
    assert launch_budget_line(12, 90) == ("launches: 12 (budget 90)", False)
    line, over = launch_budget_line(91, 90)
    assert over and line.startswith("launches: 91 (budget 90) -- OVER BUDGET by 1")
