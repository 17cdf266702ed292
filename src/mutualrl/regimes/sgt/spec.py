"""SGT, Success-Gated Transfer (paper Sec. "Regime 3"): settings, metrics, registration.

The maths is :mod:`mutualrl.regimes.sgt.maths`, the adapter
:class:`~mutualrl.regimes.sgt.adapter.SGTAdapter` (reads six columns of every peer row and keeps the verified
successes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mutualrl.regimes.registry import RegimeSpec, register_regime


@dataclass
class SGTSettings:
    """Success-Gated Transfer (paper Sec. "Regime 3", App. "Implementation details for SGT")."""

    lam: float = field(default=0.1, metadata={"ge": 0, "help": "lambda_SGT: weight of the gated NLL term relative to GRPO."})
    success_threshold: float = field(
        default=0.8, metadata={"help": "A rollout with reward above this is a verified success."}
    )
    failure_threshold: float = field(default=0.2, metadata={"help": "A rollout with reward below this is a negative."})
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


#: Metric keys the end-of-run summary reads (launch/rundir/summary.py): rescues so far, and the learner's
#: log-prob of the rescued peer answers (paper App. "Implementation details for SGT").
RESCUES_TOTAL_KEY = "sgt/rescues_total"
RESCUE_LOGP_KEY = "sgt/rescue_logp"


def check_sgt_settings(settings: SGTSettings) -> tuple[str, str] | None:
    if settings.failure_threshold > settings.success_threshold:
        return "failure_threshold", f"must not exceed success_threshold ({settings.success_threshold})"
    return None


SGT = register_regime(RegimeSpec(
    name="sgt",
    help="success-gated transfer: NLL on a verified peer success when the learner's whole group failed",
    needs_peers=True,
    settings_key="sgt",
    settings=SGTSettings,
    adapter="mutualrl.regimes.sgt.adapter:SGTAdapter",
    status=(("rescues", "rescues"), ("gate_rate", "gate")),
    titles=(("gate_rate", "SGT gate rate"), ("rescues", "SGT rescues"),
            ("extra_token_frac", "SGT extra-token fraction")),
    check=check_sgt_settings,
    order=2,
))
