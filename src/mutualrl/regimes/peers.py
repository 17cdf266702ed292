"""Peer tables (the SEE records a regime reads) as tensors in the learner's prompt order.

Paper, SEE paragraph of "The Mutual RL System Design": a learner reads only the peer fields its
regime subscribes to, keyed by ``(prompt_id, sample_index)``. Every adapter that reads peers
builds its ``[P, M-1, K]`` peer tensors with :func:`gather_peer_groups` (the layout of
:mod:`mutualrl.regimes.pool`), so the row matching and the "policies saw different prompts"
error live here once. Peer responses that enter the learner's batch (SGT's rescues, PRP's pooled
rows) become learner token rows here once too (:func:`learner_responses`, THL's retokenization).
Peer rows leave Arrow column-wise: numbers through numpy, per-token columns (spans, log-probs) as
zero-copy numpy views (:func:`peer_row_views`); only the response text becomes Python ``str``, for the
tokenizer (:func:`peer_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mutualrl.regimes.pool import join_pool

if TYPE_CHECKING:
    import pyarrow as pa
    from transformers import PreTrainedTokenizerBase

    from mutualrl.regimes.seam import StepRollouts


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


def stable_seed(*parts: Any) -> int:
    """A seed derived from (run seed, step, policy...) that does not touch the global RNG streams."""
    import hashlib

    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def require_whole_groups(rollouts: StepRollouts, regime: str) -> None:
    """SGT and PRP attach data to a prompt's rows, so each rank must hold whole K-groups."""
    from mutualrl.errors import UsageError

    n_local = len(rollouts.prompt_ids_local)
    k = rollouts.num_generations
    if n_local % k != 0:
        raise UsageError(
            f"regime {regime!r} needs every process to hold whole groups of num_generations={k} rollouts, but "
            f"this process holds {n_local} rows: make per_device_train_batch_size * steps_per_generation a "
            f"multiple of num_generations"
        )


def require_whole_micro_batches(rows: int, steps_per_generation: int, regime: str) -> None:
    """TRL splits a generation's rows into ``steps_per_generation`` micro-batches and silently drops the remainder
    (``split_tensor_dict``): a pooled batch must divide exactly, so that no row is lost."""
    if rows % steps_per_generation != 0:
        raise RuntimeError(f"regime {regime!r}: the pooled batch has {rows} rows, not a multiple of "
                           f"steps_per_generation={steps_per_generation}; TRL's split would drop "
                           f"{rows % steps_per_generation} of them")


def local_slice(rollouts: StepRollouts) -> slice:
    """This rank's rows of the gathered batch (TRL's ``process_slice``)."""
    n_local = len(rollouts.prompt_ids_local)
    return slice(rollouts.process_index * n_local, (rollouts.process_index + 1) * n_local)


def peer_rows(peers: dict[str, pa.Table], sources: Sequence[tuple[str, int]],
              columns: Sequence[str]) -> dict[str, list[Any]]:
    """Scalar ``columns`` (the response text, the finished flag) of the peer rows ``sources`` (``(peer, row)``, any
    order) as Python values in that order: the tokenizer takes ``str``. A list column (token ids, spans, log-probs)
    is read with :func:`peer_row_views` instead, without Python values.

    Column-wise: one Arrow ``take`` and ``to_pylist`` per peer and column, not one ``as_py`` per cell.
    """
    by_peer: dict[str, list[int]] = {}
    for i, (name, _) in enumerate(sources):
        by_peer.setdefault(name, []).append(i)
    out: dict[str, list[Any]] = {column: [None] * len(sources) for column in columns}
    for name, positions in by_peer.items():
        rows = [int(sources[i][1]) for i in positions]
        for column in columns:
            values = peers[name].column(column).take(rows).to_pylist()
            for i, value in zip(positions, values, strict=True):
                out[column][i] = value
    return out


class ListColumnRows:
    """One list column of a peer's table (one chunk per publishing rank), its rows as numpy views of the Arrow
    buffers (:func:`mutualrl.see.ragged`, per chunk: nothing is copied)."""

    def __init__(self, column: pa.ChunkedArray):
        from mutualrl.see import ragged

        self.chunks = [ragged(chunk) for chunk in column.chunks]
        self.starts = np.cumsum([0] + [len(chunk) for chunk in column.chunks])  # int64 [chunks + 1]

    def row(self, i: int) -> np.ndarray | None:
        """Row ``i`` of the column (None: a null row)."""
        c = int(np.searchsorted(self.starts, i, side="right")) - 1  # the last chunk starting at or before row i
        return self.chunks[c].row(i - int(self.starts[c]))


def peer_row_views(peers: dict[str, pa.Table], sources: Sequence[tuple[str, int]],
                   column: str) -> list[np.ndarray | None]:
    """The list ``column`` (``response_token_spans``, ``behaviour_logps``, ...) of the peer rows ``sources``
    (``(peer, row)``, any order), in that order: per row a zero-copy numpy view of the peer's table in the column's
    own dtype (None: a null row, e.g. a peer that did not publish traces)."""
    columns: dict[str, ListColumnRows] = {}
    out: list[np.ndarray | None] = []
    for name, row in sources:
        if name not in columns:
            columns[name] = ListColumnRows(peers[name].column(column))
        out.append(columns[name].row(int(row)))
    return out


@dataclass
class LearnerResponses:
    """Peer responses as learner token rows (paper, THL operation (1), and App. SGT details: EOS where the
    peer finished): ``ids[i]`` is ready for TRL's batch, ``spans[i]`` the character spans of its retokenized
    tokens (an appended EOS has none, so ``len(spans[i]) <= len(ids[i])``)."""

    texts: list[str]
    finished: list[bool]
    ids: list[list[int]]
    spans: list[np.ndarray]  # int64 [n_i, 2] each


def learner_responses(peers: dict[str, pa.Table], sources: Sequence[tuple[str, int]],
                      tokenizer: PreTrainedTokenizerBase, max_len: int | None) -> LearnerResponses:
    """The peer rows ``sources`` (``(peer, row)``) in the learner's vocabulary: their ``response_text``
    retokenized as a continuation of the learner's prompt (one batched THL call), the learner's EOS
    appended where the peer ``finished``, then cut to ``max_len`` tokens (TRL's ``max_completion_length``)."""
    from mutualrl.thl import retokenize

    columns = peer_rows(peers, sources, ("response_text", "finished"))
    texts = columns["response_text"]
    finished = [bool(done) for done in columns["finished"]]
    eos = tokenizer.eos_token_id
    ids_out, spans_out = [], []
    for r, done in zip(retokenize(tokenizer, texts), finished, strict=True):
        ids = list(r.ids)
        spans = np.asarray(r.spans, dtype=np.int64).reshape(-1, 2)  # [n, 2]
        if done and eos is not None:
            ids.append(eos)
        if max_len and len(ids) > max_len:
            ids = ids[:max_len]
        ids_out.append(ids)
        spans_out.append(spans[: min(len(spans), len(ids))])  # [min(n, len(ids)), 2]
    return LearnerResponses(texts, finished, ids_out, spans_out)
