"""How the launcher starts one policy worker's process: the one function that does it.

:func:`start_worker_process` is ``subprocess.Popen`` with the settings every worker gets (its own session, so a
stop reaches the whole group; its output into the policy's log; no stdin). The runner calls it by its module
attribute, each time it starts or restarts a worker, so a test can put another function in its place in the
launcher's own process (the test suite's faster start of its many short CPU runs lives in ``tests/``); the product
reads no setting, file or socket that would choose another way.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Protocol


class WorkerProcess(Protocol):
    """What the runner uses of a started worker: ``subprocess.Popen``'s ``pid``, ``returncode``, ``poll`` and
    ``wait`` (a negative code for a signal)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def start_worker_process(argv: list[str], env: Mapping[str, str], cwd: Path | None, log: IO[bytes]) -> WorkerProcess:
    """Start ``argv`` with exactly ``env`` in ``cwd`` (None: the launcher's), in a new session, stdout and stderr
    into ``log`` (the caller closes its copy), stdin from ``/dev/null``."""
    return subprocess.Popen(argv, env=dict(env), cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def process_groups(pid: int) -> set[int]:
    """The process groups of ``pid`` and of every process it started: torchrun's agent starts each rank in a session
    of its own (``torch/distributed/elastic/multiprocessing/subprocess_handler``), so a ``killpg`` of the agent's group
    alone leaves its ranks running."""
    import psutil

    groups = {pid}
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return groups
    for child in children:
        try:
            groups.add(os.getpgid(child.pid))
        except ProcessLookupError:
            continue
    return groups - {os.getpgrp()}  # never the launcher's own
