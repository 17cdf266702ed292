"""A success anchor (beyond the paper): GRPO gives a prompt whose every own rollout succeeded no gradient (its group's
advantages are 0), so nothing holds what the learner has already solved while another signal (a rescue, a
distillation) pulls on near-identical prompts. The anchor raises each of those rollouts' advantage by ``α``:
self-imitation (SIL, Oh et al. 2018, arXiv 1806.05635; RAFT, arXiv 2304.06767) held to the solved prompts.

    A'_i = A_i + α · 1[every scored rollout of p(i) is a verified success]          (A_i = 0 there)

Through TRL's clipped loss at ratio 1 its gradient is ``−α ∇ log π_θ(y_i)`` summed over ``y_i``'s tokens and reduced
as TRL reduces its loss: an NLL on the learner's own solved answers, no extra forward. ``α = 0`` changes nothing.
"""

from __future__ import annotations

import torch

from mutualrl.regimes.core.reward_shapes import check_float, every_scored


def solved_prompts(own_rewards: torch.Tensor, success_threshold: float) -> torch.Tensor:
    """bool ``[P]``: every scored own rollout (``own_rewards`` ``[P, K]``, NaN: unscored) above ``success_threshold``,
    at least one scored."""
    check_float("own_rewards", own_rewards, 2, "[P, K]")
    return every_scored(own_rewards > success_threshold, own_rewards)  # [P]


def anchored_advantages(advantages: torch.Tensor, solved: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    """``advantages`` ``[B]`` (TRL's, ``B = P·K`` rows in prompt order) with ``alpha`` added on the rows of the
    ``solved`` ``[P]`` prompts."""
    if advantages.shape != (solved.shape[0] * k,):
        raise ValueError(f"advantages must have shape [P*K] = [{solved.shape[0] * k}]; got {tuple(advantages.shape)}")
    lift = solved.repeat_interleave(k).to(device=advantages.device, dtype=advantages.dtype)  # [B]
    return advantages + alpha * lift  # [B]
