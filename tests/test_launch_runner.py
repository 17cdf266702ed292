"""The pool runner: live status, merged metrics, and clean stops when a policy fails or stalls."""

from __future__ import annotations

import pytest

import io
import json
import sys
import textwrap
import time
from pathlib import Path

from rich.console import Console

from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
from mutualrl.run_folder import RunPaths
from mutualrl.see.liveness import read_failure

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)

FAKE_WORKER = textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path
    run, name, steps, mode = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    first = int(sys.argv[5]) if len(sys.argv) > 5 else 1  # resumed after step first - 1
    (run / "metrics").mkdir(parents=True, exist_ok=True)
    (run / "status").mkdir(parents=True, exist_ok=True)
    with open(run / f"starts-{name}", "a") as fh:
        fh.write("started\\n")
    for step in range(first, steps + 1):
        with open(run / "metrics" / f"{name}.jsonl", "a") as fh:
            fh.write(json.dumps({"kind": "train", "policy": name, "step": step, "reward_mean": step / 10}) + "\\n")
        tmp = run / "status" / f".{name}.tmp"
        tmp.write_text(json.dumps({"policy": name, "step": step, "max_steps": steps, "phase": "training"}))
        os.replace(tmp, run / "status" / f"{name}.json")
        time.sleep(0.05)
    if mode == "crash":
        sys.exit(3)
    if mode == "crash-late":  # after its peers finished
        time.sleep(2.0)
        sys.exit(3)
    if mode == "slow-ok":
        time.sleep(2.0)
    if mode == "ok-after-a-restarted":  # still training until policy a's second start is well under way
        deadline = time.time() + 60
        starts = run / "starts-a"
        while time.time() < deadline and (not starts.exists() or len(starts.read_text().splitlines()) < 2):
            time.sleep(0.05)
        time.sleep(2.0)
    if mode == "wait-for-peers":  # like a SEE barrier: leave as soon as a peer is marked failed
        # reached the barrier after its peer's last step: its progress is the newer (a loaded box can start
        # the peer late, and then the waiting policy, not the stalled one, would be the longest still)
        deadline = time.time() + 60  # a box loaded by other tests can take over 10 s to start the peer
        while time.time() < deadline and len(list((run / "status").glob("*.json"))) < 2:
            time.sleep(0.05)
        tmp.write_text(json.dumps({"policy": name, "step": steps, "max_steps": steps, "phase": "waiting for peers"}))
        os.replace(tmp, run / "status" / f"{name}.json")
        deadline = time.time() + 60
        while time.time() < deadline:
            failed = list((run / "see" / "_failed").glob("*.json")) if (run / "see" / "_failed").exists() else []
            if failed:
                print(f"peer failed: {failed[0].stem}", flush=True)
                sys.exit(1)
            time.sleep(0.05)
        sys.exit(0)
    if mode == "stall":
        time.sleep(120)
    if mode == "validate-long":  # a held-out pass longer than the stall limit, showing its progress
        for done in range(9):
            tmp.write_text(json.dumps({"policy": name, "step": steps, "max_steps": steps,
                                       "phase": f"validating {done}/8 (step {steps})"}))
            os.replace(tmp, run / "status" / f"{name}.json")
            time.sleep(0.5)
    if mode == "idle-ok":  # waits at the barrier for a validating peer: no progress of its own, then done
        time.sleep(4.5)
    if mode == "hang-beat":  # beats once, then hangs silent
        (run / "see" / "_heartbeat").mkdir(parents=True, exist_ok=True)
        (run / "see" / "_heartbeat" / f"{name}.rank-0.json").write_text("{}")
        time.sleep(120)
    if mode == "slow-start":  # a restarted worker loading its checkpoint: no heartbeat for a while
        time.sleep(2.0)
