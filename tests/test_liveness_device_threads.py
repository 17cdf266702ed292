"""Liveness on CUDA: a backward runs on torch's autograd device thread (``pt_autograd_<device>``) while the training
thread waits in one call, stack still and CPU idle. Faked on the CPU: a thread named as torch names it runs the
backward while the main thread waits, longer than the peer's barrier timeout."""

from __future__ import annotations

import pytest

import threading
import time
from pathlib import Path

import torch
from see_synthetic import synthetic_batch

from mutualrl.see.errors import PeerTimeoutError
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.liveness import DEVICE_THREAD_PREFIX, device_threads_cpu, start_heartbeat_thread


def device_thread(seconds: float) -> threading.Thread:
    """A thread named as torch names autograd's device threads, running backwards for ``seconds``, started."""
    def run() -> None:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(f"{DEVICE_THREAD_PREFIX}0")
        end = time.monotonic() + seconds
        weight = torch.randn(256, 256, requires_grad=True)  # [256, 256]
        while time.monotonic() < end:
            (torch.randn(64, 256) @ weight).tanh().sum().backward()  # [64, 256] -> []
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def backward_on_a_device_thread(seconds: float) -> None:
    """The calling thread waits (as in ``Engine::execute``) while the device thread runs the backward."""
    device_thread(seconds).join()


def test_device_threads_are_found_by_torchs_name():
    """A fixed amount of work on a thread named as torch names it counts as its CPU time, read while the thread is
    still alive (a thread gone has no /proc entry). CPU time, not a wall-clock window: load slows the work but
    does not shrink what it costs."""
    worked, release = threading.Event(), threading.Event()

    def run() -> None:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(f"{DEVICE_THREAD_PREFIX}0")
        weight = torch.randn(64, 64, requires_grad=True)  # [64, 64]
        (torch.randn(8, 64) @ weight).tanh().sum().backward()  # [8, 64] -> []
        total = 0
        for i in range(3_000_000):  # about 0.2 s of this thread's own CPU at any load (no other thread helps)
            total += i & 7
        worked.set()
        release.wait(60)

    before = device_threads_cpu()
    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert worked.wait(120)
        after = device_threads_cpu()
    finally:
        release.set()
        thread.join()
    assert before is not None and after is not None and after >= before + 0.05


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_peer_waits_for_a_backward_that_outlasts_its_barrier_timeout(tmp_path):
    """Failed before: only the training thread's stack and CPU counted, so the peer timed out after 2 s."""
    root = tmp_path / "see"
    peer = ExperienceExchange(root, "run", "a", policies=["a", "b"], barrier_timeout_s=2.0, poll_interval_s=0.01)
    learner = ExperienceExchange(root, "run", "b", policies=["a", "b"])
    peer.publish(0, synthetic_batch(2, 2, seed=1))
    stop, outcome = threading.Event(), {}

    def wait() -> None:
        try:
            outcome["found"] = peer.wait_for(0)
        except PeerTimeoutError as err:
            outcome["error"] = err
    start_heartbeat_thread(learner, interval_s=0.1, stop=stop)  # watches this (the main) thread
    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        backward_on_a_device_thread(3.5)
        learner.publish(0, synthetic_batch(2, 2, seed=2))
        waiter.join(timeout=30)
    finally:
        stop.set()
    assert "error" not in outcome, outcome.get("error")
    assert set(outcome["found"]) == {"a", "b"} and learner.work >= 5
