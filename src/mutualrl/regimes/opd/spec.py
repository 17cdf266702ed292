"""OPD, mutual on-policy distillation across tokenizers (beyond the paper): settings, metrics, registration.

Each policy's rollouts are scored by its peers (each peer's forward pass over the learner's text, in the peer's own
vocabulary, published through the SEE as a judgement record per rollout); the learner adds to its GRPO advantage,
token by token, ``lam * (peer log-prob - own log-prob)`` over the THL-aligned spans, on the prompts where the peer is
the more competent. The maths is :mod:`mutualrl.regimes.opd.maths`, the adapter
:class:`~mutualrl.regimes.opd.adapter.OPDAdapter`; docs/regimes.md, "Beyond the paper: mutual on-policy
distillation".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mutualrl.regimes.api import (FREE, NONNEGATIVE, NONPOSITIVE, UNIT, CoverSettings, MetricWords, RegimeSpec,
                                  per_token_ratio_check, register_regime)


@dataclass
class OPDSettings(CoverSettings):
    """Mutual on-policy distillation (GKD, arXiv 2306.13649; MiniLLM, arXiv 2306.08543) between peers."""

    lam: float = field(default=0.1, metadata={
        "ge": 0, "help": "lambda: weight of the per-token distillation signal (peer log-prob - own log-prob) added to "
                         "the GRPO advantage; 0 is standalone GRPO"})
    signal: Literal["unit", "sequence"] = field(default="unit", metadata={
        "help": "what each token carries: 'unit', its comparison unit's log-ratio (peer - own; the token's own where "
                "both tokenizers split its word alike): the per-token reverse KL (GKD; MiniLLM's single-step term), "
                "not exact where the next token decides a word's end (' 1' / ' 12'), and a word the learner writes "
                "non-canonically is scored by that split's probability, not the word's; 'sequence', the whole text's "
                "log-ratio, each side's log-prob of the text summed over every tokenization of it: the "
                "sequence-level reverse KL over texts, exact whatever the tokenizers and however the learner split "
                "the text where the limits drop no tokenization (cover_floor, max_covers), at a higher variance and "
                "one scoring of the text's tokenizations per side (docs/regimes.md)"})
    gate: Literal["competence", "always"] = field(default="competence", metadata={
        "help": "which peers teach a prompt: 'competence' (a peer whose verified success rate on the prompt's K "
                "rollouts is above the learner's; none where no peer is), 'always' (every peer, every prompt)"})
    teachers: Literal["best", "mean"] = field(default="best", metadata={
        "help": "with several teaching peers on one prompt: 'best' (the highest success rate; ties: the first in "
                "the pool's order) or 'mean' (their signals averaged)"})
    reward_term: bool = field(default=True, metadata={
        "help": "keep GRPO's reward advantage beside the distillation signal (false: the signal alone, pure "
                "on-policy distillation on the gated prompts)"})
    success_threshold: float = field(default=0.8, metadata={
        "help": "a rollout with a combined reward above this is a verified success (the gate's success rates)"})


def check_opd_settings(settings: OPDSettings) -> tuple[str, str] | None:
    if settings.lam == 0 and not settings.reward_term:
        return "reward_term", "must stay true with lam 0: nothing would be left to train on"
    return None


OPD = register_regime(RegimeSpec(
    name="opd",
    help="mutual on-policy distillation: peers score the learner's rollouts; per-token reverse-KL advantage where "
         "a peer is the more competent",
    needs_peers=True,
    lock_step_only=True,
    settings_key="opd",
    settings=OPDSettings,
    adapter="mutualrl.regimes.opd.adapter:OPDAdapter",
    status=(("gate_rate", "gate"), ("reverse_kl", "rkl")),
    metrics=(
        ("gate_rate", MetricWords("OPD gate rate", "share of prompts with a teaching peer", UNIT)),
        ("reverse_kl", MetricWords("OPD reverse KL (sample estimate)", "own - teacher log-prob (nats per token)",
                                   FREE)),
        ("teacher_logp", MetricWords("teacher log-prob of the learner's tokens", "log-prob (nats per token)",
                                     NONPOSITIVE)),
        ("signal_abs", MetricWords("OPD signal size (λ-weighted)", "|λ·(teacher − own)| per token", NONNEGATIVE)),
        ("signal_tokens", MetricWords("tokens with a distillation signal", "tokens", NONNEGATIVE)),
        ("text_cover_dropped", MetricWords("text mass the limits dropped (signal 'sequence')",
                                           "largest share at one offset", UNIT)),
        ("judged_share", MetricWords("rollouts judged by every peer", "share of (rollout, peer) pairs", UNIT)),
        ("judged_rows", MetricWords("peer rollouts this policy judged", "rollouts", NONNEGATIVE)),
    ),
    check=check_opd_settings,
    grpo_check=per_token_ratio_check("opd"),
    order=6,
))
