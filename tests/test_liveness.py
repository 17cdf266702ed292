"""Liveness: heartbeats beat through long steps; a stopped (alive, not progressing) policy stops the pool by name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.liveness import HeartbeatWatch, start_heartbeat_thread


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


@pytest.mark.slow
def test_a_stopped_policy_stops_the_pool_naming_it_long_before_the_barrier_timeout(random_lm_pair, tmp_path):
    from e2e_helpers import child_env, train_command, write_recipe

    recipe = write_recipe(tmp_path / "r.yaml", random_lm_pair, regime="sgt", steps=200,
                          extra={"see.barrier_timeout_s": 600, "see.peer_timeout_s": 8, "validation.at_start": False})
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(train_command(recipe, run_dir), env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    status = run_dir / "status" / "sp.json"
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads(status.read_text()).get("step", 0) >= 2:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    pid = json.loads(status.read_text())["pid"]
    os.kill(pid, signal.SIGSTOP)  # alive, holding its place, doing nothing
    stopped = time.time()
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode != 0
    assert time.time() - stopped < 60, "must not wait for the 600 s barrier timeout"
    assert "policy sp failed" in out and "no heartbeat" in out and "peer_timeout_s" in out, out[-2000:]
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
