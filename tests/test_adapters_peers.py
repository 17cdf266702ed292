"""The one peer-record reader of the regime adapters: rows per prompt group, a column laid out as [P, K]."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch

from mutualrl.errors import PeerError
from mutualrl.regimes.core.peers import gather_peer_groups, peer_groups, peer_values


def test_rows_and_values_follow_the_prompt_order_not_the_table_order():
    table = pa.table({"prompt_id": ["b", "a", "b", "a"], "sample_index": [1, 0, 0, 1],
                      "reward": [0.25, 1.0, 0.5, 0.0], "num_tokens": [3, 4, 5, 6]})
    rows = peer_groups(table, ["a", "b"], 2, "peer", 7)
    assert rows.tolist() == [[1, 3], [2, 0]]
    assert torch.equal(peer_values(table, "reward", rows), torch.tensor([[1.0, 0.0], [0.5, 0.25]]))
    assert peer_values(table, "num_tokens", rows).dtype == torch.float32
    assert peer_groups(table, [], 2, "peer", 7).shape == (0, 2)


def test_a_missing_rollout_names_the_peer_and_step():
    table = pa.table({"prompt_id": ["a"], "sample_index": [0], "reward": [1.0]})
    with pytest.raises(PeerError, match="peer 'p' published 1 of 2 rollouts for prompt 'a' at step 3"):
        peer_groups(table, ["a"], 2, "p", 3)


def test_gathered_peer_groups_stack_the_peers_and_join_the_learner_into_the_pool():
    one = pa.table({"prompt_id": ["a", "a", "b", "b"], "sample_index": [1, 0, 0, 1],
                    "reward": [0.0, 1.0, 0.5, 0.25], "num_tokens": [3, 4, 5, 6]})
    two = pa.table({"prompt_id": ["b", "b", "a", "a"], "sample_index": [0, 1, 0, 1],
                    "reward": [1.0, 1.0, 0.0, 0.0], "num_tokens": [7, 8, 9, 10]})
    peer = gather_peer_groups({"two": two, "one": one}, ["one", "two"], ["a", "b"], 2, 5,
                              columns=("reward", "num_tokens"))
    assert peer.names == ["one", "two"]
    assert peer.rows.tolist() == [[[1, 0], [2, 3]], [[2, 3], [0, 1]]]
    assert peer.values["num_tokens"].tolist() == [[[4.0, 3.0], [9.0, 10.0]], [[5.0, 6.0], [7.0, 8.0]]]
    learner = torch.tensor([[0.75, 0.5], [0.0, 1.0]], dtype=torch.float64)
    pool = peer.pool(learner, 1)  # the learner between the two peers, as float32 like the peers
    assert pool.dtype == torch.float32
    assert pool.tolist() == [[[1.0, 0.0], [0.75, 0.5], [0.0, 0.0]], [[0.5, 0.25], [0.0, 1.0], [1.0, 1.0]]]
