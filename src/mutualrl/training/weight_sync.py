"""Does the colocated vLLM engine sample the weights being trained? ``mutual/weight_sync_logp_gap`` on every vLLM step.

TRL 1.16 syncs the trained weights into the engine before each generation and logs how far the engine's
log-probs are from the trainer's (``sampling/sampling_logp_difference/mean``) only under
``vllm_importance_sampling_correction``; the paper recipes turn the correction off, and then nothing shows a sync
that failed silently (an engine still sampling the first weights trains on its own, stale, rollouts).

Both log-prob tensors exist on that path too (``GRPOTrainer._generate_and_score_completions`` /
``_compute_loss``): vLLM's ``sampling_per_token_logps`` of every row TRL generated, and the trainer's log-probs of
the same tokens under the weights the engine was given -- TRL's ``old_per_token_logps`` where it scores them
(generation and update misaligned, the correction on, or a regime's snapshot of its own rows), else the loss's own
forward, which TRL then uses as the old log-probs (the weights do not change before that generation's last
micro-batch is trained). ``mutual/weight_sync_logp_gap`` is the mean ``|old - sampling|`` over the completion tokens
of the learner's own rows (TRL's metric, the same figure where TRL logs it), tokens vLLM could not score (NaN) left
out as TRL leaves them out.

The engine's numerics alone keep a gap (bf16 kernels, top-k/top-p in vLLM's processed log-probs): it is measured at
the first vLLM step, when engine and trainer hold the same weights. A stale engine's gap grows with every update:
:class:`WeightSyncWatch` warns once in the run log when the gap passes :data:`WARN_GAP` nats per token and
:data:`GROWTH` times that first gap -- both, so that neither a noisy numeric floor nor a run whose first gap was tiny
(fp32 on the CPU) warns for nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mutualrl.regimes.core.rank_metrics import Share

GAP_KEY = "mutual/weight_sync_logp_gap"
WARN_GAP = 0.1
"""Nats per token: above it the engine samples a distribution visibly other than the trainer's."""
GROWTH = 4.0
"""Times the first step's gap (the engine's numerics alone) the gap must also pass."""


def logp_gap(old: torch.Tensor, sampling: torch.Tensor, mask: torch.Tensor) -> Share:
    """Mean ``|old - sampling|`` ``[B, C]`` over the tokens of ``mask`` ``[B, C]`` that both score (a ``Share``: over
    ranks, the token sums are added before dividing)."""
    delta = (old.detach().float() - sampling.detach().float()).abs()  # [B, C]
    keep = mask.bool() & ~torch.isnan(delta)  # [B, C]
    return Share(float(delta[keep].sum()), float(keep.sum()))


@dataclass
class WeightSyncWatch:
    """The first gap of a run and whether it warned (once)."""

    policy: str
    first: float | None = None
    warned: bool = False

    def observe(self, gap: float, step: int) -> str | None:
        """The warning for ``gap`` at optimizer step ``step``, the first time it passes both bounds; else None."""
        if math.isnan(gap):  # no completion token in this batch
            return None
        if self.first is None:
            self.first = gap
            return None
        bound = max(WARN_GAP, GROWTH * self.first)
        if self.warned or gap <= bound:
            return None
        self.warned = True
        return (f"{self.policy}: vLLM's log-probs of its own samples are {gap:.3f} nats per token from the trainer's "
                f"at step {step} (first step: {self.first:.3f}; warned above {bound:.3f}): the engine may not sample "
                f"the weights being trained (a weight sync that failed); see {GAP_KEY} in the metrics")
