"""Peer tables (the SEE records a regime reads) as tensors in the learner's prompt order.

Paper, SEE paragraph of "The Mutual RL System Design": a learner reads only the peer fields its
regime subscribes to, keyed by ``(prompt_id, sample_index)``. Every adapter that reads peers
builds its ``[P, M-1, K]`` peer tensors with :func:`gather_peer_groups` (the layout of
:mod:`mutualrl.regimes.core.reward_shapes`), so the row matching and the "policies saw different prompts"
error live here once. The numbers leave Arrow column-wise, through numpy. Peer responses that enter the
learner's batch (SGT's rescues, PRP's pooled rows) become learner token rows in
:mod:`mutualrl.regimes.core.peer_responses`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from mutualrl.regimes.core.reward_shapes import join_pool

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class PeerGroups:
    """Peers' rollouts of the learner's K-groups: ``rows[p, j, i]`` is the table row of peer ``names[j]``'s
    i-th rollout of prompt ``p``; ``values[column]`` is that column there, float32 ``[P, M-1, K]``."""

    names: list[str]
    rows: torch.Tensor  # int64 [P, M-1, K]
    values: dict[str, torch.Tensor]  # float32 [P, M-1, K] each

    def pool(self, learner: torch.Tensor, learner_index: int, column: str = "reward") -> torch.Tensor:
        """The pool ``[P, M, K]``: the learner's float32 ``[P, K]`` at ``learner_index``, the peers around it."""
        return join_pool(learner.float(), self.values[column], learner_index)


def gather_peer_groups(peers: dict[str, pa.Table], names: Sequence[str], prompt_ids: Sequence[str], k: int, step: int,
                       columns: Sequence[str] = ("reward",)) -> PeerGroups:
    """The rows and numeric ``columns`` of each peer in ``names`` (that order) for the K-groups ``prompt_ids``.

    ``peers`` maps a peer to its Arrow table of round ``step``; a peer missing a rollout of a prompt
    fails (:func:`peer_groups`).
    """
    p = len(prompt_ids)
    rows = torch.empty(p, len(names), k, dtype=torch.long)
    values = {column: torch.empty(p, len(names), k, dtype=torch.float32) for column in columns}
    for j, name in enumerate(names):
        groups = peer_groups(peers[name], prompt_ids, k, name, step)
        rows[:, j] = groups
        for column in columns:
            values[column][:, j] = peer_values(peers[name], column, groups)
    return PeerGroups(list(names), rows, values)


def peer_groups(table: pa.Table, prompt_ids: Sequence[str], k: int, policy: str, step: int) -> torch.Tensor:
    """int64 ``[P, K]``: each prompt's K rollout rows in one peer's table; a gap means the policies saw different
    data (:class:`~mutualrl.errors.PeerError` naming the peer, the prompt and the step).

    Column-wise: each row's prompt is found among ``prompt_ids`` by Arrow (``index_in``, on a dictionary column's
    dictionary too) and placed at ``[prompt, sample_index]`` by numpy; the same prompt id twice in ``prompt_ids``
    gets the same rows, and of two rows with one (prompt, sample) the later counts.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = pa.array(list(prompt_ids), pa.string())
    first = pc.index_in(wanted, value_set=wanted).to_numpy(zero_copy_only=False)  # int32 [P] first place of each id
    group = pc.fill_null(pc.index_in(table.column("prompt_id"), value_set=wanted), -1)
    group = group.to_numpy().astype(np.int64)  # [R] each row's prompt among prompt_ids, -1: not one of them
    sample = table.column("sample_index").to_numpy().astype(np.int64)  # [R]
    keep = (group >= 0) & (sample >= 0) & (sample < k)  # bool [R]
    grid = np.full((len(wanted), k), -1, dtype=np.int64)  # [P, K] row of each (prompt, sample), -1: none
    np.maximum.at(grid, (group[keep], sample[keep]), np.flatnonzero(keep))  # the later row of a duplicate wins
    rows = grid[first.astype(np.int64)]  # [P, K]
    gaps = np.flatnonzero((rows < 0).any(axis=1))
    if gaps.size:
        from mutualrl.errors import PeerError

        p = int(gaps[0])
        raise PeerError(
            f"peer {policy!r} published {int((rows[p] >= 0).sum())} of {k} rollouts for prompt {prompt_ids[p]!r} at "
            f"step {step}: the policies did not see the same prompts (check that every policy uses the same seed, "
            "dataset and generation batch size)"
        )
    return torch.from_numpy(rows)


def peer_values(table: pa.Table, column: str, groups: torch.Tensor) -> torch.Tensor:
    """A numeric column of a peer's table (reward, num_tokens) as float32 ``[P, K]``, laid out as ``groups``."""
    return torch.tensor(table.column(column).to_numpy(zero_copy_only=False), dtype=torch.float32)[groups]
