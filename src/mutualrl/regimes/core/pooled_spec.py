"""The settings every regime that pools peer rows into the learner's batch shares (PRP, HACPO): how a peer row's
ratio divides, its importance-weight correction and how its advantage is grouped. Torch-free, like a ``spec.py``; the
rows themselves are :mod:`mutualrl.regimes.core.pooled_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mutualrl.metric_labels import NONNEGATIVE, UNIT, MetricWords
from mutualrl.regimes.core.sampling import shown, truncating_sampling


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
    kl_estimator: Literal["rlogr-sum", "k3-sum", "mean-log-ratio"] = field(
        default="rlogr-sum",
        metadata={"help": "Under 'ftis': how a sample's sequence KL to the learner is estimated from the peer's "
                          "tokens, r_t = pi_learner / pi_peer per token: 'rlogr-sum' (the sum of r log r - r + 1: "
                          "unbiased on the peer's samples for the tokens' KL(learner || peer) at the peer's prefixes, "
                          "summed: F-TIS's D_KL(pi_theta || pi_gen)), 'k3-sum' (the sum of GRPO's k3, 1/r + log r - "
                          "1: it estimates chi2(peer || learner) - KL(peer || learner), growing as 1/r) or "
                          "'mean-log-ratio' (the mean of -log r, TRL's off_policy_mask_threshold: the sequence's "
                          "KL(peer || learner) over its length). F-TIS names KL(pi_theta || pi_gen); g = 50 is a "
                          "whole-sequence magnitude, which a sum has."},
    )
    kl_over: Literal["texts", "tokens"] = field(
        default="texts",
        metadata={"help": "Under 'ftis': what the sequence KL compares. 'texts': each byte of the text and its end, "
                          "each policy's probability of it given the text before summed over every tokenization "
                          "(the peer publishes its own with its records), so a learner equal to the peer on texts "
                          "gives 0 whichever way either split them (exactly at regime.prp.cover_floor and max_covers "
                          "0); costs an enumeration of tokenizations per published row and per peer row with "
                          "advantage <= 0. 'tokens': the peer's sampled tokens "
                          "against the learner's tokens of its text (per word where the tokenizers split it "
                          "differently): cheaper, but a non-canonical split counts as divergence."},
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


def check_pooled_grpo(settings: PooledRowsSettings, grpo: Mapping[str, Any],
                      key: str) -> tuple[str, str] | None:
    """Settings of a pooling regime (``settings``, under ``regime.<key>``) that one policy's GRPO fields (``grpo``:
    shared and its own) would make train another objective: None, or (the GRPO field, the problem).

    - A per-token correction under GSPO: TRL's sequence ratio averages the log-ratios, so a token weight on the
      advantage reaches every token of the row as the row's mean weight (``[0.5, 2, 3, 3]`` trains ``2.125`` on each).
    - Truncated sampling with the peer's trace as a ratio's denominator (``denominator: peer``): under transformers
      generation (or wherever the plan turns vLLM off) the trace is the trainer's full-vocabulary log-prob, not the
      truncated sampler's, so ``log w`` is too high by ``−log S`` per token (``S``: the kept mass).
    """
    if (settings.correction != "none" and settings.correction_level == "token"
            and grpo.get("importance_sampling_level") == "sequence"):
        return "importance_sampling_level", (
            f"'sequence' (GSPO) with regime.{key}.correction {settings.correction!r} at correction_level 'token': "
            "TRL's sequence ratio averages the tokens' log-ratios, so every token of a peer row would train with the "
            f"row's mean weight, not its own; set regime.{key}.correction_level: sequence, or "
            "importance_sampling_level: token")
    cut = truncating_sampling(grpo)
    if cut and settings.denominator == "peer":
        return cut[0][0].split(".")[0], (
            f"{shown(cut)} truncates sampling, and regime.{key}.denominator 'peer' divides by the peer's recorded "
            "trace, which under transformers generation (wherever the plan runs a policy without vLLM) is the "
            "untruncated log-prob: log w too high by -log(kept mass) on every token; sample untruncated (top_p 1, "
            "top_k 0, min_p unset)")
    return None


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
