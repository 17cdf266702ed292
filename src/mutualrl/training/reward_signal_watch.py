"""Saying when there is no learning signal, and stopping when nothing scores at all.

GRPO learns from reward differences inside a group of K completions of one prompt. When every group of
a step has equal rewards (TRL's ``frac_reward_zero_std`` is 1.0) every advantage is 0 and the step
changes nothing (SGT can still rescue all-fail groups from a peer). After several such steps the worker
logs it once, with one completion and its reward (:class:`RewardSignalWatch`), and the launcher prints it once
on the progress display from the merged metrics rows (:func:`no_signal_note`): what was seen (the share of
groups in which every completion failed, whether any completion scored), not a guess at why; a pool's
designed blind spot (the tiny pool's) looks the same as a reward that misses the answer's format.
When no completion of a policy has scored above 0, no group had any reward spread, nothing rose above the
lowest reward the policy had got (a penalty-only reward whose completions all reached 0 has converged) and no
peer's completion read that step scored above 0 (SGT and PRP teach a policy that scores nothing from its peers'
successes), for ``task.stop_after_no_reward_steps`` steps in a row the worker stops with :class:`NoRewardError`,
one line with one completion: the models cannot do the task, or the reward never matches what they write.
Torch-free: the launcher imports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mutualrl.errors import MutualRLError

PATIENCE = 3
"""Consecutive logged steps with no reward spread in any group before it is said."""
ALL_FAIL_KEY = "mutual/all_fail_groups"
"""Metric: share of this step's groups whose K rewards are all <= 0 (all failed)."""
ZERO_STD_KEY = "frac_reward_zero_std"
"""TRL's metric: share of groups whose rewards have zero spread."""


def group_shares(rewards: Sequence[float], k: int) -> tuple[float, float]:
    """(share of groups with zero reward spread, share of groups with every reward <= 0); NaN rewards left out."""
    groups = [[r for r in rewards[i:i + k] if not math.isnan(r)] for i in range(0, len(rewards), k)]
    groups = [g for g in groups if g]
    if not groups:
        return 0.0, 0.0
    flat = sum(1 for g in groups if max(g) == min(g)) / len(groups)
    failed = sum(1 for g in groups if max(g) <= 0) / len(groups)
    return flat, failed


NO_REWARD = "no completion scored above 0"
"""How :class:`NoRewardError`'s message begins after the policy's name (the launcher finds it in a worker's log)."""


class NoRewardError(MutualRLError):
    """No completion of a policy scored above 0 for ``task.stop_after_no_reward_steps`` steps in a row."""


def seen(all_fail: float | None) -> str:
    """What the groups of a step without reward spread looked like: the share in which every completion failed,
    and whether any completion scored."""
    if all_fail is None:
        return ""
    if all_fail >= 1.0:
        return f" (every group all failed: {NO_REWARD})"
    return (f" ({all_fail:.0%} of groups all failed, reward <= 0; in the other {1 - all_fail:.0%} every completion "
            "got the same reward above 0)")


def explain(policy: str, steps: int, all_fail: float | None) -> str:
    return (f"policy {policy}: no learning signal for {steps} steps: in every group the K completions got the same "
            f"reward{seen(all_fail)}, so every GRPO advantage is 0")


class RewardSignalWatch:
    """One policy's consecutive steps without reward spread (said once, in the worker's log) and without any
    reward (``stop_after`` of them stop the policy: :class:`NoRewardError`; None or 0: never)."""

    def __init__(self, policy: str, patience: int = PATIENCE, stop_after: int | None = None,
                 lowest: float | None = None):
        self.policy, self.patience, self.flat_steps, self.said = policy, patience, 0, False
        self.stop_after, self.unscored_steps = stop_after, 0
        self.lowest = lowest  # the lowest reward seen so far (after a resume: the lowest logged step mean)

    def observe(self, rewards: Sequence[float], k: int, completion: Any, reward: float,
                peers_scored: bool = False) -> tuple[float, str | None]:
        """This step's all-fail share, and the message when this step completes ``patience`` flat steps.
        ``peers_scored``: a peer's completion this policy's regime read this step scored above 0."""
        flat, failed = group_shares(rewards, k)
        self.flat_steps = self.flat_steps + 1 if flat >= 1.0 else 0
        # a reward that is only ever a penalty (<= 0) but differs inside groups still teaches, one whose groups
        # all reached a value above the lowest seen has learnt, and a peer's success teaches under SGT and PRP
        scored = [r for r in rewards if not math.isnan(r)]
        rose = bool(scored) and self.lowest is not None and max(scored) > self.lowest
        self.lowest = min([*scored, *([] if self.lowest is None else [self.lowest])], default=None)
        nothing = failed >= 1.0 and flat >= 1.0 and not rose and not peers_scored
        self.unscored_steps = self.unscored_steps + 1 if nothing else 0
        text = completion if isinstance(completion, str) else str(completion)
        if self.stop_after and self.unscored_steps >= self.stop_after:
            raise NoRewardError(
                f"policy {self.policy}: {NO_REWARD} in {self.unscored_steps} steps in a row, so it was stopped "
                f"(task.stop_after_no_reward_steps={self.stop_after}; 0 turns this off). One completion: "
                f"{text[:200]!r} -> reward {reward:g}. Can these models do the task? (README: your own data)")
        if self.said or self.flat_steps < self.patience:
            return failed, None
        self.said = True
        return failed, (f"{explain(self.policy, self.flat_steps, failed)}. One completion: {text[:300]!r} -> "
                        f"reward {reward:g}")


def no_signal_note(policy: str, rows: Sequence[dict[str, Any]], patience: int = PATIENCE) -> str | None:
    """The launcher's note when the last ``patience`` logged train rows of ``policy`` all had no reward spread."""
    last = [r for r in rows if r.get("kind") == "train" and r.get("policy") == policy][-patience:]
    if len(last) < patience or not all((r.get(ZERO_STD_KEY) or 0) >= 1.0 for r in last):
        return None
    return explain(policy, patience, last[-1].get(ALL_FAIL_KEY)) + f"; logs/{policy}.log shows one completion and its reward"
