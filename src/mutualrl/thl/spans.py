"""Text and character spans of the tokens a policy actually generated.

THL aligns traces over the shared response *text* (paper Sec. "Tokenizer Heterogeneity
Layer", operation (1)), so every token needs the character span it covers. We compute
spans from the generated ids themselves, never from a re-encoding (a sampled sequence may
be a non-canonical tokenization of its own text), through a per-tokenizer table of the
exact bytes each token id stands for:

- byte-level BPE (GPT-2, Qwen, Llama-3, Tekken): invert GPT-2's ``bytes_to_unicode`` map;
- SentencePiece-style (Llama-2, Mistral v1, Phi-3): ``"▁"`` is a space, ``<0xNN>`` is byte NN;
- added (non-special) tokens: their content as UTF-8;
- special tokens (EOS, pad, chat markers): no bytes, span ``(-1, -1)``, flagged ``special``.

The response text is the UTF-8 decoding of the concatenated bytes. It is the continuation
of the prompt text, so a SentencePiece first token ``"▁The"`` gives ``" The"``: unlike
``tokenizer.decode``, we do not strip that leading space (it is a real space after the
prompt). A token that ends inside a multi-byte character shares that character with the
next token (both spans contain it). Invalid UTF-8 (a generation cut inside a character)
becomes one U+FFFD per invalid byte.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mutualrl.errors import UsageError

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@dataclass(frozen=True)
class DecodedText:
    """A token sequence's text and the character span of each token.

    ``spans[i] = (start, end)`` indexes ``text`` (Python ``str`` positions); special tokens
    have ``(-1, -1)`` and ``special[i] = True``.
    """

    text: str
    spans: np.ndarray  # int32 [n, 2]
    special: np.ndarray  # bool [n]


@dataclass(frozen=True)
class ByteTable:
    """The bytes of every token id of one tokenizer, as one blob plus offsets (vectorised gathers)."""

    blob: np.ndarray  # uint8, all token bytes concatenated
    offsets: np.ndarray  # int64 [V]: start of token id's bytes in blob
    lengths: np.ndarray  # int64 [V]
    special: np.ndarray  # bool [V]
    kind: str  # "byte-level" | "sentencepiece" | "generic"

    @property
    def vocab_size(self) -> int:
        return len(self.lengths)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


_BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}


def _decoder_kinds(node: Any) -> set[str]:
    if not isinstance(node, dict):
        return set()
    kinds = {str(node.get("type"))}
    for child in node.get("decoders", []) or []:
        kinds |= _decoder_kinds(child)
    return kinds


def _backend(tokenizer: Any) -> Any:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None:
        raise UsageError(
            f"THL needs a fast (Rust `tokenizers`-backed) tokenizer; got {type(tokenizer).__name__}, which has none"
        )
    return backend


@functools.lru_cache(maxsize=32)
def byte_table(tokenizer: Any) -> ByteTable:
    """Build (once per tokenizer object) the bytes of every token id."""
    backend = _backend(tokenizer)
    spec = json.loads(backend.to_str())
    kinds = _decoder_kinds(spec.get("decoder"))
    if "ByteLevel" in kinds:
        kind = "byte-level"
    elif "Metaspace" in kinds or "ByteFallback" in kinds or "Replace" in kinds:
        kind = "sentencepiece"
    else:
        kind = "generic"
    vocab: dict[str, int] = backend.get_vocab(with_added_tokens=True)
    added = {a["id"]: a for a in spec.get("added_tokens", [])}
    size = max(max(vocab.values(), default=-1), max(added, default=-1)) + 1
    pieces: list[bytes] = [b""] * size
    special = np.zeros(size, dtype=bool)
    for piece, idx in vocab.items():
        entry = added.get(idx)
        if entry is not None:
            if entry.get("special", False):
                special[idx] = True
            else:
                pieces[idx] = entry["content"].encode("utf-8")
            continue
        if kind == "byte-level":
            try:
                pieces[idx] = bytes(_BYTE_DECODER[c] for c in piece)
            except KeyError:  # a piece outside the byte alphabet (rare, model-specific): take it literally
                pieces[idx] = piece.encode("utf-8")
        elif kind == "sentencepiece":
            m = _BYTE_FALLBACK.match(piece)
            pieces[idx] = bytes([int(m.group(1), 16)]) if m else piece.replace("▁", " ").encode("utf-8")
        else:
            pieces[idx] = backend.decode([idx], skip_special_tokens=False).encode("utf-8")
    # Ids the tokenizer names as special but that are not added tokens (e.g. an <unk> piece) stay text.
    for idx in getattr(tokenizer, "all_special_ids", []) or []:
        if 0 <= idx < size and idx in added:
            special[idx] = True
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=size)
    offsets = np.zeros(size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    blob = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    return ByteTable(blob=blob, offsets=offsets, lengths=lengths, special=special, kind=kind)


def _as_ids(token_ids: Any, vocab_size: int, where: str) -> np.ndarray:
    ids = np.asarray(token_ids, dtype=np.int64).reshape(-1) if len(token_ids) else np.zeros(0, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(ids[(ids < 0) | (ids >= vocab_size)][0])
        raise UsageError(f"{where}: token id {bad} is outside the tokenizer's vocabulary (0..{vocab_size - 1})")
    return ids


def gather_bytes(table: ByteTable, ids: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
    """The concatenated bytes of ``ids`` (uint8 array), without a Python loop over tokens."""
    lens = table.lengths[ids] if lengths is None else lengths
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.uint8)
    starts_out = np.cumsum(lens) - lens
    index = np.repeat(table.offsets[ids] - starts_out, lens) + np.arange(total, dtype=np.int64)
    return table.blob[index]


def char_spans(char_start: np.ndarray, byte_starts: np.ndarray, byte_ends: np.ndarray) -> np.ndarray:
    """Character spans of byte ranges, given which bytes start a character.

    A span ending inside a character includes that character; an empty byte span maps to an
    empty character span at its position.
    """
    n = len(char_start)
    # chars_before[b] = number of characters that start before byte b.
    chars_before = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(char_start, out=chars_before[1:])
    nonempty = byte_ends > byte_starts
    starts = np.where(nonempty, chars_before[np.minimum(byte_starts + 1, n)] - 1, chars_before[byte_starts])
    ends = np.where(nonempty, chars_before[byte_ends], chars_before[byte_starts])
    return np.stack([starts, ends], axis=1)


def spans_from_bytes(raw: np.ndarray, byte_starts: np.ndarray, byte_ends: np.ndarray) -> tuple[str, np.ndarray]:
    """Decode ``raw`` as UTF-8 and map each ``[byte_start, byte_end)`` to a character span."""
    text, char_start = _decode(raw)
    return text, char_spans(char_start, byte_starts, byte_ends)


def _decode(raw: np.ndarray) -> tuple[str, np.ndarray]:
    """``raw`` as text (:func:`_decode_lossy` where it is not UTF-8) and which bytes start a character."""
    data = raw.tobytes()
    try:
        return data.decode("utf-8"), (raw & 0xC0) != 0x80
    except UnicodeDecodeError:
        return _decode_lossy(data)


def _decode_lossy(data: bytes) -> tuple[str, np.ndarray]:
    """Invalid UTF-8: one U+FFFD per invalid byte, so characters still map to bytes one-to-one."""
    escaped = data.decode("utf-8", errors="surrogateescape")
    flags: list[bool] = []
    chars: list[str] = []
    for ch in escaped:
        if "\udc80" <= ch <= "\udcff":
            flags.append(True)
            chars.append("\ufffd")
        else:
            n = len(ch.encode("utf-8"))
            flags.extend([True] + [False] * (n - 1))
            chars.append(ch)
    return "".join(chars), np.asarray(flags, dtype=bool)


def decode_with_spans(tokenizer: Any, token_ids: Sequence[int] | np.ndarray) -> DecodedText:
    """Text of ``token_ids`` and each token's character span (specials: ``(-1, -1)``, excluded from text)."""
    table = byte_table(tokenizer)
    ids = _as_ids(token_ids, table.vocab_size, "decode_with_spans")
    return _decode_ids(table, ids)


