"""PRP, Peer Rollout Pooling (paper Sec. "Regime 1"): settings, metrics, registration.

The maths is :mod:`mutualrl.regimes.prp.maths`, the adapter
:class:`~mutualrl.regimes.prp.adapter.PRPAdapter` (subscribes to peers' text and traces).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mutualrl.regimes.registry import RegimeFlag, RegimeSpec, register_regime


@dataclass
class PRPSettings:
    """Peer Rollout Pooling (paper Sec. "Regime 1")."""

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
                                   "to the learner (summed over its tokens) is at least this (50: F-TIS's value)."},
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


def check_prp_settings(settings: PRPSettings) -> tuple[str, str] | None:
    """A correction weighs a peer sample by T(pi_snapshot / pi_peer) with the snapshot in the PPO ratio, so the
    peer's trace must be read: 'learner' would make every weight 1."""
    if settings.correction != "none" and settings.denominator != "peer":
        return "denominator", (f"must be 'peer' with correction {settings.correction!r}: the correction's weight "
                               "divides by the peer's trace (the PPO ratio then divides by the learner's snapshot)")
    return None


PRP = register_regime(RegimeSpec(
    name="prp",
    help="peer rollout pooling; see --prp-denominator",
    needs_peers=True,
    settings_key="prp",
    settings=PRPSettings,
    adapter="mutualrl.regimes.prp.adapter:PRPAdapter",
    status=(("token_clip_rate", "clip"),),
    titles=(("token_ratio_p99", "PRP importance ratio p99"), ("token_clip_rate", "PRP clip rate")),
    check=check_prp_settings,
    order=3,
    flags=(RegimeFlag("--prp-denominator", "denominator",
                      "PRP only: 'learner' (naive: learner snapshot) or 'peer' (THL-aligned peer trace)."),),
))
