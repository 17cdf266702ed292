"""The settings every regime that pools peer rows into the learner's batch shares (PRP, HACPO): how a peer row's
ratio divides, its importance-weight correction and how its advantage is grouped. Torch-free, like a ``spec.py``; the
rows themselves are :mod:`mutualrl.regimes.core.pooled_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mutualrl.figure_words import NONNEGATIVE, UNIT, MetricWords


@dataclass
class PooledRowsSettings:
    """Peer rows in the learner's batch (the paper's PRP, Sec. "Regime 1", and the regimes built on its rows)."""

    denominator: Literal["learner", "peer"] = field(
        default="peer",
        metadata={
            "help": "Behaviour-policy denominator of peer rows: 'learner' = the learner's own snapshot (naive "
            "pooling), 'peer' = the peer's trace aligned into the learner's tokens by THL (corrected)."
        },
    )
    std_epsilon: float = field(default=1e-4, metadata={"gt": 0, "help": "Added to the pooled reward standard deviation."})
    correction: Literal["none", "tis", "ftis", "tis-drop"] = field(
        default="none",
        metadata={
            "help": "Importance-weight correction of peer rows, w = learner snapshot / peer's aligned trace: 'none' "
            "(the paper's PRP), 'tis' (truncated IS: weight min(w, truncation_bound)), 'ftis' (F-TIS, arXiv "
            "2605.22537: TIS plus dropping a sample whose advantage is <= 0 and whose sequence KL to the learner is "
            "above kl_bound; advantages within each policy's own group), 'tis-drop' (TIS, and a unit whose w exceeds "
            "drop_bound gets weight 0 whatever its advantage). Under a correction TRL's PPO ratio divides by the "
            "learner's snapshot (1 at generation) and the peer's trace enters only through the weight; needs "
            "denominator 'peer'."
        },
    )
    correction_level: Literal["token", "sequence"] = field(
        default="token",
        metadata={"help": "Unit of the correction: each token's w, or the response's w = exp(sum of its tokens' "
                          "log w), one weight for all its tokens."},
    )
    truncation_bound: float = field(
        default=2.0,
        metadata={"gt": 0, "help": "Cap C of the importance weight under 'tis', 'ftis' and 'tis-drop' (2: F-TIS's "
                                   "published value)."},
    )
    kl_bound: float = field(
        default=50.0,
        metadata={"gt": 0, "help": "Under 'ftis': g, a sample with advantage <= 0 is dropped when its sequence KL "
                                   "to the learner (as kl_estimator reads it) is at least this (50: F-TIS's value, "
                                   "a whole-sequence magnitude)."},
    )
    kl_estimator: Literal["k3-sum", "mean-log-ratio"] = field(
        default="k3-sum",
        metadata={"help": "Under 'ftis': how a sample's sequence KL to the learner is estimated from its tokens, "
                          "delta_t = log pi_peer - log pi_learner: 'k3-sum' (the sum over its tokens of GRPO's k3, "
                          "exp(delta) - delta - 1, TRL's KL term with the peer's trace in the reference's place) or "
                          "'mean-log-ratio' (the mean of delta over its tokens, TRL's off_policy_mask_threshold). "
                          "F-TIS does not say which; k3-sum is the default because g = 50 is a whole-sequence "
                          "magnitude (a per-token mean almost never reaches it, which would switch the filter off) "
                          "and each k3 term is >= 0, so tokens do not cancel."},
    )
    drop_bound: float = field(
        default=10.0,
        metadata={"gt": 0, "help": "Under 'tis-drop': a unit whose importance weight exceeds it is dropped (weight "
                                   "0; the mutual-RL paper's heavy-tail line, a token ratio above 10)."},
    )
    advantage_grouping: Literal["auto", "pool", "source"] = field(
        default="auto",
        metadata={"help": "Which rewards a row's advantage is normalised by: 'pool' (the paper's PRP: the prompt's "
                          "M*K rewards of every policy), 'source' (F-TIS's 'vertical' grouping: the K rewards of "
                          "the policy that wrote the row), 'auto' (source under 'ftis', pool otherwise)."},
    )


def ratio_metrics(label: str) -> tuple[tuple[str, MetricWords], ...]:
    """The words of the peer rows' ratio diagnostics every pooling regime logs (``<regime>/token_ratio_p99``, ...),
    titled with the regime's ``label`` (``PRP``)."""
    return (
        ("token_ratio_p99", MetricWords(f"{label} importance ratio p99", "ratio, 99th percentile", NONNEGATIVE)),
        ("token_clip_rate", MetricWords(f"{label} clip rate", "share of tokens clipped", UNIT)),
        ("resp_any_ratio_gt10", MetricWords(f"{label} responses with a ratio > 10", "share of responses", UNIT)),
        ("seq_ratio_median", MetricWords(f"{label} sequence ratio, median", "ratio", NONNEGATIVE)),
        ("seq_ratio_p99", MetricWords(f"{label} sequence ratio p99", "ratio, 99th percentile", NONNEGATIVE)),
        ("seq_clip_rate", MetricWords(f"{label} sequence clip rate", "share of sequences clipped", UNIT)),
        ("nan_token_frac", MetricWords(f"{label} tokens without a ratio", "share of tokens", UNIT)),
        ("peer_rows", MetricWords(f"{label} peer rows", "rows", NONNEGATIVE)),
    )
