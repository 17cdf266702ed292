"""Go or no-go before a long run: is there anything for a pool to learn, and to share, on these rows?

From the pool's greedy scores on a small sample of the task's rows
(:class:`~mutualrl.evaluation.complementarity.Outcomes`) this module says, in a few lines, each policy's reward@1,
how many of its failures a peer solves, and what that means:

- **nothing to learn**: no policy solves a sampled row; GRPO gets no reward to follow (and neither does any peer);
- **too easy**: every policy solves at least :data:`TOO_EASY` of the rows; little is left to learn or to share;
- **little to share**: the peers solve fewer than :data:`MIN_RESCUES` of the failures (at least 2): a sharing regime
  cannot differ much from standalone GRPO here;
- **worth a sweep**: otherwise, peers solve some of each other's failures: what the sharing regimes use.

A few dozen rows decide a go/no-go, not a result: the lines say how many rows they read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mutualrl.evaluation.complementarity import Outcomes

TOO_EASY = 0.9
"""A pool whose every policy solves this share of the sample has little left to learn."""
MIN_RESCUES = 0.1
"""Below this share of the failures solved by a peer (and below 2 failures), sharing has little to carry."""


@dataclass(frozen=True)
class PolicyCheck:
    """One policy on the sample: its reward@1, its failures and how many of them some peer solves."""

    name: str
    accuracy: float
    failures: int
    rescued: int


@dataclass(frozen=True)
class Verdict:
    """What the sample says: ``kind`` (``nothing-to-learn``, ``too-easy``, ``little-to-share``, ``worth-a-sweep``)
    and the sentence that explains it."""

    kind: str
    meaning: str


def policy_checks(out: Outcomes) -> list[PolicyCheck]:
    """Each policy's reward@1 (share of rows at or above the threshold) and the failures a peer solves."""
    success = out.success  # (n_prompts, n_models) bool
    checks = []
    for k, name in enumerate(out.models):
        fails = ~success[:, k]  # (n_prompts,)
        by_peer = np.delete(success, k, axis=1).any(axis=1)  # (n_prompts,): some peer solved the row
        checks.append(PolicyCheck(name, float(success[:, k].mean()), int(fails.sum()), int((fails & by_peer).sum())))
    return checks


def verdict(checks: list[PolicyCheck]) -> Verdict:
    """The go/no-go of :func:`policy_checks`' figures (the module docstring says each case)."""
    failures = sum(c.failures for c in checks)
    rescued = sum(c.rescued for c in checks)
    if all(c.accuracy == 0 for c in checks):
        return Verdict("nothing-to-learn", "no policy solves any sampled row: GRPO gets no reward to follow and no "
                       "peer has a success to share; try easier rows, longer completions (grpo.max_completion_length) "
                       "or stronger models, and check that the reward function scores a right answer 1")
    if all(c.accuracy >= TOO_EASY for c in checks):
        return Verdict("too-easy", f"every policy already solves at least {TOO_EASY:.0%} of the rows: little is left "
                       "to learn or to share; harder rows would show more")
    if rescued < max(2, MIN_RESCUES * failures):
        return Verdict("little-to-share", f"peers solve {rescued} of the {failures} failures: a sharing regime has "
                       "little to carry and cannot differ much from standalone GRPO here; models with other "
                       "strengths (or other rows) would show more")
    return Verdict("worth-a-sweep", f"peers solve {rescued} of the {failures} failures: the sharing regimes have "
                   "something to carry; a sweep against standalone will say whether it helps")


def check_lines(checks: list[PolicyCheck], n_rows: int, threshold: float) -> list[str]:
    """The check's lines: one per policy, then the verdict (with the number of rows it rests on)."""
    lines = [f"  {c.name}: reward@1 {c.accuracy:.2f}; a peer solves {c.rescued} of its {c.failures} failures"
             for c in checks]
    found = verdict(checks)
    lines.append(f"  {found.kind}: {found.meaning} ({n_rows} rows, greedy, success = reward >= {threshold:g}: a rough "
                 "look, not a measurement)")
    return lines
