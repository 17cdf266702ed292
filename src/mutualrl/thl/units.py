"""Alignment units: one partition of a response text shared by every tokenizer.

Paper App. "Detailed Logits Word Alignment" (Alg. WordSpans) anchors alignment on
whitespace-delimited words; App. "THL alignment diagnostics" (Non-whitespace languages)
switches to per-character units for CJK. We build one *partition* of the characters:

- a unit is a maximal non-whitespace run (``units="word"``), or a single non-whitespace
  character (``"char"``), or (``"auto"``) a word whose runs of CJK / no-space-script
  characters are cut into single characters (Western words stay words in mixed text);
- every whitespace run belongs to the FOLLOWING unit (Alg. PerTokenWordMapBySegments uses
  segments ``text[prev_end:end]``), leading whitespace to the first unit, trailing
  whitespace to the last; an all-whitespace text is one unit.

Tokens map to units by the non-whitespace characters they cover (a whitespace-only or
empty token goes to the unit owning its position), so a token covers a contiguous range
``[first, last]`` of units. Everything is numpy over code-point arrays: no Python loop
over words or characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mutualrl.errors import UsageError

UNIT_MODES = ("auto", "word", "char")

# Code points Python's str.isspace() accepts (regex \s in WordSpans); all lie below U+3001.
_WS_LUT = np.array([chr(c).isspace() for c in range(0x3001)], dtype=bool)

# Scripts written without spaces between words: CJK ideographs and symbols, kana, Hangul,
# Bopomofo, full-width forms, and Thai/Lao/Myanmar/Khmer.
_NO_SPACE_RANGES = np.array(
    [
        (0x0E00, 0x0EFF),  # Thai, Lao
        (0x1000, 0x109F),  # Myanmar
        (0x1100, 0x11FF),  # Hangul Jamo
        (0x1780, 0x17FF),  # Khmer
        (0x2E80, 0x2FFF),  # CJK radicals, Kangxi, ideographic description
        (0x3001, 0x33FF),  # CJK symbols and punctuation (not U+3000, a space), kana, Bopomofo, Hangul jamo, enclosed
        (0x3400, 0x4DBF),  # CJK extension A
        (0x4E00, 0x9FFF),  # CJK unified ideographs
        (0xA960, 0xA97F),  # Hangul Jamo extended A
        (0xAC00, 0xD7FF),  # Hangul syllables, Jamo extended B
        (0xF900, 0xFAFF),  # CJK compatibility ideographs
        (0xFE30, 0xFE4F),  # CJK compatibility forms
        (0xFF00, 0xFFEF),  # half-width and full-width forms
        (0x1B000, 0x1B16F),  # kana supplement/extended
        (0x20000, 0x3134F),  # CJK extensions B-G
    ],
    dtype=np.int64,
)


def codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4").astype(np.int64)


def whitespace_mask(cps: np.ndarray) -> np.ndarray:
    return (cps <= 0x3000) & _WS_LUT[np.minimum(cps, 0x3000)]


def no_space_script_mask(cps: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(_NO_SPACE_RANGES[:, 0], cps, side="right") - 1
    return (idx >= 0) & (cps <= _NO_SPACE_RANGES[np.maximum(idx, 0), 1])


def has_no_space_script(text: str) -> bool:
    return bool(no_space_script_mask(codepoints(text)).any()) if text else False


@dataclass
class Partition:
    """Units of one text, plus the per-character tables that map spans to units."""

    n_chars: int
    n_units: int
    char_unit: np.ndarray  # int64 [n_chars]: unit owning each character (nondecreasing)
    next_nonws: np.ndarray  # int64 [n_chars]: first non-whitespace char at or after i (n_chars if none)
    prev_nonws: np.ndarray  # int64 [n_chars]: last non-whitespace char at or before i (-1 if none)
    nonws_before: np.ndarray  # int64 [n_chars + 1]: number of non-whitespace chars before i
    _bounds: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def unit_ranges(self, spans: np.ndarray, owner_pos: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """First and last unit each span ``[s, e)`` covers (spans must be valid, non-special).

        A span without non-whitespace characters belongs to the unit owning character
        ``owner_pos`` (default: its start, clipped to the last character).
        """
        s = spans[:, 0]
        e = spans[:, 1]
        n = self.n_chars
        has_nonws = self.nonws_before[e] > self.nonws_before[s]
        owner = self.char_unit[np.minimum(s, n - 1) if owner_pos is None else owner_pos]
        first = np.where(has_nonws, self.char_unit[np.minimum(self.next_nonws[np.minimum(s, n - 1)], n - 1)], owner)
        last = np.where(has_nonws, self.char_unit[np.maximum(self.prev_nonws[np.maximum(e - 1, 0)], 0)], owner)
        return first, last

    def merged(self, first: np.ndarray, last: np.ndarray) -> tuple[Partition, np.ndarray]:
        """Merge every run of units that one span covers; returns the new partition and old->new ids."""
        new_id = np.arange(self.n_units, dtype=np.int64)
        multi = last > first
        if multi.any():
            depth = np.zeros(self.n_units + 1, dtype=np.int64)
            np.add.at(depth, first[multi], 1)
            np.add.at(depth, last[multi], -1)
            joined = np.cumsum(depth)[: self.n_units - 1] > 0  # edge u|u+1 lies inside a span
            new_id = np.concatenate([[0], np.cumsum(~joined)]).astype(np.int64)
        n_new = int(new_id[-1]) + 1 if self.n_units else 0
        part = Partition(
            n_chars=self.n_chars,
            n_units=n_new,
            char_unit=new_id[self.char_unit] if self.n_chars else self.char_unit,
            next_nonws=self.next_nonws,
            prev_nonws=self.prev_nonws,
            nonws_before=self.nonws_before,
        )
        return part, new_id

    def unit_char_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``[start, end)`` character range of each unit (whitespace included; every unit owns a character)."""
        if self._bounds is None:
            cu = self.char_unit
            starts = np.concatenate([[0], np.flatnonzero(cu[1:] != cu[:-1]) + 1]) if self.n_chars else np.zeros(0, np.int64)
            ends = np.concatenate([starts[1:], [self.n_chars]]) if self.n_chars else starts
            self._bounds = (starts.astype(np.int64), ends.astype(np.int64))
        return self._bounds


