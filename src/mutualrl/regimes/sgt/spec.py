"""SGT, Success-Gated Transfer (paper Sec. "Regime 3"): settings, metrics, registration.

The maths is :mod:`mutualrl.regimes.sgt.maths`, the adapter
:class:`~mutualrl.regimes.sgt.adapter.SGTAdapter` (reads six columns of every peer row and keeps the verified
successes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from mutualrl.regimes.api import (NONNEGATIVE, NONPOSITIVE, UNIT, GRPOBatch, MetricWords, RegimeSpec,
                                  RescueGateSettings, check_rescue_counts, check_rescue_thresholds, register_regime)

if TYPE_CHECKING:
    import torch


@dataclass
class SGTSettings(RescueGateSettings):
    """Success-Gated Transfer (paper Sec. "Regime 3", App. "Implementation details for SGT"): the rescue's gate,
    budget and reduction (:class:`~mutualrl.regimes.core.rescue_spec.RescueGateSettings`, shared with opd-sgt and
    byte-kd), its weight and the paper's options."""

    lam: float = field(default=0.1, metadata={"ge": 0, "help": "lambda_SGT: weight of the gated NLL term relative to GRPO."})
    require_all_failed: bool = field(
        default=True,
        metadata={"help": "Gate only when all K learner rollouts are negative (the paper's strict setting)."},
    )
    selection: Literal["random", "shortest"] = field(
        default="random", metadata={"help": "How to pick one peer success: uniformly at random, or the shortest."}
    )
    max_pairs_per_prompt: int = field(
        default=1, metadata={"ge": 1, "help": "Cap on SGT pairs formed for one prompt and learner per step."}
    )
    anchor_lam: float = field(
        default=0.0,
        metadata={"ge": 0, "help": "Beyond the paper: a success anchor. On a prompt whose every own rollout is a "
                  "verified success (GRPO's advantage 0 there), each verified rollout's advantage is raised by this: "
                  "imitation of the learner's own verified successes (RAFT's rejection-sampling fine-tuning, not "
                  "SIL's (R - V)+, which is 0 there), so that a rescue of a near-identical prompt does not pull it "
                  "away (docs/regimes.md). 0: the paper's SGT."}
    )


class SGTBatch(GRPOBatch, total=False):
    """The keys SGT adds to TRL's batch (``R``: the rescue's tokens, ``P'``: its prompt's)."""

    sgt_completion_ids: torch.Tensor  # int64 [B, R] SGT's rescue target on its gated rows, padding elsewhere
    sgt_completion_mask: torch.Tensor  # int64 [B, R]
    sgt_weight: torch.Tensor  # float32 [B] the NLL weight of each row (0 off the gated rows)
    sgt_source: torch.Tensor  # int64 [B] the rescue's peer (its place in the adapter's peers), -1 off the gated rows
    sgt_prompt_ids: torch.Tensor  # int64 [B, P'] an earlier round's prompts (see.max_staleness), scored with the rescue
    sgt_prompt_mask: torch.Tensor  # int64 [B, P']


#: Metric keys the end-of-run summary reads (launch/rundir/summary.py): rescues so far, and the learner's
#: log-prob of the rescued peer answers (paper App. "Implementation details for SGT").
RESCUES_TOTAL_KEY = "sgt/rescues_total"
RESCUE_LOGP_KEY = "sgt/rescue_logp"


def check_sgt_settings(settings: SGTSettings) -> tuple[str, str] | None:
    """The rescue's rule: the failure threshold not above the success threshold."""
    return check_rescue_thresholds(settings)


SGT = register_regime(RegimeSpec(
    name="sgt",
    help="success-gated transfer: NLL on a verified peer success when the learner's whole group failed",
    needs_peers=True,
    settings_key="sgt",
    settings=SGTSettings,
    batch=SGTBatch,
    adapter="mutualrl.regimes.sgt.adapter:SGTAdapter",
    status=(("rescues", "rescues"), ("gate_rate", "gate")),
    metrics=(
        ("gate_rate", MetricWords("SGT gate rate", "share of prompts gated", UNIT)),
        ("gated_prompts", MetricWords("SGT gated prompts", "prompts", NONNEGATIVE)),
        ("rescues", MetricWords("SGT rescues", "prompts rescued this step", NONNEGATIVE)),
        ("rescues_total", MetricWords("SGT rescues so far", "prompts rescued, cumulative", NONNEGATIVE)),
        ("over_budget", MetricWords("SGT prompts over budget", "prompts the rescue budget kept out", NONNEGATIVE)),
        ("learner_success_rate_gated", MetricWords("learner success, gated prompts", "share of rollouts", UNIT)),
        ("learner_success_rate_ungated", MetricWords("learner success, other prompts", "share of rollouts", UNIT)),
        ("pool_success_rate_gated", MetricWords("pool success, gated prompts", "share of rollouts", UNIT)),
        ("pool_success_rate_ungated", MetricWords("pool success, other prompts", "share of rollouts", UNIT)),
        ("all_fail_prompt_rate", MetricWords("prompts no policy solved", "share of prompts", UNIT)),
        ("extra_token_frac", MetricWords("SGT extra-token fraction", "extra tokens / rollout tokens", NONNEGATIVE)),
        ("extra_seq_frac", MetricWords("SGT extra sequences", "extra sequences / rollouts", NONNEGATIVE)),
        ("extra_seq_frac_bound", MetricWords("SGT extra sequences, bound", "extra sequences / rollouts", NONNEGATIVE)),
        ("nll_term", MetricWords("SGT NLL term (λ-weighted)", "NLL (nats per token)", NONNEGATIVE)),
        ("anchored_rate", MetricWords("SGT success-anchor rate", "share of prompts every rollout solved", UNIT)),
        ("rescue_logp", MetricWords("learner log-prob of rescued answers", "sequence log-prob (nats)", NONPOSITIVE)),
    ),
    check=check_sgt_settings,
    state_check=check_rescue_counts,  # its saved rescue counters (the adapter's state_dict)
    order=2,
))
