"""What the figures of ``mutualrl plot`` call each logged metric, and the y range they draw it on.

Every panel of one quantity in a figure shares one y range, so that a 0.05 move is not drawn as a deep V
and an all-zero reward does not get ticks of ±0.04: shares, accuracies and rewards on 0-1 (widened to the
values when a user's reward goes beyond it), counts and other non-negative quantities from 0, the rest on the
range of all their panels' values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

UNIT = "unit"  # 0-1 at least: shares, accuracies, rewards
NONNEGATIVE = "nonnegative"  # from 0 up: counts, entropy, KL, NLL, ratios
NONPOSITIVE = "nonpositive"  # up to 0: log-probabilities
FREE = "free"  # the values' own range: correlations, a user's regime metric


@dataclass(frozen=True)
class MetricWords:
    """How one metric is shown: the panel title, the y label and the scale its y range follows."""

    title: str
    ylabel: str
    scale: str


#: Every metric the built-in figures draw, by the key it is logged under.
METRIC_WORDS: dict[str, MetricWords] = {
    "eval/reward@1": MetricWords("validation reward@1", "reward@1 (greedy)", UNIT),
    "reward_mean": MetricWords("training reward", "mean reward", UNIT),
    "entropy": MetricWords("token entropy", "entropy (nats per token)", NONNEGATIVE),
    "kl": MetricWords("KL to the reference model", "KL (per token)", NONNEGATIVE),
    "sgt/gate_rate": MetricWords("SGT gate rate", "share of prompts gated", UNIT),
    "sgt/gated_prompts": MetricWords("SGT gated prompts", "prompts", NONNEGATIVE),
    "sgt/rescues": MetricWords("SGT rescues", "prompts rescued this step", NONNEGATIVE),
    "sgt/rescues_total": MetricWords("SGT rescues so far", "prompts rescued, cumulative", NONNEGATIVE),
    "sgt/learner_success_rate_gated": MetricWords("learner success, gated prompts", "share of rollouts", UNIT),
    "sgt/learner_success_rate_ungated": MetricWords("learner success, other prompts", "share of rollouts", UNIT),
    "sgt/pool_success_rate_gated": MetricWords("pool success, gated prompts", "share of rollouts", UNIT),
    "sgt/pool_success_rate_ungated": MetricWords("pool success, other prompts", "share of rollouts", UNIT),
    "sgt/all_fail_prompt_rate": MetricWords("prompts no policy solved", "share of prompts", UNIT),
    "sgt/extra_token_frac": MetricWords("SGT extra-token fraction", "extra tokens / rollout tokens", NONNEGATIVE),
    "sgt/extra_seq_frac": MetricWords("SGT extra sequences", "extra sequences / rollouts", NONNEGATIVE),
    "sgt/extra_seq_frac_bound": MetricWords("SGT extra sequences, bound", "extra sequences / rollouts", NONNEGATIVE),
    "sgt/nll_term": MetricWords("SGT NLL term (λ-weighted)", "NLL (nats per token)", NONNEGATIVE),
    "sgt/rescue_logp": MetricWords("learner log-prob of rescued answers", "sequence log-prob (nats)", NONPOSITIVE),
    "xgrpo/mean_abs_adv_change": MetricWords("XGRPO |advantage change|", "mean |A_eff - A_own|", NONNEGATIVE),
    "xgrpo/sign_flip_rate": MetricWords("XGRPO sign-flip rate", "share of prompts", UNIT),
    "xgrpo/rollout_sign_flip_rate": MetricWords("XGRPO sign flips per rollout", "share of rollouts", UNIT),
    "xgrpo/spread_change_corr": MetricWords("XGRPO peer spread vs advantage change", "correlation", FREE),
    "xgrpo/clip_fraction": MetricWords("XGRPO clipped advantages", "share of rollouts", UNIT),
    "xgrpo/adv_abs_mean": MetricWords("XGRPO mean |advantage|", "|advantage|", NONNEGATIVE),
    "xgrpo/adv_std": MetricWords("XGRPO advantage spread", "standard deviation", NONNEGATIVE),
    "grpo-randpert/mean_abs_adv_change": MetricWords("random-perturbation |advantage change|", "mean |change|",
                                                NONNEGATIVE),
    "prp/token_ratio_p99": MetricWords("PRP importance ratio p99", "ratio, 99th percentile", NONNEGATIVE),
    "prp/token_clip_rate": MetricWords("PRP clip rate", "share of tokens clipped", UNIT),
    "prp/resp_any_ratio_gt10": MetricWords("PRP responses with a ratio > 10", "share of responses", UNIT),
    "prp/seq_ratio_median": MetricWords("PRP sequence ratio, median", "ratio", NONNEGATIVE),
    "prp/seq_ratio_p99": MetricWords("PRP sequence ratio p99", "ratio, 99th percentile", NONNEGATIVE),
    "prp/seq_clip_rate": MetricWords("PRP sequence clip rate", "share of sequences clipped", UNIT),
    "prp/nan_token_frac": MetricWords("PRP tokens without a ratio", "share of tokens", UNIT),
}


#: Metrics logged per (learner, peer) as ``<regime>/from/<peer>/<metric>`` (the per-source diagnostics of PRP,
#: HACPO and SGT; docs/regimes.md).
PER_PEER_WORDS: dict[str, MetricWords] = {
    "ess": MetricWords("effective sample size", "ESS / samples", UNIT),
    "log_ratio_mean": MetricWords("mean log importance ratio", "log ratio (per token)", FREE),
    "log_ratio_max": MetricWords("largest log importance ratio", "log ratio", FREE),
    "truncated_share": MetricWords("share truncated", "share of weights", UNIT),
    "filtered_share": MetricWords("share filtered out", "share of weights", UNIT),
    "used_share": MetricWords("peer samples used", "share of the peer's samples", UNIT),
    "rescue_logp": MetricWords("learner log-prob of rescued answers", "sequence log-prob (nats)", NONPOSITIVE),
}


def metric_words(key: str, fallback_title: str | None = None) -> MetricWords:
    """The words of ``key``; a key not in :data:`METRIC_WORDS` (a user's regime) gets ``fallback_title`` or its
    key in words (``myreg/peer_hit_rate`` -> ``myreg: peer hit rate``) and its values' own range."""
    if key in METRIC_WORDS:
        return METRIC_WORDS[key]
    parts = key.split("/")
    if len(parts) == 4 and parts[1] == "from" and parts[3] in PER_PEER_WORDS:
        words = PER_PEER_WORDS[parts[3]]
        return MetricWords(f"{parts[0].upper()} from {parts[2]}: {words.title}", words.ylabel, words.scale)
    named = [part.replace("_", " ") for part in parts]
    title = fallback_title or (f"{' '.join(named[:-1])}: {named[-1]}" if len(named) > 1 else named[0])
    return MetricWords(title, "value", FREE)


def axis_range(values: Iterable[float], scale: str) -> tuple[float, float]:
    """The y limits of every panel showing ``values`` (all the panels' values together), padded by 4 %."""
    finite = [v for v in values if math.isfinite(v)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if scale == UNIT:
        low, high = min(low, 0.0), max(high, 1.0)
    elif scale == NONNEGATIVE:
        low = min(low, 0.0)
        high = high if high > low else low + 1.0  # all zero: 0..1, not ±0.04 round a flat line
    elif scale == NONPOSITIVE:
        high = max(high, 0.0)
        low = low if low < high else high - 1.0
    elif high == low:
        low, high = low - max(abs(low) * 0.1, 0.5), high + max(abs(high) * 0.1, 0.5)
    pad = 0.04 * (high - low)
    return low - pad, high + pad