''')


def _procs(tmp_path: Path, modes: dict[str, str], steps: int = 3) -> list[PolicyProcess]:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    return [PolicyProcess(name=name, argv=[sys.executable, str(script), str(tmp_path), name, str(steps), mode],
                          env={}, log_path=tmp_path / "logs" / f"{name}.log") for name, mode in modes.items()]


def _runner(tmp_path: Path, procs, stall: float = 30.0, on_peer_failure: str = "stop") -> PoolRunner:
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=stall, grace_s=20.0, poll_s=0.05,
                            on_peer_failure=on_peer_failure)
    return PoolRunner(procs, RunPaths(tmp_path), settings, console=Console(file=io.StringIO()))


def test_success_merges_every_metric_line(tmp_path):
    outcome = _runner(tmp_path, _procs(tmp_path, {"a": "ok", "b": "ok"}, steps=4)).run()
    assert outcome.ok and outcome.returncodes == {"a": 0, "b": 0}
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sorted((line["policy"], line["step"]) for line in lines) == [(p, s) for p in "ab" for s in range(1, 5)]


def test_crash_marks_the_peer_failed_and_stops_the_others(tmp_path):
    started = time.time()
    outcome = _runner(tmp_path, _procs(tmp_path, {"a": "crash", "b": "wait-for-peers"})).run()
    assert not outcome.ok
    assert outcome.failed_policy == "a" and "exited with code 3" in outcome.reason
    assert outcome.returncodes["a"] == 3 and outcome.returncodes["b"] == 1  # b left on its own, naming a
    assert "peer failed: a" in (tmp_path / "logs" / "b.log").read_text()
    assert read_failure(tmp_path / "see", "a") is not None
    assert time.time() - started < 20


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_policy_waiting_for_a_validating_peer_is_not_stalled(tmp_path):
    """Issue 38: a peer's long validation (progress in its status) keeps the pool alive; the waiting policy has
    no progress of its own for longer than the stall limit and must not be killed for it."""
    outcome = _runner(tmp_path, _procs(tmp_path, {"a": "validate-long", "b": "idle-ok"}, steps=1), stall=2.0).run()
    assert outcome.ok, outcome.reason


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_stalled_policy_is_killed_and_reported(tmp_path):
    outcome = _runner(tmp_path, _procs(tmp_path, {"a": "stall", "b": "wait-for-peers"}, steps=1), stall=2.0).run()
    assert not outcome.ok and outcome.failed_policy == "a" and "stalled" in outcome.reason
    assert outcome.returncodes["a"] is not None and outcome.returncodes["a"] != 0
    assert outcome.returncodes["b"] == 1


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_continue_lets_a_crashed_policy_leave_while_another_trains(tmp_path):
    outcome = _runner(tmp_path, _procs(tmp_path, {"a": "crash", "b": "slow-ok"}), on_peer_failure="continue").run()
    assert outcome.ok and outcome.returncodes == {"a": 3, "b": 0}
    assert list(outcome.extra["lost"]) == ["a"] and "exited with code 3" in outcome.extra["lost"]["a"]["reason"]
    assert read_failure(tmp_path / "see", "a") is not None  # b's exchange drops it at its next round


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_continue_does_not_hide_a_crash_after_everyone_else_finished(tmp_path):
    outcome = _runner(tmp_path, _procs(tmp_path, {"a": "crash-late", "b": "ok"}), on_peer_failure="continue").run()
    assert not outcome.ok and outcome.failed_policy == "a"


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_max_restarts_starts_a_failed_policy_again_and_it_rejoins(tmp_path):
    procs = _procs(tmp_path, {"a": "crash", "b": "slow-ok"})
    calls = []

    def restart(name):  # the second start of a succeeds, resuming after step 2 (its "newest checkpoint")
        calls.append(name)
        return [*procs[0].argv[:-1], "ok", "3"], 2

    settings = PoolSettings(tmp_path / "see", stall_timeout_s=30.0, grace_s=20.0, poll_s=0.05,
                            on_peer_failure="continue", max_restarts=1, restart_argv=restart)
    runner = PoolRunner(procs, RunPaths(tmp_path), settings, console=Console(file=io.StringIO()))
    outcome = runner.run()
    assert outcome.ok and outcome.returncodes == {"a": 0, "b": 0} and calls == ["a"]
    assert "lost" not in outcome.extra
    [attempt] = outcome.extra["restarted"]["a"]
    assert attempt["resumed_from"] == 2 and "exited with code 3" in attempt["reason"]
    # a wrote steps 1-3 before it crashed; step 3 is redone: every step is in metrics.jsonl exactly once
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sorted(line["step"] for line in lines if line["policy"] == "a") == [1, 2, 3]
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics" / "a.jsonl").read_text().splitlines()] == [1, 2, 3]


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_policy_that_fails_more_often_than_max_restarts_is_lost(tmp_path):
    procs = _procs(tmp_path, {"a": "crash", "b": "ok-after-a-restarted"})
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=30.0, grace_s=20.0, poll_s=0.05,
                            on_peer_failure="continue", max_restarts=1, restart_argv=lambda name: (list(procs[0].argv), None))
    runner = PoolRunner(procs, RunPaths(tmp_path), settings, console=Console(file=io.StringIO()))
    outcome = runner.run()
    assert outcome.ok and outcome.returncodes == {"a": 3, "b": 0}
    assert list(outcome.extra["lost"]) == ["a"] and len(outcome.extra["restarted"]["a"]) == 1


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_restarted_policy_is_not_judged_by_its_predecessors_heartbeat(tmp_path):
    procs = _procs(tmp_path, {"a": "hang-beat", "b": "ok-after-a-restarted"}, steps=2)
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=30.0, grace_s=20.0, poll_s=0.05,
                            on_peer_failure="continue", max_restarts=1, peer_timeout_s=1.0,
                            restart_argv=lambda name: ([*procs[0].argv[:-1], "slow-start"], None))
    runner = PoolRunner(procs, RunPaths(tmp_path), settings, console=Console(file=io.StringIO()))
    outcome = runner.run()
    assert outcome.ok and outcome.returncodes == {"a": 0, "b": 0}, outcome
    [attempt] = outcome.extra["restarted"]["a"]
    assert "no heartbeat" in attempt["reason"]
