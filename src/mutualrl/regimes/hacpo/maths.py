"""HACPO, Heterogeneous Agent Collaborative Policy Optimization (Zhang et al., arXiv 2603.02604, ICML 2026).

The four mechanisms of its Sec. 3, as pure functions (equation numbers are the paper's):

- 3.1 agent-capability-aware advantage estimation: :func:`step_capability` (the authors' share of rewards > 0 by
  default), :func:`smoothed_capability`,
  :func:`capability_ratios` (Eqs. 8-9) and :func:`capability_advantages` (Eqs. 6-7);
- 3.2 the capability discrepancy coefficient: :func:`discrepancy_coefficients` (Eq. 10);
- 3.3 exponential importance sampling over GSPO's sequence ratio: :func:`sequence_log_ratio` (Eq. 11) and the
  ``alpha`` of :func:`cross_agent_objective` (Eq. 12);
- 3.4 stepwise clipping: :func:`stepwise_lower_bound` (Eqs. 13-14).

Beyond the paper: PRP's truncation (TIS) on HACPO's own ratio ``s`` (:func:`correction_bounds`,
:func:`cross_row_outcome`: which rows keep a weight, which were capped, also the per-source diagnostics' counts),
and which rows move the gradient at an update (:func:`moving_rows`, the per-source ``used_share``).

:func:`cross_agent_objective` is App. E's Eq. 50 for one peer row, differentiable in the log-ratio: the adapter's
loss term on the peer rows at every parameter update; :func:`cross_agent_weight` is the gradient weight it gives a
row (the per-source figures). What the paper leaves open and is taken from the authors' code (the
verl recipe ``recipe/hacpo``) is said where it is used; docs/regimes.md lists every such choice.
"""

from __future__ import annotations

import math

import torch

from mutualrl.regimes.api import check_float, check_pool, check_same_shape, nanstd

CAPABILITY_FLOOR = 1e-8
"""Smallest capability (the authors' code): a policy that solved nothing in the window gives a finite ratio."""

MAX_ABS_LOG_RATIO = 10.0
"""|log s| is clamped here before exponentiating (the authors' ``max_abs_log_ratio``): no overflow, and a row
this far from the learner moves nothing (the clamp's gradient is 0)."""


def step_capability(pool_rewards: torch.Tensor, measure: str = "success-share") -> torch.Tensor:
    """Eq. 9's per-step performance ``P_τ^(m)`` of each policy over all its scored rollouts of the step.

    Args:
        pool_rewards: ``[P, M, K]`` rewards of the step (NaN = not scored, left out).
        measure: ``"success-share"``, the share of rewards above 0 (the authors' code); ``"mean-reward"``, the mean
            reward (Eq. 9 as the paper writes it). Equal with 0/1 rewards.

    Returns:
        ``[M]``; NaN for a policy with no scored rollout.
    """
    check_pool(pool_rewards)
    per_policy = pool_rewards.transpose(0, 1).reshape(pool_rewards.size(1), -1)  # [M, P*K]
    if measure == "success-share":
        scored = ~torch.isnan(per_policy)  # [M, P*K]
        wins = ((per_policy > 0) & scored).sum(dim=1).to(pool_rewards.dtype)  # [M]
        counted = scored.sum(dim=1)  # [M]
        share = wins / counted.clamp(min=1).to(pool_rewards.dtype)  # [M]
        return torch.where(counted > 0, share, torch.full_like(share, math.nan))  # [M]
    if measure == "mean-reward":
        return torch.nanmean(per_policy, dim=1)  # [M]
    raise ValueError(f"capability measure must be 'success-share' or 'mean-reward'; got {measure!r}")


def smoothed_capability(history: torch.Tensor, window: int) -> torch.Tensor:
    """Eq. 9's ``P̂^(m)_t``: the mean of the last ``window`` per-step performances, this step's included.

    A step where a policy scored nothing (NaN) is left out of its mean; no scored step at all, or a mean below
    :data:`CAPABILITY_FLOOR`, gives the floor.

    Args:
        history: ``[S, M]`` per-step performances, oldest first (:func:`step_capability` of each step).
        window: the paper's ``K`` (5 in every experiment).
    """
    check_float("history", history, 2, "[S, M]")
    if window < 1:
        raise ValueError(f"window must be >= 1; got {window}")
    recent = torch.nanmean(history[-window:], dim=0)  # [M]
    return torch.nan_to_num(recent, nan=CAPABILITY_FLOOR).clamp(min=CAPABILITY_FLOOR)  # [M]


