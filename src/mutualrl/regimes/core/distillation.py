"""On-policy distillation's pieces shared by OPD, opd-sgt and byte-kd: the verified success rate and the gate that pick
a teacher, and the per-token signal across tokenizers, each peer's log-ratio to the learner of the token's comparison
unit weighted by the peer's teacher weight (docs/regimes.md, OPD's formula table)."""

from __future__ import annotations

from typing import Literal

import torch

from mutualrl.regimes.core.reward_shapes import check_float
from mutualrl.regimes.core.word_units import unit_totals


def success_rates(rewards: torch.Tensor, success_threshold: float) -> torch.Tensor:
    """Share of the scored rollouts over the last axis (K) whose reward is above ``success_threshold`` (a verified
    success); NaN where none is scored. ``[..., K]`` → ``[...]``."""
    scored = ~torch.isnan(rewards)  # [..., K]
    wins = (rewards > success_threshold) & scored  # [..., K]; NaN > x is False
    counted = scored.sum(-1)  # [...]
    rates = wins.sum(-1).to(torch.float32) / counted.clamp(min=1).to(torch.float32)
    return torch.where(counted > 0, rates, torch.full_like(rates, float("nan")))


def teaching_peers(own_rate: torch.Tensor, peer_rates: torch.Tensor,
                   gate: Literal["competence", "always"]) -> torch.Tensor:
    """bool ``[P, M-1]``: the peers that teach each prompt. ``competence``: a peer whose success rate is above the
    learner's (both scored); ``always``: every peer."""
    check_float("peer_rates", peer_rates, 2, "[P, M-1]")
    if own_rate.shape != peer_rates.shape[:1]:
        raise ValueError(f"own_rate must have shape [P] = [{peer_rates.shape[0]}]; got {tuple(own_rate.shape)}")
    if gate == "always":
        return torch.ones(peer_rates.shape, dtype=torch.bool)
    if gate != "competence":
        raise ValueError(f"gate must be 'competence' or 'always'; got {gate!r}")
    return peer_rates > own_rate[:, None]  # NaN on either side: False


def teacher_weights(teaching: torch.Tensor, peer_rates: torch.Tensor,
                    teachers: Literal["best", "mean"]) -> torch.Tensor:
    """float32 ``[P, M-1]``: each teaching peer's weight ``w_{p,j}`` in the prompt's signal; a row sums to 1 where some
    peer teaches, 0 where none does. ``best``: the teaching peer with the highest success rate (ties and unscored
    rates: the first in the pool's order) alone; ``mean``: every teaching peer, equally."""
    if teaching.shape != peer_rates.shape:
        raise ValueError(f"teaching must have the shape of peer_rates {tuple(peer_rates.shape)}")
    if teachers == "mean":
        count = teaching.sum(-1, keepdim=True).clamp(min=1).to(torch.float32)  # [P, 1]
        return teaching.to(torch.float32) / count
    if teachers != "best":
        raise ValueError(f"teachers must be 'best' or 'mean'; got {teachers!r}")
    score = torch.where(teaching, torch.nan_to_num(peer_rates, nan=-1.0), torch.full_like(peer_rates, -2.0))
    best = torch.argmax(score, dim=-1)  # [P] the first maximum
    weights = torch.zeros(peer_rates.shape, dtype=torch.float32)
    weights[torch.arange(len(best)), best] = 1.0
    return weights * teaching.any(-1, keepdim=True).to(torch.float32)  # [P, M-1]


def distillation_signal(own_logps: torch.Tensor, peer_logps: torch.Tensor, valid: torch.Tensor,
                        weights: torch.Tensor, groups: torch.Tensor | None = None,
                        sequence: bool = False) -> torch.Tensor:
    """``Σ_j w_{i,j} δ^j_t`` per learner token, float32 ``[B, T]``: ``δ^j_t`` is the log-ratio ``ℓ^j_peer − ℓ_own`` of
    the token's comparison unit (``groups``): the token's own where the peer's tokens of its word are the learner's,
    the whole word's ``log π_j(u) − log π_θ(u)`` on each of its tokens where they are not (docs/regimes.md, OPD).

    ``own_logps`` ``[B, T]``: the learner's log-probs of its tokens at generation; ``peer_logps`` ``[B, M-1, T]``: each
    peer's trace aligned onto those tokens; ``valid`` bool ``[B, M-1, T]``: the tokens the peer's trace reached (a unit
    of the learner's text, or its EOS); ``weights`` ``[B, M-1]``: the row's prompt's teacher weights; ``groups`` int64
    ``[B, M-1, T]``: each token's comparison unit as the position of its first token
    (:func:`~mutualrl.regimes.core.word_units.comparison_groups`; None: every token its own, the same tokenizer). A
    token outside ``valid`` gets no signal from that peer (an exact 0, whatever the log-probs there).

    ``sequence``: each token carries instead the peer's log-ratio of the whole text, ``Σ_{t'} δ^j_{t'}`` (THL conserves
    a text's total): the score-function estimate of the gradient of the sequence-level reverse KL ``KL(π_θ(y) ‖
    π_j(y))``, exact whatever the two tokenizers, at a sequence-level estimator's variance. (A return from the token's
    own unit on, MiniLLM's, is not exact across tokenizers: where the next token ends a word the peer's log-prob of
    the text before depends on that token, so it is no baseline.)"""
    check_float("own_logps", own_logps, 2, "[B, T]")
    check_float("peer_logps", peer_logps, 3, "[B, M-1, T]")
    b, t = own_logps.shape
    if peer_logps.shape[0] != b or peer_logps.shape[2] != t or valid.shape != peer_logps.shape:
        raise ValueError(f"peer_logps and valid must have shape [B={b}, M-1, T={t}]; got "
                         f"{tuple(peer_logps.shape)} and {tuple(valid.shape)}")
    if weights.shape != peer_logps.shape[:2]:
        raise ValueError(f"weights must have shape [B, M-1] = {tuple(peer_logps.shape[:2])}; got {tuple(weights.shape)}")
    delta = peer_logps.to(torch.float32) - own_logps.to(torch.float32)[:, None, :]  # [B, M-1, T]
    reached = valid & (weights[:, :, None] > 0)  # [B, M-1, T]
    delta = torch.where(reached, delta, torch.zeros_like(delta))  # [B, M-1, T]
    if sequence:
        text = delta.sum(-1, keepdim=True).expand_as(delta)  # [B, M-1, T] each peer's log-ratio of the whole text
        delta = torch.where(reached, text, torch.zeros_like(delta))  # [B, M-1, T]
    elif groups is not None:
        delta = torch.where(reached, unit_totals(delta, groups), torch.zeros_like(delta))  # [B, M-1, T] per word
    return (weights.to(torch.float32)[:, :, None] * delta).sum(1)  # [B, T]
