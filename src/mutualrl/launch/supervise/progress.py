"""When the launcher last saw each policy of the pool get on, here or on another machine, and hear from it.

A policy gets on when its status file shows a new step or phase (a long validation moves the phase at every
batch) or its SEE heartbeat shows work (a step longer than any timeout: :func:`mutualrl.see.liveness.start_heartbeat_thread`
counts the training thread's moves). Lock-step policies wait for each other, so the pool is stalled only when none
of its policies, on any machine, got on for ``launch.stall_timeout_s``. Everything is timed on the launcher's own
monotonic clock from changes it saw: no file time written by another process or machine is compared with it, and
a wall-clock jump fires nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mutualrl.see.liveness import HeartbeatWatch


class PoolProgress:
    """Per policy: when it was last seen getting on (status or heartbeat work) and last seen beating."""

    def __init__(self, see_root: Path, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.heartbeats = HeartbeatWatch(see_root, clock)
        self._status: dict[str, tuple[Any, Any]] = {}
        self._moved_at: dict[str, float] = {}

    def started(self, policy: str) -> None:
        """``policy``'s process (re)started now: it has until the stall limit, and its predecessor's heartbeat is
        not its own."""
        self._moved_at[policy] = self.clock()
        self.heartbeats.forget(policy)

    def finished(self, others: Iterable[str]) -> None:
        """A policy finished its run now: that is the pool getting on, so ``others``' stall clocks start again (a
        peer still validating or saving after it is judged from here, not from its own last step)."""
        now = self.clock()
        for policy in others:
            self._moved_at[policy] = now

    def look(self, statuses: dict[str, dict[str, Any]]) -> None:
        """Read the heartbeats once, and note every policy of ``statuses`` whose step or phase changed."""
        self.heartbeats.look()
        now = self.clock()
        for policy, status in statuses.items():
            mark = (int(status.get("step", 0) or 0), status.get("phase"))
            if self._status.get(policy) != mark:
                self._status[policy] = mark
                self._moved_at[policy] = now

    def still_for(self, policy: str, now: float | None = None) -> float:
        """Seconds since ``policy`` was last seen getting on (since the first look when never), at ``now`` (default:
        the clock now; give one ``now`` to compare policies, else the later call looks stiller by its own delay)."""
        now = self.clock() if now is None else now
        idle = self.heartbeats.idle_for([policy])
        moved = max(self._moved_at.get(policy, now), now - idle if idle is not None else -float("inf"))
        return now - moved

    def pool_still_for(self, policies: Iterable[str]) -> float:
        """Seconds since any of ``policies`` was last seen getting on."""
        return min((self.still_for(p) for p in policies), default=0.0)

    def silent_for(self, policy: str) -> float | None:
        """Seconds since a heartbeat of ``policy``'s current process was last seen (None: none yet)."""
        return self.heartbeats.silent_for(policy)