def capability_ratios(capability: torch.Tensor, max_ratio: float = math.inf) -> torch.Tensor:
    """Eq. 8: ``ω[k, j] = P̂^(k) / P̂^(j)``, bounded to ``[1/max_ratio, max_ratio]`` (the authors' code: 10).

    Args:
        capability: ``[M]`` smoothed capabilities (> 0).
        max_ratio: bound of the ratio (>= 1); ``inf`` leaves it unbounded.

    Returns:
        ``[M, M]``; row ``k`` is the learner ``k``'s view, ``ω[k, k] = 1``.
    """
    check_float("capability", capability, 1, "[M]")
    if max_ratio < 1:
        raise ValueError(f"max_ratio must be >= 1; got {max_ratio}")
    ratios = capability[:, None] / capability[None, :]  # [M, M]
    return ratios.clamp(min=1.0 / max_ratio, max=max_ratio)  # [M, M]


def capability_advantages(pool_rewards: torch.Tensor, baseline_weights: torch.Tensor, learner_index: int,
                          eps: float = 1e-6) -> torch.Tensor:
    """Eqs. 6-7: learner ``k``'s advantage of every response of the pool, own and peers'.

        μ̂^(k)(p)  = (1 / nG) Σ_j Σ_i ω(k, j) · r_{p,j,i}                 (Eq. 7; ω = ``baseline_weights``)
        A_{p,j,i}  = (r_{p,j,i} − μ̂^(k)(p)) / (σ_joint(p) + eps)         (Eq. 6; σ_joint: std of the nG raw rewards)

    Two guards of the authors' code, where Eqs. 6-7 give no usable baseline: a prompt whose rewards are all equal
    takes the plain mean, the common reward itself (advantage exactly 0: with σ = 0 a weighted baseline, or a
    float32 mean's rounding, would divide a non-zero gap by ``eps``); and
    a baseline above the prompt's best reward takes the learner's own mean instead (the code's guard for 0/1
    rewards, ``baseline > 1``, stated for any scale). With every weight 1 neither changes anything, and this is
    PRP's pooled GRPO advantage (:func:`~mutualrl.regimes.core.grpo.prp_pooled_advantages`, ``"group"``).
    NaN rewards (not scored) are left out of every mean and std and get advantage 0.

    Args:
        pool_rewards: ``[P, M, K]`` rewards of every policy.
        baseline_weights: ``[M]`` ``ω(k, j)`` for each source ``j`` (1 for the learner; all 1: mechanism off).
        learner_index: ``k``, the learner's position in the pool.
        eps: added to ``σ_joint`` (the authors' 1e-6).

    Returns:
        ``[P, M, K]`` advantages for the learner ``k``.
    """
    check_pool(pool_rewards, learner_index)
    check_float("baseline_weights", baseline_weights, 1, "[M]")
    p, m, k = pool_rewards.shape
    flat = pool_rewards.reshape(p, m * k)  # [P, M*K]
    weighted = (pool_rewards * baseline_weights.to(pool_rewards.dtype)[None, :, None]).reshape(p, m * k)  # [P, M*K]
    baseline = torch.nanmean(weighted, dim=1)  # [P]
    best = torch.nan_to_num(flat, nan=-math.inf).amax(dim=1)  # [P]
    worst = torch.nan_to_num(flat, nan=math.inf).amin(dim=1)  # [P]
    baseline = torch.where(best == worst, best, baseline)  # [P] the common value itself: a mean of it may round
    own_mean = torch.nanmean(pool_rewards[:, learner_index], dim=1)  # [P]
    baseline = torch.where(baseline > best, own_mean, baseline)  # [P]
    scale = nanstd(flat, dim=1) + eps  # [P]
    advantages = (pool_rewards - baseline[:, None, None]) / scale[:, None, None]  # [P, M, K]
    return torch.nan_to_num(advantages, nan=0.0)  # [P, M, K]


def discrepancy_coefficients(ratios: torch.Tensor, learner_index: int) -> torch.Tensor:
    """Eq. 10's coefficient of each source's responses when learner ``k`` trains on them: ``ω(j, k) = P̂^(j)/P̂^(k)``
    (above 1 from a stronger peer: learn more; below 1 from a weaker one), 1 on the learner's own.

    Args:
        ratios: ``[M, M]`` from :func:`capability_ratios`.
        learner_index: ``k``.

    Returns:
        ``[M]``, indexed by the source ``j``.
    """
    check_float("ratios", ratios, 2, "[M, M]")
    return ratios[:, learner_index].clone()  # [M]


