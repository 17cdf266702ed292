"""Retokenization: a peer's response text -> the learner's token ids (paper Sec. THL, operation (1)).

The prompt is shared, so only the response is encoded, as a *continuation* of the
learner's own prompt ids: no BOS/EOS or other special tokens are added, and SentencePiece
vocabularies do not get their dummy-prefix ``"▁"`` (a response ``"The"`` that follows the
prompt directly is ``"The"``, a response ``" The"`` is ``"▁The"``). We build that encoder
once per tokenizer by switching off the prefix rules in a copy of its Rust backend
(``Prepend("▁")`` normalizers, ``Metaspace(prepend_scheme=...)``, ``ByteLevel(add_prefix_space)``),
then encode the whole batch in one call.

Target spans come from the same byte table as :mod:`.spans` (so a self-pair has identical
spans on both sides); when the ids do not spell the text byte for byte (a normalizing
tokenizer such as Qwen's NFC on non-NFC input, or ``<unk>``), the encoder's offset mapping
is used for that sequence instead.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mutualrl.errors import UsageError
from mutualrl.thl.spans import _backend, _flat_ids, byte_table, char_spans, gather_bytes


@dataclass(frozen=True)
class Retokenized:
    """Learner token ids of one response text and their character spans in that text."""

    ids: list[int]
    spans: np.ndarray  # int32 [m, 2]
    from_offsets: bool = False  # spans came from the encoder's offset mapping (ids do not spell the text)


def _no_prefix(node: Any) -> Any:
    """A copy of a tokenizer.json component with every "add a leading space" rule switched off."""
    if isinstance(node, list):
        return [_no_prefix(n) for n in node if not (isinstance(n, dict) and n.get("type") == "Prepend")]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "Prepend":
        return None
    out = {k: _no_prefix(v) for k, v in node.items()}
    if out.get("type") == "Metaspace":
        out["prepend_scheme"] = "never"
        if "add_prefix_space" in out:
            out["add_prefix_space"] = False
    if out.get("type") == "ByteLevel" and "add_prefix_space" in out:
        out["add_prefix_space"] = False
    return out


@functools.lru_cache(maxsize=32)
def continuation_encoder(tokenizer: Any) -> Any:
    """A Rust ``tokenizers.Tokenizer`` that encodes text as a continuation (no dummy prefix)."""
    from tokenizers import Tokenizer

    spec = json.loads(_backend(tokenizer).to_str())
    for key in ("normalizer", "pre_tokenizer"):
        if spec.get(key) is not None:
            spec[key] = _no_prefix(spec[key])
            if isinstance(spec[key], dict) and spec[key].get("type") == "Sequence":
                inner = "normalizers" if key == "normalizer" else "pretokenizers"
                if not spec[key].get(inner):
                    spec[key] = None
    return Tokenizer.from_str(json.dumps(spec))


def retokenize(tokenizer: Any, texts: Sequence[str]) -> list[Retokenized]:
    """Encode peer response ``texts`` with the learner ``tokenizer`` (one batched call)."""
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise UsageError(f"retokenize: texts[{i}] is {type(text).__name__}, not a string")
    if not texts:
        return []
    encoder = continuation_encoder(tokenizer)
    table = byte_table(tokenizer)
    # Spans come from the byte table, so the batch is encoded without offset tracking where the
    # library offers that; a sequence whose ids do not spell its text is re-encoded with offsets.
    fast = getattr(encoder, "encode_batch_fast", encoder.encode_batch)
    encodings = fast(list(texts), add_special_tokens=False)
    id_lists = [enc.ids for enc in encodings]
    flat, tok_off = _flat_ids(id_lists, table.vocab_size, "retokenize")
    special = table.special[flat]
    lens = np.where(special, 0, table.lengths[flat])
    raw = gather_bytes(table, flat, lens)
    text_bytes = [t.encode("utf-8") for t in texts]
    # Per sequence: do the ids spell the text byte for byte (and carry no special token)?
    ends_b = np.cumsum(lens)
    byte_off = np.concatenate([[0], ends_b])[tok_off]
    n_bytes = np.fromiter((len(b) for b in text_bytes), dtype=np.int64, count=len(texts))
    n_special = np.bincount(np.repeat(np.arange(len(texts)), np.diff(tok_off))[special], minlength=len(texts))
    ok = (np.diff(byte_off) == n_bytes) & (n_special == 0)
    joined = b"".join(text_bytes)
    if ok.all() and raw.tobytes() != joined:
        ok[:] = [raw[byte_off[i]:byte_off[i + 1]].tobytes() == text_bytes[i] for i in range(len(texts))]
    elif not ok.all():
        ok &= np.array([bool(ok[i]) and raw[byte_off[i]:byte_off[i + 1]].tobytes() == text_bytes[i]
                        for i in range(len(texts))])
    char_start = (raw & 0xC0) != 0x80
    spans = char_spans(char_start, ends_b - lens, ends_b)
    chars_before = np.concatenate([[0], np.cumsum(char_start)])[byte_off]
    spans -= np.repeat(chars_before[:-1], np.diff(tok_off))[:, None]
    spans = spans.astype(np.int32)
    out = []
    for i, text in enumerate(texts):
        if ok[i]:
            out.append(Retokenized(ids=id_lists[i], spans=spans[tok_off[i]:tok_off[i + 1]]))
        else:
            full = encoder.encode(text, add_special_tokens=False)
            offsets = np.asarray(full.offsets, dtype=np.int32).reshape(-1, 2)
            out.append(Retokenized(ids=full.ids, spans=offsets, from_offsets=True))
    return out
