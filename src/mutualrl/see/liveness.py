"""Liveness of a policy process: a heartbeat that keeps beating through long steps, and its age.

The SEE heartbeat (``see/_heartbeat/<policy>.rank-<rank>.json``) is touched at step boundaries and
while waiting at a barrier; a paper-scale step (generation of 1024 x 5 long rollouts) can
take many minutes without either. :func:`start_heartbeat_thread` touches it every few
seconds from a daemon thread for as long as the process runs, so a silent heartbeat means
the process is stopped, frozen or gone -- not busy. The launcher reads the ages with
:func:`freshest_heartbeat_age` and stops the pool, naming the policy, after
``see.peer_timeout_s`` (far shorter than the barrier timeout, which stays as a backstop
when no launcher watches).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from mutualrl.see.exchange import heartbeat_ages

HEARTBEAT_INTERVAL_S = 5.0


def start_heartbeat_thread(exchange: Any, interval_s: float = HEARTBEAT_INTERVAL_S) -> threading.Thread:
    """Touch ``exchange``'s heartbeat every ``interval_s`` seconds in a daemon thread."""

    def beat() -> None:
        while True:
            try:
                exchange.heartbeat()
            except OSError:  # a full or vanished disk must not kill training; the barrier reports it
                pass
            time.sleep(interval_s)

    thread = threading.Thread(target=beat, name="mutualrl-see-heartbeat", daemon=True)
    thread.start()
    return thread


def freshest_heartbeat_age(root: Path, policy: str, since: float = 0.0, now: float | None = None) -> float | None:
    """Seconds since ``policy``'s most recent heartbeat (any rank) written after ``since``; None if none."""
    now = time.time() if now is None else now
    ages = [age for age, _ in heartbeat_ages(root, policy, now=now).values() if now - age >= since]
    return min(ages) if ages else None
