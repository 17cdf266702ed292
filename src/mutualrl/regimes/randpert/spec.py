"""GRPO + random baseline perturbation, the paper's control (App. "Ablation: shared normalization
for XGRPO"): settings, registration.

The maths is :mod:`mutualrl.regimes.randpert.maths`, the adapter
:class:`~mutualrl.regimes.randpert.adapter.RandPertAdapter` (no peers; publishes its records).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mutualrl.regimes.api import NONNEGATIVE, MetricWords, RegimeSpec, register_regime


@dataclass
class RandPertSettings:
    """GRPO + random baseline perturbation (App. "Ablation: shared normalization for XGRPO")."""

    scale: float = field(
        default=0.1, metadata={"ge": 0, "help": "Std of the Gaussian noise added to each prompt's baseline (reward units)."}
    )
    skip_uniform_groups: bool = field(
        default=True,
        metadata={"help": "Leave prompts whose K rewards are all equal unperturbed (else group scaling turns the "
                  "noise into advantages of about scale/1e-4)."},
    )


RANDPERT = register_regime(RegimeSpec(
    name="grpo-randpert",
    help="GRPO with a randomly perturbed baseline, the paper's control",
    needs_exchange=True,
    settings_key="randpert",
    settings=RandPertSettings,
    adapter="mutualrl.regimes.randpert.adapter:RandPertAdapter",
    metrics=(("mean_abs_adv_change", MetricWords("random-perturbation |advantage change|", "mean |change|",
                                                 NONNEGATIVE)),),
    order=4,
))
