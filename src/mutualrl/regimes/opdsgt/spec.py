"""opd-sgt, on-policy distillation with a rescue (beyond the paper): settings, metrics, registration.

OPD's per-token reverse-KL signal from the peers' judgements of the learner's own rollouts (where a peer is the more
competent on the prompt) and SGT's NLL on one verified peer success (where every own rollout failed), in one loss.
The maths is :mod:`mutualrl.regimes.opdsgt.maths`, the adapter :class:`~mutualrl.regimes.opdsgt.adapter.
OPDSGTAdapter`; docs/regimes.md, "Beyond the paper: OPD with SGT's rescue".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mutualrl.regimes.api import (FREE, NONNEGATIVE, UNIT, GRPOBatch, MetricWords, RegimeSpec, RescueSettings,
                                  check_rescue_counts, check_rescue_thresholds, per_token_ratio_check,
                                  register_regime, rescue_metrics)

if TYPE_CHECKING:
    import torch


@dataclass
class OPDSGTSettings(RescueSettings):
    """On-policy distillation (GKD, arXiv 2306.13649) with Success-Gated Transfer's rescue, one objective."""

    lam: float = field(default=0.1, metadata={
        "ge": 0, "help": "lambda: weight of the per-token distillation signal (teacher log-prob - own log-prob) added "
                         "to the GRPO advantage where a peer is the more competent; 0 with rescue_lam 0 is standalone "
                         "GRPO. The signal is OPD's 'unit': a word the learner writes non-canonically is scored by "
                         "that split's probability, not the word's (OPD's signal: sequence compares texts)"})
    rescue_lam: float = field(default=0.1, metadata={
        "ge": 0, "help": "lambda_r: weight of the NLL of one verified peer success on a prompt whose every own "
                         "rollout failed (SGT's rescue), relative to GRPO"})


class OPDSGTBatch(GRPOBatch, total=False):
    """The keys opd-sgt adds to TRL's batch (``R``: the rescue's tokens)."""

    opdsgt_completion_ids: torch.Tensor  # int64 [B, R] the rescue on the first row of a rescued prompt, padding else
    opdsgt_completion_mask: torch.Tensor  # int64 [B, R]
    opdsgt_weight: torch.Tensor  # float32 [B] the rescue NLL's weight of each row (0 off the rescued rows)


OPD_SGT = register_regime(RegimeSpec(
    name="opd-sgt",
    help="on-policy distillation with a rescue: per-token reverse-KL advantage where a peer is the more competent, "
         "plus NLL on a verified peer success where the learner's whole group failed",
    needs_peers=True,
    lock_step_only=True,
    settings_key="opdsgt",
    settings=OPDSGTSettings,
    batch=OPDSGTBatch,
    adapter="mutualrl.regimes.opdsgt.adapter:OPDSGTAdapter",
    status=(("rescues", "rescues"), ("distill_rate", "distil")),
    metrics=(
        ("distill_rate", MetricWords("opd-sgt distillation rate", "share of prompts with a teaching peer", UNIT)),
        *rescue_metrics("opd-sgt"),
        ("reverse_kl", MetricWords("opd-sgt reverse KL (sample estimate)", "own - teacher log-prob (nats per token)",
                                   FREE)),
        ("signal_abs", MetricWords("opd-sgt signal size (λ-weighted)", "|λ·(teacher − own)| per token", NONNEGATIVE)),
        ("judged_share", MetricWords("rollouts judged by every peer", "share of (rollout, peer) pairs", UNIT)),
    ),
    check=check_rescue_thresholds,
    grpo_check=per_token_ratio_check("opd-sgt"),
    state_check=check_rescue_counts,  # its saved rescue counters (the adapter's state_dict)
    order=7,
))
