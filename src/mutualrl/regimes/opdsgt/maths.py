"""On-policy distillation with a rescue (beyond the paper): OPD's per-token reverse-KL signal and SGT's NLL on a
verified peer success, in one objective.

Per learner ``θ``, prompt ``p`` (its K rollouts ``y_i``) and peers ``j``:

    A_{i,t} = A_i^GRPO + λ · Σ_j w_{p,j} · δ^j_t                                   (TRL's surrogate, per token)
    L(θ)    = L_TRL(θ; A) + λ_r · (1 / |R|) Σ_{p ∈ R} NLL_θ(y*_p | x_p)             (one loss, one backward pass)

- ``w_{p,j}`` (:func:`teacher_weights`): 1 for the peer with the highest verified success rate on ``p`` where that
  rate is above the learner's own, 0 else (OPD's ``competence`` gate with its ``best`` teacher).
- ``δ^j_t`` (:func:`distillation_signal`): the peer's log-ratio to the learner, ``log π_j − log π_θ``, of the token
  where the two tokenizations of its word match, of the whole word (on each of its tokens) where they do not. At
  TRL's snapshot (ratio 1) the λ part of the gradient is the score-function estimate of the gradient of the reverse
  KL ``KL(π_θ ‖ π_j)`` per comparison unit, as for OPD (``mutualrl.regimes.opd.maths``).
- ``R`` (:func:`rescue_gate`): the prompts where every scored own rollout is below ``failure_threshold``, some peer
  rollout is above ``success_threshold`` (SGT's strict gate), and the prompt has been rescued on fewer than
  ``max_rescues_per_prompt`` earlier steps. ``y*_p`` is one of those peer successes, drawn uniformly
  (:func:`choose_rescues`), retokenized into the learner's vocabulary; ``NLL_θ`` is its token-averaged negative
  log-likelihood (:func:`rescue_nll`, weighted by :func:`rescue_weights` so that the sum over TRL's micro-batches is
  ``λ_r`` times the mean over ``R``).

Why both terms: on a prompt whose K rollouts all fail, OPD's signal only reweights what the learner samples (it
cannot point at an answer the learner never writes), and the rescue hands it that answer; where the learner
already succeeds sometimes but less than a peer, no rescue fires and the dense signal keeps pulling. On a rescued
prompt the peer is more competent (a success against none), so both terms act at once, on the learner's failed
rollouts (pushed down where the peer finds them unlikely) and on the peer's success (pulled up).

With ``λ = λ_r = 0`` the advantages are TRL's and no term is added: standalone GRPO, bit for bit.
"""

from __future__ import annotations

import torch

from mutualrl.regimes.api import Share, Total, check_float, distillation_signal, success_rates
from mutualrl.regimes.api import choose_rescues, rescue_gate, rescue_nll, rescue_weights  # SGT's rescue, named here too


def teacher_weights(own_rewards: torch.Tensor, peer_rewards: torch.Tensor, success_threshold: float) -> torch.Tensor:
    """float32 ``[P, M-1]``: ``w_{p,j}``, 1 for the teaching peer of each prompt (the highest success rate, above the
    learner's; ties: the first in the pool's order), 0 elsewhere and on a prompt no peer beats. ``own_rewards``
    ``[P, K]``, ``peer_rewards`` ``[P, M-1, K]`` (NaN: not scored; an unscored side teaches nothing)."""
    check_float("peer_rewards", peer_rewards, 3, "[P, M-1, K]")
    if own_rewards.shape != (peer_rewards.shape[0], peer_rewards.shape[2]):
        raise ValueError(f"own_rewards must have shape [P, K] = {(peer_rewards.shape[0], peer_rewards.shape[2])}; "
                         f"got {tuple(own_rewards.shape)}")
    own = success_rates(own_rewards.float(), success_threshold)  # [P]
    peers = success_rates(peer_rewards.float(), success_threshold)  # [P, M-1]
    teaching = peers > own[:, None]  # [P, M-1] NaN on either side: False
    score = torch.where(teaching, peers, torch.full_like(peers, -1.0))  # [P, M-1]
    best = torch.argmax(score, dim=-1)  # [P] the first maximum
    weights = torch.zeros(peers.shape, dtype=torch.float32)  # [P, M-1]
    weights[torch.arange(len(best)), best] = 1.0
    return weights * teaching.any(-1, keepdim=True).to(torch.float32)  # [P, M-1]


