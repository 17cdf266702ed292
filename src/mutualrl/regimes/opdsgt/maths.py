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


def rescue_gate(own_rewards: torch.Tensor, peer_rewards: torch.Tensor, success_threshold: float,
                failure_threshold: float, rescued_before: torch.Tensor, max_rescues: int | None) -> torch.Tensor:
    """bool ``[P]``: the prompts rescued this step. Every scored own rollout below ``failure_threshold`` (and at
    least one scored), some peer rollout above ``success_threshold``, and ``rescued_before`` ``[P]`` (earlier steps
    that rescued the prompt) below ``max_rescues`` (None: no limit)."""
    check_float("peer_rewards", peer_rewards, 3, "[P, M-1, K]")
    scored = ~torch.isnan(own_rewards)  # [P, K]
    failed = ((own_rewards < failure_threshold) | ~scored).all(-1) & scored.any(-1)  # [P]
    peer_success = (peer_rewards > success_threshold).flatten(1).any(-1)  # [P]
    gated = failed & peer_success  # [P]
    if max_rescues is not None:
        gated = gated & (rescued_before < max_rescues)  # [P]
    return gated


def choose_rescues(peer_rewards: torch.Tensor, gated: torch.Tensor, success_threshold: float,
                   generator: torch.Generator) -> torch.Tensor:
    """int64 ``[P, 2]``: ``(peer slot, sample index)`` of the success each gated prompt learns from, uniform over the
    prompt's peer successes (peer-major order; one draw per prompt, gated or not, so the generator advances the same
    every step); ``(-1, -1)`` off the gate."""
    p, peers, k = peer_rewards.shape
    candidates = (peer_rewards > success_threshold).reshape(p, peers * k) & gated[:, None]  # [P, (M-1)·K]
    count = candidates.sum(-1)  # [P]
    draw = torch.rand(p, generator=generator, dtype=torch.float64)  # [P]
    rank = torch.minimum((draw * count).floor().long(), (count - 1).clamp(min=0))  # [P]
    hit = candidates & (candidates.long().cumsum(-1) == (rank + 1)[:, None])  # [P, (M-1)·K]
    position = hit.long().argmax(-1)  # [P]
    chosen = torch.stack([position // k, position % k], dim=1)  # [P, 2]
    return torch.where((count > 0)[:, None], chosen, torch.full_like(chosen, -1))


def combined_advantages(advantages: torch.Tensor, signal: torch.Tensor, mask: torch.Tensor,
                        lam: float) -> torch.Tensor:
    """Per-token advantages ``[B, T]`` for TRL's loss: ``A_i + λ · signal_{i,t}`` on the completion's tokens
    (``mask``), 0 elsewhere. ``advantages`` ``[B]`` (GRPO's)."""
    if advantages.dim() != 1 or signal.dim() != 2 or signal.shape[0] != advantages.shape[0]:
        raise ValueError(f"advantages must be [B] and signal [B, T]; got {tuple(advantages.shape)} and "
                         f"{tuple(signal.shape)}")
    combined = advantages[:, None].float() + lam * signal.float()  # [B, T]
    return torch.where(mask.bool(), combined, torch.zeros_like(combined)).to(advantages.dtype)


def rescue_weights(rows: torch.Tensor, lam: float, steps_per_generation: int, gradient_accumulation_steps: int,
                   num_gated: int, num_processes: int = 1) -> torch.Tensor:
    """float32 ``[B]``: the weight of each row's rescue NLL, ``w = λ_r · S · N / (G · n)`` on the ``rows`` (bool
    ``[B]``) that carry one, 0 elsewhere; ``n`` the rescued rows of every rank. TRL cuts the generation batch into
    ``S`` micro-batches and ``G`` of them make an optimizer step, and DDP averages over ``N`` ranks, so the summed
    term over one step is ``λ_r`` times the mean NLL over the rescued rows (SGT's weighting)."""
    if num_gated < int(rows.sum()):
        raise ValueError(f"num_gated ({num_gated}) is smaller than this rank's rescued rows ({int(rows.sum())})")
    if num_gated == 0:
        return torch.zeros(rows.shape, dtype=torch.float32)
    w = lam * steps_per_generation * num_processes / (gradient_accumulation_steps * num_gated)
    return torch.where(rows, torch.full(rows.shape, w), torch.zeros(rows.shape)).float()  # [B]


def rescue_nll(logps: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``Σ_i w_i · (−Σ_t ℓ_{i,t} m_{i,t} / max(1, Σ_t m_{i,t}))``: the weighted token-averaged NLL of the rescues.
    ``logps`` ``[R, T]`` (with grad), ``mask`` ``[R, T]``, ``weights`` ``[R]``; rows of weight 0 and masked positions
    add an exact 0 whatever their log-probs."""
    check_float("logps", logps, 2, "[R, T]")
    if mask.shape != logps.shape or weights.shape != logps.shape[:1]:
        raise ValueError(f"mask must be [R, T] = {tuple(logps.shape)} and weights [R]; got {tuple(mask.shape)} and "
                         f"{tuple(weights.shape)}")
    kept = torch.where(mask.bool(), logps, torch.zeros_like(logps))  # [R, T]
    nll = -kept.sum(1) / mask.bool().sum(1).clamp(min=1).to(logps.dtype)  # [R]
    w = weights.to(logps.dtype)  # [R]
    return torch.where(w != 0, w * nll, torch.zeros_like(nll)).sum()


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
