"""The test-only variant, file 2 of 3: its maths, pure."""

from __future__ import annotations

import math

import torch


def capped_token_weights(log_w: torch.Tensor, log_ratio_in_loss: torch.Tensor, mask: torch.Tensor,
                         cap: float) -> torch.Tensor:
    """Per-token loss weights ``[N, T]`` that make the loss's importance weight ``min(w, cap)`` at the snapshot.

    ``log_w``: the learner's log importance weight of each peer token ``[N, T]``; ``log_ratio_in_loss``: what TRL's
    ratio already holds at the snapshot ``[N, T]`` (``log w`` under the peer denominator, 0 under the learner's);
    outside ``mask`` the weight is 1.
    """
    weights = torch.exp(torch.clamp(log_w, max=math.log(cap)) - log_ratio_in_loss)  # [N, T]
    return torch.where(mask.bool(), weights, torch.ones_like(weights))  # [N, T]
