"""The probability a policy gives each byte of a text, given the bytes before it, over every tokenization.

A text's probability factors over its bytes: ``p(x) = Π_o q(x_o | x_{<o}) · q(END | x)``, ``q`` the model's exact
next-byte distribution (:mod:`~mutualrl.regimes.core.byte_covers`: the sum over every tokenization covering the
prefix, a last token running past the offset included). These factors are the text's, not a tokenization's: two
policies that give every text the same probability give every byte of it the same ``q``, whichever way either
split it, so their per-byte log-ratios are 0. F-TIS's filter compares a learner with the peer that wrote a row on
them (:func:`mutualrl.regimes.prp.maths.text_kl`); the peer publishes its own with its rollout records (the SEE
record's ``text_byte_logps``), the learner computes its own over its retokenization of the text.

Cost: the cover enumeration's (:mod:`~mutualrl.regimes.core.cover_scoring`), no gradient: one forward of the given
tokenization per text plus one per other tokenization kept. At the limits (``CoverLimits``: a tokenization below
``floor`` times its offset's most likely one, or past ``max_states`` per offset, is left out with its descendants)
each offset's ``q`` is the kept tokenizations' alone, renormalised; ``dropped`` reports the largest share of an
offset's mass left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mutualrl.regimes.core.byte_covers import TokenPieces, cover_next_byte_logps, find_covers
from mutualrl.regimes.core.cover_scoring import CoverLimits, logits_width, model_forward, token_pieces
from mutualrl.regimes.core.next_bytes import END
from mutualrl.regimes.core.rank_forwards import forwards_in_step
from mutualrl.regimes.core.trainer_interface import TrainerView


def written_byte_logps(logq: torch.Tensor, text: bytes, finished: bool) -> torch.Tensor:
    """float64 ``[n + finished]``: ``log q(x_o | x_{<o})`` of each of the ``n`` bytes of ``text``, then ``log q(END |
    x)`` where it ``finished`` (a cut text: no end term, its prefix probability), from the exact next-byte log-masses
    ``logq`` ``[n + 1, 258]`` (:func:`~mutualrl.regimes.core.byte_covers.cover_next_byte_logps`)."""
    symbols = list(text) + ([END] if finished else [])
    index = torch.arange(len(symbols), device=logq.device)  # [n + finished]
    return logq[index, torch.tensor(symbols, dtype=torch.long, device=logq.device)].double().cpu()


def text_byte_logps(text: bytes, tokens: Sequence[int], finished: bool, pieces: TokenPieces, forward,
                    limits: CoverLimits) -> tuple[torch.Tensor, float]:
    """One text's :func:`written_byte_logps` under a model (``forward``: the enumeration's, after the text's prompt;
    ``tokens``: a tokenization of ``text``, EOS left out, forwarded first) and the share of mass the limits dropped."""
    covers = find_covers(text, pieces, forward, tokens, limits.floor, limits.max_states)
    return written_byte_logps(cover_next_byte_logps(covers, text, pieces), text, finished), covers.dropped


def policy_byte_logps(trainer: TrainerView, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                      rows: Sequence[int], tokens: Sequence[Sequence[int]], finished: Sequence[bool],
                      texts: Sequence[bytes] | None = None, *,
                      limits: CoverLimits) -> tuple[dict[int, torch.Tensor], float]:
    """The trainer's model's :func:`written_byte_logps` of texts: for each row index in ``rows``, ``texts[row]``
    (None: the bytes ``tokens[row]`` write) after prompt ``prompt_ids[row]`` / ``prompt_mask[row]`` (``[N, P]``, TRL's
    left padding), ``tokens[row]`` a tokenization of it (EOS left out; empty: none known), ``finished[row]``: its end
    term counted. No gradient. Returns each row's values and the largest share of an offset's mass the limits
    dropped."""
    model = trainer.model
    pieces = token_pieces(trainer, logits_width(model))
    out: dict[int, torch.Tensor] = {}
    dropped = 0.0
    with torch.no_grad(), forwards_in_step(trainer, model) as in_step:  # every rank: its rows' counts differ
        for row in rows:
            forward = model_forward(trainer, model, prompt_ids[row], prompt_mask[row], in_step)  # each call in step
            text = pieces.text_of(tokens[row]) if texts is None else texts[row]
            out[row], lost = text_byte_logps(text, tokens[row], bool(finished[row]), pieces, forward, limits)
            dropped = max(dropped, lost)
    return out, dropped


def published_byte_logps(values: torch.Tensor | None) -> list[float] | None:
    """A row's values as the SEE record holds them (float32, finite): None where an offset is ``-inf`` (the limits
    lost every tokenization writing it, or the model gives a byte no mass)."""
    if values is None or not bool(torch.isfinite(values).all()):
        return None
    return np.asarray(values, dtype=np.float32).clip(max=0.0).tolist()
