"""XGRPO, cross-policy GRPO advantage sharing (paper Sec. "Regime 2"): settings, metrics, registration.

The maths is :mod:`mutualrl.regimes.xgrpo.maths`, the adapter
:class:`~mutualrl.regimes.xgrpo.adapter.XGRPOAdapter` (subscribes to peers' scalar rewards).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mutualrl.regimes.api import FREE, NONNEGATIVE, UNIT, MetricWords, RegimeSpec, register_regime


@dataclass
class XGRPOSettings:
    """Cross-policy GRPO advantage sharing (paper Sec. "Regime 2", App. "Implementation details")."""

    cross_model_factor: float = field(
        default=0.2, metadata={"ge": 0, "le": 1, "help": "Weight of the pooled advantage mixed into the learner's own (paper: 0.2)."}
    )
    length_correction: float = field(
        default=0.1, metadata={"ge": 0, "help": "Strength of the length correction (paper: 0.1); 0 disables it."}
    )
    advantage_clip: float = field(
        default=5.0,
        metadata={"gt": 0, "help": "Effective advantages are clipped to [-c, c] (the paper does not state c; ours)."},
    )
    std_epsilon: float = field(default=1e-4, metadata={"gt": 0, "help": "Added to standard deviations (TRL's 1e-4)."})
    normalisation: Literal["pooled", "per-policy"] = field(
        default="pooled",
        metadata={"help": "Scale of the pooled advantage: 'pooled' (the paper: the pool's reward std) or "
                  "'per-policy' (Dr. MAS: the learner's own reward std; the baseline stays pooled). Use "
                  "'per-policy' with grpo.scale_rewards: batch."},
    )


XGRPO = register_regime(RegimeSpec(
    name="xgrpo",
    help="pooled reward statistics in the advantages",
    needs_peers=True,
    settings_key="xgrpo",
    settings=XGRPOSettings,
    adapter="mutualrl.regimes.xgrpo.adapter:XGRPOAdapter",
    status=(("mean_abs_adv_change", "|ΔA|"),),
    metrics=(
        ("mean_abs_adv_change", MetricWords("XGRPO |advantage change|", "mean |A_eff - A_own|", NONNEGATIVE)),
        ("sign_flip_rate", MetricWords("XGRPO sign-flip rate", "share of prompts", UNIT)),
        ("rollout_sign_flip_rate", MetricWords("XGRPO sign flips per rollout", "share of rollouts", UNIT)),
        ("spread_change_corr", MetricWords("XGRPO peer spread vs advantage change", "correlation", FREE)),
        ("clip_fraction", MetricWords("XGRPO clipped advantages", "share of rollouts", UNIT)),
        ("adv_abs_mean", MetricWords("XGRPO mean |advantage|", "|advantage|", NONNEGATIVE)),
        ("adv_std", MetricWords("XGRPO advantage spread", "standard deviation", NONNEGATIVE)),
    ),
    order=1,
))
