"""``kill -9`` of a sweep stops its ``train`` run (issue 68: the run trained on): the run gets SIGTERM, its own stop
(resumable), from the kernel when the sweep dies. A stand-in sweep starts a stand-in run through the sweep's own
``start_point``; nothing trains."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)

STAND_IN_RUN = '''
import os, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def stopped(signum, frame):
    (out / "stopped.tmp").write_text(signal.Signals(signum).name)
    os.replace(out / "stopped.tmp", out / "stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, stopped)
(out / "run.pid.tmp").write_text(str(os.getpid()))
os.replace(out / "run.pid.tmp", out / "run.pid")  # whole: the test once read the file between creation and write
time.sleep(60)
'''

STAND_IN_SWEEP = '''
import sys, time
from pathlib import Path
from rich.console import Console
from mutualrl.launch.sweep import grid
out = Path(sys.argv[1])
grid.train_command = lambda spec, point, resume: [sys.executable, str(out / "run.py"), str(out)]
spec = grid.SweepSpec(folder=out / "SW", regimes=["standalone"], seeds=[1], grid=[], pool="tiny", max_steps=1)
grid.start_point(spec, spec.points()[0], False, 1, Console(file=open("/dev/null", "w")))
time.sleep(60)
'''


def wait_for(check, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_kill_9_of_a_sweep_sends_its_run_the_runs_own_stop(tmp_path: Path) -> None:
    (tmp_path / "run.py").write_text(STAND_IN_RUN)
    (tmp_path / "sweep.py").write_text(STAND_IN_SWEEP)
    the_sweep = subprocess.Popen([sys.executable, str(tmp_path / "sweep.py"), str(tmp_path)])
    try:
        assert wait_for(lambda: (tmp_path / "run.pid").exists()), "the stand-in run never started"
        run_pid = int((tmp_path / "run.pid").read_text())
        the_sweep.send_signal(signal.SIGKILL)
        the_sweep.wait(10)
        assert wait_for(lambda: (tmp_path / "stopped").exists()), "the run trained on after its sweep died"
        assert (tmp_path / "stopped").read_text() == "SIGTERM"
        assert wait_for(lambda: not alive(run_pid))
    finally:
        the_sweep.kill()
        if (tmp_path / "run.pid").exists() and alive(pid := int((tmp_path / "run.pid").read_text())):
            os.kill(pid, signal.SIGKILL)
