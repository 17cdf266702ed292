"""HACPO (Zhang et al., arXiv 2603.02604, ICML 2026), a variant of PRP: settings, metrics, registration.

Peers' rollouts reach the learner as PRP's do (retokenized, with their THL-aligned traces); the four mechanisms of
the paper's Sec. 3 are :mod:`mutualrl.regimes.hacpo.maths`, the adapter
:class:`~mutualrl.regimes.hacpo.adapter.HACPOAdapter`. Each mechanism is a setting that turns off, so the paper's
ablations are recipes (docs/regimes.md, "HACPO").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mutualrl.regimes.api import (
    NONNEGATIVE,
    UNIT,
    GRPOBatch,
    MetricWords,
    PooledRowsSettings,
    RegimeSpec,
    ratio_metrics,
    register_regime,
)

if TYPE_CHECKING:
    import torch


@dataclass
class HACPOSettings(PooledRowsSettings):
    """HACPO's four mechanisms (paper Sec. 3) on PRP's peer rows; the defaults are the paper's common setting
    (App. A: K = 5, alpha = 1, lower clip bound 0.8, step 0.025)."""

    capability_advantage: bool = field(
        default=True,
        metadata={"help": "Sec. 3.1: the learner's baseline weights each peer's rewards by capability ratio "
                          "P_learner/P_peer (false: the plain pooled mean, the paper's 'HACPO - Adv')."},
    )
    discrepancy_coefficient: bool = field(
        default=True,
        metadata={"help": "Sec. 3.2: a peer row's advantage is scaled by P_peer/P_learner (false: by 1, the "
                          "paper's 'HACPO - omega')."},
    )
    alpha: float = field(
        default=1.0,
        metadata={"ge": 0, "help": "Sec. 3.3: exponent of the stop-gradient factor sg[s]^alpha on a peer row's "
                                   "sequence ratio s (0: plain sequence-level importance sampling)."},
    )
    cross_clip: bool = field(
        default=True,
        metadata={"help": "Sec. 3.4: a peer row's ratio s is clipped to [1 - clip_delta, 1]; outside it the row "
                          "moves nothing (false: no clipping, the paper's 'no Clip')."},
    )
    clip_delta: float = field(
        default=0.2,
        metadata={"gt": 0, "le": 1, "help": "Sec. 3.4: delta, the width of the peer rows' band [1 - delta, 1] "
                                            "(App. A's table lists the lower bound 1 - delta: 0.8)."},
    )
    clip_step: float = field(
        default=0.025,
        metadata={"ge": 0, "help": "Sec. 3.4, Eq. 14: the lower bound rises by this at each parameter update "
                                   "within a step (0: a static band, the paper's 'no Stepwise')."},
    )
    capability: Literal["success-share", "mean-reward"] = field(
        default="success-share",
        metadata={"help": "Eq. 9's per-step performance of a policy: 'success-share', the share of its rewards "
                          "above 0 (the authors' code), or 'mean-reward', its mean reward (the paper's text); equal "
                          "with 0/1 rewards."},
    )
    capability_window: int = field(
        default=5,
        metadata={"ge": 1, "help": "Eq. 9: a policy's capability is its per-step performance ('capability') "
                                   "averaged over the last K steps, this one included (K = 5 in the paper)."},
    )
    max_capability_ratio: float = field(
        default=10.0,
        metadata={"ge": 1, "help": "Capability ratios are bounded to [1/x, x] (the authors' code; the paper "
                                   "gives no bound)."},
    )
    std_epsilon: float = field(
        default=1e-6, metadata={"gt": 0, "help": "Added to the joint reward standard deviation (the authors' code)."}
    )
    kl_on_peer_rows: bool = field(
        default=False,
        metadata={"help": "Apply the KL term to the reference (grpo.beta) to peer rows too (false: own rows only, as "
                          "the authors' code; then no reference pass is run over the peer rows)."},
    )


def check_hacpo_settings(settings: HACPOSettings) -> tuple[str, str] | None:
    if settings.denominator != "peer":
        return "denominator", "must be 'peer': HACPO's ratio s divides by the peer's own probability of its response"
    if settings.correction not in ("none", "tis"):
        return "correction", (f"{settings.correction!r} is PRP's; HACPO takes 'none' or 'tis' (a cap on its sequence "
                              "ratio s): its clip band already drops the rows far from the learner")
    if settings.correction != "none" and settings.correction_level != "sequence":
        return "correction_level", ("must be 'sequence' with a correction: HACPO weighs a peer row by its one "
                                    "sequence ratio s, which 'tis' caps")
    return None


def check_hacpo_grpo(grpo: Mapping[str, Any]) -> tuple[str, str] | None:
    """HACPO's ratios are GSPO's sequence ratios (its Sec. 3.3); its peer rows' term is a mean over rows or tokens
    that TRL's 'bnpo' (a per-micro-batch token mean of the rows TRL itself scores) cannot share."""
    if grpo.get("importance_sampling_level", "sequence") != "sequence":
        return "importance_sampling_level", ("must be 'sequence' under regime hacpo: its own rows are GSPO's and its "
                                             "peer rows' ratio s is a sequence ratio (leave it unset or 'sequence')")
    if grpo.get("loss_type") == "bnpo":
        return "loss_type", ("'bnpo' normalises by the tokens of the rows TRL scores itself, and HACPO's peer rows "
                             "are its own term: use 'grpo' (the authors' mean over rows), 'dapo' or 'dr_grpo'")
    return None


