"""Peer responses as learner token rows: the text of the peer rows a regime puts into the learner's batch (SGT's
rescues, PRP's and HACPO's pooled rows), retokenized into the learner's vocabulary once, here (THL).

Peer rows leave Arrow column-wise: per-token columns (spans, log-probs) as zero-copy numpy views
(:func:`peer_row_views`); only the response text becomes Python ``str``, for the tokenizer (:func:`peer_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa
    from transformers import PreTrainedTokenizerBase


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