def combined_advantages(advantages: torch.Tensor, signal: torch.Tensor, mask: torch.Tensor,
                        lam: float) -> torch.Tensor:
    """Per-token advantages ``[B, T]`` for TRL's loss: ``A_i + λ · signal_{i,t}`` on the completion's tokens
    (``mask``), 0 elsewhere. ``advantages`` ``[B]`` (GRPO's)."""
    if advantages.dim() != 1 or signal.dim() != 2 or signal.shape[0] != advantages.shape[0]:
        raise ValueError(f"advantages must be [B] and signal [B, T]; got {tuple(advantages.shape)} and "
                         f"{tuple(signal.shape)}")
    combined = advantages[:, None].float() + lam * signal.float()  # [B, T]
    return torch.where(mask.bool(), combined, torch.zeros_like(combined)).to(advantages.dtype)


def step_metrics(weights: torch.Tensor, gated: torch.Tensor, matched: torch.Tensor) -> dict[str, float]:
    """``distill_rate`` (prompts with a teaching peer), ``rescue_rate`` (prompts rescued), ``rescues`` (their count)
    and ``judged_share`` (the (rollout, peer) pairs whose judgement arrived): shares and totals, reduced over the
    ranks. ``weights`` ``[P, M-1]``, ``gated`` ``[P]``, ``matched`` ``[B, M-1]``."""
    p = weights.shape[0]
    return {"distill_rate": Share(float((weights > 0).any(-1).sum()), p),
            "rescue_rate": Share(float(gated.sum()), p),
            "rescues": Total(float(gated.sum())),
            "judged_share": Share(float(matched.sum()), matched.numel())}


def signal_metrics(own_logps: torch.Tensor, peer_logps: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor,
                   lam: float, signal: torch.Tensor) -> dict[str, float]:
    """``reverse_kl`` (own − teacher log-prob per signalled token, the sample estimate of the reverse KL) and
    ``signal_abs`` (mean ``|λ · signal|`` there; ``signal`` ``[B, T]`` as :func:`distillation_signal` gave the step).
    ``weights`` ``[B, M-1]`` are 0/1 (one teacher per prompt)."""
    reached = valid & (weights[:, :, None] > 0)  # [B, M-1, T]
    tokens = reached.any(1)  # [B, T]
    teacher = torch.where(reached, peer_logps.double(), torch.zeros((), dtype=torch.float64)).sum(1)  # [B, T]
    count = float(tokens.sum())
    return {"reverse_kl": Share(float((own_logps.double() - teacher)[tokens].sum()), count),
            "signal_abs": Share(float((lam * signal.double()).abs()[tokens].sum()), count)}


def source_use(signal_by_peer: list[torch.Tensor], rescue_source: torch.Tensor, names: list[str]) -> dict[str, float]:
    """Per peer ``names[j]``: ``from/<peer>/used_share``, the share of the learner's rollouts of the step (``[B]``)
    whose loss peer ``j`` changed: its distillation signal (``signal_by_peer[j]`` ``[B, T]``, already λ-weighted) is
    nonzero on some token, or the row carries its rescue (``rescue_source`` ``[B]``, the peer's slot, -1: none)."""
    rows = rescue_source.shape[0]
    return {f"from/{name}/used_share": Share(float(((signal_by_peer[j] != 0).any(1) | (rescue_source == j)).sum()),
                                             rows) for j, name in enumerate(names)}