class HACPOBatch(GRPOBatch, total=False):
    """The keys HACPO adds to TRL's batch (beside PRP's peer rows and their token weights)."""

    hacpo_peer_logps: torch.Tensor  # float [B, C] a peer row's aligned trace (Eq. 11's denominator)
    hacpo_coefficient: torch.Tensor  # float32 [B] a peer row's discrepancy coefficient, 1 on own rows
    hacpo_peer_row: torch.Tensor  # bool [B] True on the peer rows
    hacpo_source_tokens: torch.Tensor  # float [B] a peer row's count of its source's own tokens (Eq. 11's source mean)
    hacpo_source: torch.Tensor  # int64 [B] a peer row's source policy (its pool index), -1 on own rows


#: The dtypes a capability window is saved in (the adapter keeps it in float32; a float dtype torch names).
WINDOW_DTYPES = ("float32", "float64", "float16", "bfloat16")


FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32: a capability beyond it is infinite in the window's tensor."""


def check_hacpo_state(state: Mapping[str, Any]) -> str | None:
    """HACPO's saved capability window (the adapter's ``state_dict``): the pool's policy names, a real float dtype, and
    per step one number (or null: no scored rollout) per policy, in Eq. 9's range: a share of rewards above 0 is in
    [0, 1] (``measure`` "success-share", the default, or not saved); a mean reward (``measure`` "mean-reward") is
    finite in the window's dtype."""
    policies = state.get("policies")
    if not isinstance(policies, list) or not all(isinstance(name, str) for name in policies):
        return "policies is not a list of policy names"
    if not isinstance(state.get("dtype"), str) or state.get("dtype") not in WINDOW_DTYPES:
        return f"dtype {str(state.get('dtype'))[:40]!r} is not one of {', '.join(WINDOW_DTYPES)}"
    measure = state.get("measure", "success-share")
    if measure not in ("success-share", "mean-reward"):
        return f"measure {str(measure)[:40]!r} is not 'success-share' or 'mean-reward'"
    history = state.get("capability_history")
    if not isinstance(history, list):
        return "capability_history is not a list of steps"
    for index, row in enumerate(history):
        if not isinstance(row, list) or len(row) != len(policies) or not all(
                value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)) for value in row):
            return (f"capability_history[{index}] is not one number or null for each of the {len(policies)} "
                    "policies")
        wrong = next((value for value in row if value is not None and not capability_in_range(value, measure)), None)
        if wrong is not None:
            where = "in [0, 1] (a share of rewards above 0)" if measure == "success-share" else "a finite mean reward"
            return f"capability_history[{index}] holds {str(wrong)[:40]}, not {where}"
    return None


def capability_in_range(value: float, measure: str) -> bool:
    """A saved capability Eq. 9 can give: a share in [0, 1]; a mean reward finite in float32."""
    if measure == "success-share":
        return 0.0 <= value <= 1.0
    return abs(value) <= FLOAT32_MAX  # NaN fails too


HACPO = register_regime(RegimeSpec(
    name="hacpo",
    help="HACPO (arXiv 2603.02604): PRP's shared rollouts with capability-aware advantages, exponential "
         "importance sampling and stepwise clipping",
    needs_peers=True,
    settings_key="hacpo",
    settings=HACPOSettings,
    batch=HACPOBatch,
    adapter="mutualrl.regimes.hacpo.adapter:HACPOAdapter",
    status=(("cross_kept", "kept"),),
    metrics=(
        ("capability", MetricWords("HACPO capability (last K steps)", "share of rewards > 0, or mean reward", UNIT)),
        ("capability_ratio", MetricWords("HACPO peer/learner capability ratio", "ratio", NONNEGATIVE)),
        ("cross_ratio", MetricWords("HACPO peer rows' sequence ratio s", "ratio", NONNEGATIVE)),
        ("cross_kept", MetricWords("HACPO peer rows inside the clip band", "share of peer rows", UNIT)),
        *ratio_metrics("HACPO"),
    ),
    check=check_hacpo_settings,
    state_check=check_hacpo_state,
    grpo_defaults=(("importance_sampling_level", "sequence"),),
    grpo_check=check_hacpo_grpo,
    order=5,
))