def _decode_ids(table: ByteTable, ids: np.ndarray) -> DecodedText:
    special = table.special[ids]
    lens = np.where(special, 0, table.lengths[ids])
    ends_b = np.cumsum(lens)
    starts_b = ends_b - lens
    raw = gather_bytes(table, ids, lens)
    text, spans = spans_from_bytes(raw, starts_b, ends_b)
    spans[special] = -1
    return DecodedText(text=text, spans=spans.astype(np.int32), special=special)


def _flat_ids(batch_ids: Any, vocab_size: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """All ids of a batch in one array, and each sequence's token offset into it; ``batch_ids`` is a sequence of
    id sequences, or flat ``values`` with ``offsets`` (a ``mutualrl.see.Ragged``: no Python work per token)."""
    if hasattr(batch_ids, "values") and hasattr(batch_ids, "offsets"):
        flat = np.asarray(batch_ids.values, dtype=np.int64)  # [total]
        tok_off = np.asarray(batch_ids.offsets, dtype=np.int64)  # [rows + 1]
    else:
        counts = np.fromiter((len(x) for x in batch_ids), dtype=np.int64, count=len(batch_ids))  # [rows]
        flat = np.fromiter(itertools.chain.from_iterable(batch_ids), dtype=np.int64, count=int(counts.sum()))
        tok_off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)  # [rows + 1]
    if flat.size:
        bad = (flat < 0) | (flat >= vocab_size)
        if bad.any():
            j = int(np.argmax(bad))
            i = int(np.searchsorted(tok_off, j, side="right") - 1)
            raise UsageError(f"{where}[{i}]: token id {int(flat[j])} is outside the tokenizer's vocabulary "
                             f"(0..{vocab_size - 1})")
    return flat, tok_off


