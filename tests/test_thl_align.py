"""THL alignment: hand-built hard cases, a brute-force oracle, the paper's reference, bad input."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from mutualrl.errors import UsageError
from mutualrl.thl import align_logprobs, batch_decode_with_spans, partition, retokenize
from mutualrl.thl.metrics import conservation_stats, word_mass

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from thl_paper_reference import word_align_logprobs  # noqa: E402 - the paper's alignment, a benchmark's baseline


def _spans_of(text: str, pieces: list[str]) -> np.ndarray:
    """Spans of consecutive ``pieces`` that spell ``text`` ("" pieces: special tokens)."""
    out, pos = [], 0
    for p in pieces:
        if p == "":
            out.append((-1, -1))
            continue
        assert text.startswith(p, pos), (p, pos)
        out.append((pos, pos + len(p)))
        pos += len(p)
    assert pos == len(text)
    return np.asarray(out, dtype=np.int32)


def _one(text, src_pieces, src_lp, tgt_pieces, **kw):
    res = align_logprobs([text], [_spans_of(text, src_pieces)], [np.asarray(src_lp, dtype=np.float32)],
                         [_spans_of(text, tgt_pieces)], **kw)
    return res, res.values[0]


def _oracle_units(text: str, mode: str) -> list[int]:
    """Per-character unit ids by plain Python loops (independent of the numpy implementation)."""
    cjk = re.compile(r"[\u3001-\u9fff\uac00-\ud7ff\uff00-\uffef]")
    unit_of = [-1] * len(text)
    u = -1
    for i, ch in enumerate(text):
        if ch.isspace():
            continue
        brk = mode == "char" or (mode == "auto" and (cjk.match(ch) or (i > 0 and cjk.match(text[i - 1]))))
        if i == 0 or text[i - 1].isspace() or brk:
            u += 1
        unit_of[i] = u
    nxt = None
    for i in range(len(text) - 1, -1, -1):  # whitespace joins the following unit (trailing: the last)
        if unit_of[i] >= 0:
            nxt = unit_of[i]
        else:
            unit_of[i] = nxt if nxt is not None else max(u, 0)
    return unit_of


def _oracle_align(text, src_spans, src_lp, tgt_spans, mode="auto"):
    unit_of = _oracle_units(text, mode)

    def units_of(s, e):
        nonws = [unit_of[i] for i in range(s, e) if not text[i].isspace()]
        return sorted(set(nonws)) if nonws else [unit_of[min(s, len(text) - 1)]]

    parent = list(range(max(unit_of) + 1 if unit_of else 0))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for s, e in tgt_spans:
        us = units_of(s, e)
        for a, b in zip(us, us[1:], strict=False):
            for k in range(a, b):
                parent[find(k + 1)] = find(k)
    z: dict[int, float] = {}
    for (s, e), lp in zip(src_spans, src_lp, strict=True):
        nonws = [i for i in range(s, e) if not text[i].isspace()]
        if not nonws:
            u = find(units_of(s, e)[0])
            z[u] = z.get(u, 0.0) + float(lp)
            continue
        for i in nonws:
            u = find(unit_of[i])
            z[u] = z.get(u, 0.0) + float(lp) / len(nonws)
    tgt_units = [find(units_of(s, e)[0]) for s, e in tgt_spans]
    return z, tgt_units


HARD_CASES = [
    # leading whitespace, SentencePiece-style "▁" prefixes (as spaces), newline and tab runs
    ("  Hello world", ["  Hello", " world"], ["  ", "Hel", "lo", " wor", "ld"]),
    ("a\n\n\tb  c\n", ["a", "\n\n\t", "b", "  c", "\n"], ["a\n", "\n", "\tb", " ", " c\n"]),
    # a source token straddling two words (apportioned by character overlap)
    ("end.\nNext one", ["end", ".\nNext", " one"], ["end.", "\n", "Next", " one"]),
    # a target token straddling two words (units merged)
    ("x = y+1", ["x", " =", " y", "+1"], ["x =", " y+", "1"]),
    # CJK per-character units, mixed with Western words
    ("数学 is 语言。", ["数", "学", " is", " 语言", "。"], ["数学", " is ", "语", "言。"]),
]


@pytest.mark.parametrize("text,src,tgt", HARD_CASES)
@pytest.mark.parametrize("mode", ["auto", "word", "char"])
def test_hard_cases_conserve_per_unit_and_match_the_oracle(text, src, tgt, mode) -> None:
    rng = np.random.default_rng(len(text))
    lp = (-rng.uniform(0, 8, len(src))).astype(np.float32)
    res, vals = _one(text, src, lp, tgt, units=mode, rule="paper")
    z, tgt_units = _oracle_align(text, _spans_of(text, src), lp, _spans_of(text, tgt), mode)
    # Paper rule: every target token carries its unit's mass over the unit's token count.
    counts = {u: tgt_units.count(u) for u in set(tgt_units)}
    expected = [z.get(u, 0.0) / counts[u] for u in tgt_units]
    np.testing.assert_allclose(vals, expected, rtol=1e-5, atol=1e-5)
    assert abs(vals.sum() + res.residual[0] - lp.sum()) < 1e-4
    assert res.residual[0] == 0 and res.residual_tokens[0] == 0


def test_straddling_target_token_merges_units_and_is_reported() -> None:
    res, vals = _one("x = y+1", ["x", " =", " y", "+1"], [-1, -2, -3, -4], ["x =", " y+", "1"])
    # Units x, =, y+1: "x =" merges the first two; " y+" and "1" stay within "y+1".
    assert res.n_base_units[0] == 3 and res.n_units[0] == 2 and res.n_merged[0] == 1
    np.testing.assert_allclose(vals, [-3.0, -3.5, -3.5])


def test_straddling_source_token_is_apportioned_by_character_overlap() -> None:
    res, vals = _one("ab.cd ef", ["ab.cd", " ef"], [-5.0, -1.0], ["ab.cd", " ef"], units="char")
    # char units: each non-space character; the target token "ab.cd" merges them, so no split is needed
    np.testing.assert_allclose(vals, [-5.0, -1.0])
    res, vals = _one("ab cd", ["ab cd"], [-4.0], ["ab", " cd"])  # 2 + 2 non-space chars
    np.testing.assert_allclose(vals, [-2.0, -2.0])
    res, vals = _one("abc d", ["abc d"], [-4.0], ["abc", " d"])  # 3 : 1
    np.testing.assert_allclose(vals, [-3.0, -1.0])


def test_special_tokens_are_excluded_and_counted_in_the_residual() -> None:
    res, vals = _one("Hi there", ["Hi", " there", ""], [-1.0, -2.0, -0.5], ["Hi", " the", "re", ""])
    np.testing.assert_allclose(vals, [-1.0, -1.0, -1.0, 0.0])
    assert res.residual[0] == pytest.approx(-0.5) and res.residual_special[0] == pytest.approx(-0.5)
    assert res.residual_tokens[0] == 1


def test_truncated_target_leaves_uncovered_units_in_the_residual() -> None:
    text = "one two three"
    res = align_logprobs([text], [_spans_of(text, ["one", " two", " three"])], [np.array([-1, -2, -4], np.float32)],
                         [np.array([[0, 3], [3, 7]], dtype=np.int32)])
    np.testing.assert_allclose(res.values[0], [-1, -2])
    assert res.residual[0] == pytest.approx(-4) and res.residual_tokens[0] == 1


def test_exact_copy_reproduces_a_self_pair_exactly_and_paper_rule_spreads() -> None:
    text = "Thinking small is a self-fulfilling prophecy."
    pieces = ["Thinking", " small", " is", " a", " self", "-", "ful", "filling", " prophecy", "."]
    lp = np.array([-3.1, -2.2, -0.3, -0.1, -4.5, -0.2, -1.7, -0.01, -6.0, -0.4], dtype=np.float32)
    res, vals = _one(text, pieces, lp, pieces)
    assert np.array_equal(vals, lp) and res.n_copied_units[0] == res.n_units[0]
    _, vals_paper = _one(text, pieces, lp, pieces, rule="paper")
    assert not np.array_equal(vals_paper, lp)
    np.testing.assert_allclose(vals_paper[4:8].sum(), lp[4:8].sum(), rtol=1e-6)
    np.testing.assert_allclose(vals_paper[4:8], lp[4:8].sum() / 4, rtol=1e-6)


def test_cjk_auto_switch_uses_characters_and_word_mode_does_not() -> None:
    text = "数学是语言"
    assert partition(text, "auto").n_units == 5 and partition(text, "word").n_units == 1
    assert partition("hello 世界 ok", "auto").n_units == 4 and partition("hello world", "auto").n_units == 2
    src, tgt = ["数学", "是", "语言"], ["数", "学是", "语", "言"]
    _, word_vals = _one(text, src, [-2.0, -1.0, -3.0], tgt, units="word")
    np.testing.assert_allclose(word_vals, [-1.5] * 4)  # one unit: spread over everything
    res, char_vals = _one(text, src, [-2.0, -1.0, -3.0], tgt, units="char")
    # units 数 | 学是 (merged by the target "学是") | 语 | 言; the source "数学" and "语言" split 1:1
    np.testing.assert_allclose(char_vals, [-1.0, -2.0, -1.5, -1.5])
    assert res.n_merged[0] == 1


def test_src_mask_drops_non_response_positions() -> None:
    text = "ab cd"
    spans = np.array([[0, 2], [2, 5], [-1, -1]])  # last: a padding slot
    res = align_logprobs([text], [spans], [np.array([-1.0, -2.0, -7.0])], [np.array([[0, 2], [2, 5]])],
                         src_mask=[np.array([1, 1, 0])])
    np.testing.assert_allclose(res.values[0], [-1.0, -2.0])
    assert res.residual[0] == 0 and res.residual_tokens[0] == 0


def test_empty_text_gives_an_empty_result() -> None:
    res = align_logprobs([""], [np.zeros((0, 2), np.int32)], [np.zeros(0, np.float32)], [np.zeros((0, 2), np.int32)])
    assert res.values[0].shape == (0,) and res.residual[0] == 0
    res = align_logprobs([""], [np.array([[-1, -1]])], [np.array([-0.3])], [np.zeros((0, 2))])
    assert res.values[0].shape == (0,) and res.residual[0] == pytest.approx(-0.3)
    assert align_logprobs([], [], [], []).values == []


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(src_logps=[np.array([-1.0])]), r"sequence 0: 1 source log-probs but 2 source spans"),
        (dict(src_logps=[np.array([-1.0, np.nan])]), r"sequence 0: source log-prob 1 is nan"),
        (dict(src_logps=[np.array([-np.inf, -1.0])]), r"sequence 0: source log-prob 0 is -inf"),
        (dict(tgt_spans=[np.array([[0, 99]])]), r"sequence 0: tgt_spans: token 0 has span \(0, 99\)"),
        (dict(src_spans=[np.array([[0, 2], [-1, -1]])], src_logps=[np.array([-1.0, -1.0])],
              src_special=[np.array([False, False])]), r"no span \(-1, -1\) but is not marked special"),
        (dict(tgt_spans=[]), r"1 texts but 0 tgt_spans"),
        (dict(src_mask=[np.array([1, 1, 0])]), r"sequence 0: src_mask has 3 entries but the trace has 2"),
        (dict(units="words"), r"unknown THL unit mode 'words'"),
        (dict(rule="spread"), r"unknown THL alignment rule 'spread'"),
    ],
)
def test_bad_input_is_a_clear_error(kwargs, match) -> None:
    args = dict(texts=["ab cd"], src_spans=[np.array([[0, 2], [2, 5]])], src_logps=[np.array([-1.0, -2.0])],
                tgt_spans=[np.array([[0, 5]])])
    args.update(kwargs)
    with pytest.raises(UsageError, match=match):
        align_logprobs(**args)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_paper_reference_loses_mass_on_sentencepiece_targets_and_thl_does_not(thl_tokenizers: dict) -> None:
    toks = thl_tokenizers
    src, tgt = toks["qwen3"], toks["phi3"]
    texts = ["The quick brown fox jumps over the lazy dog, twice.", "Step 1: 48 / 6 = 8.\nStep 2: 8 * 7 = 56."]
    src_ids = [r.ids for r in retokenize(src, texts)]
    decoded = batch_decode_with_spans(src, src_ids)
    lp = [(-np.random.default_rng(i).uniform(0, 8, len(ids))).astype(np.float32) for i, ids in enumerate(src_ids)]
    tgt_rt = retokenize(tgt, texts)
    ours = align_logprobs(texts, [d.spans for d in decoded], lp, [t.spans for t in tgt_rt])
    ref = word_align_logprobs(texts, lp, [len(t.ids) for t in tgt_rt], src, tgt)
    for i in range(len(texts)):
        assert abs(float(ours.values[i].sum(dtype=np.float64)) - float(lp[i].sum(dtype=np.float64))) < 1e-4
        assert abs(float(ref[i].sum(dtype=np.float64)) - float(lp[i].sum(dtype=np.float64))) > 1.0
    stats = conservation_stats(ours, [d.spans for d in decoded], lp, [t.spans for t in tgt_rt])
    assert stats.src_to_aligned_max < 1e-4 and stats.n_words > 20


def test_word_mass_apportions_straddling_tokens() -> None:
    part = partition("ab cd", "word")
    np.testing.assert_allclose(word_mass(part, np.array([[0, 5]]), np.array([-4.0])), [-2.0, -2.0])
    np.testing.assert_allclose(word_mass(part, np.array([[0, 2], [-1, -1]]), np.array([-1.0, -9.0])), [-1.0, 0.0])


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_batch_alignment_equals_one_sequence_at_a_time(thl_tokenizers: dict) -> None:
    toks = thl_tokenizers
    src, tgt = toks["mistral-tekken"], toks["phi3"]
    texts = ["first text ends with spaces   ", "", "   ", "\nsecond\tstarts with a newline", "数学 mixed", "x"]
    src_ids = [r.ids for r in retokenize(src, texts)]
    src_ids[1] = [src.eos_token_id]  # an empty completion: EOS only
    decoded = batch_decode_with_spans(src, src_ids)
    rng = np.random.default_rng(3)
    lp = [(-rng.uniform(0, 8, len(ids))).astype(np.float32) for ids in src_ids]
    tgt_rt = retokenize(tgt, [d.text for d in decoded])
    args = ([d.text for d in decoded], [d.spans for d in decoded], lp, [t.spans for t in tgt_rt])
    batch = align_logprobs(*args)
    for i in range(len(texts)):
        one = align_logprobs(*([a[i]] for a in args))
        assert np.array_equal(batch.values[i], one.values[0])
        assert batch.residual[i] == one.residual[0] and batch.residual_tokens[i] == one.residual_tokens[0]
        assert batch.n_units[i] == one.n_units[0] and batch.n_base_units[i] == one.n_base_units[0]
        assert np.array_equal(batch.unit_mass[i], one.unit_mass[0])
        assert np.array_equal(batch.target_units[i], one.target_units[0])
        assert np.array_equal(batch.partitions[i].char_unit, one.partitions[0].char_unit)
    # Trailing whitespace stays with its own text; an all-whitespace text is one unit; EOS is residual.
    assert batch.n_units.tolist()[:3] == [5, 0, 1]
    assert batch.residual[1] == pytest.approx(float(lp[1][0])) and batch.residual_tokens[1] == 1
