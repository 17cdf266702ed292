"""A slow but healthy peer: its step outlasts ``see.barrier_timeout_s`` and the launcher's stall limit while its
training thread keeps moving; the pool waits for it. A peer that beats but whose training thread is stuck in one
call still times the barrier out and stalls the pool."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rich.console import Console

from pool_fakes import FINISH, sleeper

from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
from mutualrl.run_folder import RunPaths
from mutualrl.see.errors import PeerTimeoutError
from mutualrl.see.exchange import ExperienceExchange
from see_synthetic import synthetic_batch

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)

PEER = FINISH + textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from mutualrl.see.exchange import ExperienceExchange
    from mutualrl.see.liveness import start_heartbeat_thread
    from see_synthetic import synthetic_batch
    root, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    b = ExperienceExchange(root, "run", "b", policies=["a", "b"])
    start_heartbeat_thread(b, interval_s=0.1)
    end = time.monotonic() + seconds
    if mode == "train":  # one long step: the training thread computes all along
        total = 0
        while time.monotonic() < end:
            total += sum(i * i for i in range(2000)) % 7
    else:  # "stuck": alive, its heartbeat thread beats, its training thread waits in one call
        time.sleep(seconds)
    b.publish(0, synthetic_batch(2, 2, seed=2))
    finish(Path(root).parent, "b")
''')


def waiting_policy(tmp_path: Path, barrier_timeout_s: float) -> ExperienceExchange:
    """Policy ``a`` of the pair ``a``, ``b`` in ``tmp_path/see``, its step 0 published: the one at the barrier."""
    a = ExperienceExchange(tmp_path / "see", "run", "a", policies=["a", "b"], barrier_timeout_s=barrier_timeout_s,
                           poll_interval_s=0.01)
    a.publish(0, synthetic_batch(2, 2, seed=1))
    return a


def assert_barrier_times_out(a: ExperienceExchange) -> None:
    """``a``'s barrier at step 0 raises PeerTimeoutError, well before the peer's 20 s or more."""
    started = time.monotonic()
    with pytest.raises(PeerTimeoutError):
        a.wait_for(0)
    assert time.monotonic() - started < 10


PEER_ENV = {"PYTHONPATH": str(Path(__file__).resolve().parent)}  # see_synthetic, in the tests


def _peer_argv(tmp_path: Path, mode: str, seconds: float) -> list[str]:
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    return [sys.executable, str(script), str(tmp_path / "see"), mode, str(seconds)]


def _start_peer(tmp_path: Path, mode: str, seconds: float) -> subprocess.Popen:
    """Peer ``b`` of the exchange in ``tmp_path/see``, started and beating."""
    proc = subprocess.Popen(_peer_argv(tmp_path, mode, seconds), env={**os.environ, **PEER_ENV})
    beat = tmp_path / "see" / "_heartbeat" / "b.rank-0.json"
    deadline = time.monotonic() + 60
    while not beat.exists() and time.monotonic() < deadline:  # its imports can take seconds on a loaded box
        time.sleep(0.02)
    return proc


@pytest.mark.slow
def test_the_barrier_waits_for_a_peer_whose_step_outlasts_the_barrier_timeout(tmp_path):
    """Failed before: only validation progress extended the deadline, so ``a`` raised PeerTimeoutError after 2 s
    while ``b`` was still training its (5 s) step."""
    a = waiting_policy(tmp_path, 2.0)
    peer = _start_peer(tmp_path, "train", 5.0)
    started = time.monotonic()
    shards = a.wait_for(0)
    assert peer.wait(timeout=60) == 0
    assert set(shards) == {"a", "b"} and time.monotonic() - started > 2.0


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_peer_that_beats_but_is_stuck_times_the_barrier_out(tmp_path):
    a = waiting_policy(tmp_path, 1.5)
    peer = _start_peer(tmp_path, "stuck", 30.0)
    try:
        assert_barrier_times_out(a)
    finally:
        peer.kill()
        peer.wait()


def _run_pool(tmp_path: Path, mode: str, seconds: float) -> tuple:
    """``a`` waits at the barrier (no progress of its own) while ``b`` works or is stuck for ``seconds``; the stall
    limit is 2 s. ``a`` leaves first: alone, a waiting policy would be still."""
    procs = [sleeper(tmp_path, "a", seconds - 1.0),
             PolicyProcess("b", _peer_argv(tmp_path, mode, seconds), PEER_ENV, tmp_path / "logs" / "b.log")]
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=2.0, grace_s=5.0, poll_s=0.05, peer_timeout_s=5.0)
    started = time.monotonic()
    outcome = PoolRunner(procs, RunPaths(tmp_path), settings, console=Console(file=io.StringIO())).run()
    return outcome, time.monotonic() - started


@pytest.mark.slow
def test_the_launcher_does_not_stop_a_pool_whose_slow_peer_trains_past_the_stall_limit(tmp_path):
    """Failed before: no status step or phase for 2 s was a stall, though ``b``'s training thread moved."""
    outcome, _ = _run_pool(tmp_path, "train", 5.0)
    assert outcome.ok, outcome.reason
    assert outcome.returncodes == {"a": 0, "b": 0}


@pytest.mark.slow
def test_the_launcher_still_stops_a_pool_whose_peer_beats_but_is_stuck(tmp_path):
    outcome, seconds = _run_pool(tmp_path, "stuck", 60.0)
    assert not outcome.ok and "stalled" in outcome.reason, outcome.reason
    assert seconds < 40
