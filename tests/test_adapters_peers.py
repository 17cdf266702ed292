"""The one peer-record reader of the regime adapters: rows per prompt group, a column laid out as [P, K]."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch

from mutualrl.errors import PeerError
from mutualrl.regimes.peers import peer_groups, peer_values


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
