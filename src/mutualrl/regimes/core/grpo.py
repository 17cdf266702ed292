"""Standalone GRPO advantages, exactly as TRL 1.16 computes them (paper Sec. "Preliminaries", Eq. grpo), and the
same normalisation over a pool of policies (PRP's unified candidate pool, Sec. "Regime 1", which XGRPO's pooled
statistics and the channel decomposition read too).

Every regime builds on this: with its sharing switched off, a regime must hand TRL the
advantages TRL would have computed itself, bit for bit. So this module copies TRL's
arithmetic (``GRPOTrainer._generate_and_score_completions``, ``multi_objective_aggregation=
"sum_then_normalize"``, one reward function) operation for operation, including its
NaN-aware standard deviation (``trl.trainer.utils.nanstd`` itself), its ``+ 1e-4`` on the standard
deviation and its final ``nan_to_num``. ``tests/test_regimes_grpo.py`` runs TRL's own source
block against this function.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import nanstd  # TRL's own: the advantages' std is TRL's op for op

from mutualrl.regimes.core.reward_shapes import ScaleRewards, check_float, check_pool, check_scale_rewards

TRL_STD_EPS = 1e-4
"""The constant TRL adds to the reward standard deviation (``advantages / (std_rewards + 1e-4)``)."""


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
            weighted and summed over reward functions as TRL does (the trainer's ``_collect_step_rollouts``).
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


def prp_pooled_advantages(
    pool_rewards: torch.Tensor, scale_rewards: ScaleRewards = "group", eps: float = TRL_STD_EPS
) -> torch.Tensor:
    """GRPO advantages normalised over the unified candidate pool of ``M*K`` responses (Sec. "Regime 1").

    For prompt ``p`` with pool rewards ``r_{p,m,k}`` (all M policies, K rollouts each):

        μ_pool(p) = nanmean_{m,k} r_{p,m,k}
        A_{p,m,i} = (r_{p,m,i} - μ_pool(p)) / (σ_pool(p) + eps)

    with ``σ_pool(p)`` the NaN-aware sample std of the prompt's ``M*K`` rewards ("group"), or of
    all ``P*M*K`` rewards ("batch"); "none" skips the division. Exactly
    :func:`~mutualrl.regimes.core.grpo.group_advantages` applied to the ``[P, M*K]`` pool, so it is
    the same tensor for every learner (the pool is the same set) and, for ``M = 1``, equals
    standalone GRPO bit for bit. NaN rewards get advantage 0.

    Args:
        pool_rewards: ``[P, M, K]`` rewards of every policy of the pool (NaN = unscorable).
        scale_rewards: TRL's ``"group"``, ``"batch"`` or ``"none"``.
        eps: added to the pooled std (``regime.prp.std_epsilon``).

    Returns:
        ``[P, M, K]`` pooled advantages.
    """
    check_pool(pool_rewards)
    p, m, k = pool_rewards.shape
    return group_advantages(pool_rewards.reshape(p, m * k), scale_rewards, eps).reshape(p, m, k)
