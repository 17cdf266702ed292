"""The barrier returns what it found and the read uses it: a step scans each peer's folder once, in lock-step and
off it (rank 0's choice of round), and a round a peer pruned after the choice is a missing round, not a crash."""

from __future__ import annotations

import contextlib
from collections import Counter
from types import SimpleNamespace

import pytest

import mutualrl.see.exchange
import mutualrl.see.offlock.staleness
from mutualrl.regimes.adapter import RegimeAdapter
from mutualrl.regimes.offlock import read_bounded_round, read_round
from mutualrl.see.errors import CorruptShardError, ShardMissingError
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.lockstep import LockStepConsumption
from mutualrl.see.offlock.consumption import BoundedConsumption
from see_synthetic import synthetic_batch

POLICIES = ("learner", "peer")
COLUMNS = ("prompt_id", "sample_index", "reward")


def client(root, policy):
    return ExperienceExchange(root, "run", policy, policies=POLICIES, barrier_timeout_s=5.0, poll_interval_s=0.01)


def publish(exchange, *steps):
    for step in steps:
        exchange.publish(step, synthetic_batch(2, 2, seed=step, prompt_offset=2 * step, with_logps=False))


@pytest.fixture
def scans(monkeypatch):
    """Scans of a (step, policy) folder for committed shards, wherever they start (the barrier, a read, the
    off-lock-step choice of round)."""
    counted: Counter = Counter()

    def spy(original):
        def scan(root, run_id, step, policy, found, other_runs):
            counted[(step, policy)] += 1
            return original(root, run_id, step, policy, found, other_runs)
        return scan

    for module in (mutualrl.see.exchange, mutualrl.see.offlock.staleness):
        monkeypatch.setattr(module, "scan_committed", spy(module.scan_committed))
    return counted


class Trainer:
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1)

    def __init__(self):
        self.recorded: dict[str, float] = {}

    def record_metrics(self, values, mode="train"):
        self.recorded.update(values)


def learner_adapter(exchange):
    config = SimpleNamespace(pool=SimpleNamespace(policies=[SimpleNamespace(name=name) for name in POLICIES]))
    adapter = RegimeAdapter(config, "learner", exchange)
    adapter.peer_columns = COLUMNS
    return adapter


def test_a_lock_step_step_scans_each_peer_folder_once(tmp_path, scans):
    """Failed before: the barrier scanned the peer's folder, then the read scanned it again."""
    learner, peer = client(tmp_path, "learner"), client(tmp_path, "peer")
    publish(peer, 0)
    adapter = learner_adapter(learner)
    adapter.consumption = LockStepConsumption(learner, ["peer"])
    timings: dict[str, float] = {}
    step, tables = adapter.read_peer_round(0, timings)
    assert scans == {(0, "peer"): 1}
    assert step == 0 and tables["peer"].equals(learner.read(0, "peer", columns=COLUMNS))
    assert set(timings) == {"wait_s", "read_s"}


def offlock_adapter(exchange, consumption):
    """An adapter reading off lock-step through ``consumption`` (rank 0: it chooses the round)."""
    adapter = learner_adapter(exchange)
    adapter.consumption, adapter.trainer = consumption, Trainer()
    adapter.uses_stale_rounds = True
    adapter.remember = lambda output, rollouts: None
    adapter.phase = lambda name: contextlib.nullcontext()
    return adapter


@pytest.mark.parametrize("stale", [False, True])
def test_off_lock_step_a_step_scans_the_round_it_reads_once(tmp_path, scans, stale):
    """Failed before: rank 0 scanned the peer's newest round to see that it is not behind, again as the round to
    read, and the read scanned it a third time."""
    learner, peer = client(tmp_path, "learner"), client(tmp_path, "peer")
    publish(peer, 0, *([] if stale else [1]))
    consumption = BoundedConsumption(learner, ["peer"], max_staleness=1)
    consumption.note_round(0)
    adapter = offlock_adapter(learner, consumption)
    peer_step, tables = read_bounded_round(adapter, {}, SimpleNamespace(step=1), {})
    expected = 0 if stale else 1
    assert peer_step == expected and scans[(expected, "peer")] == 1
    assert tables["peer"].equals(learner.read(expected, "peer", columns=COLUMNS))
    assert adapter.trainer.recorded["mutual/peer_age"] == (1 if stale else 0)


def test_a_round_pruned_after_the_choice_is_missing_and_a_lost_data_file_is_corrupt(tmp_path):
    learner, peer = client(tmp_path, "learner"), client(tmp_path, "peer")
    publish(peer, 0)
    consumption = BoundedConsumption(learner, ["peer"], max_staleness=1)
    adapter = offlock_adapter(learner, consumption)
    chosen = consumption.next_round(0)
    assert chosen.shards is not None and set(chosen.shards) == {"peer"}
    info = chosen.shards["peer"][0]
    info.data_path.unlink()  # the manifest stays: the data file is lost, which is corruption
    with pytest.raises(CorruptShardError, match="does not exist"):
        read_round(adapter, chosen, 0)
    info.manifest_path.unlink()  # now as a prune leaves it (manifest first, then data)
    with pytest.raises(ShardMissingError, match="'peer' pruned its shards of step 0"):
        read_round(adapter, chosen, 0)


def test_a_replayed_round_is_read_from_the_shards_its_wait_found(tmp_path, scans):
    """Failed before: the replay waited for the recorded round, then the read scanned it again."""
    old, see = tmp_path / "old", tmp_path / "see"
    old.mkdir()
    (old / "learner.jsonl").write_text('{"run_id": "r", "step": 0, "peer_step": 0, "age": 0, "waited": false, '
                                       '"peers": ["peer"], "departed": []}\n')
    learner, peer = client(see, "learner"), client(see, "peer")
    publish(peer, 0)
    consumption = BoundedConsumption(learner, ["peer"], max_staleness=1, replay=old)
    adapter = offlock_adapter(learner, consumption)
    peer_step, tables = read_bounded_round(adapter, {}, SimpleNamespace(step=0), {})
    assert peer_step == 0 and tables["peer"].num_rows == 4
    assert scans == {(0, "peer"): 1}
