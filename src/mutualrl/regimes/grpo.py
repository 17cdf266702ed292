"""Standalone GRPO advantages, exactly as TRL 1.16 computes them (paper Sec. "Preliminaries", Eq. grpo).

Every regime builds on this: with its sharing switched off, a regime must hand TRL the
advantages TRL would have computed itself, bit for bit. So this module copies TRL's
arithmetic (``GRPOTrainer._generate_and_score_completions``, ``multi_objective_aggregation=
"sum_then_normalize"``, one reward function) operation for operation, including its
NaN-aware standard deviation (``trl.trainer.utils.nanstd``), its ``+ 1e-4`` on the standard
deviation and its final ``nan_to_num``. ``tests/test_regimes_grpo.py`` runs TRL's own source
block against this function.
"""

from __future__ import annotations

import torch

from mutualrl.regimes.pool import ScaleRewards, check_float, check_scale_rewards

TRL_STD_EPS = 1e-4
"""The constant TRL adds to the reward standard deviation (``advantages / (std_rewards + 1e-4)``)."""


def nanstd(tensor: torch.Tensor, dim: int | tuple[int, ...] | None = None, keepdim: bool = False) -> torch.Tensor:
    """Sample standard deviation ignoring NaNs, op-for-op ``trl.trainer.utils.nanstd``.

    ``std = sqrt( n/(n-1) * mean_{non-NaN}((x - mean_{non-NaN}(x))^2) )`` with ``n`` the number
    of non-NaN entries (Bessel's correction); NaN where ``n <= 1``.
    """
    mean = torch.nanmean(tensor, dim=dim, keepdim=True)
    variance = torch.nanmean((tensor - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(tensor), dim=dim, keepdim=True)
    correction = count / (count - 1)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    variance *= correction
    std = torch.sqrt(variance)
    if keepdim:
        return std
    if dim is None:
        return std.squeeze()
    return std.squeeze(dim)


def trl_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor | None = None) -> torch.Tensor:
    """The per-completion reward TRL normalises: ``Σ_f w_f · r_f`` over reward functions, NaN-aware.

    Op-for-op TRL 1.16's ``sum_then_normalize`` sum: ``(rewards_per_func * weights).nansum(dim=1)``,
    then NaN for completions every reward function declined to score (``None`` → NaN). Feed its
    output, viewed as ``[P, K]``, to :func:`group_advantages`.

    Args:
        rewards_per_func: ``[B, F]`` rewards of F reward functions (NaN = that function did not score).
        reward_weights: ``[F]`` weights (TRL's ``reward_weights``); default all ones.

    Returns:
        ``[B]`` rewards in TRL's row order.
    """
    check_float("rewards_per_func", rewards_per_func, 2, "[B, F]")
    if reward_weights is None:
        reward_weights = torch.ones(rewards_per_func.shape[1], dtype=rewards_per_func.dtype)
    if reward_weights.shape != rewards_per_func.shape[1:]:
        raise ValueError(
            f"reward_weights must have shape [F] = ({rewards_per_func.shape[1]},); got {tuple(reward_weights.shape)}"
        )
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    return rewards


def reward_scale(rewards: torch.Tensor, scale_rewards: ScaleRewards) -> torch.Tensor:
    """The ``std_rewards`` TRL divides by, broadcast to ``rewards``' shape ``[P, K]``.

    - ``"group"`` (and ``"none"``, where TRL computes it only for logging): ``nanstd`` of each
      prompt's K rewards; zeros when ``K == 1``.
    - ``"batch"``: ``nanstd`` of all ``P*K`` rewards (raw rewards, not centred ones); zeros when
      there is a single reward.
    """
    check_scale_rewards(scale_rewards)
    if scale_rewards in ("group", "none"):
        if rewards.shape[1] > 1:
            return nanstd(rewards, dim=1).unsqueeze(1).expand_as(rewards)
        return torch.zeros_like(rewards)
    flat = rewards.reshape(-1)
    if flat.numel() > 1:
        return nanstd(flat).expand_as(rewards)
    return torch.zeros_like(rewards)


def group_advantages(
    rewards: torch.Tensor, scale_rewards: ScaleRewards = "group", eps: float = TRL_STD_EPS
) -> torch.Tensor:
    """GRPO group-relative advantages of one policy (paper Sec. "Preliminaries"; TRL 1.16).

    For prompt ``p`` with rewards ``r_{p,1..K}`` (NaN = unscorable, left out of every statistic):

        mean_p = nanmean_k r_{p,k}
        A_{p,i} = (r_{p,i} - mean_p) / (s + eps)     for scale_rewards in {"group", "batch"}
        A_{p,i} =  r_{p,i} - mean_p                  for scale_rewards = "none"

    with ``s = nanstd_k r_{p,k}`` (group) or ``s = nanstd`` over all ``P*K`` rewards (batch), and
    finally ``A = 0`` wherever it is NaN (unscorable rows; groups with a single scorable reward,
    whose sample std is undefined). This is the paper's ``Ã^zn_i = (r_i - r̄)/(std({r_j}) + ε)``
    with TRL's choices: Bessel-corrected std, ``ε = 1e-4`` added to the std.

    Args:
        rewards: ``[P, K]`` float rewards of the learner (P prompts, K rollouts each), already
            weighted and summed over reward functions as TRL does (:func:`trl_rewards`).
        scale_rewards: TRL's ``scale_rewards``: ``"group"``, ``"batch"`` or ``"none"``.
        eps: added to the standard deviation; TRL hard-codes ``1e-4``.

    Returns:
        ``[P, K]`` advantages, bit-identical to TRL's for the same rewards and settings.
    """
    check_float("rewards", rewards, 2, "[P, K]")
    check_scale_rewards(scale_rewards)
    # TRL reduces a contiguous flat batch; a strided view (e.g. a pool slice) could reduce in
    # another order and differ in the last bit.
    # ``+ 0.0`` maps a -0.0 reward to +0.0 and changes nothing else: TRL's rewards come out of a
    # nansum, which never yields -0.0, and a signed zero would flip the sign bit of a zero advantage.
    rewards = rewards.contiguous() + 0.0
    mean = torch.nanmean(rewards, dim=1, keepdim=True)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (reward_scale(rewards, scale_rewards) + eps)
    return torch.nan_to_num(advantages, nan=0.0)
