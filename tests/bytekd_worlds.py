"""Small enumerable worlds for byte-kd's exact next-byte distributions (test-only).

A *table model* over a vocabulary of byte pieces: its next-token logits are a row of a parameter table, one row per
token history (so a non-canonical tokenization has its own probabilities), and after ``depth`` tokens it writes only
its EOS (every text is finite). Every token sequence can be enumerated, so a model's next-byte distribution at any
byte prefix is a ratio of sums over its complete sequences, with no tokenization reasoning at all: the reference the
cover enumeration is checked against.
"""

from __future__ import annotations

import itertools

import torch

from mutualrl.regimes.core.byte_covers import TokenPieces
from mutualrl.regimes.core.next_bytes import END, SYMBOLS

EOS_PIECE = b""


class TableModel:
    """``pieces``: the bytes of each token (``b""``: the EOS, the last id); ``theta`` ``[contexts, V]`` logits, one row
    per history of fewer than ``depth`` tokens (EOS-free)."""

    def __init__(self, pieces: list[bytes], depth: int, seed: int = 0, scale: float = 1.5):
        self.pieces, self.depth = pieces, depth
        self.eos = len(pieces) - 1
        writing = range(self.eos)
        self.contexts = {history: i for i, history in enumerate(
            h for n in range(depth) for h in itertools.product(writing, repeat=n))}
        generator = torch.Generator().manual_seed(seed)
        self.theta = torch.randn((len(self.contexts), len(pieces)), generator=generator) * scale  # [H, V]
        symbols = torch.tensor([piece[0] if piece else END for piece in pieces])  # [V]
        self.token_pieces = TokenPieces(list(pieces), symbols)

    def logps(self, history: tuple[int, ...], theta: torch.Tensor | None = None) -> torch.Tensor:
        """``[V]`` next-token log-probs after ``history`` (only EOS at ``depth``)."""
        theta = self.theta if theta is None else theta
        if len(history) >= self.depth:
            out = torch.full((len(self.pieces),), float("-inf"), dtype=theta.dtype)
            out[self.eos] = 0.0
            return out + 0.0 * theta.sum()  # [V] keeps the graph
        return torch.log_softmax(theta[self.contexts[history]], -1)

    def forward(self, theta: torch.Tensor | None = None):
        """The cover enumeration's ``forward``: each sequence's log-probs after each of its prefixes."""
        return lambda sequences: [torch.stack([self.logps(tuple(s[:p]), theta) for p in range(len(s) + 1)])
                                  for s in sequences]

    def sequences(self, theta: torch.Tensor | None = None) -> list[tuple[tuple[int, ...], torch.Tensor]]:
        """Every complete sequence (its EOS left out) and its log-probability, EOS included."""
        return [(history, self.sequence_logp(history, theta))
                for n in range(self.depth + 1) for history in itertools.product(range(self.eos), repeat=n)]

    def sequence_logp(self, tokens: tuple[int, ...], theta: torch.Tensor | None = None) -> torch.Tensor:
        """The log-probability of writing ``tokens`` and then the EOS."""
        return sum((self.logps(tokens[:t], theta)[tokens[t]] for t in range(len(tokens))),
                   torch.zeros(())) + self.logps(tokens, theta)[self.eos]

    def text_of(self, tokens) -> bytes:
        return b"".join(self.pieces[v] for v in tokens)


def brute_next_bytes(model, prefix: bytes, theta: torch.Tensor | None = None) -> torch.Tensor:
    """``log q(· | prefix)`` ``[258]`` by summing the model's complete sequences (``model``: a TableModel, or any with
    ``sequences`` and ``text_of``)."""
    joint = torch.full((SYMBOLS,), float("-inf"), dtype=torch.float64)
    for tokens, logp in model.sequences(theta):
        text = model.text_of(tokens)
        if not text.startswith(prefix):
            continue
        symbol = END if len(text) == len(prefix) else text[len(prefix)]
        joint = joint.index_put((torch.tensor([symbol]),), torch.logaddexp(joint[symbol], logp.double())[None])
    return joint - torch.logsumexp(joint, 0)


