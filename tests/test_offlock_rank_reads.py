"""Off lock-step, rank 0 decides which peer round a step reads and every rank reads it; a peer that dropped this
policy and ran ahead may prune that round between two ranks' reads. The ranks must then still take one path: one
rank that found the records would transform the batch (SGT, XGRPO and PRP enter collectives there) while the other
trained plain GRPO, and the pair would wait for each other forever. Two gloo ranks; rank 1 finds the round gone."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa

from gloo_ranks import run_on_two_ranks
from mutualrl.see.errors import ShardMissingError
from mutualrl.see.lockstep import PeerRound


class PrunedForRankOne:
    """An exchange whose peer round 3 rank 1 reads after the peer pruned it."""

    def __init__(self, rank: int):
        self.rank = rank

    def read(self, step, policy, columns=None):
        if self.rank == 1:
            raise ShardMissingError(f"SEE: policy {policy!r} has not committed all shards of step {step}",
                                    peer=policy, step=step)
        return pa.table({"reward": [1.0]})


def _read_round(accelerator) -> tuple:
    from mutualrl.see.rounds import next_round

    chosen = PeerRound(4, 3, 1)  # rank 0's decision, read by both ranks from its log
    consumption = SimpleNamespace(lock_step=False, next_round=lambda step: chosen, active=["b"],
                                  exchange=PrunedForRankOne(accelerator.process_index), accelerator=accelerator)
    read = next_round(consumption, 4, ("reward",), uses_stale=True)
    return read.peer_step, sorted(read.tables)


def test_ranks_use_a_peer_round_only_when_every_rank_could_read_it():
    """Failed before: rank 0 used round 3 (it read it) while rank 1 trained without peers."""
    assert run_on_two_ranks(_read_round) == [(None, []), (None, [])]