def sequence_log_ratio(learner_logps: torch.Tensor, behaviour_logps: torch.Tensor, mask: torch.Tensor,
                       source_tokens: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 11 in logs, as the authors' code computes it: the learner's mean token log-prob of the response minus the
    source's mean over the source's own tokens (``source_mean_logp``),

        log s = (1/|y|_k) Σ_t log π^(k)_θ(y_t)  −  (1/|y|_j) Σ_{t'} log π^(j)_old(y_t')

    clamped to ``±MAX_ABS_LOG_RATIO``. Within one tokenizer (every pair of the authors') both counts are the
    response's tokens and this is GSPO's sequence ratio (TRL's ``importance_sampling_level: sequence``). Across
    tokenizers the source's total is that of its trace on the learner's tokens (THL conserves it) and its count
    ``source_tokens`` its own.

    Args:
        learner_logps: ``[B, T]`` learner log-probs of the responses in its tokens.
        behaviour_logps: ``[B, T]`` the source's log-probs on the same tokens (a peer's THL-aligned trace).
        mask: ``[B, T]`` completion mask; a row without tokens gives 0.
        source_tokens: ``[B]`` the source's own token count of each response (None: the learner's, ``|y|_k``).

    Returns:
        ``[B]``.
    """
    check_float("learner_logps", learner_logps, 2, "[B, T]")
    check_same_shape("behaviour_logps", behaviour_logps, "learner_logps", learner_logps)
    check_same_shape("mask", mask, "learner_logps", learner_logps)
    m = mask.bool()
    zeros = torch.zeros_like(learner_logps)  # [B, T]
    count = m.sum(dim=1).clamp(min=1).to(learner_logps.dtype)  # [B]
    if source_tokens is None:
        source_count = count  # [B]
    else:
        check_float("source_tokens", source_tokens, 1, "[B]")
        source_count = source_tokens.to(learner_logps.device, learner_logps.dtype).clamp(min=1)  # [B]
    learner_mean = torch.where(m, learner_logps, zeros).sum(dim=1) / count  # [B]
    source_mean = torch.where(m, behaviour_logps, zeros).sum(dim=1) / source_count  # [B]
    log_s = torch.where(m.any(dim=1), learner_mean - source_mean, torch.zeros_like(learner_mean))  # [B]
    return log_s.clamp(-MAX_ABS_LOG_RATIO, MAX_ABS_LOG_RATIO)  # [B]


def stepwise_lower_bound(delta: float, delta_step: float, update_index: int) -> float:
    """Eqs. 13-14: the lower clip bound of a cross-agent ratio at the ``update_index``-th parameter update of the
    step (0 for the first): ``1 − δ + k·δ_step``, at most the upper bound 1 (the authors' code). ``δ_step = 0`` is
    Eq. 13's static band ``[1 − δ, 1]``."""
    if update_index < 0:
        raise ValueError(f"update_index must be >= 0; got {update_index}")
    return min(1.0, 1.0 - delta + update_index * delta_step)


def _clip_log_bounds(lower: float, upper: float) -> tuple[float, float]:
    low = -MAX_ABS_LOG_RATIO if lower <= 0 else max(math.log(lower), -MAX_ABS_LOG_RATIO)
    high = MAX_ABS_LOG_RATIO if upper == math.inf else min(math.log(upper), MAX_ABS_LOG_RATIO)
    return low, high


def cross_agent_objective(log_ratio: torch.Tensor, advantages: torch.Tensor, coefficients: torch.Tensor,
                          alpha: float, lower: float, upper: float = 1.0,
                          truncation_bound: float = math.inf) -> torch.Tensor:
    """App. E Eq. 50 per peer row (to be maximised): ``clip(s, lower, upper) · sg[clip(s, lower, upper)]^α · ω · A``.

    ``lower``/``upper`` are Eq. 14's band (``lower = 0``, ``upper = inf``: no clipping, the paper's "no Clip"
    ablation); ``α = 0`` is plain sequence-level importance sampling (Eq. 12 off); ``ω`` the discrepancy
    coefficients (all 1: Eq. 10 off). Outside the band the clip's gradient is 0: the row is discarded (Sec. 3.4).
    Beyond the paper, TIS's cap ``C`` (``truncation_bound``) bounds the row's weight: ``clip(s) ·
    sg[min(clip(s), C)^(α+1) / clip(s)]``, whose gradient is ``min(s, C)^(α+1)·∇log s`` (``C = inf``: Eq. 50).

    Args:
        log_ratio: ``[B]`` ``log s`` (:func:`sequence_log_ratio`), differentiable.
        advantages: ``[B]`` learner advantages of the rows (:func:`capability_advantages`).
        coefficients: ``[B]`` ``ω(j, k)`` of each row's source.
        alpha: Eq. 12's exponent (>= 0).
    """
    check_float("log_ratio", log_ratio, 1, "[B]")
    check_same_shape("advantages", advantages, "log_ratio", log_ratio)
    check_same_shape("coefficients", coefficients, "log_ratio", log_ratio)
    low, high = _clip_log_bounds(lower, upper)
    log_clipped = log_ratio.clamp(-MAX_ABS_LOG_RATIO, MAX_ABS_LOG_RATIO).clamp(low, high)  # [B]
    clipped = torch.exp(log_clipped)  # [B]
    capped = log_clipped.detach().clamp(max=math.log(truncation_bound)) if truncation_bound != math.inf \
        else log_clipped.detach()  # [B] log min(clip(s), C)
    factor = torch.exp((alpha + 1.0) * capped - log_clipped.detach())  # [B] sg[min(clip(s), C)^(α+1) / clip(s)]
    return clipped * factor * coefficients * advantages  # [B]


def cross_agent_weight(log_ratio: torch.Tensor, coefficients: torch.Tensor, alpha: float, lower: float,
                       upper: float = 1.0, truncation_bound: float = math.inf) -> torch.Tensor:
    """The gradient weight Eq. 50 gives a peer row at ratio ``s`` (its gradient is ``w · A · ∇ mean log π_θ``):

        w = ω · min(s, C)^(α+1) · [lower <= s <= upper]     (s = exp(log_ratio))

    (the derivative of :func:`cross_agent_objective` over ``A``; ``C = truncation_bound``, ``inf``: Eq. 50 exactly).
    Detached: what the per-source figures report as the weight the loss uses.

    Returns:
        ``[B]``, finite and >= 0 for ``ω >= 0``.
    """
    check_float("log_ratio", log_ratio, 1, "[B]")
    check_same_shape("coefficients", coefficients, "log_ratio", log_ratio)
    kept, _ = cross_row_outcome(log_ratio, lower, upper, truncation_bound)  # bool [B] each
    ls = log_ratio.detach().clamp(-MAX_ABS_LOG_RATIO, MAX_ABS_LOG_RATIO)  # [B]
    if truncation_bound != math.inf:
        ls = ls.clamp(max=math.log(truncation_bound))  # [B] log min(s, C)
    weight = coefficients.detach() * torch.exp((alpha + 1.0) * ls)  # [B]
    return torch.where(kept, weight, torch.zeros_like(weight))  # [B]


def moving_rows(log_ratio: torch.Tensor, advantages: torch.Tensor, coefficients: torch.Tensor, alpha: float,
                lower: float, upper: float = 1.0, truncation_bound: float = math.inf) -> torch.Tensor:
    """Which peer rows Eq. 50 gives a nonzero gradient at ``log_ratio``, bool ``[B]``: the weighted advantage
    ``w · A`` (``w``: :func:`cross_agent_weight`) is nonzero, and ``|log s|`` is below :data:`MAX_ABS_LOG_RATIO`
    (:func:`sequence_log_ratio` clamps there, and the clamp's gradient is 0). A row inside the band whose advantage
    is 0 (a prompt whose rewards are all equal, an unscored row) moves nothing and is not counted."""
    check_same_shape("advantages", advantages, "log_ratio", log_ratio)
    weight = cross_agent_weight(log_ratio, coefficients, alpha, lower, upper, truncation_bound)  # [B]
    inside_clamp = log_ratio.detach().abs() < MAX_ABS_LOG_RATIO  # bool [B]
    return (weight * advantages.detach() != 0) & inside_clamp  # bool [B]


def correction_bounds(correction: str, truncation_bound: float) -> float:
    """The cap ``C`` of ``s`` that PRP's correction settings give HACPO: ``none`` → ``inf``, ``tis`` → ``C`` (F-TIS's
    and the drop line's filters are PRP's, refused under HACPO by its settings check)."""
    if correction == "none":
        return math.inf
    if correction == "tis":
        return truncation_bound
    raise ValueError(f"HACPO's correction must be 'none' or 'tis'; got {correction!r}")


def cross_row_outcome(log_ratio: torch.Tensor, lower: float, upper: float,
                      truncation_bound: float = math.inf) -> tuple[torch.Tensor, torch.Tensor]:
    """Which peer rows keep a weight (inside the band ``[lower, upper]``) and which of those had ``s`` capped at
    ``C``: two bool ``[B]``. With the band ``[·, 1]`` a cap ``C >= 1`` never binds (``s <= 1`` there)."""
    check_float("log_ratio", log_ratio, 1, "[B]")
    low, high = _clip_log_bounds(lower, upper)
    ls = log_ratio.detach()  # [B]
    kept = (ls >= low) & (ls <= high)  # [B]
    if truncation_bound == math.inf:
        return kept, torch.zeros_like(kept)
    return kept, kept & (ls > math.log(truncation_bound))  # [B], [B]
