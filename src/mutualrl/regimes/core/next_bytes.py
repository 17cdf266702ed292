"""A model's next-token distribution as a distribution over the next *byte*: what two tokenizers can compare.

Two vocabularies share no tokens, but every token writes bytes (THL's byte table: byte-level BPE's bytes,
SentencePiece's ``"▁"`` as a space, ``<0xNN>`` as byte NN). At a text offset where a tokenization has a token
boundary, the next-token distribution ``π(· | prefix)`` gives a distribution over the first byte the text continues
with:

    q(b) = Σ_{v : first byte of v = b} π(v | prefix)          b ∈ {0..255, END, OTHER}

``END`` is the mass of the tokens that end a generation, ``OTHER`` every other special or empty token's. Mass is conserved
(``Σ_b q(b) = 1``) and both models' ``q`` live on the same 258 symbols, so at an offset where both tokenizations of
one text have a boundary a divergence between them is defined, whatever the vocabularies (docs/regimes.md, byte-kd).

A judge publishes its ``q`` at the start of each of its tokens (and at its EOS) as the ``k`` most likely symbols and
their log-masses (the SEE record's ``next_byte_ids`` and ``next_byte_logps``); the rest of the mass is ``1 − Σ``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mutualrl.see.records import NEXT_BYTE_END as END  # the symbol of the tokens that end a generation
from mutualrl.see.records import NEXT_BYTE_OTHER as OTHER  # of every other token that writes no byte

SYMBOLS = OTHER + 1


def first_byte_symbols(tokenizer: Any, vocab_size: int, stop_ids: Sequence[int] = ()) -> torch.Tensor:
    """int64 ``[V]``: each token id's symbol, for a model whose logits are ``vocab_size`` wide: its first byte, ``END``
    for every id that ends a generation (the tokenizer's EOS and ``stop_ids``, TRL's ``eos_token_ids``), ``OTHER``
    for the rest (special, empty, and ids the tokenizer does not have)."""
    from mutualrl.thl.spans import byte_table

    table = byte_table(tokenizer)
    n = min(vocab_size, table.vocab_size)
    symbols = np.full(vocab_size, OTHER, dtype=np.int64)  # [V]
    writes = (table.lengths[:n] > 0) & ~table.special[:n]  # [n]
    first = table.blob[np.minimum(table.offsets[:n], max(len(table.blob) - 1, 0))].astype(np.int64)  # [n]
    symbols[:n] = np.where(writes, first, OTHER)
    eos = tokenizer.eos_token_id
    for token in [*(eos if isinstance(eos, (list, tuple)) else [eos]), *stop_ids]:
        if token is not None and 0 <= int(token) < vocab_size:
            symbols[int(token)] = END
    return torch.from_numpy(symbols)


def symbol_logps(logps: torch.Tensor, symbols: torch.Tensor) -> torch.Tensor:
    """``log q(b)`` ``[..., 258]`` from next-token log-probs ``[..., V]`` (a log-sum-exp per symbol, so a symbol the
    model gives 1e-30 keeps its gradient; a symbol no token has is ``-inf``)."""
    if logps.shape[-1] != symbols.shape[0]:
        raise ValueError(f"log-probs are {logps.shape[-1]} wide, the symbol table {symbols.shape[0]}")
    index = symbols.to(logps.device).expand_as(logps)  # [..., V]
    shape = (*logps.shape[:-1], SYMBOLS)
    peak = torch.full(shape, float("-inf"), dtype=logps.dtype, device=logps.device).scatter_reduce(
        -1, index, logps.detach(), reduce="amax")  # [..., 258]
    safe_peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))  # [..., 258]
    scaled = torch.exp(logps - safe_peak.gather(-1, index))  # [..., V]
    total = torch.zeros(shape, dtype=logps.dtype, device=logps.device).scatter_add(-1, index, scaled)  # [..., 258]
    written = total > 0  # [..., 258] some token has the symbol
    logq = safe_peak + torch.log(torch.where(written, total, torch.ones_like(total)))  # [..., 258] no log(0) to backprop
    return torch.where(written, logq, torch.full_like(logq, float("-inf")))  # [..., 258]


ROWS_PER_CHUNK_ELEMENTS = 1 << 24
""":func:`next_byte_logps` works on at most this many ``[rows, V]`` logits at once (64 MiB of float32)."""


def tempered_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits`` ``[..., V]`` (the model's, bf16 under autocast) as one float32 tensor over ``temperature``: one copy,
    divided in place. ``logits.float() / temperature`` holds two float32 copies beside the bf16 logits at once, 10
    bytes a logit where the plan counts 8 (``launch/plan/bounds.py``: ``FULL_LOGIT_COPIES``); in place, 6 at this line
    and 8 at the backward (these and their gradient)."""
    scaled = logits.to(torch.float32, copy=True)  # [..., V]
    return scaled.div_(temperature) if temperature != 1 else scaled  # [..., V]: neither op keeps a tensor for backward


