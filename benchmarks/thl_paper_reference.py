"""The paper's reference word alignment, kept only as a baseline for benchmarks and tests.

A faithful transcription of App. "Detailed Logits Word Alignment": Alg. WordSpans,
Alg. PerTokenWordMapBySegments (tokenize every segment ``text[prev_end:end]`` on its own,
truncate to the common prefix when the pieces disagree with the full encoding) and
Alg. WordAlignLogProbs (sum source log-probs per word, spread over the target tokens of
the word). It calls the tokenizer once per word, and with SentencePiece tokenizers every
segment gets a dummy-prefix token the full encoding does not have, so its word map drifts
and mass is lost. Do not use it for training; :func:`mutualrl.thl.align_logprobs` is THL.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

_WORD = re.compile(r"\S+")


def word_spans(text: str) -> list[tuple[int, int]]:
    """Alg. WordSpans: maximal non-whitespace runs."""
    return [(m.start(), m.end()) for m in _WORD.finditer(text)]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def per_token_word_map_by_segments(text: str, tokenizer: Any) -> tuple[list[int], list[int | None]]:
    """Alg. PerTokenWordMapBySegments."""
    full_ids = _encode(tokenizer, text)
    spans = word_spans(text)
    word_map: list[int | None] = []
    built_ids: list[int] = []
    prev_end = 0
    for w_idx, (start, end) in enumerate(spans):
        seg_ids = _encode(tokenizer, text[prev_end:end])
        built_ids.extend(seg_ids)
        if prev_end == 0 and start > 0:
            n_lead = len(_encode(tokenizer, text[:start]))
            word_map.extend([None] * n_lead)
            word_map.extend([w_idx] * (len(seg_ids) - n_lead))
        else:
            word_map.extend([w_idx] * len(seg_ids))
        prev_end = end
    if len(built_ids) != len(full_ids):  # best-effort alignment
        n = min(len(built_ids), len(full_ids))
        word_map, full_ids = word_map[:n], full_ids[:n]
    return full_ids, word_map


def word_align_logprobs(
    texts: list[str],
    source_logps: list[np.ndarray],
    n_target: list[int],
    source_tokenizer: Any,
    target_tokenizer: Any,
    ignore_value: float = 0.0,
) -> list[np.ndarray]:
    """Alg. WordAlignLogProbs for a batch (per-sequence masks = the response positions)."""
    out = []
    for text, lps, m in zip(texts, source_logps, n_target, strict=True):
        vals = np.full(m, ignore_value, dtype=np.float32)
        _, src_map = per_token_word_map_by_segments(text, source_tokenizer)
        _, tgt_map = per_token_word_map_by_segments(text, target_tokenizer)
        l_src, l_tgt = min(len(lps), len(src_map)), min(m, len(tgt_map))
        per_word_sum: dict[int, float] = {}
        for p in range(l_src):
            wid = src_map[p]
            if wid is not None:
                per_word_sum[wid] = per_word_sum.get(wid, 0.0) + float(lps[p])
        if per_word_sum:
            per_word_count: dict[int, int] = {}
            for p in range(l_tgt):
                wid = tgt_map[p]
                if wid is not None:
                    per_word_count[wid] = per_word_count.get(wid, 0) + 1
            for p in range(l_tgt):
                wid = tgt_map[p]
                if wid is None or per_word_count.get(wid, 0) <= 0:
                    continue
                vals[p] = per_word_sum.get(wid, 0.0) / per_word_count[wid]
        out.append(vals)
    return out
