"""Named offline tokenizers: reference tokenizations, spans from generated ids, continuation encoding."""

from __future__ import annotations

import base64
import json
import time
import zipfile

import numpy as np
import pytest
import regex

from mutualrl.assets.tokenizers import (
    MISTRAL_COMMON_WHEEL,
    REFERENCE_VOCABS,
    THL_TOKENIZERS,
    _mistral_common_wheel,
    load_tokenizer,
    reference_tokenizations,
)
from mutualrl.errors import UnknownNameError
from mutualrl.thl import batch_decode_with_spans, decode_with_spans, retokenize

ORDINARY = [
    "Hello world",
    "Thinking small is a self-fulfilling prophecy.",
    "Step 1: 48 / 6 = 8.\nStep 2: 8 * 7 = 56.",
    "def f(x):\n\treturn x ** 2  # square",
    "Emoji 🦙🎉 and accents: é ü ß ñ",
    "数学是科学的语言。Mixed 中文 and English.",
    "$\\frac{a}{b} = \\sum_{i=1}^n x_i$",
]


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("name", sorted(REFERENCE_VOCABS))
def test_named_tokenizer_matches_llama_cpp_reference_tokenizations(name: str) -> None:
    tok = load_tokenizer(name)
    refs = reference_tokenizations(REFERENCE_VOCABS[name])
    assert len(refs) > 30
    mismatches = [(text, ids) for text, ids in refs if tok(text, add_special_tokens=False)["input_ids"] != ids]
    assert mismatches == []


def _tekken_reference_encode(text: str) -> list[int]:
    """An independent Tekken encoder: tiktoken-style rank BPE straight from tekken.json."""
    with zipfile.ZipFile(_mistral_common_wheel()) as zf:
        raw = json.loads(zf.read("mistral_common/data/tekken_240911.json"))
    n_special = raw["config"]["default_num_special_tokens"]
    inner = raw["config"]["default_vocab_size"] - n_special
    ranks = {base64.b64decode(v["token_bytes"]): i for i, v in enumerate(raw["vocab"][:inner])}
    ids: list[int] = []
    for piece in regex.findall(raw["config"]["pattern"], text):
        parts = [bytes([b]) for b in piece.encode("utf-8")]
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: ranks.get(parts[i] + parts[i + 1], 1 << 30))
            if parts[best] + parts[best + 1] not in ranks:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        ids.extend(ranks[p] + n_special for p in parts)
    return ids


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_tekken_matches_an_independent_rank_bpe() -> None:
    tok = load_tokenizer("mistral-tekken")
    assert MISTRAL_COMMON_WHEEL.startswith("mistral-common")
    for text in ORDINARY + ["  leading spaces\n\n\ttabs", "Ελληνικά and русский текст"]:
        assert tok(text, add_special_tokens=False)["input_ids"] == _tekken_reference_encode(text), text
    assert tok.eos_token == "</s>" and tok.eos_token_id == 2


def test_unknown_tokenizer_name_is_a_fast_clear_error() -> None:
    t0 = time.perf_counter()
    with pytest.raises(UnknownNameError) as err:
        load_tokenizer("qwen-3")
    assert time.perf_counter() - t0 < 5
    message = str(err.value)
    assert "qwen-3" in message and "mistral-tekken" in message and "qwen3" in message


@pytest.mark.parametrize("name", THL_TOKENIZERS)
def test_decode_with_spans_agrees_with_tokenizer_decode(thl_tokenizers: dict, name: str) -> None:
    tok = thl_tokenizers[name]
    for text in ORDINARY:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        decoded = decode_with_spans(tok, ids)
        reference = tok.decode(ids)
        # Documented rule: SentencePiece's decode strips the space of a leading "▁"; we keep it.
        assert decoded.text in (reference, " " + reference), (decoded.text, reference)
        # Spans tile the text in order; concatenating their (de-duplicated) characters gives it back.
        spans = decoded.spans
        assert (spans[:, 0] <= spans[:, 1]).all() and (spans[1:, 0] >= spans[:-1, 0]).all()
        assert spans[0, 0] == 0 and spans[-1, 1] == len(decoded.text)
        assert (spans[1:, 0] <= spans[:-1, 1]).all()  # no gaps (shared chars only where bytes split a char)


