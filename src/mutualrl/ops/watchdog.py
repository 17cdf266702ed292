"""A policy worker stops when its launcher dies (no orphan keeps training and writing).

The launcher (``mutualrl train``) puts its pid into :data:`LAUNCHER_PID_ENV`. Each worker
process (every rank, also under ``accelerate launch``) runs :func:`start_launcher_watchdog`:
a daemon thread that checks once a second whether that pid is still alive and, when it is
not, stops the worker's whole process group -- SIGTERM, then SIGKILL after a grace period.
A thread that polls works the same on Linux and macOS (a parent-death signal is Linux-only
and covers only direct children, not the ranks ``accelerate launch`` starts).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

LAUNCHER_PID_ENV = "MUTUALRL_LAUNCHER_PID"
REJOIN_ENV = "MUTUALRL_REJOIN"
"""Set (to the restart count) by the launcher when it starts a policy again into its running pool
(``see.max_restarts``): the worker clears its failure marker and keeps the shards it already published."""


def launcher_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else (pid reused): treat as gone only if reparented
        return os.getppid() != 1
    return True


def start_launcher_watchdog(poll_s: float = 1.0, grace_s: float = 10.0) -> threading.Thread | None:
    """Watch the launcher named in the environment; None when there is none (a worker started by hand)."""
    text = os.environ.get(LAUNCHER_PID_ENV, "")
    if not text.isdigit():
        return None
    pid = int(text)

    def watch() -> None:
        while launcher_alive(pid):
            time.sleep(poll_s)
        print(f"mutualrl worker {os.getpid()}: launcher {pid} is gone; stopping", file=sys.stderr, flush=True)
        stop_own_group(grace_s)

    thread = threading.Thread(target=watch, name="mutualrl-launcher-watchdog", daemon=True)
    thread.start()
    return thread


def stop_own_group(grace_s: float) -> None:
    """SIGTERM this process group (every rank of the policy), then SIGKILL whatever is left."""
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        pass
    time.sleep(grace_s)
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os._exit(1)
