"""Clocks: a wall-clock jump of an hour, or a machine whose clock is an hour behind, stops no healthy run.

Durations the launcher and the barrier measure themselves are on the monotonic clock; heartbeats written by other
processes are judged by the changes the reader sees, never by comparing their file times with its own clock."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from pool_fakes import FINISH, sleeper

from mutualrl.launch.supervise.nodes import RemoteWatch, join_path, open_session, session_path, write_done
from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
from mutualrl.run_folder import RunPaths
from mutualrl.see.exchange import ExperienceExchange
from see_synthetic import synthetic_batch

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)

HOUR = 3600.0
SKEWED = FINISH + textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path
    beat, seconds, skew_s = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    beat.parent.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # beats, its file times on a clock skew_s off the launcher's
        beat.write_text(json.dumps({"work": time.monotonic()}))
        os.utime(beat, (time.time() + skew_s, time.time() + skew_s))
        time.sleep(0.2)
    finish(beat.parents[2], beat.name.split(".")[0])
''')


VALIDATING_BEHIND = textwrap.dedent('''
    import sys, time
    real = time.time
    time.time = lambda: real() - 3600  # this machine's clock is an hour behind
    from mutualrl.see.exchange import ExperienceExchange
    from see_synthetic import synthetic_batch
    b = ExperienceExchange(sys.argv[1], "run", "b", policies=["a", "b"])
    batch = synthetic_batch(2, 2, seed=2)  # built first: only the validation below is silent on shards
    for done in range(25):  # 5 s of validation against a 3 s barrier timeout
        b.heartbeat(progress=f"validating {done}/25 (step 0)")
        time.sleep(0.2)
    b.publish(0, batch)
''')


def _jump_an_hour_after(monkeypatch, seconds: float) -> None:
    """This process's wall clock jumps an hour ahead ``seconds`` from now (an NTP step, a suspended VM)."""
    real, since = time.time, time.monotonic()
    monkeypatch.setattr(time, "time", lambda: real() + (HOUR if time.monotonic() - since > seconds else 0.0))


def _settings(tmp_path: Path, **kwargs) -> PoolSettings:
    return PoolSettings(tmp_path / "see", grace_s=5.0, poll_s=0.05, **kwargs)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_wall_clock_jump_does_not_stall_the_launchers_pool(tmp_path, monkeypatch):
    """Failed before: the stall clock was the wall clock; the jump made every policy an hour still."""
    _jump_an_hour_after(monkeypatch, 0.5)
    runner = PoolRunner([sleeper(tmp_path, "a", 2.0)], RunPaths(tmp_path), _settings(tmp_path, stall_timeout_s=60.0),
                        console=Console(file=io.StringIO()))
    outcome = runner.run()
    assert outcome.ok, outcome.reason
    assert outcome.seconds < 60


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_wall_clock_jump_does_not_make_a_beating_policy_silent(tmp_path, monkeypatch):
    """Failed before: after the jump the last heartbeat's file time was an hour behind the launcher's clock."""
    script = tmp_path / "skewed.py"
    script.write_text(SKEWED)
    beat = tmp_path / "see" / "_heartbeat" / "a.rank-0.json"
    proc = PolicyProcess("a", [sys.executable, str(script), str(beat), "2.5", "0"], {}, tmp_path / "logs" / "a.log")
    _jump_an_hour_after(monkeypatch, 0.5)
    runner = PoolRunner([proc], RunPaths(tmp_path), _settings(tmp_path, stall_timeout_s=10 * HOUR, peer_timeout_s=5.0),
                        console=Console(file=io.StringIO()))
    outcome = runner.run()
    assert outcome.ok, outcome.reason


