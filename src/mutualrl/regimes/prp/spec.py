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
    correction: Literal["none", "tis", "ftis"] = field(
        default="none",
        metadata={
            "help": "Importance-weight correction of peer rows, w = learner snapshot / peer's aligned trace: 'none' "
            "(the paper's PRP), 'tis' (truncated: w capped at truncation_bound), 'ftis' (filtered and truncated: "
            "a unit whose w exceeds filter_bound gets weight 0, the rest are capped at truncation_bound). Needs the "
            "peers' traces, which they then publish."
        },
    )
    correction_level: Literal["token", "sequence"] = field(
        default="token",
        metadata={"help": "Unit of the correction: each token's w, or the response's w = exp(sum of its tokens' "
                          "log w), one weight for all its tokens."},
    )
    truncation_bound: float = field(
        default=3.0,
        metadata={"gt": 0, "help": "Cap C of the importance weight under 'tis' and 'ftis' (the default is TRL's "
                                   "vllm_importance_sampling_clip_max)."},
    )
    filter_bound: float = field(
        default=10.0,
        metadata={"gt": 0, "help": "Under 'ftis': a unit whose importance weight exceeds it is dropped (weight 0; "
                                   "the default is the paper's heavy-tail line, a token ratio above 10)."},
    )


PRP = register_regime(RegimeSpec(
    name="prp",
    help="peer rollout pooling; see --prp-denominator",
    needs_peers=True,
    settings_key="prp",
    settings=PRPSettings,
    adapter="mutualrl.regimes.prp.adapter:PRPAdapter",
    status=(("token_clip_rate", "clip"),),
    titles=(("token_ratio_p99", "PRP importance ratio p99"), ("token_clip_rate", "PRP clip rate")),
    order=3,
    flags=(RegimeFlag("--prp-denominator", "denominator",
                      "PRP only: 'learner' (naive: learner snapshot) or 'peer' (THL-aligned peer trace)."),),
))
