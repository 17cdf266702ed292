"""GRPO + random baseline perturbation: the control of App. "Ablation: shared normalization for XGRPO".

Paper wording: "a GRPO variant where each model still uses its own rollouts but we inject
random perturbations into the per-prompt baseline used for advantage computation (the
``id2mean`` values) before normalization". It tests whether XGRPO's gain is just baseline
noise. The noise is Gaussian with a settable scale (``regime.randpert.scale``; the paper does
not state its scale), and the normaliser is GRPO's own, untouched.
"""

from __future__ import annotations

import torch

from mutualrl.regimes.api import TRL_STD_EPS, ScaleRewards, check_float, check_scale_rewards, reward_scale


def randpert_advantages(
    rewards: torch.Tensor,
    scale: float,
    generator: torch.Generator,
    scale_rewards: ScaleRewards = "group",
    eps: float = TRL_STD_EPS,
    skip_uniform_groups: bool = True,
) -> torch.Tensor:
    """GRPO advantages around a randomly perturbed per-prompt baseline (App. "Ablation: shared normalization").

    For prompt ``p`` draw ``ξ_p ~ N(0, scale²)`` once (one draw per prompt, from ``generator``):

        b_p = nanmean_k r_{p,k} + ξ_p
        A_{p,i} = (r_{p,i} - b_p) / (s + eps)     (s exactly as GRPO: group or batch nanstd)
        A_{p,i} =  r_{p,i} - b_p                  for scale_rewards = "none"

    and ``A = 0`` where NaN, as in :func:`~mutualrl.regimes.core.grpo.group_advantages`. With
    ``scale = 0`` the result equals ``group_advantages`` bit for bit. With a perturbed baseline the
    advantages of a prompt no longer sum to zero, which is the point of the control; a uniform group
    (all rewards equal) would get ``-ξ_p / (0 + eps)`` under group scaling, which
    ``skip_uniform_groups`` (the default) prevents.

    Args:
        rewards: ``[P, K]`` learner rewards (NaN = unscorable).
        scale: standard deviation of the baseline noise, in reward units (``>= 0``).
        generator: source of the noise (one ``randn`` of size P per call, also at scale 0; it advances).
        scale_rewards: TRL's ``"group"``, ``"batch"`` or ``"none"``.
        eps: added to the std (TRL's 1e-4).
        skip_uniform_groups: under ``"group"`` scaling, leave prompts whose rewards are all equal
            unperturbed (advantage 0, as in GRPO). Such a group has no spread to normalise the noise by,
            and the literal rule would give every rollout ``-xi/eps`` (about +-1000 at scale 0.1): a
            pure-noise update that is not what the control is meant to test. ``"batch"``/``"none"``
            scaling have no such blow-up and always perturb. Set False for the literal rule.

    Returns:
        ``[P, K]`` advantages.
    """
    check_float("rewards", rewards, 2, "[P, K]")
    check_scale_rewards(scale_rewards)
    if not scale >= 0:
        raise ValueError(f"randpert scale must be >= 0; got {scale}")
    rewards = rewards.contiguous() + 0.0  # as group_advantages: no -0.0 rewards (TRL's nansum has none)
    noise = torch.randn(rewards.shape[0], 1, generator=generator, device=generator.device, dtype=rewards.dtype)
    baseline = torch.nanmean(rewards, dim=1, keepdim=True)
    if scale != 0:  # scale 0 adds nothing, not even a +0.0 that would flip TRL's signed zeros
        perturbation = noise.to(rewards.device) * scale
        if skip_uniform_groups and scale_rewards == "group":
            spread = torch.nan_to_num(rewards.amax(dim=1, keepdim=True) - rewards.amin(dim=1, keepdim=True))
            perturbation = torch.where(spread > 0, perturbation, torch.zeros_like(perturbation))
        baseline = baseline + perturbation
    advantages = rewards - baseline
    if scale_rewards != "none":
        advantages = advantages / (reward_scale(rewards, scale_rewards) + eps)
    return torch.nan_to_num(advantages, nan=0.0)
