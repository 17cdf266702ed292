"""On-policy distillation's pieces shared by OPD, opd-sgt and byte-kd: the verified success rate and the gate that pick
a teacher, and the per-token signal across tokenizers, each peer's log-ratio to the learner of the token's comparison
unit weighted by the peer's teacher weight (docs/regimes.md, OPD's formula table)."""

from __future__ import annotations

from typing import Literal

import torch

from mutualrl.regimes.core.distillation_spec import SIGNAL_LOSS_TYPES
from mutualrl.regimes.core.loss_types import loss_type as classified
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




def signal_row_scale(loss_type: str, mask: torch.Tensor, max_completion_length: int, num_items: float,
                     num_processes: int) -> torch.Tensor:
    """float32 ``[B]``: the factor on each row's signal (``mask`` ``[B, C]``, this rank's rows) under which TRL's
    reduction of ``A_t = signal_t`` is the row's sum over ``max_completion_length``, averaged over the rows (dr_grpo's
    normaliser, a constant): ``grpo`` and ``sapo`` divide a row by its own length (factor ``|y_i| / L``), ``dapo`` and
    ``cispo`` by the step's token count ``num_items`` over all ranks (factor ``num_items / (B · ranks · L)``). So the
    λ part's expected update is the gradient of its source's objective whatever the rows' lengths (a row's own
    normaliser would weigh a sample by ``1/|y|``, which its length correlates with)."""
    if loss_type not in SIGNAL_LOSS_TYPES:
        raise ValueError(f"a distillation signal is exact under loss_type {', '.join(SIGNAL_LOSS_TYPES)}; got "
                         f"{loss_type!r}")
    rows, length = mask.shape[0], float(max(1, max_completion_length))
    normaliser = classified(loss_type).normaliser  # regimes/core/loss_types.py: TRL's reductions, classified once
    if normaliser == "row_tokens":
        return mask.sum(-1).clamp(min=1).to(torch.float32) / length  # [B]
    if normaliser == "max_length":
        return torch.ones(rows, dtype=torch.float32)  # [B]
    if normaliser != "generation_tokens":
        raise ValueError(f"no exact distillation signal under a {normaliser!r} normaliser ({loss_type!r})")
    return torch.full((rows,), float(num_items) / (rows * num_processes * length), dtype=torch.float32)  # [B]


def text_signal(own_text: torch.Tensor, judge_text: torch.Tensor, valid: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
    """OPD's ``signal: sequence`` over texts, float32 ``[B, T]``: each token a judge reached carries ``Σ_j w_{i,j}
    (log p_j(x_i) − log p_θ(x_i))``, both the models' log-probabilities of the row's text summed over every
    tokenization of it (``own_text`` ``[B]``, ``judge_text`` ``[B, M-1]``; ``valid`` ``[B, M-1, T]``, ``weights``
    ``[B, M-1]``, 0 where a judge sent none). With ``y`` the tokens sampled for text ``x``, ``E_y[δ(x) ∇log π_θ(y)] =
    Σ_x δ(x) ∇p_θ(x)``: the gradient of ``KL(p_θ ‖ p_j)`` over texts however the learner split them (with the
    learner's log-prob of its own tokens instead, ``−H(tokenization | text)`` joins the objective)."""
    check_float("judge_text", judge_text, 2, "[B, M-1]")
    if own_text.shape != judge_text.shape[:1] or valid.shape[:2] != judge_text.shape or \
            weights.shape != judge_text.shape:
        raise ValueError(f"own_text [B], judge_text and weights [B, M-1], valid [B, M-1, T]; got "
                         f"{tuple(own_text.shape)}, {tuple(judge_text.shape)}, {tuple(weights.shape)}, "
                         f"{tuple(valid.shape)}")
    taught = weights > 0  # [B, M-1]
    delta = torch.where(taught, judge_text.float() - own_text.float()[:, None], torch.zeros_like(judge_text.float()))
    reached = valid & taught[:, :, None]  # [B, M-1, T]
    per_judge = torch.where(reached, delta[:, :, None].expand_as(reached), torch.zeros(reached.shape))  # [B, M-1, T]
    return (weights.float()[:, :, None] * per_judge).sum(1)  # [B, T]

