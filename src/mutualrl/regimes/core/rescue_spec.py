"""The settings of SGT's rescue, declared once for every regime that uses it (SGT, opd-sgt, byte-kd): its gate's
thresholds, its budget and its reduction (:class:`RescueGateSettings`, SGT's own base), and its weight where it is a
term of another regime's loss (:class:`RescueSettings`). Torch-free, like a ``spec.py``; the rescue itself is
:mod:`mutualrl.regimes.core.rescue`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mutualrl.metric_labels import NONNEGATIVE, NONPOSITIVE, UNIT, MetricWords


@dataclass
class RescueGateSettings:
    """SGT's rescue without its weight: which rollouts count as successes and failures, how often one prompt may be
    rescued, and how a rescue's NLL is reduced over its tokens. SGT's settings inherit these fields (its weight is
    ``lam``); :class:`RescueSettings` adds the weight of the rescue inside another loss."""

    success_threshold: float = field(default=0.8, metadata={
        "help": "a rollout with a combined reward above this is a verified success (a rescue's candidates; the "
                "success rates a teaching gate compares)"})
    failure_threshold: float = field(default=0.2, metadata={
        "help": "an own rollout with a combined reward below this failed; the rescue (and a gate that reads "
                "failures) fires where every scored one did"})
    max_rescues_per_prompt: int | None = field(default=None, metadata={
        "ge": 1, "help": "over the whole run, how many steps may rescue one prompt for this learner (unset: no "
                         "limit, as in the paper); the regime's other term is not limited. The counts are saved "
                         "with each checkpoint."})
    rescue_reduction: Literal["mean", "sum"] = field(default="mean", metadata={
        "help": "how a rescue's NLL is reduced over its tokens: 'mean' (per token, so a long answer weighs as much as "
                "a short one), 'sum' (the SGT paper's L_SGT = -log pi(y*|x), so an answer weighs by its token "
                "count, which differs across tokenizers)"})


@dataclass
class RescueSettings(RescueGateSettings):
    """SGT's rescue as a term of another regime's loss (opd-sgt, byte-kd): a regime's settings inherit these fields
    and may change a default."""

    rescue_lam: float = field(default=0.0, metadata={
        "ge": 0, "help": "lambda_r: weight of the NLL of one verified peer success on a prompt whose every own "
                         "rollout failed (SGT's rescue), in the same loss; 0: no rescue"})


def check_rescue_thresholds(settings: RescueGateSettings, failures_count: bool = True) -> tuple[str, str] | None:
    """The thresholds' order, where a failure counts (the rescue on, or a gate that reads failures)."""
    if failures_count and settings.failure_threshold > settings.success_threshold:
        return "failure_threshold", f"must not exceed success_threshold ({settings.success_threshold})"
    return None


def rescue_metrics(regime: str) -> tuple[tuple[str, MetricWords], ...]:
    """The metrics :class:`~mutualrl.regimes.core.rescue.RescueBudget` records under ``<regime>/``."""
    return (
        ("rescue_rate", MetricWords(f"{regime} rescue rate", "share of prompts rescued", UNIT)),
        ("rescues", MetricWords(f"{regime} rescues", "prompts rescued this step", NONNEGATIVE)),
        ("rescues_total", MetricWords(f"{regime} rescues so far", "prompts rescued, cumulative", NONNEGATIVE)),
        ("nll_term", MetricWords(f"{regime} rescue NLL term (λ_r-weighted)", "NLL (nats per token)", NONNEGATIVE)),
        ("rescue_logp", MetricWords("learner log-prob of rescued answers", "sequence log-prob (nats)", NONPOSITIVE)),
    )