def partition(text: str, units: str = "auto") -> Partition:
    """The unit partition of ``text`` (see module docstring)."""
    return partition_batch([text], units)[0]


@dataclass
class BatchPartition:
    """The partitions of a batch of texts, built at once over their concatenation.

    Units never cross texts; ``unit_offsets[i]:unit_offsets[i + 1]`` are text ``i``'s units and
    ``char_offsets[i]:char_offsets[i + 1]`` its characters in ``whole``.
    """

    whole: Partition
    char_offsets: np.ndarray  # int64 [B + 1]
    unit_offsets: np.ndarray  # int64 [B + 1]

    def __len__(self) -> int:
        return len(self.char_offsets) - 1

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i: int) -> Partition:
        """Text ``i``'s own partition (positions relative to that text)."""
        a, b = int(self.char_offsets[i]), int(self.char_offsets[i + 1])
        u0, u1 = int(self.unit_offsets[i]), int(self.unit_offsets[i + 1])
        w = self.whole
        n = b - a
        return Partition(
            n_chars=n,
            n_units=u1 - u0,
            char_unit=w.char_unit[a:b] - u0,
            next_nonws=np.minimum(w.next_nonws[a:b] - a, n),
            prev_nonws=np.maximum(w.prev_nonws[a:b] - a, -1),
            nonws_before=w.nonws_before[a:b + 1] - w.nonws_before[a],
        )


def partition_batch(texts: list[str], units: str = "auto") -> BatchPartition:
    """Partitions of every text in one pass over their concatenation (no Python loop per text).

    Each text's first character starts a unit; whitespace joins the following unit *of the
    same text* (trailing whitespace: the text's last unit); an all-whitespace text is one unit
    anchored at its first character.
    """
    if units not in UNIT_MODES:
        raise UsageError(f"unknown THL unit mode {units!r}; expected one of {', '.join(UNIT_MODES)}")
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    char_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cps = codepoints("".join(texts))
    n = len(cps)
    ws = whitespace_mask(cps)
    nonws = ~ws
    if units == "word":
        cut = np.zeros(n, dtype=bool)
    elif units == "char":
        cut = np.ones(n, dtype=bool)
    else:
        cut = no_space_script_mask(cps)
    text_start = np.zeros(n, dtype=bool)
    text_start[char_offsets[:-1][lengths > 0]] = True
    text_id = np.repeat(np.arange(len(texts)), lengths)
    nonws_before = np.concatenate([[0], np.cumsum(nonws)]).astype(np.int64)
    # A text without any non-whitespace character gets one unit, anchored at its first character.
    text_has_nonws = (nonws_before[char_offsets[1:]] - nonws_before[char_offsets[:-1]]) > 0
    anchor = nonws | (text_start & ~text_has_nonws[text_id]) if n else nonws
    prev_ws = np.concatenate([[True], ws[:-1]]) if n else ws
    prev_cut = np.concatenate([[False], cut[:-1]]) if n else cut
    starts = anchor & (prev_ws | cut | prev_cut | text_start)
    unit_of_anchor = np.cumsum(starts) - 1
    n_units = int(starts.sum())
    arange = np.arange(n, dtype=np.int64)
    next_nonws = np.minimum.accumulate(np.where(nonws, arange, n)[::-1])[::-1] if n else arange
    prev_nonws = np.maximum.accumulate(np.where(nonws, arange, -1)) if n else arange
    if n:
        next_anchor = np.minimum.accumulate(np.where(anchor, arange, n)[::-1])[::-1]
        prev_anchor = np.maximum.accumulate(np.where(anchor, arange, -1))
        # Whitespace belongs to the next unit of its own text, else (trailing) to the text's last unit.
        same_text = (next_anchor < n) & (text_id[np.minimum(next_anchor, n - 1)] == text_id)
        char_unit = np.where(same_text, unit_of_anchor[np.minimum(next_anchor, n - 1)],
                             unit_of_anchor[np.maximum(prev_anchor, 0)]).astype(np.int64)
    else:
        char_unit = np.zeros(0, dtype=np.int64)
    units_per_text = np.bincount(text_id[starts], minlength=len(texts)) if n else np.zeros(len(texts), np.int64)
    unit_offsets = np.concatenate([[0], np.cumsum(units_per_text)]).astype(np.int64)
    whole = Partition(n, n_units, char_unit, next_nonws, prev_nonws, nonws_before)
    return BatchPartition(whole=whole, char_offsets=char_offsets, unit_offsets=unit_offsets)
