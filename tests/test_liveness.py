"""Liveness: heartbeats beat through long steps; a stopped (alive, not progressing) policy stops the pool by name."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.liveness import HeartbeatWatch, start_heartbeat_thread

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)


def test_the_heartbeat_thread_beats_and_a_watch_counts_only_changes_after_its_first_look(tmp_path):
    exchange = ExperienceExchange(tmp_path, run_id="r", policy="a", world_size=2, rank=1)
    exchange.heartbeat(step=0)  # a beat from before the watch's first look (a previous launch)
    watch = HeartbeatWatch(tmp_path)
    watch.look()
    assert watch.silent_for("a") is None
    start_heartbeat_thread(exchange, interval_s=0.05)
    time.sleep(0.3)
    watch.look()
    age = watch.silent_for("a")
    assert age is not None and age < 0.5
    assert watch.silent_for("a", ranks=[0]) is None and watch.silent_for("b") is None


BEATING = """
import sys, time
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.liveness import start_heartbeat_thread
start_heartbeat_thread(ExperienceExchange(sys.argv[1], "run", sys.argv[2], policies=["bpe", "sp"]), interval_s=0.2)
time.sleep(300)  # a policy waiting at a barrier whose timeout is far away: only its heartbeat says it lives
"""


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_stopped_policy_stops_the_pool_naming_it_long_before_the_barrier_timeout(tmp_path):
    """The launcher's pool runner over two processes that beat with the workers' heartbeat thread; one is stopped
    (SIGSTOP: alive, holding its place, doing nothing) once it has beaten, and the pool stops naming it within
    ``see.peer_timeout_s``, the stopped process killed. (A stall limit and a barrier timeout of 600 s are far off.)"""
    import io
    import sys
    import threading

    from rich.console import Console

    from mutualrl.launch.rundir.summary import print_failure
    from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
    from mutualrl.run_folder import RunPaths

    script = tmp_path / "beating.py"
    script.write_text(BEATING)
    procs = [PolicyProcess(name, [sys.executable, str(script), str(tmp_path / "see"), name], {},
                           tmp_path / "logs" / f"{name}.log") for name in ("bpe", "sp")]
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=600.0, grace_s=5.0, poll_s=0.05, peer_timeout_s=3.0)
    shown = io.StringIO()
    runner = PoolRunner(procs, RunPaths(tmp_path), settings, console=Console(file=shown, width=200))
    stopped_pid: list[int] = []

    def stop_sp_once_it_beats() -> None:
        deadline = time.time() + 120
        while time.time() < deadline and not (procs[1].popen and list((tmp_path / "see").rglob("sp.rank-0*"))):
            time.sleep(0.05)
        stopped_pid.append(procs[1].popen.pid)
        os.kill(stopped_pid[0], signal.SIGSTOP)

    stopper = threading.Thread(target=stop_sp_once_it_beats, daemon=True)
    started = time.time()
    stopper.start()
    outcome = runner.run()
    stopper.join(timeout=5)
    assert stopped_pid, "sp never beat"
    assert not outcome.ok and outcome.failed_policy == "sp", outcome
    assert time.time() - started < 60, "must not wait for the 600 s stall limit"
    assert "no heartbeat" in outcome.reason and "peer_timeout_s" in outcome.reason, outcome.reason
    print_failure(outcome, RunPaths(tmp_path), Console(file=shown, width=200))  # what `mutualrl train` prints
    assert "policy sp failed" in shown.getvalue() and "peer_timeout_s" in shown.getvalue(), shown.getvalue()[-2000:]
    pid = stopped_pid[0]
    assert not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_the_barrier_waits_while_a_peer_reports_validation_progress(tmp_path):
    """Issue 38: a peer validating a large held-out set for longer than ``barrier_timeout_s`` is waited for as
    long as its heartbeat reports progress; once it stops reporting, the barrier times out as before."""
    import threading

    from mutualrl.see.errors import PeerTimeoutError
    from see_synthetic import synthetic_batch

    # A beat every 0.2 s against a 1.5 s timeout: a margin a loaded box keeps (0.6 s once timed out under load).
    a = ExperienceExchange(tmp_path, "run", "a", policies=["a", "b"], barrier_timeout_s=1.5, poll_interval_s=0.01)
    b = ExperienceExchange(tmp_path, "run", "b", policies=["a", "b"], barrier_timeout_s=1.5, poll_interval_s=0.01)
    a.publish(0, synthetic_batch(2, 2, seed=1))

    def validate_then_publish() -> None:
        for done in range(12):  # 12 x 0.2 s of validation = 2.4 s, beyond the 1.5 s barrier timeout
            b.heartbeat(progress=f"validating {done}/12 (step 0)")
            time.sleep(0.2)
        b.publish(0, synthetic_batch(2, 2, seed=2))

    started = time.monotonic()
    worker = threading.Thread(target=validate_then_publish)
    worker.start()
    shards = a.wait_for(0)
    worker.join()
    assert set(shards) == {"a", "b"} and time.monotonic() - started >= 2.3
    a.publish(1, synthetic_batch(2, 2, seed=3))
    started = time.monotonic()
    with pytest.raises(PeerTimeoutError):  # no progress at step 1: the usual timeout
        a.wait_for(1)
    assert time.monotonic() - started < 2.8  # one timeout (1.5 s) and a margin: stale progress must not extend it


@pytest.mark.parametrize("enabled", [True, False])
def test_the_frames_are_read_with_the_collector_paused_and_its_state_kept(monkeypatch, enabled):
    """CPython 3.11 can freeze in sys._current_frames() when a collection starts inside it (python/cpython#106883)."""
    import gc
    import sys

    from mutualrl.see.liveness import current_frame

    seen = []
    real = sys._current_frames
    monkeypatch.setattr(sys, "_current_frames", lambda: seen.append(gc.isenabled()) or real())
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        assert current_frame(threading.get_ident()) is not None
        assert seen == [False] and gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()