def next_byte_logps(logits: torch.Tensor, symbols: torch.Tensor) -> torch.Tensor:
    """``log q(b)`` ``[..., 258]`` from next-token logits ``[..., V]``: :func:`symbol_logps` of their log-softmax,
    with its gradient, keeping only ``logits`` for the backward (:class:`_NextByteLogps`) where autograd's composition
    keeps two ``[..., V]`` float32 tensors and makes more at its peak (on a 152k vocabulary, GiBs per micro-batch)."""
    if logits.shape[-1] != symbols.shape[0]:
        raise ValueError(f"logits are {logits.shape[-1]} wide, the symbol table {symbols.shape[0]}")
    flat = logits.reshape(-1, logits.shape[-1])  # [N, V]
    return _NextByteLogps.apply(flat, symbols.to(logits.device)).reshape(*logits.shape[:-1], SYMBOLS)


class _NextByteLogps(torch.autograd.Function):
    """``log q(c) = log Σ_{v ∈ c} softmax(z)_v`` row by row, in chunks; its backward recomputes each chunk's
    log-softmax: ``∂ log q(c) / ∂z_w = π(w) 1[w ∈ c] / q(c) − π(w)``, so for an upstream gradient ``g``
    ``∂L/∂z_w = g_{c(w)} exp(log π(w) − log q(c(w))) − π(w) Σ_c g_c`` (a symbol no token has: ``−inf``, no gradient)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, symbols: torch.Tensor) -> torch.Tensor:  # [N, V], [V] -> [N, 258]
        out = torch.empty((logits.shape[0], SYMBOLS), dtype=logits.dtype, device=logits.device)  # [N, 258]
        for rows in _chunks(logits):
            out[rows] = symbol_logps(torch.log_softmax(logits[rows], dim=-1), symbols)  # [n, 258]
        ctx.save_for_backward(logits, symbols, out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # [N, 258] -> [N, V]
        logits, symbols, logq = ctx.saved_tensors
        grad_logits = torch.empty_like(logits)  # [N, V]
        for rows in _chunks(logits):
            finite = torch.isfinite(logq[rows])  # [n, 258]
            g = torch.where(finite, grad[rows], torch.zeros_like(grad[rows]))  # [n, 258]
            safe_logq = torch.where(finite, logq[rows], torch.zeros_like(logq[rows]))  # [n, 258]
            logp = torch.log_softmax(logits[rows], dim=-1)  # [n, V]
            index = symbols.expand_as(logp)  # [n, V]
            own_cell = g.gather(-1, index) * torch.exp(logp - safe_logq.gather(-1, index))  # [n, V]
            grad_logits[rows] = own_cell - torch.exp(logp) * g.sum(-1, keepdim=True)  # [n, V]
        return grad_logits, None


def _chunks(logits: torch.Tensor) -> list[slice]:
    """Row slices of ``logits`` ``[N, V]`` of at most :data:`ROWS_PER_CHUNK_ELEMENTS` elements each."""
    step = max(1, ROWS_PER_CHUNK_ELEMENTS // max(1, logits.shape[1]))
    return [slice(start, start + step) for start in range(0, logits.shape[0], step)]


def top_symbols(logps: torch.Tensor, symbols: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` most likely next-byte symbols at each position and their log-masses, from next-token log-probs
    ``[..., V]``: (int32 ``[..., k]``, float32 ``[..., k]``), most likely first (a symbol no token has: the float32
    minimum, a finite stand-in for log 0)."""
    logq = symbol_logps(logps.float(), symbols)  # [..., 258]
    values, ids = torch.topk(logq, k=min(k, SYMBOLS), dim=-1)  # [..., k] each
    return ids.to(torch.int32), values.clamp(min=torch.finfo(torch.float32).min)


def clean_starts(spans: np.ndarray, text_length: int) -> np.ndarray:
    """int64 ``[n]``: the text offset each token starts at where it starts on a boundary of its tokenization, else
    -1. ``spans`` ``[n, 2]`` (THL's character spans; ``(-1, -1)`` for a token with no text): a text token starts on a
    boundary where it starts where the text before it ended (not inside a character it shares with the previous
    token); a no-text token (the EOS) stands at the offset where the text before it ended, a boundary when that is the
    text's end (the EOS after the whole text)."""
    starts = np.full(len(spans), -1, dtype=np.int64)  # [n]
    ended = 0  # where the text before this token ends
    for i, (start, end) in enumerate(spans.tolist()):
        if start < 0:
            starts[i] = ended if ended == text_length else -1
            continue
        starts[i] = start if start == ended else -1
        ended = max(ended, end)
    return starts