@dataclass(frozen=True)
class _BatchBytes:
    """A batch's generated ids as bytes: what the text-only and the span decodes share."""

    table: ByteTable
    flat: np.ndarray  # [total] ids
    tok_off: np.ndarray  # [rows + 1] token offsets
    special: np.ndarray  # [total] bool
    ends_b: np.ndarray  # [total] byte end of each token
    lens: np.ndarray  # [total] bytes of each token
    raw: np.ndarray  # [bytes] uint8
    byte_off: np.ndarray  # [rows + 1] byte offsets
    char_start: np.ndarray  # [bytes] bool: the byte starts a character
    whole: str | None  # the batch's text in one decode, or None: decode row by row


def _batch_bytes(tokenizer: Any, batch_ids: Any, where: str) -> _BatchBytes:
    table = byte_table(tokenizer)
    flat, tok_off = _flat_ids(batch_ids, table.vocab_size, where)
    special = table.special[flat]  # [total]
    lens = np.where(special, 0, table.lengths[flat])  # [total]
    ends_b = np.cumsum(lens)  # [total]
    raw = gather_bytes(table, flat, lens)  # [bytes]
    byte_off = np.concatenate([[0], ends_b])[tok_off]  # [rows + 1]
    char_start = (raw & 0xC0) != 0x80  # [bytes]
    # One decode for the batch, unless a sequence ends or starts inside a character (then the
    # bytes are only valid, or only invalid, across the boundary): decode those one by one.
    boundary = byte_off[:-1][byte_off[:-1] < len(raw)]
    try:
        whole = raw.tobytes().decode("utf-8") if not (~char_start[boundary]).any() else None
    except UnicodeDecodeError:
        whole = None
    return _BatchBytes(table, flat, tok_off, special, ends_b, lens, raw, byte_off, char_start, whole)


def batch_decode_text(tokenizer: Any, batch_ids: Any) -> list[str]:
    """The texts :func:`batch_decode_with_spans` gives, character for character, without the spans (a regime
    whose readers need no spans publishes none)."""
    b = _batch_bytes(tokenizer, batch_ids, "batch_decode_text")
    rows = range(len(b.tok_off) - 1)
    if b.whole is None:
        return [_decode(b.raw[b.byte_off[i]:b.byte_off[i + 1]])[0] for i in rows]
    chars_before = np.concatenate([[0], np.cumsum(b.char_start)])[b.byte_off]  # [rows + 1]
    return [b.whole[chars_before[i]:chars_before[i + 1]] for i in rows]


def batch_decode_with_spans(tokenizer: Any, batch_ids: Any) -> list[DecodedText]:
    """:func:`decode_with_spans` for a batch (a sequence of id sequences, or a ``Ragged``), computed over the whole
    batch at once."""
    b = _batch_bytes(tokenizer, batch_ids, "batch_decode_with_spans")
    rows = range(len(b.tok_off) - 1)
    if b.whole is None:
        return [_decode_ids(b.table, b.flat[b.tok_off[i]:b.tok_off[i + 1]]) for i in rows]
    spans = char_spans(b.char_start, b.ends_b - b.lens, b.ends_b)  # [total, 2]
    chars_before = np.concatenate([[0], np.cumsum(b.char_start)])[b.byte_off]  # [rows + 1]
    spans -= np.repeat(chars_before[:-1], np.diff(b.tok_off))[:, None]
    spans[b.special] = -1
    spans = spans.astype(np.int32)
    return [
        DecodedText(text=b.whole[chars_before[i]:chars_before[i + 1]], spans=spans[b.tok_off[i]:b.tok_off[i + 1]],
                    special=b.special[b.tok_off[i]:b.tok_off[i + 1]])
        for i in rows
    ]
