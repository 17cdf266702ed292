"""The launcher's view of which policy got on when (launch/supervise/progress.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

from mutualrl.launch.supervise.progress import PoolProgress


def test_policies_seen_at_one_look_are_equally_still_at_one_instant(tmp_path: Path) -> None:
    """Compared at one ``now``, two policies whose status changed at the same look tie; measured each at its own
    call (a clock that moves between calls), the one looked at last seemed the stiller and was named stalled."""
    ticks = itertools.count()
    progress = PoolProgress(tmp_path / "see", clock=lambda: float(next(ticks)))
    progress.look({"a": {"step": 1, "phase": "training"}, "b": {"step": 1, "phase": "waiting for peers"}})
    now = progress.clock()
    assert progress.still_for("a", now) == progress.still_for("b", now)
    assert max(["a", "b"], key=lambda name: progress.still_for(name, now)) == "a"
    assert progress.still_for("b") > progress.still_for("a", now)  # each at its own call: b seems stiller


def test_a_finished_peer_restarts_the_others_stall_clocks(tmp_path: Path) -> None:
    clock = iter([0.0, 0.0, 10.0, 10.0])
    progress = PoolProgress(tmp_path / "see", clock=lambda: next(clock))
    progress.look({"b": {"step": 1}})  # heartbeats looked at, then b seen at 0
    progress.finished(["b"])  # its peer finished at 10
    assert progress.still_for("b") == 0.0
