"""Cross-policy GRPO advantage sharing, XGRPO (paper Sec. "Regime 2: Value-level experience sharing").

The paper states the rule in words only. App. "Implementation details": XGRPO "averages
per-prompt advantages across policies, mixes them back into each policy's own advantages with a
cross-model factor of 0.2, applies a length correction of strength 0.1, and clips the resulting
effective advantages before the loss". Sec. "Regime 2": "the learner's local group-relative
advantage is combined with a pool-aggregated counterpart computed from the per-prompt reward
statistics across the learner and its M-1 concurrent peers ... regularized to discourage
long-response domination and clipped". App. theory (Verifiable contextual-bandit formulation)
gives the pool-aggregated counterpart: ``A = (r - μ_pool(x)) / (σ_pool(x) + ε)`` with ``μ_pool``
the mean of all ``M·K`` rewards of the prompt.

Our rule, for learner ``n``, prompt ``x``, rollout ``i`` (every constant a setting):

    A_loc  = group_advantages(r_n)                                  (standalone GRPO, TRL-exact)
    A_pool = (r_{n,i} - μ_pool(x)) / (σ_pool(x) + ε)                (pooled over all M·K rewards)
    A_mix  = (1 - α) · A_loc + α · A_pool                           α = cross_model_factor (0.2)
    A_len  = A_mix · (L̄(x) / L_i)^γ                                 γ = length_correction (0.1)
    A_eff  = clip(A_len, -c, c)                                      c = advantage_clip (5.0, ours)

``σ_pool`` and the ``"batch"``/``"none"`` variants follow TRL's ``scale_rewards`` exactly as
``A_loc`` does, applied to the pool: for ``"batch"`` σ is the NaN-aware std of all ``P·M·K``
rewards (TRL's batch std is over raw rewards, not centred ones), for ``"none"`` there is no
division. Hence ``A_pool`` is the learner's slice of :func:`~mutualrl.regimes.core.grpo.prp_pooled_advantages`,
and a pool of one (M = 1) gives ``A_pool = A_loc`` in all three modes. ``L̄(x)`` is the mean
length of the learner's K responses; lengths are clamped to at least one token. The length
factor is multiplicative, so it never flips a sign, and it shrinks the advantage of responses
longer than the group's mean (positive or negative alike), which is how we read "discourage
long-response domination". With ``α = 0, γ = 0, c = ∞`` the result is ``A_loc`` bit for bit.

Normalisation of ``A_pool`` (``regime.xgrpo.normalisation``; one control beyond the paper):

- ``pooled`` (the paper's, default): baseline and scale from the pool, as above;
- ``per-policy`` (Dr. MAS, arXiv 2602.08847: one normalisation shared across agents
  destabilises gradient norms, agent-wise normalisation fixes it): the baseline stays pooled,
  ``μ_pool(x)`` (XGRPO's cross-policy signal), and the scale is the learner's own, the same
  ``scale_rewards`` statistic computed over its rewards only:
  ``A_pool = (r_{n,i} - μ_pool(x)) / (σ_n + ε)``. A fully per-policy mean would make
  ``A_pool = A_loc`` and XGRPO plain GRPO. With ``scale_rewards = "group"``, a prompt whose K
  learner rewards are equal has ``σ_n(x) = 0`` and its advantage is divided by ε alone (then
  clipped at ``±c``): use it with ``"batch"`` (the paper recipes), as Dr. MAS does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from mutualrl.regimes.api import (
    TRL_STD_EPS,
    ScaleRewards,
    check_pool,
    check_scale_rewards,
    group_advantages,
    nanstd,
    prp_pooled_advantages,
    reward_scale,
    split_pool,
)

Normalisation = Literal["pooled", "per-policy"]
NORMALISATIONS = ("pooled", "per-policy")


@dataclass
class XGRPOResult:
    """XGRPO advantages of one learner with the diagnostics of App. "Pooled normalization vs. shuffled-pool control".

    Attributes:
        advantages: ``[P, K]`` effective advantages ``A_eff`` to hand to TRL.
        standalone_advantages: ``[P, K]`` the learner's own GRPO advantages ``A_loc``.
        pooled_advantages: ``[P, K]`` ``A_pool``, the pooled-normalisation counterpart.
        mean_abs_change: mean over scored learner rollouts of ``|A_eff - A_loc|``.
        sign_flip_rate: fraction of prompts (with a scored learner rollout) on which the sign
            (−, 0, +; ``|A| ≤ zero_tol`` counts as 0) of some learner advantage differs from standalone.
        rollout_sign_flip_rate: the same over scored rollouts instead of prompts.
        spread_change_corr: Pearson correlation across prompts between the peer reward spread
            (NaN-aware sample std of the prompt's ``(M-1)·K`` peer rewards) and the learner's
            advantage change (mean ``|A_eff - A_loc|`` over its scored rollouts); NaN when fewer
            than two prompts have both, or either has zero variance.
        clip_fraction: fraction of scored rollouts whose ``|A_len|`` exceeded ``c``.
        adv_abs_mean: mean ``|A_eff|`` over scored rollouts (the advantage scale, logged per step
            so that a normalisation that destabilises training shows).
        adv_std: sample std of ``A_eff`` over scored rollouts.
    """

    advantages: torch.Tensor
    standalone_advantages: torch.Tensor
    pooled_advantages: torch.Tensor
    mean_abs_change: float
    sign_flip_rate: float
    rollout_sign_flip_rate: float
    spread_change_corr: float
    clip_fraction: float
    adv_abs_mean: float = float("nan")
    adv_std: float = float("nan")

    def metrics(self) -> dict[str, float]:
        """The scalar diagnostics, keyed for logging (prefix them with ``xgrpo/``)."""
        return {
            "mean_abs_adv_change": self.mean_abs_change,
            "sign_flip_rate": self.sign_flip_rate,
            "rollout_sign_flip_rate": self.rollout_sign_flip_rate,
            "spread_change_corr": self.spread_change_corr,
            "clip_fraction": self.clip_fraction,
            "adv_abs_mean": self.adv_abs_mean,
            "adv_std": self.adv_std,
        }


def length_factor(lengths: torch.Tensor, gamma: float, dtype: torch.dtype) -> torch.Tensor:
    """``(L̄(x) / L_i)^γ`` per learner rollout, lengths clamped to ``>= 1`` token; ``[P, K]``."""
    lens = lengths.to(dtype).clamp(min=1.0)
    return (lens.mean(dim=1, keepdim=True) / lens) ** gamma


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson correlation of two 1-D tensors over entries where both are finite; NaN if undefined."""
    ok = torch.isfinite(x) & torch.isfinite(y)
    x, y = x[ok].double(), y[ok].double()
    if x.numel() < 2:
        return float("nan")
    xc, yc = x - x.mean(), y - y.mean()
    den = math.sqrt(float((xc * xc).sum()) * float((yc * yc).sum()))
    return float((xc * yc).sum()) / den if den > 0 else float("nan")


def pooled_counterpart(
    pool_rewards: torch.Tensor,
    learner_index: int,
    scale_rewards: ScaleRewards = "group",
    eps: float = TRL_STD_EPS,
    normalisation: Normalisation = "pooled",
) -> torch.Tensor:
    """``A_pool`` ``[P, K]`` of the learner: pooled baseline, pooled or the learner's own scale (module doc).

    ``pooled``: ``(r - μ_pool(x)) / (σ_pool + ε)`` (:func:`prp_pooled_advantages`, the paper's);
    ``per-policy``: ``(r - μ_pool(x)) / (σ_n + ε)`` with ``σ_n`` the ``scale_rewards`` std of the
    learner's own rewards (Dr. MAS). NaN rewards get 0; ``"none"`` divides by nothing in both.
    """
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {', '.join(NORMALISATIONS)}; got {normalisation!r}")
    if normalisation == "pooled":
        return prp_pooled_advantages(pool_rewards, scale_rewards, eps)[:, learner_index]
    p, m, k = pool_rewards.shape
    flat = pool_rewards.reshape(p, m * k).contiguous() + 0.0
    learner = pool_rewards[:, learner_index].contiguous() + 0.0
    advantages = learner - torch.nanmean(flat, dim=1, keepdim=True)
    if scale_rewards != "none":
        advantages = advantages / (reward_scale(learner, scale_rewards) + eps)
    return torch.nan_to_num(advantages, nan=0.0)


def _sign(a: torch.Tensor, tol: float) -> torch.Tensor:
    return torch.where(a.abs() <= tol, torch.zeros_like(a), torch.sign(a))


def xgrpo_advantages(
    pool_rewards: torch.Tensor,
    learner_index: int,
    lengths: torch.Tensor,
    cross_model_factor: float = 0.2,
    length_correction: float = 0.1,
    advantage_clip: float = 5.0,
    scale_rewards: ScaleRewards = "group",
    eps: float = TRL_STD_EPS,
    zero_tol: float = 1e-6,
    normalisation: Normalisation = "pooled",
) -> XGRPOResult:
    """XGRPO effective advantages of learner ``learner_index`` (paper Sec. "Regime 2"; rule in the module doc).

        A_eff = clip( ((1-α)·A_loc + α·A_pool) · (L̄(x)/L_i)^γ , -c, c )

    Unscorable (NaN) learner rollouts get 0 (both ``A_loc`` and ``A_pool`` are 0 there); NaN peer
    rewards are left out of the pooled statistics.

    Args:
        pool_rewards: ``[P, M, K]`` rewards of every policy on the shared prompts.
        learner_index: which slice of dim 1 is the learner.
        lengths: ``[P, K]`` learner response lengths in tokens.
        cross_model_factor: α (``regime.xgrpo.cross_model_factor``, paper 0.2).
        length_correction: γ (``regime.xgrpo.length_correction``, paper 0.1; 0 disables).
        advantage_clip: c (``regime.xgrpo.advantage_clip``; ``math.inf`` disables).
        scale_rewards: TRL's ``scale_rewards`` of the run.
        eps: added to both stds (``regime.xgrpo.std_epsilon``; TRL's 1e-4 keeps ``A_loc`` TRL-exact).
        zero_tol: advantages within this of 0 count as sign 0 in the sign-flip diagnostics.
        normalisation: ``"pooled"`` (paper) or ``"per-policy"`` (Dr. MAS) scale of ``A_pool``
            (``regime.xgrpo.normalisation``; :func:`pooled_counterpart`).
    """
    check_pool(pool_rewards, learner_index)
    check_scale_rewards(scale_rewards)
    check_xgrpo_settings(pool_rewards, lengths, cross_model_factor, length_correction, advantage_clip)

    learner, peers = split_pool(pool_rewards, learner_index)  # [P, K], [P, M-1, K]
    a_loc = group_advantages(learner, scale_rewards, eps)  # [P, K]
    a_pool = pooled_counterpart(pool_rewards, learner_index, scale_rewards, eps, normalisation)  # [P, K]
    # α = 0 skips the sum: -0.0 + 0.0 would turn TRL's signed zeros into +0.0 (same loss, other bits).
    a_mix = (a_loc if cross_model_factor == 0
             else (1 - cross_model_factor) * a_loc + cross_model_factor * a_pool)  # [P, K]
    a_len = a_mix * length_factor(lengths.to(a_mix.device), length_correction, a_mix.dtype)  # [P, K]
    a_eff = torch.clamp(a_len, -advantage_clip, advantage_clip)  # [P, K]
    return XGRPOResult(advantages=a_eff, standalone_advantages=a_loc, pooled_advantages=a_pool,
                       **xgrpo_diagnostics(learner, peers, a_loc, a_len, a_eff, advantage_clip, zero_tol))


def check_xgrpo_settings(pool_rewards: torch.Tensor, lengths: torch.Tensor, cross_model_factor: float,
                         length_correction: float, advantage_clip: float) -> None:
    """``lengths`` of the learner's shape ``[P, K]``, α in [0, 1], γ >= 0 and c > 0; else a ValueError naming it."""
    p, _, k = pool_rewards.shape
    if not isinstance(lengths, torch.Tensor) or tuple(lengths.shape) != (p, k):
        got = tuple(lengths.shape) if isinstance(lengths, torch.Tensor) else type(lengths).__name__
        raise ValueError(f"lengths must have the learner shape [P, K] = ({p}, {k}); got {got}")
    if not 0 <= cross_model_factor <= 1:
        raise ValueError(f"cross_model_factor must be in [0, 1]; got {cross_model_factor}")
    if not length_correction >= 0:
        raise ValueError(f"length_correction must be >= 0; got {length_correction}")
    if not advantage_clip > 0:
        raise ValueError(f"advantage_clip must be > 0 (math.inf disables it); got {advantage_clip}")


def xgrpo_diagnostics(learner: torch.Tensor, peers: torch.Tensor, a_loc: torch.Tensor, a_len: torch.Tensor,
                      a_eff: torch.Tensor, advantage_clip: float, zero_tol: float) -> dict[str, float]:
    """The scalar diagnostics of :class:`XGRPOResult` (its attributes say what each is), over the learner's scored
    rollouts: ``learner`` ``[P, K]`` rewards, ``peers`` ``[P, M-1, K]``, the advantages ``[P, K]`` before the
    length correction (``a_loc``), before the clip (``a_len``) and after it (``a_eff``)."""
    p, k = learner.shape
    scored = ~torch.isnan(learner)  # [P, K]
    change = (a_eff - a_loc).abs()  # [P, K]
    flipped = (_sign(a_eff, zero_tol) != _sign(a_loc, zero_tol)) & scored  # [P, K]
    prompt_has = scored.any(dim=1)  # [P]
    n_scored = int(scored.sum())
    per_prompt_change = torch.where(scored, change, torch.zeros_like(change)).sum(dim=1) / scored.sum(dim=1).clamp(
        min=1
    )  # [P]
    per_prompt_change = torch.where(prompt_has, per_prompt_change,
                                    torch.full_like(per_prompt_change, float("nan")))  # [P]
    spread = nanstd(peers.flatten(1), dim=1) if peers.shape[1] * k > 1 else torch.full((p,), float("nan"))  # [P]
    clipped = (a_len.abs() > advantage_clip) & scored  # [P, K]
    return {
        "mean_abs_change": float(change[scored].double().mean()) if n_scored else float("nan"),
        "sign_flip_rate": float(flipped.any(dim=1)[prompt_has].double().mean()) if n_scored else float("nan"),
        "rollout_sign_flip_rate": float(flipped.sum()) / n_scored if n_scored else float("nan"),
        "spread_change_corr": pearson(spread.to(per_prompt_change.device), per_prompt_change),
        "clip_fraction": float(clipped.sum()) / n_scored if n_scored else float("nan"),
        "adv_abs_mean": float(a_eff[scored].abs().double().mean()) if n_scored else float("nan"),
        "adv_std": float(a_eff[scored].double().std()) if n_scored > 1 else float("nan"),
    }
