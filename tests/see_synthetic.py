"""Synthetic rollout batches for tests and the SEE bandwidth benchmark (no model needed), and rollouts as plain
Python records (:class:`RolloutRecord`) for small tests.

Every column is filled the way a real step fills it: token ids, per-token character spans
that tile the response text, behaviour log-probs, rewards, advantages. Prompt ids and
prompt texts depend only on ``prompt_seed`` so that several "policies" share the prompts
of a step, as the paper requires.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mutualrl.see.records import COLUMNS, Ragged, RolloutBatch

_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz      0123456789+-*/=()\n", dtype=np.uint8)


def synthetic_batch(
    num_prompts: int,
    rollouts: int = 5,
    min_len: int = 0,
    max_len: int = 32,
    *,
    seed: int = 0,
    prompt_seed: int = 7,
    prompt_offset: int = 0,
    with_logps: bool = True,
    vocab_size: int = 151_000,
) -> RolloutBatch:
    """``num_prompts x rollouts`` rows; response lengths uniform in [min_len, max_len] tokens, 1-7 characters each.

    ``prompt_offset`` shifts the prompt ids (e.g. by ``step * num_prompts``) so successive
    steps see different prompts.
    """
    rng = np.random.default_rng(seed)
    n = num_prompts * rollouts
    lengths = rng.integers(min(min_len, max_len), max_len + 1, size=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    token_ids = rng.integers(0, vocab_size, size=total, dtype=np.int32)
    char_len = rng.integers(1, 8, size=total, dtype=np.int64)
    ends = np.cumsum(char_len)
    starts = ends - char_len
    text = _ALPHABET[rng.integers(0, len(_ALPHABET), size=int(ends[-1]) if total else 0)].tobytes().decode()
    # Character offset where each row's text starts in the shared text.
    row_start = np.zeros(n + 1, dtype=np.int64)
    row_start[1:] = np.concatenate([[0], ends])[offsets[1:]]
    texts = [text[row_start[i] : row_start[i + 1]] for i in range(n)]
    spans = np.empty(2 * total, dtype=np.int32)
    base = np.repeat(row_start[:-1], lengths)
    spans[0::2] = starts - base
    spans[1::2] = ends - base
    prompt_rng = np.random.default_rng(prompt_seed + prompt_offset)
    prompts = [
        _ALPHABET[prompt_rng.integers(0, len(_ALPHABET), size=400)].tobytes().decode() for _ in range(num_prompts)
    ]
    return RolloutBatch(
        prompt_id=[f"p{prompt_offset + i // rollouts:06d}" for i in range(n)],
        sample_index=np.arange(n) % rollouts,
        prompt_text=[prompts[i // rollouts] for i in range(n)],
        response_text=texts,
        response_token_ids=Ragged(token_ids, offsets),
        response_token_spans=Ragged(spans, 2 * offsets),
        reward=rng.integers(0, 2, size=n).astype(np.float32),
        advantage=rng.standard_normal(n).astype(np.float32),
        behaviour_logps=Ragged(-rng.exponential(1.0, size=total).astype(np.float32), offsets) if with_logps else None,
        finished=rng.random(n) < 0.9,
    )


@dataclass
class RolloutRecord:
    """One rollout as plain Python values (spans as ``(start, end)`` pairs; ``None``: not published)."""

    prompt_id: str
    sample_index: int
    prompt_text: str
    response_text: str
    response_token_ids: list[int]
    response_token_spans: list[tuple[int, int]] | None
    reward: float
    advantage: float | None = None
    behaviour_logps: list[float] | None = None
    finished: bool = True
    next_byte_ids: list[int] | None = None  # flattened [num_tokens, k]
    next_byte_logps: list[float] | None = None
    text_byte_logps: list[float] | None = None  # one per byte of the text, then its end where finished


def batch_from_records(records: Sequence[RolloutRecord]) -> RolloutBatch:
    """A :class:`RolloutBatch` of ``records`` (a column all ``None`` is left out: null)."""
    def optional(name: str) -> list | None:
        values = [getattr(r, name) for r in records]
        return None if all(v is None for v in values) else values

    spans = optional("response_token_spans")
    return RolloutBatch(
        prompt_id=[r.prompt_id for r in records],
        sample_index=[r.sample_index for r in records],
        prompt_text=[r.prompt_text for r in records],
        response_text=[r.response_text for r in records],
        response_token_ids=[r.response_token_ids for r in records],
        response_token_spans=None if spans is None else [None if s is None else np.asarray(s, np.int32).reshape(-1)
                                                         for s in spans],
        reward=[r.reward for r in records],
        advantage=[r.advantage for r in records],
        behaviour_logps=optional("behaviour_logps"),
        finished=[r.finished for r in records],
        next_byte_ids=optional("next_byte_ids"),
        next_byte_logps=optional("next_byte_logps"),
        text_byte_logps=optional("text_byte_logps"),
    )


def records_of(data: RolloutBatch | pa.Table) -> list[RolloutRecord]:
    """The rows of a batch or an SEE table as :class:`RolloutRecord`."""
    table = data.to_table() if isinstance(data, RolloutBatch) else data
    cols = {name: table.column(name).to_pylist() for name in COLUMNS if name != "num_tokens"}
    out = []
    for i in range(table.num_rows):
        row = {name: values[i] for name, values in cols.items()}
        flat = row["response_token_spans"]
        row["response_token_spans"] = None if flat is None else list(zip(flat[0::2], flat[1::2], strict=True))
        out.append(RolloutRecord(**row))
    return out
