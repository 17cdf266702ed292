"""byte-kd, on-policy distillation of the peers' next-byte distributions (beyond the paper): settings, metrics,
registration.

Each peer judges the learner's rollouts (OPD's exchange) and publishes, at each byte offset of the text, its exact
next-byte distribution, summed over every tokenization covering the text so far
(:mod:`mutualrl.regimes.core.byte_covers`; ``distribution: canonical``: at each of its tokens, its next-token
distribution by first byte). At every byte offset of the learner's text (``canonical``: where both tokenizations have
a token boundary), the learner adds ``λ · KL(q_peer ‖ q_θ)`` over next-byte symbols to TRL's loss, on the prompts
where the peer is the more competent (``gate: blind-spot``: only where every own rollout failed); with ``rescue_lam``
it also adds SGT's NLL on one verified peer success where every own rollout failed (:mod:`mutualrl.regimes.core.rescue`). The maths is
:mod:`mutualrl.regimes.bytekd.maths`, the adapter :class:`~mutualrl.regimes.bytekd.adapter.ByteKDAdapter`;
docs/regimes.md, "Beyond the paper: next-byte distillation".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from mutualrl.regimes.api import (NONNEGATIVE, UNIT, CoverSettings, GRPOBatch, MetricWords, RegimeSpec, RescueSettings,
                                  check_optional_rescue_counts, check_rescue_thresholds, register_regime,
                                  rescue_metrics)

if TYPE_CHECKING:
    import torch


@dataclass
class ByteKDSettings(RescueSettings, CoverSettings):
    """On-policy distillation (GKD, arXiv 2306.13649) of a peer's next-token distribution, compared over next bytes;
    SGT's rescue in the same loss with ``rescue_lam``."""

    lam: float = field(default=1.0, metadata={
        "ge": 0, "help": "lambda: weight of the next-byte KL(peer ‖ learner), summed over the learner's text (at "
                         "every byte offset with distribution 'exact', at the shared token boundaries with "
                         "'canonical') and reduced as TRL reduces its per-token loss; 0 is standalone GRPO"})
    top_bytes: int = field(default=8, metadata={
        "ge": 1, "le": 258, "help": "how many of its most likely next-byte symbols a judge publishes per token; the "
                                    "rest of its mass is one more cell of the divergence (exact for that partition)"})
    distribution: Literal["exact", "canonical"] = field(default="exact", metadata={
        "help": "which next-byte distribution each model gives: 'exact', the sum over every tokenization covering "
                "the text so far, a last token running past the offset included (Phan et al. 2024), compared at "
                "every byte offset; 'canonical', an approximation: the next-token distribution after the model's own "
                "tokens only, summed by first byte, compared where both tokenizations have a boundary (it reads a "
                "merged token's inside as the end of the text: docs/regimes.md)"})
    gate: Literal["competence", "blind-spot"] = field(default="competence", metadata={
        "help": "where a peer's distribution teaches: 'competence' (every prompt where a peer's success rate on its "
                "K rollouts is above the learner's; the best such peer), 'blind-spot' (only the prompts where every "
                "own rollout failed, below failure_threshold, and a peer has a verified success: SGT's rescue gate, "
                "without its budget)"})


class ByteKDBatch(GRPOBatch, total=False):
    """The keys byte-kd adds to TRL's batch (``J`` judges, ``k`` symbols per position)."""

    bytekd_ids: torch.Tensor  # int64 [B, J, C, k] each judge's most likely next-byte symbols before each own token
    # (with 'exact': [B, J, O, k] at each byte offset of the row's text, O = the longest text's bytes + 1)
    bytekd_logps: torch.Tensor  # float32 [B, J, C, k] their log-masses ([B, J, O, k] with 'exact')
    bytekd_weights: torch.Tensor  # float32 [B, J, C] the teacher weight where that judge has a boundary there, else 0
    # ([B, J, O] with 'exact': at every offset of a text the judge judged)
    bytekd_completion_ids: torch.Tensor  # int64 [B, R] the rescue on the first row of a rescued prompt, padding else
    bytekd_completion_mask: torch.Tensor  # int64 [B, R]
    bytekd_weight: torch.Tensor  # float32 [B] the rescue NLL's weight of each row (0 off the rescued rows)


def check_bytekd_settings(settings: ByteKDSettings) -> tuple[str, str] | None:
    return check_rescue_thresholds(settings, settings.rescue_lam > 0 or settings.gate == "blind-spot")


BYTE_KD = register_regime(RegimeSpec(
    name="byte-kd",
    help="next-byte distillation: peers publish their next-byte distributions; KL(peer ‖ learner) at every byte "
         "offset of the learner's text ('canonical': at shared token boundaries) where a peer is the more competent",
    needs_peers=True,
    lock_step_only=True,
    settings_key="bytekd",
    settings=ByteKDSettings,
    batch=ByteKDBatch,
    adapter="mutualrl.regimes.bytekd.adapter:ByteKDAdapter",
    status=(("gate_rate", "gate"), ("byte_kl", "bkl")),
    metrics=(
        ("gate_rate", MetricWords("byte-kd gate rate", "share of prompts with a teaching peer", UNIT)),
        ("shared_share", MetricWords("positions compared", "share of taught byte offsets ('canonical': tokens)",
                                     UNIT)),
        ("byte_kl", MetricWords("next-byte KL(teacher ‖ learner)",
                                "nats per byte offset ('canonical': per shared boundary)", NONNEGATIVE)),
        ("kl_term", MetricWords("byte-kd loss term (λ-weighted)", "as TRL's loss", NONNEGATIVE)),
        ("cover_states", MetricWords("tokenizations of prefixes enumerated", "states per taught row", NONNEGATIVE)),
        ("cover_dropped", MetricWords("prefix mass the floor dropped", "largest share at one offset", UNIT)),
        ("judged_share", MetricWords("rollouts judged by every peer", "share of (rollout, peer) pairs", UNIT)),
        *rescue_metrics("byte-kd"),
    ),
    check=check_bytekd_settings,
    state_check=check_optional_rescue_counts,  # its rescue counters; {} in a checkpoint of before the rescue
    order=8,
))
