"""The test-only variant, file 3 of 3: PRP's adapter with one hook overridden and one metric added."""

from __future__ import annotations

import math

import torch

from mutualrl.regimes.api import PooledStep, Share
from mutualrl.regimes.prp.adapter import PRPAdapter
from prp_tis_variant.maths import capped_token_weights
from prp_tis_variant.spec import SPEC, PRPTISSettings


class PRPTISAdapter(PRPAdapter):
    spec = SPEC
    settings: PRPTISSettings

    def needs_traces(self) -> bool:
        return True  # the weight is learner snapshot / peer trace, whatever the denominator

    def peer_token_weights(self, step: PooledStep) -> torch.Tensor:
        in_loss = step.snapshot[step.n_local:] - step.behaviour[step.n_local:]  # [N, T]
        return capped_token_weights(step.peer_log_weights(), in_loss, step.peer_mask, self.settings.weight_cap)

    def step_metrics(self, step: PooledStep, weights: torch.Tensor | None) -> dict[str, float]:
        stats = super().step_metrics(step, weights)
        mask = step.peer_mask.bool()  # [N, T]
        capped = (step.peer_log_weights() > math.log(self.settings.weight_cap)) & mask  # [N, T]
        stats["capped_share"] = Share(capped.sum().item(), mask.sum().item())
        return stats