@pytest.mark.slow
def test_a_policy_gone_silent_on_a_machine_whose_clock_is_an_hour_ahead_is_seen(tmp_path):
    """Failed before: machine 0 compared machine 1's heartbeat file times with its own clock; an hour ahead, the
    heartbeat never grew old and the silent policy was never seen."""
    session = {"session": "s-1"}
    remote = RemoteWatch(tmp_path, tmp_path / "see", session, 0, {"a": (0,), "b": (1,)}, wait_for=[1],
                         peer_timeout_s=2.0)
    beat = tmp_path / "see" / "_heartbeat" / "b.rank-0.json"
    script = tmp_path / "skewed.py"
    script.write_text(SKEWED)

    def machine_1() -> None:  # b beats for 1 s, then hangs; its launcher reports it finished 12 s later
        subprocess.run([sys.executable, str(script), str(beat), "1.0", str(HOUR)], check=True)
        time.sleep(12.0)
        write_done(tmp_path, 1, session, True, returncodes={"b": 0})

    thread = threading.Thread(target=machine_1, daemon=True)
    thread.start()
    runner = PoolRunner([sleeper(tmp_path, "a", 12.0)], RunPaths(tmp_path), _settings(tmp_path, stall_timeout_s=HOUR),
                        console=Console(file=io.StringIO()), remote=remote)
    outcome = runner.run()
    assert not outcome.ok and outcome.failed_policy == "b" and "no heartbeat" in outcome.reason, outcome


@pytest.mark.slow
def test_the_barrier_waits_for_a_validating_peer_whose_clock_is_an_hour_behind(tmp_path):
    """Failed before: the barrier compared the peer's progress time with its own clock: an hour old, no wait."""
    # 3 s: on a loaded 2-core box the peer's publish after its last beat once took over 1.5 s (a timeout, not the bug)
    a = ExperienceExchange(tmp_path, "run", "a", policies=["a", "b"], barrier_timeout_s=3.0, poll_interval_s=0.01)
    a.publish(0, synthetic_batch(2, 2, seed=1))
    script = tmp_path / "validating.py"
    script.write_text(VALIDATING_BEHIND)
    peer = subprocess.Popen([sys.executable, str(script), str(tmp_path)],
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)})  # see_synthetic
    beat = tmp_path / "_heartbeat" / "b.rank-0.json"
    deadline = time.monotonic() + 60
    while not beat.exists() and time.monotonic() < deadline:  # its imports can take seconds on a loaded box
        time.sleep(0.02)
    shards = a.wait_for(0)
    assert peer.wait(timeout=60) == 0
    assert set(shards) == {"a", "b"}


def test_machine_0_waits_for_a_joiner_through_a_wall_clock_jump(tmp_path, monkeypatch):
    """Failed before: ``launch.join_timeout_s`` was counted on the wall clock, so the jump ended the wait."""
    looks = []

    def sleep(seconds: float) -> None:
        looks.append(seconds)
        if len(looks) == 1:
            _jump_an_hour_after(monkeypatch, 0.0)
        if len(looks) == 3:  # machine 1 announces itself
            join_path(tmp_path, 1).write_text('{"token": "t-1", "host": "m1", "pid": 1, "address": "10.0.0.2"}')

    session = open_session(tmp_path, 2, "10.0.0.1", None, timeout_s=600.0, say=lambda line: None, sleep=sleep)
    assert session["machines"]["1"]["token"] == "t-1"
    assert session_path(tmp_path).exists() and time.time() - time.monotonic() > HOUR / 2  # it did jump


def test_round_times_for_catch_up_follow_the_writers_monotonic_clock():
    """A wall-clock jump between two decisions is not a round an hour long (``see.catch_up`` reads round times)."""
    from mutualrl.see.async_rounds.staleness import round_seconds

    rows = [{"time": 100.0, "clock": 10.0, "wait_s": 0.0}, {"time": 102.0, "clock": 12.0, "wait_s": 0.0},
            {"time": 104.0 + HOUR, "clock": 14.0, "wait_s": 0.5}]
    assert round_seconds(rows) == 1.75  # intervals 2.0 and 1.5 (2.0 less 0.5 waited)
    assert round_seconds([{"time": 1.0}, {"time": 3.0}]) == 2.0  # rows of older versions: the wall clock