def brute_texts(model, theta: torch.Tensor | None = None) -> dict[bytes, torch.Tensor]:
    """Each text's log-probability, summed over its tokenizations."""
    out: dict[bytes, torch.Tensor] = {}
    for tokens, logp in model.sequences(theta):
        text = model.text_of(tokens)
        out[text] = torch.logaddexp(out[text], logp) if text in out else logp
    return out


class ByteChainModel:
    """A model with one token per byte whose next byte is ``reference``'s exact next-byte distribution: equal to
    ``reference`` on every text (``P(text) = Π_o q(b_o | b_{<o}) · q(END | text)``), whatever its tokenizations."""

    def __init__(self, reference: TableModel, alphabet: bytes):
        self.alphabet = alphabet
        self.pieces = [bytes([b]) for b in alphabet] + [EOS_PIECE]
        self.eos = len(alphabet)
        self.reference = reference
        symbols = torch.tensor([*alphabet, END])
        self.token_pieces = TokenPieces(list(self.pieces), symbols)
        self._cache: dict[bytes, torch.Tensor] = {}

    def logps(self, history: tuple[int, ...]) -> torch.Tensor:
        prefix = self.text_of(history)
        if prefix not in self._cache:
            q = brute_next_bytes(self.reference, prefix).detach()  # [258] float64
            self._cache[prefix] = torch.stack([q[b] for b in self.alphabet] + [q[END]])  # [V]
        return self._cache[prefix]

    def forward(self):
        return lambda sequences: [torch.stack([self.logps(tuple(s[:p])) for p in range(len(s) + 1)])
                                  for s in sequences]

    def text_of(self, tokens) -> bytes:
        return b"".join(self.pieces[v] for v in tokens)

    def tokens_of(self, text: bytes) -> list[int]:
        return [self.alphabet.index(b) for b in text]


def per_state_next_byte_logps(covers, text: bytes, pieces: TokenPieces, state_logps) -> torch.Tensor:
    """``log q(c | b_{<o})`` ``[len(text) + 1, 258]`` one state and one (state, end) pair at a time: the cover sum
    written as a loop (what :func:`~mutualrl.regimes.core.byte_covers.cover_next_byte_logps` vectorises), the reference
    its batched form is checked against; ``state_logps``: each state's next-token log-probs, ``[V]`` each."""
    from mutualrl.regimes.core.next_bytes import symbol_logps

    path: list[torch.Tensor] = []
    for s, parent in enumerate(covers.parents):
        path.append(torch.zeros((), dtype=state_logps[0].dtype) if parent < 0
                    else path[parent] + state_logps[parent][covers.tokens[s][-1]])
    contributions: list[list[torch.Tensor]] = [[] for _ in range(len(text) + 1)]
    for s, start in enumerate(covers.ends):
        contributions[start].append(path[s] + symbol_logps(state_logps[s], pieces.symbols))  # [258]
        for end in range(start + 1, min(start + pieces.longest, len(text)) + 1):
            ids, nxt = pieces.extending(text[start:end])
            if not len(ids):
                break
            contributions[end].append(path[s] + symbol_logps(state_logps[s][ids], nxt))  # [258]
    out = []
    for parts in contributions:
        if not parts:
            out.append(torch.full((SYMBOLS,), float("-inf"), dtype=state_logps[0].dtype))
            continue
        stacked = torch.stack(parts)  # [R, 258]
        peak = stacked.detach().amax(0)  # [258]
        safe = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))  # [258]
        total = torch.exp(stacked - safe).sum(0)  # [258]
        written = total > 0
        joint = torch.where(written, safe + torch.log(torch.where(written, total, torch.ones_like(total))),
                            torch.full_like(total, float("-inf")))  # [258]
        out.append(joint - torch.logsumexp(joint, 0))
    return torch.stack(out)  # [O, 258]
