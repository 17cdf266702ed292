"""A child that must not outlive the process that started it: a sweep's ``train`` runs.

``kill -9`` of a sweep gives it no chance to stop its runs, and a run left behind trains on, holding its folder's
lock and the machine. On Linux the kernel sends a child a chosen signal when its parent dies
(``prctl(PR_SET_PDEATHSIG)``); SIGTERM is the run's own stop (it stops its workers and records itself as
interrupted, resumable), as a sweep's Ctrl-C sends it. Elsewhere nothing is set (the sweep's own stop path still
applies).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``signum`` when the process starting it dies (also
    when it died before the setting took hold); None where the platform has no such setting."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def in_the_child() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return  # best effort: the sweep's own stop path still applies
        if os.getppid() != parent:  # the parent died between our start and prctl: nobody will send the signal
            os.kill(os.getpid(), signum)

    return in_the_child
