"""What SGT's rescue brings to another regime's settings and metrics (opd-sgt, byte-kd with ``rescue_lam``): its
weight, its gate's thresholds, its budget, declared once. Torch-free, like a ``spec.py``; the rescue itself is
:mod:`mutualrl.regimes.core.rescue`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mutualrl.metric_labels import NONNEGATIVE, NONPOSITIVE, UNIT, MetricWords


@dataclass
class RescueSettings:
    """SGT's rescue as a part of another loss (a regime's settings inherit these fields and may change a default)."""

    rescue_lam: float = field(default=0.0, metadata={
        "ge": 0, "help": "lambda_r: weight of the NLL of one verified peer success on a prompt whose every own "
                         "rollout failed (SGT's rescue), in the same loss; 0: no rescue"})
    success_threshold: float = field(default=0.8, metadata={
        "help": "a rollout with a combined reward above this is a verified success (a rescue's candidates; the "
                "success rates a teaching gate compares)"})
    failure_threshold: float = field(default=0.2, metadata={
        "help": "an own rollout with a combined reward below this failed; the rescue (and a gate that reads "
                "failures) fires where every scored one did"})
    max_rescues_per_prompt: int | None = field(default=None, metadata={
        "ge": 1, "help": "over the whole run, how many steps may rescue one prompt for this learner (unset: no "
                         "limit); the regime's other term is not limited. The counts are saved with each checkpoint."})


def check_rescue_thresholds(settings: RescueSettings, failures_count: bool = True) -> tuple[str, str] | None:
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