@pytest.mark.parametrize("name", THL_TOKENIZERS)
def test_special_tokens_get_no_span_and_no_text(thl_tokenizers: dict, name: str) -> None:
    tok = thl_tokenizers[name]
    ids = tok("Hi there", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    decoded = decode_with_spans(tok, ids)
    assert decoded.special.tolist() == [False] * (len(ids) - 1) + [True]
    assert decoded.spans[-1].tolist() == [-1, -1]
    assert decoded.text.strip() == "Hi there"


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("name", THL_TOKENIZERS)
def test_retokenize_is_a_continuation_of_the_prompt(thl_tokenizers: dict, name: str) -> None:
    tok = thl_tokenizers[name]
    prompt = "Question: what is 6 times 7?\nAnswer:"
    responses = [" 42.", "", "The answer is 42.", "\n\n答案是 42。", " x\ty 🦙", ""]
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    for resp, rt in zip(responses, retokenize(tok, responses), strict=True):
        special = set(tok.all_special_ids)
        assert not special & set(rt.ids), "no BOS/EOS or other special token is added"
        assert tok.decode(prompt_ids + rt.ids) == prompt + resp
        assert decode_with_spans(tok, rt.ids).text == resp
        assert [resp[s:e] for s, e in rt.spans] == [resp[s:e] for s, e in decode_with_spans(tok, rt.ids).spans]


def test_byte_level_token_splitting_a_character_shares_it(thl_tokenizers: dict) -> None:
    tok = thl_tokenizers["gpt2"]
    text = "日本語"  # GPT-2 splits these 3-byte characters across tokens
    ids = tok(text, add_special_tokens=False)["input_ids"]
    decoded = decode_with_spans(tok, ids)
    assert decoded.text == text and len(ids) > len(text)
    covered = np.zeros(len(text), dtype=int)
    for s, e in decoded.spans:
        covered[s:e] += 1
    assert (covered >= 1).all() and (covered > 1).any()


def test_invalid_utf8_becomes_one_replacement_per_byte(thl_tokenizers: dict) -> None:
    tok = thl_tokenizers["gpt2"]
    ids = tok("🦙", add_special_tokens=False)["input_ids"]  # 4 bytes over several tokens
    decoded = decode_with_spans(tok, ids[:-1])  # cut inside the character
    assert set(decoded.text) == {"\ufffd"} and 1 <= len(decoded.text) <= 3
    assert decoded.spans.max() <= len(decoded.text)


def test_out_of_vocabulary_id_is_a_clear_error(thl_tokenizers: dict) -> None:
    from mutualrl.errors import UsageError

    tok = thl_tokenizers["gpt2"]
    with pytest.raises(UsageError, match="token id 999999 is outside"):
        decode_with_spans(tok, [1, 999999])
    with pytest.raises(UsageError, match=r"batch_decode_with_spans\[1\]"):
        batch_decode_with_spans(tok, [[1], [-3]])
    assert decode_with_spans(tok, []).text == ""


@pytest.mark.slow
def test_normalizing_tokenizer_falls_back_to_offsets(thl_tokenizers: dict) -> None:
    tok = thl_tokenizers["qwen3"]  # NFC normalizer: decomposed "é" is encoded as the composed character
    text = "Cafe\u0301 au lait"
    rt = retokenize(tok, [text])[0]
    assert rt.from_offsets
    assert rt.spans[0, 0] == 0 and rt.spans[-1, 1] == len(text) and (rt.spans[:, 1] <= len(text)).all()


def test_non_canonical_generated_ids_keep_their_own_spans(thl_tokenizers: dict) -> None:
    from mutualrl.thl import align_logprobs

    tok = thl_tokenizers["gpt2"]
    text = "hello world"
    # A sampled sequence may spell the text one character per token (ids for "h", "e", ...).
    ids = [tok.convert_tokens_to_ids(c if c != " " else "Ġ") for c in text]
    decoded = decode_with_spans(tok, ids)
    assert decoded.text == text and decoded.spans.tolist() == [[i, i + 1] for i in range(len(text))]
    lp = np.linspace(-3, -0.1, len(ids)).astype(np.float32)
    canonical = retokenize(tok, [text])[0]
    res = align_logprobs([text], [decoded.spans], [lp], [canonical.spans])
    assert len(canonical.ids) == 2
    np.testing.assert_allclose(res.values[0], [lp[:5].sum(), lp[5:].sum()], rtol=1e-6)


def test_batch_decode_handles_sequences_cut_inside_a_character(thl_tokenizers: dict) -> None:
    tok = thl_tokenizers["gpt2"]
    ids = tok("a🦙b", add_special_tokens=False)["input_ids"]
    assert len(ids) >= 3
    # Split the ids mid-character across two sequences: each decodes on its own (with U+FFFD).
    batch = batch_decode_with_spans(tok, [ids[:2], ids[2:], [], ids])
    singles = [decode_with_spans(tok, x) for x in (ids[:2], ids[2:], [], ids)]
    for b, s in zip(batch, singles, strict=True):
        assert b.text == s.text and np.array_equal(b.spans, s.spans) and np.array_equal(b.special, s.special)
    assert batch[3].text == "a🦙b" and "\ufffd" in batch[0].text + batch[1].text
