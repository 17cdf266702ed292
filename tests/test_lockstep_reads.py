"""The barrier returns what it found and the read uses it: a step scans each peer's folder once, in lock-step and
off it (rank 0's choice of round), and a round a peer pruned after the choice is a missing round, not a crash."""

from __future__ import annotations

from collections import Counter

import pytest

import mutualrl.see.exchange
import mutualrl.see.async_rounds.staleness
from mutualrl.see.errors import CorruptShardError, ShardMissingError
from mutualrl.see.exchange import ExperienceExchange
from mutualrl.see.lockstep import LockStepConsumption
from mutualrl.see.async_rounds.consumption import BoundedConsumption
from mutualrl.see.rounds import next_round, read_round
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
        def scan(root, run_id, step, policy, *args, **kwargs):
            counted[(step, policy)] += 1
            return original(root, run_id, step, policy, *args, **kwargs)
        return scan

    for module in (mutualrl.see.exchange, mutualrl.see.async_rounds.staleness):
        monkeypatch.setattr(module, "scan_committed", spy(module.scan_committed))
    return counted


def test_a_lock_step_step_scans_each_peer_folder_once(tmp_path, scans):
    """Failed before: the barrier scanned the peer's folder, then the read scanned it again."""
    learner, peer = client(tmp_path, "learner"), client(tmp_path, "peer")
    publish(peer, 0)
    read = next_round(LockStepConsumption(learner, ["peer"]), 0, COLUMNS)
    assert scans == {(0, "peer"): 1}
    assert read.peer_step == 0 and read.tables["peer"].equals(learner.read(0, "peer", columns=COLUMNS))
    assert set(read.seconds) == {"wait_s", "read_s"} and read.metrics == {}


@pytest.mark.parametrize("stale", [False, True])
def test_off_lock_step_a_step_scans_the_round_it_reads_once(tmp_path, scans, stale):
    """Failed before: rank 0 scanned the peer's newest round to see that it is not behind, again as the round to
    read, and the read scanned it a third time."""
    learner, peer = client(tmp_path, "learner"), client(tmp_path, "peer")
    publish(peer, 0, *([] if stale else [1]))
    consumption = BoundedConsumption(learner, ["peer"], max_staleness=1)
    consumption.note_round(0)
    read = next_round(consumption, 1, COLUMNS, uses_stale=True)
    expected = 0 if stale else 1
    assert read.peer_step == expected and scans[(expected, "peer")] == 1
    assert read.tables["peer"].equals(learner.read(expected, "peer", columns=COLUMNS))
    assert read.metrics["mutual/peer_age"] == (1 if stale else 0)


def test_a_round_pruned_after_the_choice_is_missing_and_a_lost_data_file_is_corrupt(tmp_path):
    learner, peer = client(tmp_path, "learner"), client(tmp_path, "peer")
    publish(peer, 0)
    consumption = BoundedConsumption(learner, ["peer"], max_staleness=1)
    chosen = consumption.next_round(0)
    assert chosen.shards is not None and set(chosen.shards) == {"peer"}
    info = chosen.shards["peer"][0]
    info.data_path.unlink()  # the manifest stays: the data file is lost, which is corruption
    with pytest.raises(CorruptShardError, match="does not exist"):
        read_round(learner, ["peer"], chosen, 0, COLUMNS)
    info.manifest_path.unlink()  # now as a prune leaves it (manifest first, then data)
    with pytest.raises(ShardMissingError, match="'peer' pruned its shards of step 0"):
        read_round(learner, ["peer"], chosen, 0, COLUMNS)


def test_a_replayed_round_is_read_from_the_shards_its_wait_found(tmp_path, scans):
    """Failed before: the replay waited for the recorded round, then the read scanned it again."""
    old, see = tmp_path / "old", tmp_path / "see"
    old.mkdir()
    (old / "learner.jsonl").write_text('{"run_id": "r", "step": 0, "peer_step": 0, "age": 0, "waited": false, '
                                       '"peers": ["peer"], "departed": []}\n')
    learner, peer = client(see, "learner"), client(see, "peer")
    publish(peer, 0)
    consumption = BoundedConsumption(learner, ["peer"], max_staleness=1, replay=old)
    read = next_round(consumption, 0, COLUMNS, uses_stale=True)
    assert read.peer_step == 0 and read.tables["peer"].num_rows == 4
    assert scans == {(0, "peer"): 1}
