"""Peer Rollout Pooling (paper Sec. "Regime 1: Data-level experience sharing via PRP").

The learner ``n`` trains on the unified candidate pool ``Y_pool = {y^(n)_1:K} ∪ ⋃_{m≠n} {y^(m)_1:K}``
with group-relative advantages "normalized across the entire pool", and importance weights
``w_t = π_θ(y_t) / π_behavior(y_t)`` whose denominator is either the learner's own snapshot
('learner', naive pooling) or the peer's recorded trace aligned into the learner's tokens by
THL ('peer', corrected). The clipped surrogate itself is TRL's (``GRPOTrainer._compute_loss``);
this module only supplies what goes into it, plus the diagnostics of
App. "Importance-ratio distribution under the THL-aligned denominator" (the channel
decomposition of the three regimes is :mod:`mutualrl.regimes.usability`).
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from mutualrl.regimes.grpo import TRL_STD_EPS, group_advantages
from mutualrl.regimes.rank_metrics import Quantile, Share
from mutualrl.regimes.pool import (
    ScaleRewards,
    check_float,
    check_pool,
    check_same_shape,
)


def prp_pooled_advantages(
    pool_rewards: torch.Tensor, scale_rewards: ScaleRewards = "group", eps: float = TRL_STD_EPS
) -> torch.Tensor:
    """GRPO advantages normalised over the unified candidate pool of ``M*K`` responses (Sec. "Regime 1").

    For prompt ``p`` with pool rewards ``r_{p,m,k}`` (all M policies, K rollouts each):

        μ_pool(p) = nanmean_{m,k} r_{p,m,k}
        A_{p,m,i} = (r_{p,m,i} - μ_pool(p)) / (σ_pool(p) + eps)

    with ``σ_pool(p)`` the NaN-aware sample std of the prompt's ``M*K`` rewards ("group"), or of
    all ``P*M*K`` rewards ("batch"); "none" skips the division. Exactly
    :func:`~mutualrl.regimes.grpo.group_advantages` applied to the ``[P, M*K]`` pool, so it is
    the same tensor for every learner (the pool is the same set) and, for ``M = 1``, equals
    standalone GRPO bit for bit. NaN rewards get advantage 0.

    Args:
        pool_rewards: ``[P, M, K]`` rewards of every policy of the pool (NaN = unscorable).
        scale_rewards: TRL's ``"group"``, ``"batch"`` or ``"none"``.
        eps: added to the pooled std (``regime.prp.std_epsilon``).

    Returns:
        ``[P, M, K]`` pooled advantages.
    """
    check_pool(pool_rewards)
    p, m, k = pool_rewards.shape
    return group_advantages(pool_rewards.reshape(p, m * k), scale_rewards, eps).reshape(p, m, k)


def ratio_statistics(
    ratios: torch.Tensor, mask: torch.Tensor, epsilon: float = 0.2, epsilon_high: float | None = None
) -> dict[str, float]:
    """Importance-ratio diagnostics of App. "Importance-ratio distribution under the THL-aligned denominator".

    Over the masked tokens ``t`` of responses ``b`` (ratio ``w_{b,t} = exp(log-ratio)``):

    - ``token_ratio_p99``: 99th percentile of ``w_{b,t}`` (linear interpolation);
    - ``token_clip_rate``: fraction of tokens with ``w < 1 - ε_low`` or ``w > 1 + ε_high`` (PPO clip band,
      compared in the ratios' dtype like TRL's clamp);
    - ``resp_any_ratio_gt10``: fraction of responses with some token ratio ``> 10``;
    - ``seq_ratio_median`` / ``seq_ratio_p99`` / ``seq_clip_rate``: the same for the sequence ratio
      ``W_b = exp(Σ_t log w_{b,t})`` (App. theory: ``exp{L_θ - L_behavior}``).

    Responses without masked tokens are left out; an empty selection gives NaN. NaN token ratios
    (unaligned tokens) are left out of the token statistics and make their sequence ratio NaN,
    which is left out too; ``nan_token_frac`` reports how many there were. The rates are
    :class:`~mutualrl.regimes.rank_metrics.Share` and the percentiles ``Quantile`` (linear interpolation,
    numpy's default): over several ranks they reduce to those of every rank's responses together.

    Args:
        ratios: ``[B, T]`` token ratios ``w`` (not log-ratios).
        mask: ``[B, T]`` completion mask.
        epsilon: lower clip width ``ε_low`` (the paper's 0.2; TRL's ``epsilon``).
        epsilon_high: upper clip width (TRL's ``epsilon_high``); default ``epsilon``.
    """
    check_float("ratios", ratios, 2, "[B, T]")
    check_same_shape("mask", mask, "ratios", ratios)
    eps_hi = epsilon if epsilon_high is None else epsilon_high
    m = mask.bool()
    tok = ratios[m]
    nan_tok = torch.isnan(tok)
    tok_ok = tok[~nan_tok]
    # Compared in the ratios' own dtype, as TRL's clamp does: a float32 ratio of 1.2 is on the edge, not outside.
    outside = (tok_ok < 1 - epsilon) | (tok_ok > 1 + eps_hi)
    has_tokens = m.any(dim=1)
    any_gt10 = ((ratios > 10) & m).any(dim=1)[has_tokens]
    log_ratio = torch.where(m, torch.log(ratios.double()), torch.zeros_like(ratios, dtype=torch.float64))
    seq = torch.exp(log_ratio.sum(dim=1))[has_tokens]
    seq = seq[~torch.isnan(seq)]
    seq_cmp = seq.to(ratios.dtype)
    seq_outside = (seq_cmp < 1 - epsilon) | (seq_cmp > 1 + eps_hi)
    n_resp = int(has_tokens.sum())
    return {
        "token_ratio_p99": Quantile(tok_ok.double(), 0.99),
        "token_clip_rate": Share(outside.sum().item(), tok_ok.numel()),
        "resp_any_ratio_gt10": Share(any_gt10.sum().item(), n_resp),
        "seq_ratio_median": Quantile(seq, 0.5),
        "seq_ratio_p99": Quantile(seq, 0.99),
        "seq_clip_rate": Share(seq_outside.sum().item(), seq.numel()),
        "nan_token_frac": Share(nan_tok.sum().item(), tok.numel()),
    }


# -- importance-weight corrections of peer rows (beyond the paper: TIS, F-TIS) ------------------------------
Correction = Literal["none", "tis", "ftis"]
CorrectionLevel = Literal["token", "sequence"]


def unit_log_weights(log_w: torch.Tensor, mask: torch.Tensor, level: CorrectionLevel) -> tuple[torch.Tensor, torch.Tensor]:
    """The log importance weights of the correction's units and which units exist.

    ``token``: each masked token's ``log w_t`` (``[N, T]``); ``sequence``: each response's
    ``log W = Σ_t log w_t`` over its masked tokens (``[N, 1]``), one weight for all its tokens.
    """
    check_float("log_w", log_w, 2, "[N, T]")
    check_same_shape("mask", mask, "log_w", log_w)
    m = mask.bool()
    masked = torch.where(m, log_w, torch.zeros_like(log_w))  # [N, T]
    if level == "token":
        return masked, m
    if level == "sequence":
        return masked.sum(dim=1, keepdim=True), m.any(dim=1, keepdim=True)  # [N, 1], bool [N, 1]
    raise ValueError(f"correction level must be 'token' or 'sequence'; got {level!r}")


def corrected_log_weights(unit_log_w: torch.Tensor, correction: Correction, truncation_bound: float,
                          filter_bound: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``log T(w)`` of each unit, and which units were truncated and which filtered.

    - ``none``: ``T(w) = w``;
    - ``tis`` (truncated IS): ``T(w) = min(w, C)``, ``C = truncation_bound``;
    - ``ftis`` (filtered and truncated): ``T(w) = 0`` where ``w > F`` (``F = filter_bound``: the unit is
      dropped), else ``min(w, C)``.

    With ``C = F = inf`` every correction is ``T(w) = w``.
    """
    log_c, log_f = math.log(truncation_bound), math.log(filter_bound)
    none = torch.zeros_like(unit_log_w, dtype=torch.bool)  # bool, unit_log_w's shape
    if correction == "none":
        return unit_log_w, none, none
    truncated = unit_log_w > log_c
    capped = torch.clamp(unit_log_w, max=log_c)
    if correction == "tis":
        return capped, truncated, none
    if correction == "ftis":
        filtered = unit_log_w > log_f
        return torch.where(filtered, torch.full_like(capped, -math.inf), capped), truncated & ~filtered, filtered
    raise ValueError(f"correction must be 'none', 'tis' or 'ftis'; got {correction!r}")


def correction_weights(log_w: torch.Tensor, log_ratio_in_loss: torch.Tensor, mask: torch.Tensor,
                       correction: Correction, level: CorrectionLevel, truncation_bound: float,
                       filter_bound: float) -> torch.Tensor:
    """Per-token loss weights ``[N, T]`` of peer rows that make the loss's importance weight ``T(w)``.

    ``w = π_snapshot / π_peer`` is the learner's importance weight of the peer's sample (``log_w``), and TRL's ratio
    ``π_θ / π_old`` already holds ``r₀ = π_snapshot / π_old`` at the snapshot (``log_ratio_in_loss``: ``log w``
    under the peer denominator, 0 under the learner's). The weight ``T(w) / r₀`` (per token, or per response with
    ``W = Π_t w_t`` and ``R₀ = Π_t r₀_t`` at sequence level) multiplies the per-token policy loss, so at the
    snapshot the loss weighs the sample by ``T(w)`` and its gradient is ``T(w)·∇log π_θ·A`` while TRL's PPO
    clip is unchanged. Under the peer denominator and ``C = inf`` (``tis``) the weight is exactly 1: today's PRP.
    Outside ``mask`` the weight is 1 (those tokens are not in the loss).
    """
    check_same_shape("log_ratio_in_loss", log_ratio_in_loss, "log_w", log_w)
    units, exists = unit_log_weights(log_w, mask, level)  # [N, T] or [N, 1]
    in_loss, _ = unit_log_weights(log_ratio_in_loss, mask, level)  # [N, T] or [N, 1]
    corrected, _, _ = corrected_log_weights(units, correction, truncation_bound, filter_bound)
    weights = torch.exp(corrected - in_loss).expand_as(log_w)  # [N, T]
    return torch.where(mask.bool() & exists, weights, torch.ones_like(weights))  # [N, T]


def source_diagnostics(log_w: torch.Tensor, mask: torch.Tensor, correction: Correction, level: CorrectionLevel,
                       truncation_bound: float, filter_bound: float) -> dict[str, torch.Tensor]:
    """Per-row sums of how off-policy a peer's rows are, for :func:`source_metrics` (rows ``[N]``, float64).

    ``w_sum``, ``w_sq_sum``, ``units``: ``Σ w``, ``Σ w²`` and the count over the correction's units (for the
    effective sample size; ``log w`` clamped to ±150 so that ``w²`` stays finite in float64); ``log_w_sum``,
    ``tokens``: ``Σ_t log w_t`` and the masked tokens; ``log_w_max``: the largest token ``log w`` (``-inf``
    without tokens); ``truncated``, ``filtered``: units the correction truncated or dropped; ``used``: 1 where
    the row keeps some weight (not every unit filtered).
    """
    units, exists = unit_log_weights(log_w, mask, level)  # [N, T] or [N, 1]
    _, truncated, filtered = corrected_log_weights(units, correction, truncation_bound, filter_bound)
    w = torch.exp(units.double().clamp(-150.0, 150.0)) * exists  # [N, T] or [N, 1]
    m = mask.bool()
    token_max = torch.where(m, log_w.double(), torch.full_like(log_w, -math.inf, dtype=torch.float64))  # [N, T]
    kept = (exists & ~filtered).any(dim=1)  # bool [N]
    return {
        "w_sum": w.sum(dim=1), "w_sq_sum": (w * w).sum(dim=1), "units": exists.sum(dim=1).double(),
        "log_w_sum": torch.where(m, log_w.double(), torch.zeros_like(log_w, dtype=torch.float64)).sum(dim=1),
        "tokens": m.sum(dim=1).double(), "log_w_max": token_max.max(dim=1).values,
        "truncated": (truncated & exists).sum(dim=1).double(), "filtered": (filtered & exists).sum(dim=1).double(),
        "used": kept.double(),
    }


def normalised_ess(w_sum: float, w_sq_sum: float, units: float) -> float:
    """Kish's effective sample size over the number of units, ``(Σ w)² / (n Σ w²)`` in ``(0, 1]``: 1 when every
    weight is the same (on-policy samples), near ``1/n`` when one weight dominates; NaN without units."""
    if units <= 0 or w_sq_sum <= 0:
        return math.nan
    return (w_sum * w_sum) / (units * w_sq_sum)
