"""The suite's guard on its own launches (issue 70): every policy worker a test starts appends its pid to the file
``worker.START_LOG_ENV`` names (set by ``tests/conftest.py``), and a session that started more than
``POLICY_PROCESS_BUDGET`` fails."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from conftest import (POLICY_PROCESS_BUDGET, POLICY_START_KEY, count_policy_starts, policy_budget_line, policy_starts,
                      pytest_sessionfinish)
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


@pytest.mark.parametrize("starts, failed", [(POLICY_PROCESS_BUDGET, False), (POLICY_PROCESS_BUDGET + 1, True)])
def test_a_session_over_the_budget_fails_even_when_every_test_passed(tmp_path, starts, failed):
    log = tmp_path / "starts.log"
    log.write_text("".join(f"{pid}\n" for pid in range(starts)))
    config = SimpleNamespace(stash=pytest.Stash())
    config.stash[POLICY_START_KEY] = (log, time.monotonic())
    session = SimpleNamespace(config=config, exitstatus=pytest.ExitCode.OK)
    pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert session.exitstatus == (pytest.ExitCode.TESTS_FAILED if failed else pytest.ExitCode.OK)
