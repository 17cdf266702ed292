"""Bounded staleness (see.max_staleness) and on_peer_failure: which peer round a step reads, and who is left."""

from __future__ import annotations

import json
import threading
import time

import pytest

from mutualrl.see.errors import PeerFailedError, PeerTimeoutError
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.async_rounds.staleness import choose_peer_round
from see_synthetic import synthetic_batch
from mutualrl.see.consumption_log import read_consumption
from mutualrl.see.lockstep import LockStepConsumption
from mutualrl.see.async_rounds.consumption import BoundedConsumption
from mutualrl.fault_injection import step_delay

POLICIES = ["fast", "slow"]


def client(root, policy, timeout=5.0):
    return ExperienceExchange(root, "run", policy, policies=POLICIES, barrier_timeout_s=timeout, poll_interval_s=0.01)


def publish(exchange, *steps):
    for step in steps:
        exchange.publish(step, synthetic_batch(2, 2, seed=step, prompt_offset=2 * step, with_logps=False))


def test_lock_step_reads_the_same_round_and_waits_for_it(tmp_path):
    fast, slow = client(tmp_path, "fast"), client(tmp_path, "slow")
    publish(fast, 0)
    threading.Timer(0.3, publish, (slow, 0)).start()
    started = time.monotonic()
    chosen = choose_peer_round(fast, [0], ["slow"], max_staleness=0, last_consumed=None)
    assert time.monotonic() - started >= 0.25
    assert (chosen.step, chosen.peer_step, chosen.age, chosen.waited) == (0, 0, 0, True)


def test_a_peer_within_the_bound_is_read_without_waiting_at_its_age(tmp_path):
    fast, slow = client(tmp_path, "fast", timeout=0.2), client(tmp_path, "slow")
    publish(fast, 0, 1, 2, 3)
    publish(slow, 0, 1)
    chosen = choose_peer_round(fast, [1, 2, 3], ["slow"], max_staleness=2, last_consumed=0)
    assert (chosen.step, chosen.peer_step, chosen.age, chosen.waited) == (3, 1, 2, False)
    # A round is read once: with round 1 consumed and the peer still there, nothing new (and no wait).
    again = choose_peer_round(fast, [1, 2, 3], ["slow"], max_staleness=2, last_consumed=1)
    assert again.peer_step is None and again.age is None and not again.waited


def test_early_steps_do_not_wait_for_a_peer_that_has_published_nothing(tmp_path):
    fast = client(tmp_path, "fast", timeout=0.2)
    publish(fast, 0, 1)
    chosen = choose_peer_round(fast, [0, 1], ["slow"], max_staleness=2, last_consumed=None)
    assert chosen.peer_step is None and not chosen.waited


def test_a_peer_more_than_s_rounds_behind_blocks_until_it_catches_up(tmp_path):
    fast, slow = client(tmp_path, "fast", timeout=0.3), client(tmp_path, "slow")
    publish(fast, 0, 1, 2, 3)
    publish(slow, 0)
    with pytest.raises(PeerTimeoutError) as err:  # round 1 = 3 - S is the oldest allowed: it must wait for it
        choose_peer_round(fast, [1, 2, 3], ["slow"], max_staleness=2, last_consumed=0)
    assert err.value.step == 1 and err.value.peers == ["slow"]
    fast.barrier_timeout_s = 5.0
    threading.Timer(0.2, publish, (slow, 1)).start()
    chosen = choose_peer_round(fast, [1, 2, 3], ["slow"], max_staleness=2, last_consumed=0)
    assert (chosen.peer_step, chosen.age, chosen.waited) == (1, 2, True)


def test_the_newest_round_every_peer_has_is_chosen(tmp_path):
    root = tmp_path
    names = ["a", "b", "c"]
    a, b, c = (ExperienceExchange(root, "run", n, policies=names, barrier_timeout_s=1.0) for n in names)
    publish(a, 0, 1, 2)
    publish(b, 0, 1, 2)
    publish(c, 0, 1)
    chosen = choose_peer_round(a, [0, 1, 2], ["b", "c"], max_staleness=2, last_consumed=None)
    assert (chosen.peer_step, chosen.age) == (1, 1)


