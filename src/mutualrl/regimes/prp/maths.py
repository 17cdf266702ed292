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

PRPDenominator = Literal["learner", "peer"]


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


def prp_behaviour_logps(
    denominator: PRPDenominator, learner_old_logps: torch.Tensor, peer_aligned_logps: torch.Tensor | None
) -> torch.Tensor:
    """The behaviour log-probs ``ℓ_behavior`` of peer rows for the chosen PRP denominator (Sec. "Regime 1").

    - ``'learner'`` (learner-snapshot denominator, naive pooling): ``ℓ^(n)_old(x, y)``, the learner's
      own snapshot on the retokenized peer response; at the first iteration the ratio is exactly 1
      and only PPO clipping limits mismatched rollouts.
    - ``'peer'`` (THL-aligned peer denominator): ``ℓ^(m)_aligned(x, y)``, the peer's recorded trace
      aligned into the learner's token grid by THL.

    Both are ``[B, T]`` on the learner's completion tokens; the returned tensor is what TRL's
    ``old_per_token_logps`` must hold for the peer rows.
    """
    if denominator == "learner":
        return learner_old_logps
    if denominator == "peer":
        if peer_aligned_logps is None:
            raise ValueError("PRP denominator 'peer' needs the THL-aligned peer log-probs; got None")
        check_same_shape("peer_aligned_logps", peer_aligned_logps, "learner_old_logps", learner_old_logps)
        return peer_aligned_logps
    raise ValueError(f"PRP denominator must be 'learner' or 'peer'; got {denominator!r}")


def peer_log_ratio(learner_logps: torch.Tensor, behaviour_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token log importance ratio ``log w_t = ℓ^(n)_θ,t - ℓ_behavior,t`` on masked tokens (Sec. "Regime 1").

    ``w^(n)_θ(x, y) = exp(ℓ^(n)_θ(x, y) - ℓ_behavior(x, y))`` elementwise; positions outside ``mask``
    are set to exactly 0 (ratio 1) so that padding (which may hold -inf or NaN) never leaks into a
    sum. Inside the mask NaN is kept: an unaligned token must be seen, not silently zeroed.

    Args:
        learner_logps: ``[B, T]`` learner log-probs of the (retokenized) responses.
        behaviour_logps: ``[B, T]`` behaviour log-probs, see :func:`prp_behaviour_logps`.
        mask: ``[B, T]`` completion mask (bool or 0/1).

    Returns:
        ``[B, T]`` log-ratios.
    """
    check_float("learner_logps", learner_logps, 2, "[B, T]")
    check_same_shape("behaviour_logps", behaviour_logps, "learner_logps", learner_logps)
    check_same_shape("mask", mask, "learner_logps", learner_logps)
    m = mask.bool()
    return torch.where(m, learner_logps - behaviour_logps, torch.zeros_like(learner_logps))


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
