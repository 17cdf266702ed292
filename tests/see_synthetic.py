"""Synthetic rollout batches for tests and the SEE bandwidth benchmark (no model needed).

Every column is filled the way a real step fills it: token ids, per-token character spans
that tile the response text, behaviour log-probs, rewards, advantages. Prompt ids and
prompt texts depend only on ``prompt_seed`` so that several "policies" share the prompts
of a step, as the paper requires.
"""

from __future__ import annotations

import numpy as np

from mutualrl.see.ragged import Ragged
from mutualrl.see.schema import RolloutBatch

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
