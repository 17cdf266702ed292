"""Shapes shared by every regime: a learner's rewards ``[P, K]`` and a pool's ``[P, M, K]``.

Paper Sec. "Preliminaries" (Mutual RL setup): ``M`` policies receive the identical batch of
``P`` prompts and each draws ``K`` rollouts per prompt. The pool tensor stacks them along
dim 1 by policy index ``m``; the learner is ``m = learner_index`` and its peers are the
other ``M - 1`` slices, kept in increasing policy order (peer slot ``j`` is policy ``j`` if
``j < learner_index`` else ``j + 1``).

These helpers raise :class:`ValueError` naming the argument and the shape it should have;
a wrong shape here is a bug of the caller (the trainer adapter), not a user error.
"""

from __future__ import annotations

from typing import Literal

import torch

ScaleRewards = Literal["group", "batch", "none"]
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")
"""TRL's ``GRPOConfig.scale_rewards`` values (after its True/False → group/none mapping)."""


def check_scale_rewards(scale_rewards: str) -> None:
    """Reject a ``scale_rewards`` value TRL 1.16 would reject too."""
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(
            f"scale_rewards must be one of {', '.join(map(repr, SCALE_REWARDS))}; got {scale_rewards!r}"
        )


def every_scored(hit: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """bool ``[P]``: ``hit`` ``[P, K]`` on every scored rollout of ``rewards`` ``[P, K]`` (NaN: unscored), at least
    one scored."""
    scored = ~torch.isnan(rewards)  # [P, K]
    return (hit | ~scored).all(-1) & scored.any(-1)  # [P]


def check_float(name: str, t: torch.Tensor, ndim: int, layout: str) -> None:
    """Require a floating tensor with ``ndim`` dimensions (``layout`` names them, e.g. ``"[P, K]"``)."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor {layout}; got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have shape {layout}; got {tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor (NaN marks unscorable); got {t.dtype}")


def check_same_shape(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    """Require ``t.shape == ref.shape``."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor shaped like {ref_name}; got {type(t).__name__}")
    if t.shape != ref.shape:
        raise ValueError(
            f"{name} must have the shape of {ref_name} {tuple(ref.shape)}; got {tuple(t.shape)}"
        )


def check_pool(pool_rewards: torch.Tensor, learner_index: int | None = None) -> None:
    """Require a ``[P, M, K]`` float pool and, if given, a valid learner index ``0 <= n < M``."""
    check_float("pool_rewards", pool_rewards, 3, "[P, M, K]")
    if learner_index is not None:
        m = pool_rewards.shape[1]
        if isinstance(learner_index, bool) or not isinstance(learner_index, int):
            raise ValueError(f"learner_index must be an int; got {learner_index!r}")
        if not 0 <= learner_index < m:
            raise ValueError(f"learner_index must be in [0, {m}) for a pool of M={m} policies; got {learner_index}")


def split_pool(pool_rewards: torch.Tensor, learner_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a pool ``[P, M, K]`` into the learner's ``[P, K]`` and its peers' ``[P, M-1, K]``.

    Peers keep increasing policy order: peer slot ``j`` is policy ``j`` below the learner's index, ``j + 1`` from it on.
    """
    check_pool(pool_rewards, learner_index)
    m = pool_rewards.shape[1]
    others = [i for i in range(m) if i != learner_index]
    return pool_rewards[:, learner_index], pool_rewards[:, others]


def join_pool(learner_rewards: torch.Tensor, peer_rewards: torch.Tensor, learner_index: int) -> torch.Tensor:
    """Inverse of :func:`split_pool`: put the learner's ``[P, K]`` back at ``learner_index`` of ``[P, M, K]``."""
    check_learner_and_peers(learner_rewards, peer_rewards)
    m = peer_rewards.shape[1] + 1
    if not 0 <= learner_index < m:
        raise ValueError(f"learner_index must be in [0, {m}) for a pool of M={m} policies; got {learner_index}")
    return torch.cat(
        [peer_rewards[:, :learner_index], learner_rewards.unsqueeze(1), peer_rewards[:, learner_index:]], dim=1
    )


def check_learner_and_peers(learner_rewards: torch.Tensor, peer_rewards: torch.Tensor) -> None:
    """Require learner ``[P, K]`` and peers ``[P, M-1, K]`` (``M >= 2``) with matching P and K."""
    check_float("learner_rewards", learner_rewards, 2, "[P, K]")
    check_float("peer_rewards", peer_rewards, 3, "[P, M-1, K]")
    p, k = learner_rewards.shape
    if peer_rewards.shape[0] != p or peer_rewards.shape[2] != k:
        raise ValueError(
            f"peer_rewards must have shape [P={p}, M-1, K={k}] to match learner_rewards [P, K]; "
            f"got {tuple(peer_rewards.shape)}"
        )
