"""A success anchor (beyond the paper): GRPO gives a prompt whose every own rollout succeeded no gradient (its group's
advantages are 0), so nothing holds what the learner has already solved while another signal (a rescue, a
distillation) pulls on near-identical prompts. The anchor raises the advantage of each verified success of those
prompts by ``α``: imitation of the learner's own verified successes, as RAFT's rejection-sampling fine-tuning does
(arXiv 2304.06767), held to the solved prompts.

    A'_i = A_i + α · 1[every scored rollout of p(i) is a verified success] · 1[r_i > τ_succ]      (A_i = 0 there)

It is not SIL's ``(R − V)₊ ∇log π`` (Oh et al. 2018, arXiv 1806.05635), which is 0 on such a group, since a value
``V`` learned there reaches ``R``. A rollout with no score (NaN) in a solved group is not verified and is not lifted.
Through TRL's clipped loss at ratio 1 the anchor's gradient is ``−α ∇ log π_θ(y_i)`` summed over ``y_i``'s tokens and
reduced as TRL reduces its loss: an NLL on the learner's own solved answers, no extra forward. ``α = 0`` changes
nothing.
"""

from __future__ import annotations

import torch

from mutualrl.regimes.core.reward_shapes import check_float, every_scored


def solved_prompts(own_rewards: torch.Tensor, success_threshold: float) -> torch.Tensor:
    """bool ``[P]``: every scored own rollout (``own_rewards`` ``[P, K]``, NaN: unscored) above ``success_threshold``,
    at least one scored."""
    check_float("own_rewards", own_rewards, 2, "[P, K]")
    return every_scored(own_rewards > success_threshold, own_rewards)  # [P]


def anchored_rollouts(own_rewards: torch.Tensor, success_threshold: float) -> torch.Tensor:
    """bool ``[P, K]``: the rollouts the anchor lifts, each a verified success (NaN: not) of a solved prompt."""
    solved = solved_prompts(own_rewards, success_threshold)  # [P]
    return solved.unsqueeze(1) & (own_rewards > success_threshold)  # [P, K]


def anchored_advantages(advantages: torch.Tensor, lifted: torch.Tensor, alpha: float) -> torch.Tensor:
    """``advantages`` ``[B]`` (TRL's, ``B = P·K`` rows in prompt order) with ``alpha`` added on the ``lifted``
    ``[P, K]`` rollouts (:func:`anchored_rollouts`)."""
    if lifted.dim() != 2 or advantages.shape != (lifted.numel(),):
        raise ValueError(f"advantages must have shape [P*K] = [{lifted.numel()}] for lifted rollouts [P, K] = "
                         f"{list(lifted.shape)}; got {tuple(advantages.shape)}")
    lift = lifted.reshape(-1).to(device=advantages.device, dtype=advantages.dtype)  # [B]
    return advantages + alpha * lift  # [B]
