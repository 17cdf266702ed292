"""A reward function that never returns while it keeps the CPU busy (an endless loop, a regex that backtracks
forever) is a hang, not a slow step: its peers' barrier times out and the launcher's stall clock runs, as for a
reward function stuck waiting. The heartbeat thread counts the training thread's moves and CPU time as work (a
step longer than see.barrier_timeout_s keeps its peers waiting), so time inside a reward function must not count."""

from __future__ import annotations

import pytest

import threading
import time

from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.liveness import start_heartbeat_thread
from mutualrl.tasks.reward_form import DatasetFormReward
from see_synthetic import synthetic_batch
from test_slow_peer import assert_barrier_times_out, waiting_policy

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)


def test_a_peer_spinning_inside_a_reward_function_times_the_barrier_out(tmp_path):
    """Failed before: the spinning reward function's CPU time was counted as work, so ``a`` waited for as long as
    it spun (here 20 s, until the test stops it), and with a real endless loop forever."""
    a = waiting_policy(tmp_path, 1.5)
    b = ExperienceExchange(tmp_path / "see", "run", "b", policies=["a", "b"])
    stop = threading.Event()

    def spins(completions, **kwargs):  # never returns on its own
        total = 0
        while not stop.is_set():
            total += sum(i * i for i in range(2000)) % 7
        return [0.0] * len(completions)

    reward = DatasetFormReward(spins, {}, False, tmp_path / "reward-call")
    training = threading.Thread(target=reward, args=(["p"], ["c"]), daemon=True)
    training.start()
    threading.Timer(20.0, stop.set).start()  # before the fix: the wait ends only once the spinning stops
    start_heartbeat_thread(b, interval_s=0.1, worker=training, stop=stop)
    try:
        assert_barrier_times_out(a)
    finally:
        stop.set()
        training.join(timeout=30)
    assert (tmp_path / "reward-call").exists() is False  # the call ended: the marker is gone


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_peer_computing_outside_reward_functions_is_still_waited_for(tmp_path):
    """The other side: the same CPU work outside a reward function keeps the barrier waiting past its timeout. The
    timeout is 2 s, as in test_slow_peer.py: at 1 s a loaded CI box once left the computing thread unseen for a
    whole timeout (2026-11-29)."""
    a = waiting_policy(tmp_path, 2.0)
    b = ExperienceExchange(tmp_path / "see", "run", "b", policies=["a", "b"])

    def trains() -> None:  # one step of 3.5 s, then its records
        end, total = time.monotonic() + 3.5, 0
        while time.monotonic() < end:
            total += sum(i * i for i in range(2000)) % 7
        b.publish(0, synthetic_batch(2, 2, seed=2))

    training = threading.Thread(target=trains, daemon=True)
    training.start()
    beating = threading.Event()
    start_heartbeat_thread(b, interval_s=0.1, worker=training, stop=beating)
    started = time.monotonic()
    try:
        shards = a.wait_for(0)
    finally:
        beating.set()
        training.join(timeout=30)
    assert set(shards) == {"a", "b"} and time.monotonic() - started > 2.0
