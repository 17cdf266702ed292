"""The launcher's SIGKILL of a policy reaches its ranks: torchrun's agent starts each rank in a session of its own, so
a ``killpg`` of the agent's group alone left them running until the launcher itself exited (their watchdog)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil

from mutualrl.launch.supervise.runner import PoolRunner

AGENT = """
import subprocess, sys, time
rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print(rank.pid, flush=True)
time.sleep(120)
"""


def test_a_sigkill_of_a_policy_reaches_ranks_in_sessions_of_their_own():
    agent = subprocess.Popen([sys.executable, "-c", AGENT], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    rank = int(agent.stdout.readline())
    assert psutil.Process(rank).ppid() == agent.pid and psutil.Process(rank).pid == __import__("os").getpgid(rank)
    PoolRunner.terminate(SimpleNamespace(), [SimpleNamespace(popen=agent)], signal.SIGKILL)
    agent.wait(timeout=10)
    agent.stdout.close()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(rank) and psutil.Process(rank).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the rank outlived its policy's SIGKILL"
        time.sleep(0.05)
