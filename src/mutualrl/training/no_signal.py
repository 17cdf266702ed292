"""Saying when there is no learning signal (issue 39).

GRPO learns from reward differences inside a group of K completions of one prompt. When every group of
a step has equal rewards (TRL's ``frac_reward_zero_std`` is 1.0) every advantage is 0 and the step
changes nothing (SGT can still rescue all-fail groups from a peer). For several steps in a row that is
almost always the reward not matching what the model writes (a format mismatch: the answer is there,
the reward function does not find it). The worker logs it once, with one completion and its reward
(:class:`NoSignalWatch`); the launcher prints it once on the progress display from the merged metrics
rows (:func:`no_signal_note`). Torch-free: the launcher imports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

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


def explain(policy: str, steps: int, all_fail: float | None) -> str:
    share = f" ({all_fail:.0%} of groups all-fail)" if all_fail is not None else ""
    return (f"policy {policy}: no learning signal for {steps} steps: in every group the K completions got the same "
            f"reward{share}, so every GRPO advantage is 0. Usually the reward does not match the completions' "
            "format (the answer is there but the reward function does not find it)")


class NoSignalWatch:
    """One policy's consecutive steps without reward spread; says so once (worker log)."""

    def __init__(self, policy: str, patience: int = PATIENCE):
        self.policy, self.patience, self.flat_steps, self.said = policy, patience, 0, False

    def observe(self, rewards: Sequence[float], k: int, completion: Any, reward: float) -> tuple[float, str | None]:
        """This step's all-fail share, and the message when this step completes ``patience`` flat steps."""
        flat, failed = group_shares(rewards, k)
        self.flat_steps = self.flat_steps + 1 if flat >= 1.0 else 0
        if self.said or self.flat_steps < self.patience:
            return failed, None
        self.said = True
        text = completion if isinstance(completion, str) else str(completion)
        return failed, (f"{explain(self.policy, self.flat_steps, failed)}. One completion: {text[:300]!r} -> "
                        f"reward {reward:g}")


def no_signal_note(policy: str, rows: Sequence[dict[str, Any]], patience: int = PATIENCE) -> str | None:
    """The launcher's note when the last ``patience`` logged train rows of ``policy`` all had no reward spread."""
    last = [r for r in rows if r.get("kind") == "train" and r.get("policy") == policy][-patience:]
    if len(last) < patience or not all((r.get(ZERO_STD_KEY) or 0) >= 1.0 for r in last):
        return None
    return explain(policy, patience, last[-1].get(ALL_FAIL_KEY)) + f"; logs/{policy}.log shows one completion"