def test_a_failed_peer_stops_the_wait_at_once(tmp_path):
    fast, slow = client(tmp_path, "fast", timeout=30.0), client(tmp_path, "slow")
    publish(fast, 0, 1, 2, 3)
    slow.mark_policy_failed("out of memory")
    started = time.monotonic()
    with pytest.raises(PeerFailedError, match="out of memory"):
        choose_peer_round(fast, [1, 2, 3], ["slow"], max_staleness=2, last_consumed=None)
    assert time.monotonic() - started < 5


def test_consumption_under_stop_raises_on_a_dead_peer(tmp_path):
    fast, slow = client(tmp_path, "fast", timeout=30.0), client(tmp_path, "slow")
    publish(fast, 0)
    slow.mark_policy_failed("killed")
    with pytest.raises(PeerFailedError):
        LockStepConsumption(fast, ["slow"]).next_round(0)
    with pytest.raises(PeerFailedError):
        BoundedConsumption(fast, ["slow"], max_staleness=2, on_peer_failure="stop").next_round(0)


@pytest.mark.parametrize("staleness", [0, 2])
def test_consumption_under_continue_drops_a_dead_peer_and_goes_on_alone(tmp_path, staleness):
    fast, slow = client(tmp_path, "fast", timeout=30.0), client(tmp_path, "slow")
    consumption = BoundedConsumption(fast, ["slow"], max_staleness=staleness, on_peer_failure="continue")
    publish(fast, 0)
    publish(slow, 0)
    assert consumption.next_round(0).peer_step == 0
    publish(fast, 1)
    slow.mark_policy_failed("killed by signal SIGKILL")
    chosen = consumption.next_round(1)
    assert chosen.peer_step is None and consumption.active == []
    assert consumption.departed["slow"]["step"] == 1 and "SIGKILL" in consumption.departed["slow"]["reason"]
    rows = read_consumption(tmp_path, "fast", run_id="run")
    assert [(r["step"], r["peer_step"], r["departed"]) for r in rows] == [(0, 0, []), (1, None, ["slow"])]


def test_consumption_under_continue_drops_a_peer_that_never_commits(tmp_path):
    fast = client(tmp_path, "fast", timeout=0.3)
    consumption = BoundedConsumption(fast, ["slow"], max_staleness=0, on_peer_failure="continue")
    publish(fast, 0)
    assert consumption.next_round(0).peer_step is None
    assert "committed nothing" in consumption.departed["slow"]["reason"]


def test_lock_step_consumption_logs_age_zero_every_step(tmp_path):
    fast, slow = client(tmp_path, "fast"), client(tmp_path, "slow")
    consumption = LockStepConsumption(fast, ["slow"])
    for step in range(3):
        publish(fast, step)
        publish(slow, step)
        consumption.next_round(step)
    rows = read_consumption(tmp_path, "fast")
    assert [(r["step"], r["peer_step"], r["age"]) for r in rows] == [(0, 0, 0), (1, 1, 0), (2, 2, 0)]


def test_step_delay_spec():
    assert step_delay("a", "a=1.5,b=2@odd") == (1.5, None)
    assert step_delay("b", "a=1.5,b=2@odd") == (2.0, "odd")
    assert step_delay("c", "a=1.5") == (0.0, None)
    with pytest.raises(ValueError, match="@even or @odd"):
        step_delay("a", "a=1@sometimes")


