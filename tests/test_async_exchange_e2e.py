"""Bounded staleness and on_peer_failure on real 2-policy tiny runs (slow tier)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from e2e_helpers import assert_ok, child_env, hold_tiny_sp
from mutualrl.see.consumption_log import read_consumption

POLICIES = ("tiny-bpe", "tiny-sp")


def train_argv(run_dir: Path, steps: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mutualrl", "train", "--pool", "tiny", "--regime", "sgt", "--max-steps", str(steps),
            "--set", "validation.limit=20", "--set", "validation.every_steps=0", "--set", "validation.at_start=false",
            "-o", str(run_dir), *extra]


def train(run_dir: Path, steps: int, *extra: str, delay: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**child_env(), "MUTUALRL_DEBUG_STEP_DELAY": delay}
    return subprocess.run(train_argv(run_dir, steps, *extra), env=env, capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def final_weights(run_dir: Path, policy: str) -> dict:
    return load_file(str(run_dir / "policies" / policy / "final" / "model.safetensors"))


def replay_bit_identical(run_dir: Path, replay: Path, steps: int, *extra: str) -> Path:
    """Train ``replay`` unthrottled with see.replay_consumption=run_dir (S = 2, and ``extra``, from the folder
    above ``replay``); every policy's final weights must equal the original run's."""
    done = train(replay, steps, "--set", "see.max_staleness=2", "--set", f"see.replay_consumption={run_dir}", *extra,
                 cwd=replay.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for policy in POLICIES:
        a, b = final_weights(run_dir, policy), final_weights(replay, policy)
        assert all(a[k].equal(b[k]) for k in a), policy
    return replay


def kill_policy_at_step(proc: subprocess.Popen, run_dir: Path, policy: str, step: int) -> str:
    """SIGKILL ``policy``'s worker once it reports ``step``; the launcher's output."""
    status = run_dir / "status" / f"{policy}.json"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads(status.read_text()).get("step", 0) >= step:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    os.kill(json.loads(status.read_text())["pid"], signal.SIGKILL)
    return proc.communicate(timeout=300)[0]


@pytest.mark.slow
def test_staleness_zero_off_the_lock_step_path_is_bit_identical(sgt_3_steps, sgt_3_steps_off_lock_step):
    """S = 0 through the staleness machinery (on_peer_failure=continue) trains exactly like the lock-step barrier."""
    lock, done = sgt_3_steps  # the same 3 SGT steps, lock-step
    assert_ok(done)
    other, done = sgt_3_steps_off_lock_step  # test_trackers_e2e.py reads it too
    assert_ok(done)
    for policy in POLICIES:
        a, b = final_weights(lock, policy), final_weights(other, policy)
        assert a.keys() == b.keys()
        assert all(a[k].equal(b[k]) for k in a), policy
        rows = read_consumption(other / "see", policy)
        assert [(r["step"], r["peer_step"], r["age"]) for r in rows] == [(s, s, 0) for s in range(3)]


@pytest.mark.slow
def test_a_slow_peer_is_read_stale_within_the_bound_then_skips_rounds_to_catch_up(tmp_path):
    """One run (S = 2, catch-up on, tiny-sp throttled) and its unthrottled replay: the fast policy reads the slow
    one's rounds stale within the bound and each round once; the persistently slow one skips rounds until the fast
    one stops waiting; replaying the recorded reads and skips reproduces the run bit for bit. tiny-sp's step 0 is
    held until tiny-bpe has chosen its round of step 1 (:func:`e2e_helpers.hold_tiny_sp`), so tiny-bpe waits at
    step 2 for round 0 and reads it (or round 1) stale whatever the load: with the throttle alone, a tiny-sp that
    started first stayed ahead by catching up and no round was read stale (CI, 2026-11-26). Both policies are
    throttled, so the ratio of their round times that sets how far tiny-sp jumps (:func:`catch_up_target`) stays
    near 2.4 / 0.6 whatever the load: with tiny-bpe unthrottled it reached ~7 on a quiet box, tiny-sp jumped past
    the last round tiny-bpe could read, and tiny-bpe got nothing after the catch-up (CI, 2026-11-28). tiny-bpe
    stands at round 4 when tiny-sp decides (S = 2 holds it there), so the jump ends by round 4 + ceil(2 rho - 1) - 2,
    11 at rho = 5, well before the last. (Bounded staleness without catch-up, and its exact ages:
    test_multirank_cpu.py; the policy's choices: test_see_staleness.py.)"""
    run_dir = tmp_path / "catch-up"
    steps = 20
    hold = hold_tiny_sp(tmp_path, held_steps=1)
    done = train(run_dir, steps, "--set", "see.max_staleness=2", "--set", "see.catch_up=true", *hold,
                 delay="tiny-bpe=0.4,tiny-sp=2.0", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    fast = read_consumption(run_dir / "see", "tiny-bpe")
    assert [r["step"] for r in fast] == list(range(steps))
    used = [r["peer_step"] for r in fast if r["peer_step"] is not None]
    assert used == sorted(set(used)), "a peer round was read twice"
    assert all(0 <= r["age"] <= 2 for r in fast if r["age"] is not None)
    assert fast[2]["age"] in (1, 2), fast[:3]  # the hold's order
    fast_rows = [json.loads(line) for line in (run_dir / "metrics" / "tiny-bpe.jsonl").read_text().splitlines()]
    assert max(r.get("mutual/peer_age", 0) for r in fast_rows if r["kind"] == "train") > 0
    assert any(r.get("mutual/stale_used", 0) > 0 for r in fast_rows if r["kind"] == "train")
    spans = [(r["step"], r["until"]) for r in read_consumption(run_dir / "see", "tiny-sp", kind="skip")
             if r["until"] > r["step"]]
    assert spans, "the throttled policy never skipped a round"
    assert not [r for r in read_consumption(run_dir / "see", "tiny-bpe", kind="skip") if r["until"] > r["step"]]
    slow = read_consumption(run_dir / "see", "tiny-sp")
    trained = [r["step"] for r in slow]
    assert len(trained) < steps and not any(start <= t < until for t in trained for start, until in spans)
    after = [r for r in fast if r["step"] >= spans[0][1]]  # once the slow policy has caught up
    assert sum(r["waited"] for r in after) <= 2, [(r["step"], r["waited"], r["wait_s"]) for r in after]
    assert {r["peer_step"] for r in after if r["peer_step"] is not None} <= set(trained)
    assert any(r["peer_step"] is not None for r in after), "the fast policy got no records of the slow one"
    rows = [json.loads(line) for line in (run_dir / "metrics" / "tiny-sp.jsonl").read_text().splitlines()]
    assert any(r.get("mutual/skipped", 0) > 0 for r in rows if r["kind"] == "train")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["policies"]["tiny-sp"]["steps"] == steps  # skipped rounds still count as (empty) steps
    # Replaying the recorded skips and reads without the throttle reproduces the run bit for bit.
    replay = replay_bit_identical(run_dir, tmp_path / "replay", steps, *hold)
    assert [r["step"] for r in read_consumption(replay / "see", "tiny-sp")] == trained
    assert [r["peer_step"] for r in read_consumption(replay / "see", "tiny-bpe")] == [r["peer_step"] for r in fast]


@pytest.mark.slow
@pytest.mark.user_start
def test_continue_lets_the_survivor_finish_when_a_peer_is_killed(tmp_path):
    run_dir = tmp_path / "kill"
    env = {**child_env(), "MUTUALRL_DEBUG_STEP_DELAY": "tiny-sp=0.5"}
    proc = subprocess.Popen(train_argv(run_dir, 10, "--set", "see.on_peer_failure=continue"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = kill_policy_at_step(proc, run_dir, "tiny-sp", 3)
    assert proc.returncode == 0, out[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert list(summary["lost"]) == ["tiny-sp"] and "SIGKILL" in summary["lost"]["tiny-sp"]["reason"]
    assert summary["policies"]["tiny-bpe"]["steps"] == 10
    assert "lost: tiny-sp left the pool" in " ".join(out.split())
    fast = read_consumption(run_dir / "see", "tiny-bpe")
    assert fast[-1]["departed"] == ["tiny-sp"] and fast[-1]["peer_step"] is None


HOLD_TINY_BPE_UNTIL_REJOINED = '''
import sys
import time
from pathlib import Path

from mutualrl.see.consumption_log import log_path, parse_log

HELD_STEP = {held_step}


def hold_tiny_bpe(prompts, completions, trainer_state=None, **kwargs):
    """0.0 for every completion (added to the verifier's reward, it changes none). In tiny-bpe at step HELD_STEP it
    first waits, at most 300 s, until tiny-sp, restarted into the run, has logged the read of a round at or after
    HELD_STEP (it logs a read after committing its own round): tiny-bpe readmits it at its next step."""
    argv, step = sys.argv, None if trainer_state is None else trainer_state.global_step
    if argv[argv.index("--policy") + 1] == "tiny-bpe" and step == HELD_STEP:
        path = log_path(Path(argv[argv.index("--run-dir") + 1]) / "see", "tiny-sp")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not caught_up(parse_log(path)):
            time.sleep(0.2)
    return [0.0] * len(completions)


def caught_up(rows):
    kinds = [r.get("kind") or "read" for r in rows]
    if "rejoin" not in kinds:
        return False
    after = rows[len(kinds) - 1 - kinds[::-1].index("rejoin") + 1:]
    return any((r.get("kind") or "read") == "read" and int(r["step"]) >= HELD_STEP for r in after)
'''


@pytest.mark.slow
@pytest.mark.user_start
def test_max_restarts_a_killed_peer_restarts_from_its_checkpoint_and_rejoins(tmp_path):
    """tiny-sp is killed at step 3 and restarted from its checkpoint; tiny-bpe drops it by step 5 (at step s it waits
    for round s - 1 at the latest: S = 1), goes on alone, and takes it back once it has caught up. tiny-bpe is held
    at step 5 until the restarted tiny-sp has read a round at or after 5 (a reward function that waits), so it is
    readmitted at step 6 whatever the load. A 2-s throttle on every tiny-bpe step did this before, and under a load
    of 10 the restarted policy still never caught up (2026-11-29)."""
    run_dir = tmp_path / "rejoin"
    (tmp_path / "hold.py").write_text(HOLD_TINY_BPE_UNTIL_REJOINED.format(held_step=5))
    # user_start: restarted as a fresh interpreter (seconds, as a user's); one forked from a zygote would be back
    # before the survivor drops it, and the drop is what this test follows
    steps = 8
    argv = train_argv(run_dir, steps, "--set", "see.on_peer_failure=continue", "--set", "see.max_restarts=1",
                      "--set", "see.max_staleness=1", "--set", "grpo.save_steps=2",
                      "--set", "task.reward_funcs=[hold.hold_tiny_bpe]")
    proc = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp_path)
    out = kill_policy_at_step(proc, run_dir, "tiny-sp", 3)
    assert proc.returncode == 0, out[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "lost" not in summary
    [attempt] = summary["restarted"]["tiny-sp"]
    assert attempt["resumed_from"] == 2 and "SIGKILL" in attempt["reason"]
    assert {p["steps"] for p in summary["policies"].values()} == {steps}
    assert "rejoined from checkpoint" in " ".join(out.split())
    # tiny-bpe dropped tiny-sp, then took it back once it had caught up (at the step after the hold)
    peers = [r["peers"] for r in read_consumption(run_dir / "see", "tiny-bpe")]
    assert [] in peers[:6] and peers[6:] == [["tiny-sp"]] * (steps - 6), peers
    # every step of each policy is in metrics.jsonl once (the redone steps replaced, not repeated)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for policy in POLICIES:
        done = [r["step"] for r in rows if r.get("policy") == policy and r["kind"] == "train"]
        assert sorted(done) == sorted(set(done)) and max(done) == steps, (policy, done)


# A killed peer failing the run under the default on_peer_failure=stop: test_train_e2e.py
# test_killed_peer_stops_the_pool_named_and_resume_finishes_with_the_same_steps (it also checks the survivor's log
# and the exchange).
