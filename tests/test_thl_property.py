"""Property test: per-unit conservation over arbitrary Unicode for every ordered pair of the six vocabularies."""

from __future__ import annotations

import pytest

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mutualrl.assets.tokenizers import THL_TOKENIZERS
from mutualrl.thl import align_logprobs, batch_decode_with_spans, retokenize
from mutualrl.thl.metrics import unit_slots, word_mass

FRAGMENTS = [
    " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000", " \t \n",
    "🦙", "👨‍👩‍👧‍👦", "🎉🎉", "👍🏽",
    "数学", "語言。", "ひらがな", "한국어", "ภาษาไทย", "中文 text",
    "$\\frac{a}{b}$", "\\sum_{i=1}^n", "x^2", "e^{i\\pi}",
    "def f(x):", "    return x", "a[i] += 1;", "{}", "==>",
    "<|endoftext|>", "</s>", "<s>", "<|im_end|>", "<think>", "[INST]", "<0x0A>", "▁",
    "Hello", "world", "self-fulfilling", "prophecy.", "42", "3.14", "é", "ß", "Ω",
]

texts = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(min_size=1, max_size=6)), min_size=0, max_size=12,
).map("".join)

PAIRS = list(itertools.product(THL_TOKENIZERS, THL_TOKENIZERS))


@pytest.mark.slow  # over 2 s: outside the fast tier
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts, seed=st.integers(0, 2**16), mode=st.sampled_from(["auto", "word", "char"]))
def test_per_unit_conservation_for_every_pair(thl_tokenizers: dict, text: str, seed: int, mode: str) -> None:
    toks = thl_tokenizers
    rng = np.random.default_rng(seed)
    for src_name, tgt_name in PAIRS:
        src, tgt = toks[src_name], toks[tgt_name]
        # The source "generates" its own encoding of the text; the shared text is what those ids spell.
        src_ids = retokenize(src, [text])[0].ids
        decoded = batch_decode_with_spans(src, [src_ids])[0]
        shared = decoded.text
        lp = (-rng.uniform(0, 8, len(src_ids))).astype(np.float32)
        tgt_rt = retokenize(tgt, [shared])[0]
        res = align_logprobs([shared], [decoded.spans], [lp], [tgt_rt.spans], units=mode)
        vals = res.values[0]
        where = f"{src_name}->{tgt_name} {shared!r}"
        assert vals.shape == (len(tgt_rt.ids),), where
        assert np.isfinite(vals).all(), where
        part = res.partitions[0]
        slot = unit_slots(part, tgt_rt.spans)
        src_w = word_mass(part, decoded.spans, lp)
        ali_w = word_mass(part, tgt_rt.spans, vals)
        assert np.abs(src_w - ali_w)[slot].max(initial=0.0) <= 1e-4, where
        # Theorem thl-residual: source total = aligned total + R_THL
        total = float(lp.sum(dtype=np.float64))
        assert abs(total - float(vals.sum(dtype=np.float64)) - res.residual[0]) <= 1e-3, where
        kept = [i for i, sp in zip(src_ids, decoded.special, strict=True) if not sp]
        if src_name == tgt_name and tgt_rt.ids == kept:
            # Self-pair on the same token sequence: exactly the source values (specials: residual only).
            assert np.array_equal(vals, lp[~decoded.special]), where