def replay_setup(tmp_path, choices):
    """Rounds 0-2 of both policies in ``tmp_path/see``; an earlier run ``tmp_path/old`` whose fast policy logged
    ``choices`` = [(run_id, step, peer_step, age)]. Returns the fast policy's exchange client."""
    fast, slow = client(tmp_path / "see", "fast"), client(tmp_path / "see", "slow")
    publish(fast, 0, 1, 2)
    publish(slow, 0, 1, 2)
    log = tmp_path / "old" / "see" / "_consumed"
    log.mkdir(parents=True)
    rows = [{"run_id": run, "step": s, "peer_step": p, "age": a, "waited": False, "peers": ["slow"], "departed": []}
            for run, s, p, a in choices]
    (log / "fast.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return fast


def test_replay_reads_the_recorded_round_and_names_a_missing_log(tmp_path):
    from mutualrl.errors import UsageError

    fast = replay_setup(tmp_path, [("old", s, p, a) for s, p, a in ((0, None, None), (1, 0, 1), (2, 1, 1))])
    consumption = BoundedConsumption(fast, ["slow"], max_staleness=2, replay=tmp_path / "old")
    assert [consumption.next_round(s).peer_step for s in range(3)] == [None, 0, 1]
    with pytest.raises(UsageError, match="no consumption log of policy 'fast'"):
        BoundedConsumption(fast, ["slow"], replay=tmp_path / "nowhere")


def test_a_peer_that_ran_ahead_and_pruned_the_window_is_not_waited_for(tmp_path):
    fast, slow = client(tmp_path, "fast", timeout=0.3), client(tmp_path, "slow")
    publish(fast, 1, 2, 3)
    publish(slow, 7)  # ahead of us (it dropped us under continue), its rounds 1-3 pruned
    chosen = choose_peer_round(fast, [1, 2, 3], ["slow"], max_staleness=2, last_consumed=None)
    assert chosen.peer_step is None and not chosen.waited


def test_replay_merges_a_resumed_runs_launches(tmp_path):
    fast = replay_setup(tmp_path, [(run, s, p, 0) for run, s, p in (("launch1", 0, 0), ("launch1", 1, 1),
                                                                     ("launch2", 1, 0), ("launch2", 2, 2))])
    consumption = BoundedConsumption(fast, ["slow"], max_staleness=2, replay=tmp_path / "old")
    assert [consumption.next_round(s).peer_step for s in range(3)] == [0, 0, 2]


def test_staleness_settings_are_checked_with_one_line_errors(tmp_path):
    from mutualrl.config.loader import load_run_config
    from mutualrl.config.typed import ConfigError

    for setting, message in (("see.max_staleness=-1", "must be >= 0"),
                             ("see.on_peer_failure=maybe", "expected one of 'stop', 'continue'"),
                             (f"see.replay_consumption={tmp_path / 'none'}", "is not a folder")):
        with pytest.raises(ConfigError, match=message):
            load_run_config("tiny", overrides=[setting])


def test_a_peer_at_round_zero_is_not_counted_as_behind_when_round_zero_is_the_oldest_allowed(tmp_path):
    fast, slow = client(tmp_path, "fast", timeout=0.3), client(tmp_path, "slow")
    publish(fast, 0, 1, 2)
    publish(slow, 0)
    chosen = choose_peer_round(fast, [0, 1, 2], ["slow"], max_staleness=2, last_consumed=None)
    assert (chosen.peer_step, chosen.age, chosen.waited) == (0, 2, False)


def test_a_departed_peer_rejoins_once_its_marker_is_gone_and_it_caught_up(tmp_path):
    from mutualrl.see.liveness import clear_failure

    fast, slow = client(tmp_path, "fast", timeout=0.2), client(tmp_path, "slow")
    consumption = BoundedConsumption(fast, ["slow"], max_staleness=1, on_peer_failure="continue")
    publish(fast, 0, 1, 2, 3, 4)
    publish(slow, 0)
    consumption.next_round(0)
    slow.mark_policy_failed("killed")
    assert consumption.next_round(1).peer_step is None and consumption.active == []
    clear_failure(tmp_path, "slow")  # restarted (see.max_restarts) from an early checkpoint: not caught up yet
    slow.keep_committed = True
    publish(slow, 0)  # redone: the shard it had committed is kept
    assert consumption.next_round(2).peer_step is None and consumption.active == []  # window [1, 2]: not before 1
    assert consumption.next_round(3).peer_step is None and consumption.active == []  # window [2, 3]: 1 is behind
    publish(slow, 1, 2, 3)
    chosen = consumption.next_round(4)  # window [3, 4]: slow reached 3
    assert consumption.active == ["slow"] and consumption.departed == {} and chosen.peer_step == 3
    rows = read_consumption(tmp_path, "fast")
    assert [r["peers"] for r in rows] == [["slow"], [], [], [], ["slow"]]


def test_keep_committed_leaves_an_already_published_shard_alone(tmp_path):
    slow = client(tmp_path, "slow")
    publish(slow, 0)
    first = slow.shards(0, "slow")[0].checksum
    slow.publish(0, synthetic_batch(2, 2, seed=99, with_logps=False))  # a plain second publish replaces the shard
    replaced = slow.shards(0, "slow")[0].checksum
    assert replaced != first
    slow.keep_committed = True
    slow.publish(0, synthetic_batch(2, 2, seed=5, with_logps=False))
    assert slow.shards(0, "slow")[0].checksum == replaced
    slow.publish(1, synthetic_batch(2, 2, seed=99, with_logps=False))  # a new step is published as always
    assert slow.shards(1, "slow")


def test_resume_rolls_the_consumption_logs_back_with_the_exchange(tmp_path):
    from mutualrl.ops.exchange_rollback import rollback_exchange
    from mutualrl.see.consumption_log import append_row

    for step in range(4):
        append_row(tmp_path, "fast", {"run_id": "run", "step": step, "peer_step": step})
    append_row(tmp_path, "slow", {"run_id": "run", "kind": "skip", "step": 0, "until": 2})
    append_row(tmp_path, "slow", {"run_id": "run", "kind": "skip", "step": 2, "until": 6})
    rollback_exchange(tmp_path, 3)
    assert [r["step"] for r in read_consumption(tmp_path, "fast")] == [0, 1, 2]
    assert [(r["step"], r["until"]) for r in read_consumption(tmp_path, "slow", kind="skip")] == [(0, 2), (2, 3)]  # the span cut by the resume ends there


def test_a_replay_takes_back_a_peer_that_rejoined_in_the_replayed_run(tmp_path):
    from mutualrl.see.consumption_log import append_row

    old = tmp_path / "old"
    for step, peers, departed, peer_step in ((0, ["slow"], [], 0), (1, [], ["slow"], None), (2, ["slow"], [], 2)):
        append_row(old, "fast", {"run_id": "run", "step": step, "peer_step": peer_step, "age": 0, "waited": False,
                                 "peers": peers, "departed": departed})
    see = tmp_path / "see"
    fast, slow = client(see, "fast"), client(see, "slow")
    publish(slow, 0, 2)
    consumption = BoundedConsumption(fast, ["slow"], max_staleness=1, on_peer_failure="continue", replay=old)
    assert consumption.next_round(0).peer_step == 0 and consumption.active == ["slow"]
    assert consumption.next_round(1).peer_step is None and consumption.active == []
    assert consumption.next_round(2).peer_step == 2 and consumption.active == ["slow"] and not consumption.departed


LOCK_STEP_BIND = """
import sys
from types import SimpleNamespace
from mutualrl.config import load_run_config
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.training.adapters import make_regime_adapter
config = load_run_config("tiny", regime=sys.argv[2], overrides=sys.argv[3:], check_grpo=False).config
names = [p.name for p in config.pool.policies]
exchange = ExperienceExchange(sys.argv[1], "run", names[0], policies=names)
adapter = make_regime_adapter(config, names[0], exchange)
args = SimpleNamespace(steps_per_generation=1, num_iterations=1, gradient_accumulation_steps=1)
adapter.bind(SimpleNamespace(accelerator=None, args=args))
print(type(adapter.consumption).__name__, sorted(m for m in sys.modules if m.endswith("async_rounds")
                                                 or ".async_rounds." in m))
"""


@pytest.mark.parametrize("overrides, expected", [
    ([], "LockStepConsumption []"),
    (["see.max_staleness=1"], "BoundedConsumption ['mutualrl.see.async_rounds', "
                              "'mutualrl.see.async_rounds.consumption', 'mutualrl.see.async_rounds.staleness']"),
])
@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_lock_step_regime_never_imports_the_off_lock_step_layer(tmp_path, overrides, expected):
    """The paper's path reads lock-step code only: the optional layer is imported where the settings leave it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", LOCK_STEP_BIND, str(tmp_path), "sgt", *overrides],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected
