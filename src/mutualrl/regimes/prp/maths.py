"""Peer Rollout Pooling (paper Sec. "Regime 1: Data-level experience sharing via PRP").

The learner ``n`` trains on the unified candidate pool ``Y_pool = {y^(n)_1:K} ∪ ⋃_{m≠n} {y^(m)_1:K}``
with group-relative advantages "normalized across the entire pool", and importance weights
``w_t = π_θ(y_t) / π_behavior(y_t)`` whose denominator is either the learner's own snapshot
('learner', naive pooling) or the peer's recorded trace aligned into the learner's tokens by
THL ('peer', corrected). The clipped surrogate itself is TRL's (``GRPOTrainer._compute_loss``);
this module only supplies what goes into it (the pooled advantages are
:func:`mutualrl.regimes.core.grpo.prp_pooled_advantages`, shared with XGRPO; the diagnostics of App.
"Importance-ratio distribution under the THL-aligned denominator" are :mod:`mutualrl.regimes.core.importance`, shared
with HACPO; the channel decomposition of the three regimes is :mod:`mutualrl.evaluation.channel_decomposition`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from mutualrl.regimes.api import (
    TRL_STD_EPS,
    ScaleRewards,
    check_float,
    check_pool,
    check_same_shape,
    group_advantages,
    loss_types_where,
    unit_heads,
    unit_totals,
)


# -- importance-weight corrections of peer rows (beyond the paper: TIS, F-TIS, TIS with a drop line) -------------
Correction = Literal["none", "tis", "ftis", "tis-drop"]
CorrectionLevel = Literal["token", "sequence"]
AdvantageGrouping = Literal["auto", "pool", "source"]


def unit_log_weights(log_w: torch.Tensor, mask: torch.Tensor, level: CorrectionLevel,
                     groups: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The log importance weights of the correction's units and which units exist.

    ``token``: each masked token's ``log w_t`` (``[N, T]``), where the peer's tokens of its word are the learner's;
    on a word the two tokenizers split differently (``groups``,
    :func:`~mutualrl.regimes.core.word_units.comparison_groups`; None: every token its own) each of its tokens
    carries the word's ``log w_u = log π_θ(u) − log π_peer(u)``, the only ratio both policies give there;
    ``sequence``: each response's ``log W = Σ_t log w_t`` over its masked tokens (``[N, 1]``), one weight for all
    its tokens.
    """
    check_float("log_w", log_w, 2, "[N, T]")
    check_same_shape("mask", mask, "log_w", log_w)
    m = mask.bool()
    masked = torch.where(m, log_w, torch.zeros_like(log_w))  # [N, T]
    if level == "token":
        if groups is not None:
            masked = torch.where(m, unit_totals(masked, groups), torch.zeros_like(masked))  # [N, T] per word
        return masked, m
    if level == "sequence":
        return masked.sum(dim=1, keepdim=True), m.any(dim=1, keepdim=True)  # [N, 1], bool [N, 1]
    raise ValueError(f"correction level must be 'token' or 'sequence'; got {level!r}")


def corrected_log_weights(unit_log_w: torch.Tensor, correction: Correction, truncation_bound: float,
                          drop_bound: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``log T(w)`` of each unit, and which units were truncated and which dropped by their weight.

    - ``none``: ``T(w) = w``;
    - ``tis`` and ``ftis``: ``T(w) = min(w, C)``, ``C = truncation_bound`` (F-TIS's own filter acts on whole samples
      by their advantage and KL, :func:`ftis_kept`, not here);
    - ``tis-drop``: ``T(w) = 0`` where ``w > D`` (``D = drop_bound``: the unit is dropped whatever the advantage's
      sign), else ``min(w, C)``.

    With ``C = D = inf`` every correction is ``T(w) = w``.
    """
    log_c, log_d = math.log(truncation_bound), math.log(drop_bound)
    none = torch.zeros_like(unit_log_w, dtype=torch.bool)  # bool, unit_log_w's shape
    if correction == "none":
        return unit_log_w, none, none
    truncated = unit_log_w > log_c
    capped = torch.clamp(unit_log_w, max=log_c)
    if correction in ("tis", "ftis"):
        return capped, truncated, none
    if correction == "tis-drop":
        dropped = unit_log_w > log_d
        return torch.where(dropped, torch.full_like(capped, -math.inf), capped), truncated & ~dropped, dropped
    raise ValueError(f"correction must be 'none', 'tis', 'ftis' or 'tis-drop'; got {correction!r}")


def correction_weights(log_w: torch.Tensor, mask: torch.Tensor, correction: Correction, level: CorrectionLevel,
                       truncation_bound: float, drop_bound: float, groups: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token loss weights ``[N, T]`` of peer rows: ``T(w)`` of each token's unit (1 outside ``mask``).

    ``w = π_snapshot / π_peer`` is the learner's importance weight of the peer's sample (``log_w``). Under a correction
    TRL's ratio on a peer row divides by the learner's own snapshot (``PRPAdapter.behaviour_logps``), so it is 1 at
    the snapshot, inside every clip band: the weight multiplies the per-token policy loss, and the row's gradient
    there is ``T(w)·A·∇log π_θ`` for either sign of ``A``, TIS's form (a constant weight on the PPO surrogate; the
    truncated weight of F-TIS multiplies its clipped term the same way).
    """
    units, exists = unit_log_weights(log_w, mask, level, groups)  # [N, T] or [N, 1]
    corrected, _, _ = corrected_log_weights(units, correction, truncation_bound, drop_bound)
    weights = torch.exp(corrected).expand_as(log_w)  # [N, T]
    return torch.where(mask.bool() & exists, weights, torch.ones_like(weights))  # [N, T]


KLEstimator = Literal["rlogr-sum", "k3-sum", "mean-log-ratio"]
KL_ESTIMATORS: tuple[str, ...] = ("rlogr-sum", "k3-sum", "mean-log-ratio")


def sequence_kl(learner_logps: torch.Tensor, generator_logps: torch.Tensor, mask: torch.Tensor,
                estimator: KLEstimator = "rlogr-sum", groups: torch.Tensor | None = None) -> torch.Tensor:
    """F-TIS's per-sequence filter figure ``[N]`` from the tokens the generator sampled, ``δ_u = log π_gen − log π_θ``
    and ``r_u = π_θ / π_gen = exp(−δ_u)`` of each comparison unit ``u`` of the masked tokens: a token where the
    generator's tokens of its word are the learner's, the whole word where they are not (``groups``,
    :func:`~mutualrl.regimes.core.word_units.comparison_groups`; None: every token its own). Across tokenizers THL
    spreads a split word's log-prob over the learner's tokens of it, and a per-token term of that spread is no
    divergence (an agreeing peer's number-heavy answer would pass the bound); per word the terms are exact where a
    word's tokens say where it ends (not where the next token does: docs/regimes.md, OPD's "The limit"). What each
    estimator's expectation over the generator's samples is (per unit at the generator's own prefix; docs/regimes.md,
    "Which sequence KL"):

    - ``rlogr-sum`` (the default): ``Σ_u (r_u log r_u − r_u + 1)``, each term >= 0; unbiased for ``Σ_u KL(π_θ ‖
      π_gen)`` at the generator's prefixes, F-TIS's ``D_KL(π_θ ‖ π_gen)`` (the sequence KL itself where a unit's
      distributions do not depend on the prefix);
    - ``k3-sum``: ``Σ_u (exp(δ_u) − δ_u − 1)``, GRPO's k3 with the generator in the reference's place; on the
      generator's samples it estimates ``Σ_u (χ²(π_gen ‖ π_θ) − KL(π_gen ‖ π_θ))``, which grows as ``e^δ``;
    - ``mean-log-ratio``: ``(1/|y|) Σ_t δ_t``, TRL 1.16's off-policy sequence mask (``get_off_policy_mask``):
      ``Σ_t δ_t`` is unbiased for the sequence's ``KL(π_gen ‖ π_θ)``, divided by the learner's token count; 0 on a
      row without tokens (word totals are conserved, so the units do not change it).
    """
    check_same_shape("generator_logps", generator_logps, "learner_logps", learner_logps)
    check_same_shape("mask", mask, "learner_logps", learner_logps)
    m = mask.bool()
    delta = torch.where(m, generator_logps.double() - learner_logps.double(),
                        torch.zeros_like(learner_logps, dtype=torch.float64))  # [N, T] float64
    if estimator == "mean-log-ratio":
        return delta.clamp(-50.0, 50.0).sum(dim=1) / m.sum(dim=1).clamp(min=1)  # [N]
    if groups is not None:
        check_same_shape("groups", groups, "learner_logps", learner_logps)
        delta = unit_totals(delta, groups)  # [N, T] each token: its unit's log-ratio
        m = m & unit_heads(groups.to(m.device))  # [N, T] one term per unit
    delta = delta.clamp(-50.0, 50.0)  # [N, T]
    if estimator == "rlogr-sum":
        r = torch.exp(-delta)  # [N, T] π_θ / π_gen
        terms = r * -delta - r + 1.0  # [N, T] r log r − r + 1
        return torch.where(m, terms, torch.zeros_like(terms)).sum(dim=1)  # [N]
    if estimator == "k3-sum":
        k3 = torch.exp(delta) - delta - 1.0  # [N, T]
        return torch.where(m, k3, torch.zeros_like(k3)).sum(dim=1)  # [N]
    raise ValueError(f"kl_estimator must be one of {', '.join(KL_ESTIMATORS)}; got {estimator!r}")


def written_log_ratios(learner: torch.Tensor | None, generator: torch.Tensor | None) -> torch.Tensor | None:
    """float64 ``[u]``: ``δ_o = log q_gen(x_o | x_{<o}) − log q_θ(x_o | x_{<o})`` of each symbol the learner's row
    writes (``learner`` ``[u]``: its bytes, then the end where its row holds the EOS;
    :func:`~mutualrl.regimes.core.written_bytes.written_byte_logps`), against the generator's of the whole text
    (``generator``, its bytes then its end where it finished): a row cut in the learner's tokens compares its bytes'.
    None where either is missing or the generator's text is shorter than the row."""
    if learner is None or generator is None or len(generator) < len(learner):
        return None
    return generator[: len(learner)].double() - learner.double()  # [u]


def text_kl(deltas: Sequence[torch.Tensor | None], tokens: torch.Tensor,
            estimator: KLEstimator = "rlogr-sum") -> torch.Tensor:
    """F-TIS's per-sequence filter figure ``[N]`` over texts: :func:`sequence_kl`'s estimators with the text's
    written symbols as units (``deltas``, :func:`written_log_ratios` of each row; ``r_o = exp(−δ_o)``), each side's
    probability of a symbol its exact next-byte one, over every tokenization. So a learner equal to the generator on
    every text gives 0 whichever split either sampled, and ``E_gen`` of ``rlogr-sum`` is ``Σ_o E_{x~gen}
    KL(q_θ(·|x_{<o}) ‖ q_gen(·|x_{<o}))``, per byte at the generator's prefixes; ``mean-log-ratio`` is the text's
    log-ratio ``log p_gen(x) − log p_θ(x)`` over the row's learner token count (``tokens`` ``[N]``). A row without
    the values (None) is ``+inf``: nothing says it is near."""
    out = torch.full((len(deltas),), math.inf, dtype=torch.float64)  # [N]
    for row, delta in enumerate(deltas):
        if delta is None:
            continue
        delta = delta.double().clamp(-50.0, 50.0)  # [u]
        if estimator == "mean-log-ratio":
            out[row] = delta.sum() / max(int(tokens[row]), 1)
        elif estimator == "rlogr-sum":
            r = torch.exp(-delta)  # [u] q_θ / q_gen
            out[row] = (r * -delta - r + 1.0).sum()
        elif estimator == "k3-sum":
            out[row] = (torch.exp(delta) - delta - 1.0).sum()
        else:
            raise ValueError(f"kl_estimator must be one of {', '.join(KL_ESTIMATORS)}; got {estimator!r}")
    return out


def ftis_kept(advantages: torch.Tensor, kl: torch.Tensor, kl_bound: float) -> torch.Tensor:
    """F-TIS's filter, bool ``[N]``: a sample keeps its advantage where ``A > 0`` or its sequence KL is below ``g``
    (``kl_bound``); a sample with ``A <= 0`` this far from the learner is dropped (advantage 0). The dropped samples
    still counted in their group's mean and std (the advantages are computed before)."""
    check_same_shape("kl", kl, "advantages", advantages)
    return (advantages > 0) | (kl < kl_bound)  # bool [N]


def per_source_advantages(pool_rewards: torch.Tensor, scale_rewards: ScaleRewards = "group",
                          eps: float = TRL_STD_EPS) -> torch.Tensor:
    """F-TIS's "vertical" advantages ``[P, M, K]``: each policy's K rewards of a prompt normalised within themselves,
    its own GRPO advantages (:func:`~mutualrl.regimes.core.grpo.group_advantages` per source; ``"batch"`` scales by the
    source's own rewards of the step). The learner's own rows get exactly standalone GRPO's."""
    check_pool(pool_rewards)
    return torch.stack([group_advantages(pool_rewards[:, m], scale_rewards, eps)
                        for m in range(pool_rewards.size(1))], dim=1)  # [P, M, K]


def resolved_grouping(grouping: AdvantageGrouping, correction: Correction) -> Literal["pool", "source"]:
    """``auto``: F-TIS's own "vertical" grouping under ``ftis``, the paper's pooled one otherwise."""
    if grouping == "auto":
        return "source" if correction == "ftis" else "pool"
    return grouping


@dataclass(frozen=True)
class PPOClip:
    """TRL's clipped surrogate as it acts on a peer row whose ratio divides by the peer's trace (no correction under
    ``denominator: peer``): ``level`` is TRL's ``importance_sampling_level``, ``epsilon_low``/``epsilon_high`` its clip
    widths, ``delta`` its two-sided bound (``GRPOConfig.delta``, None: off)."""

    level: Literal["token", "sequence"]
    epsilon_low: float
    epsilon_high: float
    delta: float | None = None


CLIPPED_LOSSES = loss_types_where(clipped=True)
"""TRL 1.16's loss types whose surrogate is ``-min(r·A, clip(r)·A)`` (``LOSS_TYPES``; the others give every ratio a
gradient)."""


def clip_passes(log_w: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor, clip: PPOClip) -> torch.Tensor:
    """Where TRL's clipped surrogate passes a gradient at the snapshot, bool ``[N, T]``, its ratio ``r`` being the
    importance weight: ``w_t`` (``level`` token) or GSPO's ``exp(mean_t log w_t)`` over the row's masked tokens
    (sequence). ``-min(r·A, clip(r, 1−ε_low, 1+ε_high)·A)`` has the gradient of ``r`` where the unclipped term is the
    minimum, ``r <= 1+ε_high`` for ``A > 0`` and ``r >= 1−ε_low`` for ``A < 0``, and none elsewhere; under ``delta``
    also ``r <= delta`` (TRL clamps ``r`` there). ``A = 0`` is :func:`moving_units`' to rule out."""
    check_float("advantages", advantages, 1, "[N]")
    m = mask.bool()
    masked = torch.where(m, log_w.double(), torch.zeros_like(log_w, dtype=torch.float64))  # [N, T]
    if clip.level == "sequence":
        mean = masked.sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1)  # [N, 1]
        masked = mean.expand_as(masked)  # [N, T]
    elif clip.level != "token":
        raise ValueError(f"importance_sampling_level must be 'token' or 'sequence'; got {clip.level!r}")
    r = torch.exp(masked)  # [N, T] float64
    positive = (advantages > 0).to(r.device)[:, None]  # bool [N, 1]
    passes = torch.where(positive, r <= 1.0 + clip.epsilon_high, r >= 1.0 - clip.epsilon_low)  # bool [N, T]
    if clip.delta is not None:
        passes = passes & (r <= clip.delta)  # bool [N, T]
    return passes & m  # bool [N, T]


def source_diagnostics(log_w: torch.Tensor, mask: torch.Tensor, correction: Correction, level: CorrectionLevel,
                       truncation_bound: float, drop_bound: float, rows_kept: torch.Tensor,
                       advantages: torch.Tensor, clip: PPOClip | None = None,
                       groups: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-row sums of how off-policy a peer's rows are and what the loss makes of them, for the per-source metrics
    (rows ``[N]``, float64).

    ``w_sum``, ``w_sq_sum``: ``Σ w`` and ``Σ w²`` of the raw weights over the correction's units; ``lw_sum``,
    ``lw_sq_sum``: the same of the weights the loss uses (``T(w)`` of a kept row's units, 0 on a row the loss
    drops: ``rows_kept`` is False, F-TIS's filter or an unscored row); ``units``: the units (``log w`` clamped to
    ±150 so that ``w²`` stays finite in float64); ``log_w_sum``, ``tokens``: ``Σ_t log w_t`` and the masked tokens;
    ``log_w_max``: the largest token ``log w`` (``-inf`` without tokens); ``truncated``, ``filtered``: units the
    correction capped, and units that keep no weight (dropped by their weight, or of a dropped row); ``used``: 1
    where the row's gradient at the snapshot is nonzero on some token: its weighted advantage ``T(w)·A`` is nonzero
    (:func:`moving_units`) and, given ``clip`` (no correction under the peer denominator: TRL's PPO ratio is ``w``
    itself), TRL's clip passes that token's gradient (:func:`clip_passes`) (``advantages`` ``[N]``: the rows'
    advantages as the loss reads them). Later updates of the same generation are not seen.
    """
    units, exists = unit_log_weights(log_w, mask, level, groups)  # [N, T] or [N, 1]
    corrected, truncated, dropped = corrected_log_weights(units, correction, truncation_bound, drop_bound)
    kept_rows = rows_kept.bool()[:, None]  # bool [N, 1]
    w = torch.exp(units.double().clamp(-150.0, 150.0)) * exists  # [N, T] or [N, 1]
    lw = torch.exp(corrected.double().clamp(max=150.0)) * (exists & kept_rows)  # [N, T] or [N, 1]
    m = mask.bool()
    token_max = torch.where(m, log_w.double(), torch.full_like(log_w, -math.inf, dtype=torch.float64))  # [N, T]
    filtered = (dropped | ~kept_rows) & exists  # [N, T] or [N, 1]
    moving = moving_units(corrected, exists & ~filtered, correction, advantages)  # bool [N, T] or [N, 1]
    if clip is not None:  # no correction: one weight per row, so the clip's tokens and the row's units combine by row
        moving = moving & clip_passes(log_w, mask, advantages, clip).any(dim=1, keepdim=True)  # bool [N, T] or [N, 1]
    return {
        "w_sum": w.sum(dim=1), "w_sq_sum": (w * w).sum(dim=1), "lw_sum": lw.sum(dim=1),
        "lw_sq_sum": (lw * lw).sum(dim=1), "units": exists.sum(dim=1).double(),
        "log_w_sum": torch.where(m, log_w.double(), torch.zeros_like(log_w, dtype=torch.float64)).sum(dim=1),
        "tokens": m.sum(dim=1).double(), "log_w_max": token_max.max(dim=1).values,
        "truncated": (truncated & exists & kept_rows).sum(dim=1).double(), "filtered": filtered.sum(dim=1).double(),
        "used": moving.any(dim=1).double(),
    }


def moving_units(corrected: torch.Tensor, weighed: torch.Tensor, correction: Correction,
                 advantages: torch.Tensor) -> torch.Tensor:
    """Which of the correction's units carry a nonzero weighted advantage ``T(w)·A``, bool like ``corrected``.

    ``weighed``: the units that exist and keep a weight (not dropped, of a row the loss keeps). ``T(w)`` is taken as
    :func:`correction_weights` gives it to the loss, ``exp`` of ``corrected`` in its own dtype, because a weight
    that underflows to 0 there moves nothing; without a correction the loss has no weight (1). A row of advantage 0
    (a group whose rewards are all equal, an unscored row) moves nothing whatever its weight. What this does not
    see: without a correction under ``denominator: peer``, TRL's PPO clip on ``w`` (:func:`clip_passes`, which
    :func:`source_diagnostics` adds).
    """
    check_float("advantages", advantages, 1, "[N]")
    if correction == "none":
        positive = torch.ones_like(weighed)  # bool: the loss's weight is 1
    else:
        positive = torch.exp(corrected) > 0  # bool: T(w) as the loss reads it, 0 where it underflows
    nonzero = (advantages != 0).to(weighed.device)[:, None]  # bool [N, 1]
    return weighed & positive & nonzero  # bool [N, T] or [N, 1]
