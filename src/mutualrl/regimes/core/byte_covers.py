"""A tokenized model's exact next-byte distribution: the sum over every tokenization that covers the text so far.

A model over tokens is a model over byte strings: the probability that its text begins with the bytes ``b_{<o}`` is
the mass of every token sequence whose bytes begin with them (Phan et al. 2024, arXiv 2410.09303, "Exact Byte-Level
Probabilities from Tokenized Language Models"; their *cover encodings*). Such a sequence is a tokenization ``s`` of
a prefix ``b_{<i}`` (a *state*, ``i ≤ o``) followed by one token whose bytes begin with ``b_{i:o}``; a last token
may run past ``o`` (``"12"`` covers ``"1"``). So, with ``P(s)`` the product of the model's token probabilities
along ``s`` and ``S(i)`` the states ending at ``i``:

    P(b_{<o} · c) = Σ_{i ≤ o} Σ_{s ∈ S(i)} P(s) Σ_{v : bytes(v) begin with b_{i:o} · c} π(v | s)      c a byte
    P(b_{<o} · END) = Σ_{s ∈ S(o)} P(s) π(EOS | s)          (OTHER likewise: a special or empty token)
    q(c | b_{<o}) = P(b_{<o} · c) / Σ_{c'} P(b_{<o} · c')

The 258 symbols sum to ``P(b_{<o})`` (a token that ends exactly at ``o`` leads to a state of ``S(o)``, whose next
tokens are counted there), so ``q`` is the model's next-byte distribution, defined at every byte offset, inside a
token as at a boundary, whatever the vocabulary: two models that give every text the same probability have the same
``q`` at every offset. Non-canonical tokenizations are states like any other (a model that writes ``"12"`` as
``"1" "2"`` sometimes has both in ``S(2)``).

The states are enumerated per offset (:func:`find_covers`): each state's next-token distribution (the given tokenization's prefixes
from a single forward; a state no earlier forward holds is continued to the text's end and forwarded, its
descendants along that continuation with it) extends it by every token
whose bytes are the text's next bytes. A state whose probability is below ``floor`` times the most likely state of its
offset is dropped with its descendants (``floor`` 0: none, exact); so are the states past ``max_states`` per offset,
least likely first. :attr:`Covers.dropped` is the largest share of an offset's state mass dropped.
:func:`find_covers_together` runs several texts' enumerations side by side, each round's sequences of every text in
one call of ``forward`` (a batch's texts: one padded forward per round, not one per text).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mutualrl.regimes.core.next_bytes import END, OTHER, SYMBOLS, first_byte_symbols


@dataclass
class TokenPieces:
    """A vocabulary's bytes: ``pieces[v]`` the bytes token ``v`` writes (``b""`` for a token that writes none: the
    EOS, a special token), ``symbols`` int64 ``[V]`` each token's next-byte symbol (its first byte, END, OTHER)."""

    pieces: list[bytes]
    symbols: torch.Tensor
    _exact: dict[bytes, list[int]] = field(default_factory=dict, repr=False)
    _sorted: list[bytes] = field(default_factory=list, repr=False)
    _sorted_ids: list[int] = field(default_factory=list, repr=False)
    _extending: dict[bytes, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        writing = sorted((piece, v) for v, piece in enumerate(self.pieces)
                         if piece and int(self.symbols[v]) not in (END, OTHER))
        self._sorted = [piece for piece, _ in writing]
        self._sorted_ids = [v for _, v in writing]
        for piece, v in writing:
            self._exact.setdefault(piece, []).append(v)
        self.longest = max((len(piece) for piece in self._sorted), default=0)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, vocab_size: int, stop_ids: Sequence[int] = ()) -> TokenPieces:
        """THL's byte table of ``tokenizer`` for a model ``vocab_size`` wide (ids past the tokenizer: no bytes)."""
        from mutualrl.thl.spans import byte_table

        table = byte_table(tokenizer)
        symbols = first_byte_symbols(tokenizer, vocab_size, stop_ids)  # [V]
        pieces = [b""] * vocab_size
        for v in range(min(vocab_size, table.vocab_size)):
            if int(symbols[v]) not in (END, OTHER):
                start = int(table.offsets[v])
                pieces[v] = table.blob[start:start + int(table.lengths[v])].tobytes()
        return cls(pieces, symbols)

    def exact(self, piece: bytes) -> list[int]:
        """The tokens that write exactly ``piece``."""
        return self._exact.get(piece, [])

    def extending(self, prefix: bytes) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens whose bytes begin with ``prefix`` (non-empty) and are longer, and each one's byte after it:
        (int64 ``[m]``, int64 ``[m]``)."""
        cached = self._extending.get(prefix)
        if cached is None:
            lo = bisect.bisect_right(self._sorted, prefix)  # prefix itself (exact) sorts first: left out
            hi = bisect.bisect_left(self._sorted, prefix + b"\xff" * (self.longest + 1), lo)
            ids = [v for piece, v in zip(self._sorted[lo:hi], self._sorted_ids[lo:hi], strict=True)
                   if piece.startswith(prefix)]
            nxt = [self.pieces[v][len(prefix)] for v in ids]
            cached = (torch.tensor(ids, dtype=torch.long), torch.tensor(nxt, dtype=torch.long))  # [m], [m]
            self._extending[prefix] = cached
        return cached

    def text_of(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self.pieces[int(v)] for v in tokens)


Forward = Callable[[list[tuple[int, ...]]], list[torch.Tensor]]
"""``forward(sequences)``: for each token sequence ``s`` (after the model's prompt), its next-token log-probs after
every prefix of it, ``[len(s) + 1, V]`` (row 0: after the prompt alone)."""


@dataclass
class Covers:
    """The states of one text (:func:`find_covers`): ``tokens[s]`` each state's token sequence, ``ends[s]`` the
    byte offset it ends at, ``parents[s]`` the state it extends (-1: the empty state), ``branches`` the sequences
    forwarded, ``at[s]`` = (branch, position) where the state's next-token log-probs are, ``logps`` ``[S, V]`` those
    log-probs (no gradient), ``dropped`` the largest share of an offset's state mass left out."""

    tokens: list[tuple[int, ...]]
    ends: list[int]
    parents: list[int]
    branches: list[tuple[int, ...]]
    at: list[tuple[int, int]]
    logps: torch.Tensor
    dropped: float


def _extension(state: tuple[int, ...], end: int, text: bytes, pieces: TokenPieces,
               given: Sequence[int]) -> tuple[int, ...]:
    """``state`` continued to the text's end where it can be (a forward of it gives its descendants' log-probs too):
    the longest matching token until a boundary of ``given`` (a tokenization of the text), then ``given``'s tokens."""
    boundaries, offset = {}, 0
    for index, v in enumerate(given):
        boundaries[offset] = index
        offset += len(pieces.pieces[int(v)])
    out = list(state)
    while end < len(text) and end not in boundaries:
        step = next((n for n in range(min(pieces.longest, len(text) - end), 0, -1)
                     if pieces.exact(text[end:end + n])), 0)
        if step == 0:
            return tuple(out)
        out.append(pieces.exact(text[end:end + step])[0])
        end += step
    if end < len(text):
        out.extend(int(v) for v in given[boundaries[end]:])
    return tuple(out)


def find_covers(text: bytes, pieces: TokenPieces, forward: Forward, given: Sequence[int] = (), floor: float = 0.0,
                max_states: int = 0) -> Covers:
    """Every tokenization of every prefix of ``text`` the model gives mass (the states of the module docstring),
    offset by offset, with their next-token log-probs; ``given``: a tokenization of ``text`` (the sampled or the
    canonical one), forwarded first. ``floor`` > 0 / ``max_states`` > 0: the approximations of the module docstring."""
    return find_covers_together([text], pieces, lambda requests: forward([sequence for _, sequence in requests]),
                                [given], floor, max_states)[0]


RowsForward = Callable[[list[tuple[int, tuple[int, ...]]]], list[torch.Tensor]]
"""``forward(requests)``: for each ``(text index, token sequence)``, the sequence's next-token log-probs after every
prefix of it, after that text's prompt, ``[len(s) + 1, V]`` (a :data:`Forward` over several prompts at once)."""


def find_covers_together(texts: Sequence[bytes], pieces: TokenPieces, forward: RowsForward,
                         given: Sequence[Sequence[int]], floor: float = 0.0, max_states: int = 0) -> list[Covers]:
    """:func:`find_covers` of each text (``given[i]`` a tokenization of ``texts[i]``), the enumerations run side by
    side: each round's sequences of every text go to one ``forward`` (one padded batch instead of one per text)."""
    walks = {i: _enumerate(text, pieces, tokens, floor, max_states)
             for i, (text, tokens) in enumerate(zip(texts, given, strict=True))}
    asked = {i: next(walk) for i, walk in walks.items()}
    found: dict[int, Covers] = {}
    while asked:
        requests = [(i, sequence) for i, sequences in asked.items() for sequence in sequences]
        outputs = iter(forward(requests))
        answers = {i: [next(outputs).detach() for _ in sequences] for i, sequences in asked.items()}
        asked = {}
        for i, rows in answers.items():
            try:
                asked[i] = walks[i].send(rows)
            except StopIteration as stop:
                found[i] = stop.value
    return [found[i] for i in range(len(texts))]


def _enumerate(text: bytes, pieces: TokenPieces, given: Sequence[int], floor: float,
               max_states: int) -> Generator[list[tuple[int, ...]], list[torch.Tensor], Covers]:
    """:func:`find_covers`' walk over the offsets, as a generator: it yields the token sequences it needs forwarded
    and is sent their log-probs (``[len(s) + 1, V]`` each); it returns the covers."""
    cache: dict[tuple[int, ...], tuple[int, int]] = {}
    branches: list[tuple[int, ...]] = []
    rows: list[torch.Tensor] = []

    def store(sequences: list[tuple[int, ...]], outputs: list[torch.Tensor]) -> None:
        for sequence, out in zip(sequences, outputs, strict=True):
            branches.append(sequence)
            rows.append(out)
            for position in range(len(sequence) + 1):
                cache.setdefault(sequence[:position], (len(branches) - 1, position))

    first = [tuple(int(v) for v in given)]
    store(first, (yield first))
    at_offset: list[list[tuple[tuple[int, ...], float, int]]] = [[] for _ in range(len(text) + 1)]
    at_offset[0].append(((), 0.0, -1))
    states: list[tuple[int, ...]] = []
    ends, parents, at, dropped = [], [], [], 0.0
    for offset in range(len(text) + 1):
        found = sorted((entry for entry in at_offset[offset] if entry[1] > float("-inf")), key=lambda e: -e[1])
        if not found:
            continue
        best = found[0][1]
        keep = [entry for entry in found if floor <= 0 or entry[1] >= best + math.log(floor)]
        if max_states > 0:
            keep = keep[:max_states]
        if len(keep) < len(found):
            total = torch.logsumexp(torch.tensor([entry[1] for entry in found]), 0)
            kept = torch.logsumexp(torch.tensor([entry[1] for entry in keep]), 0)
            dropped = max(dropped, float(1.0 - torch.exp(kept - total)))
        missing = list(dict.fromkeys(_extension(state, offset, text, pieces, given)
                                     for state, _, _ in keep if state not in cache))
        if missing:
            store(missing, (yield missing))
        for state, logp, parent in keep:
            index = len(states)
            states.append(state)
            ends.append(offset)
            parents.append(parent)
            at.append(cache[state])
            branch, position = cache[state]
            _extend(state, logp, index, rows[branch][position], offset, text, pieces, at_offset)
    logps = torch.stack([rows[b][p] for b, p in at]) if at else torch.zeros((0, 0))  # [S, V]
    return Covers(states, ends, parents, branches, at, logps, dropped)


def _extend(state: tuple[int, ...], logp: float, index: int, logps: torch.Tensor, offset: int, text: bytes,
            pieces: TokenPieces, at_offset: list[list[tuple[tuple[int, ...], float, int]]]) -> None:
    """Add to ``at_offset`` each child of ``state`` (at ``offset``, log-prob ``logp``, number ``index``; its next-token
    log-probs ``logps`` ``[V]``): the state and one token whose bytes are the text's next bytes."""
    for n in range(1, min(pieces.longest, len(text) - offset) + 1):
        piece = text[offset:offset + n]
        for v in pieces.exact(piece):
            at_offset[offset + n].append((state + (v,), logp + float(logps[v]), index))
        if not len(pieces.extending(piece)[0]):
            break  # no token is longer and begins with these bytes


def cover_next_byte_logps(covers: Covers, text: bytes, pieces: TokenPieces,
                          state_logps: torch.Tensor | None = None) -> torch.Tensor:
    """``log q(c | b_{<o})`` ``[len(text) + 1, 258]`` at every byte offset ``o`` of ``text`` (module docstring), from
    each state's next-token log-probs ``state_logps`` ``[S, V]`` (``covers.logps`` where None; with a gradient, the
    result has it). An offset no state reaches (the model cannot write the text) is ``-inf`` throughout.

    Every term ``P(s) π(v | s)`` goes to its cell ``(o, c)`` in one flat log-sum-exp: each state's every token to
    the cell of its own offset and the token's symbol, and each token that runs past a later offset (one gather for
    all of them: the states of one offset share the text ahead, so their tokens are listed once per offset)."""
    logps = covers.logps if state_logps is None else state_logps  # [S, V]
    device, offsets = logps.device, len(text) + 1
    path = _path_logps(covers, logps)  # [S]
    ends = torch.tensor(covers.ends, dtype=torch.long, device=device)  # [S]
    cells = [(ends[:, None] * SYMBOLS + pieces.symbols.to(device)[None, :]).flatten()]  # [S·V] its next token here
    terms = [(path[:, None] + logps).flatten()]  # [S·V]
    states, tokens, running = _running_past(covers, text, pieces)  # [R] each, a token running past an offset
    if len(states):
        states, tokens, running = states.to(device), tokens.to(device), running.to(device)
        cells.append(running)
        terms.append(path[states] + logps[states, tokens])  # [R]
    joint = _segment_logsumexp(torch.cat(terms), torch.cat(cells), offsets * SYMBOLS).view(offsets, SYMBOLS)
    reached = torch.isfinite(joint).any(-1, keepdim=True)  # [O, 1] some state writes the text this far
    norm = torch.logsumexp(torch.where(reached, joint, torch.zeros_like(joint)), -1, keepdim=True)  # [O, 1]
    return torch.where(reached, joint - norm, torch.full_like(joint, float("-inf")))  # [O, 258]


def _running_past(covers: Covers, text: bytes, pieces: TokenPieces) -> tuple[torch.Tensor, torch.Tensor,
                                                                              torch.Tensor]:
    """Each (state, token) whose token's bytes begin with the text from the state's offset to a later offset ``e``
    and are longer: the state, the token and its cell ``e · 258 + (its byte after e)`` (int64 ``[R]`` each)."""
    by_start: dict[int, list[int]] = {}
    for s, start in enumerate(covers.ends):
        by_start.setdefault(start, []).append(s)
    states, tokens, cells = [], [], []
    for start, members in by_start.items():
        group = torch.tensor(members, dtype=torch.long)  # [k]
        for end in range(start + 1, min(start + pieces.longest, len(text)) + 1):
            ids, nxt = pieces.extending(text[start:end])  # [m] each: a last token running past `end`
            if not len(ids):
                break  # no token runs past this prefix: none runs past a longer one
            states.append(group.repeat_interleave(len(ids)))  # [k·m]
            tokens.append(ids.repeat(len(members)))  # [k·m]
            cells.append((end * SYMBOLS + nxt).repeat(len(members)))  # [k·m]
    if not states:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    return torch.cat(states), torch.cat(tokens), torch.cat(cells)


def _path_logps(covers: Covers, logps: torch.Tensor) -> torch.Tensor:
    """``log P(s)`` ``[S]`` of each state: its parent's plus its last token's log-prob after the parent, summed one
    depth (token count) at a time, in the order a chain of additions would."""
    path = torch.zeros(len(covers.parents), dtype=logps.dtype, device=logps.device)  # [S]
    depths: dict[int, list[int]] = {}
    for s, tokens in enumerate(covers.tokens):
        if covers.parents[s] >= 0:
            depths.setdefault(len(tokens), []).append(s)
    for depth in sorted(depths):
        states = depths[depth]
        index = torch.tensor(states, dtype=torch.long, device=logps.device)  # [k]
        parents = torch.tensor([covers.parents[s] for s in states], dtype=torch.long, device=logps.device)  # [k]
        last = torch.tensor([covers.tokens[s][-1] for s in states], dtype=torch.long, device=logps.device)  # [k]
        path = path.index_put((index,), path[parents] + logps[parents, last])  # [S]
    return path


def _segment_logsumexp(terms: torch.Tensor, cells: torch.Tensor, size: int) -> torch.Tensor:
    """``log Σ_{r: cells[r] = c} exp(terms[r])`` ``[size]`` over the flat ``terms`` ``[R]``; ``-inf`` with no gradient
    (not NaN) where no term of a cell is finite."""
    peak = torch.full((size,), float("-inf"), dtype=terms.dtype, device=terms.device).scatter_reduce(
        0, cells, terms.detach(), reduce="amax")  # [size]
    safe = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))  # [size]
    total = torch.zeros_like(safe).index_add(0, cells, torch.exp(terms - safe[cells]))  # [size]
    written = total > 0
    out = safe + torch.log(torch.where(written, total, torch.ones_like(total)))  # [size]
    return torch.where(written, out, torch.full_like(out, float("-inf")))


def text_logp(covers: Covers, text: bytes, pieces: TokenPieces, finished: bool,
              state_logps: torch.Tensor | None = None) -> torch.Tensor:
    """The model's log-probability of the text over every tokenization: ``log Σ_{s ∈ S(n)} P(s) π(EOS | s)`` where
    the text ``finished``, else the mass of the tokenizations that write exactly it, ``log Σ_{s ∈ S(n)} P(s)`` (a cut
    text; a scalar, with the gradient of ``state_logps`` where given)."""
    logps = covers.logps if state_logps is None else state_logps  # [S, V]
    path = _path_logps(covers, logps)
    last = [s for s, end in enumerate(covers.ends) if end == len(text)]
    if not last:
        return torch.tensor(float("-inf"), dtype=logps.dtype, device=logps.device)
    ends = pieces.symbols.to(logps.device) == END  # [V]
    terms = []
    for s in last:
        stop = torch.logsumexp(logps[s][ends], 0) if finished else torch.zeros((), dtype=logps.dtype)
        terms.append(path[s] + stop)
    return torch.logsumexp(torch.stack(terms), 0)
