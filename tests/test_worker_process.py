"""The one place the launcher starts a worker's process (launch/supervise/worker_process.py): ``subprocess.Popen``
in a session of its own, its output into the policy's log, no stdin, exactly the environment and folder it is
given; the runner looks it up at each start (the one seam a test may replace), and nothing else in the product
starts workers another way."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mutualrl.launch.supervise import runner, worker_process

SRC = Path(__file__).resolve().parents[1] / "src" / "mutualrl"

pytestmark = pytest.mark.user_start  # the product's own start, whatever the session plugged in

REPORT = ("import json, os, sys; print(json.dumps({'pid': os.getpid(), 'sid': os.getsid(0), 'cwd': os.getcwd(), "
          "'stdin': sys.stdin.read(), 'env': os.environ.get('ONLY')}), flush=True); print('to stderr', file=sys.stderr); "
          "sys.exit(3)")


def test_a_worker_is_popen_in_its_own_session_with_its_log_and_nothing_on_stdin(tmp_path):
    log = tmp_path / "policy.log"
    with log.open("ab") as fh:
        process = worker_process.start_worker_process([sys.executable, "-c", REPORT], {"ONLY": "this"}, tmp_path, fh)
    assert isinstance(process, subprocess.Popen) and process.wait(timeout=60) == 3 and process.poll() == 3
    first, second = log.read_text().splitlines()
    seen = json.loads(first)
    assert seen == {"pid": process.pid, "sid": process.pid, "cwd": str(tmp_path), "stdin": "", "env": "this"}
    assert second == "to stderr"


def test_a_signal_s_end_is_negative_as_popen_reports_it(tmp_path):
    with (tmp_path / "log").open("ab") as fh:
        process = worker_process.start_worker_process([sys.executable, "-c", "import time; time.sleep(60)"],
                                                      dict(os.environ), None, fh)
    os.killpg(process.pid, signal.SIGTERM)  # as the runner stops a policy: its whole group
    assert process.wait(timeout=30) == -signal.SIGTERM


def test_the_runner_starts_each_worker_through_the_seam(tmp_path, monkeypatch):
    """A function put in the module's place is the one the runner calls, at each start (a restart included)."""
    calls = []

    def start(argv, env, cwd, log):
        calls.append((argv, env["X"], log.name))
        return subprocess.Popen(["true"])

    monkeypatch.setattr(worker_process, "start_worker_process", start)
    proc = runner.PolicyProcess(name="a", argv=["/bin/a"], env={"X": "1"}, log_path=tmp_path / "logs" / "a.log")
    pool = runner.PoolRunner([proc], runner.RunPaths(tmp_path),
                             runner.PoolSettings(see_root=tmp_path / "see", stall_timeout_s=60.0))
    pool._spawn(proc)
    pool._spawn(proc)
    assert [call[:2] for call in calls] == [(["/bin/a"], "1")] * 2 and proc.popen.wait(timeout=30) == 0


def test_the_product_holds_no_other_way_to_start_a_worker():
    """The suite's fork server lives in tests/fork_server/; no module of the product mentions forking one."""
    found = [f"{path.relative_to(SRC)}:{number}" for path in sorted(SRC.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if re.search("fork", line, re.I)]
    assert found == []
