"""Go or no-go before a long run: is there anything for a pool to learn, and to share, on these rows?

From the pool's greedy scores on a small sample of the task's rows
(:class:`~mutualrl.evaluation.complementarity.Outcomes`) this module says, in a few lines, each policy's reward@1,
how many of its failures a peer solves, and what that means:

- **nothing to learn**: no policy solves a sampled row; GRPO gets no reward to follow (and neither does any peer);
- **too easy**: every policy solves at least :data:`TOO_EASY` of the rows; little is left to learn or to share;
- **little to share**: the peers solve fewer than :data:`MIN_RESCUES` of the failures (at least 2): a sharing regime
  cannot differ much from standalone GRPO here;
- **worth a sweep**: otherwise, peers solve some of each other's failures: what the sharing regimes use.

A few dozen rows decide a go/no-go, not a result: the lines say how many rows they read, and the share of the
failures a peer solves comes with its 95% Wilson interval (:func:`wilson`); where that interval lies on both sides of
:data:`MIN_RESCUES` the verdict says the sample does not settle it.

Success is reward >= a threshold taken from the rewards seen (:func:`success_threshold`): 0.5 for a reward in
[0, 1] (a verifier's 0/1), else the middle of the range the sample's rewards span (a shaped or penalty-only reward,
always <= 0, still has better and worse completions); when every completion got the same reward there is nothing
to tell apart, and nothing for GRPO to follow.
"""

from __future__ import annotations

import math
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


Z95 = 1.959964
"""The normal quantile of a two-sided 95% interval."""


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial share (``successes`` of ``trials``); None for no trial. Unlike the
    normal approximation it stays inside [0, 1] and keeps its coverage near 0 and 1 on a few dozen trials."""
    if trials <= 0:
        return None
    share, z2 = successes / trials, z * z
    centre = (share + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(share * (1 - share) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def success_threshold(scores: np.ndarray) -> tuple[float | None, str]:
    """The success threshold for the sample's rewards (``scores``, any shape) and how it was chosen: 0.5 where every
    reward lies in [0, 1], else the middle of the range seen; None where every reward is the same."""
    finite = scores[np.isfinite(scores)]  # (n,)
    if finite.size == 0:
        return None, "no completion was scored"
    low, high = float(finite.min()), float(finite.max())
    if low >= 0.0 and high <= 1.0:
        return 0.5, "a reward in [0, 1]"
    if low == high:
        return None, f"every completion got reward {low:g}"
    middle = (low + high) / 2
    return middle, f"the middle of the rewards seen, {low:g} to {high:g}: the reward is not 0/1"


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
    share = f"peers solve {rescued} of the {failures} failures{rescue_interval(rescued, failures)}"
    if rescued < max(2, MIN_RESCUES * failures):
        return Verdict("little-to-share", f"{share}: a sharing regime has little to carry and cannot differ much from "
                       f"standalone GRPO here; models with other strengths (or other rows) would show more"
                       f"{unsettled(rescued, failures)}")
    return Verdict("worth-a-sweep", f"{share}: the sharing regimes have something to carry; a sweep against "
                   f"standalone will say whether it helps{unsettled(rescued, failures)}")


def rescue_interval(rescued: int, failures: int) -> str:
    """`` (12%, 95% interval 4% to 27%)``: the share of the failures a peer solves, with its Wilson interval."""
    bounds = wilson(rescued, failures)
    if bounds is None:
        return ""
    return f" ({rescued / failures:.0%}, 95% interval {bounds[0]:.0%} to {bounds[1]:.0%})"


def unsettled(rescued: int, failures: int) -> str:
    """What a verdict adds where the share's interval lies on both sides of :data:`MIN_RESCUES`: this sample does
    not tell little-to-share from worth-a-sweep."""
    bounds = wilson(rescued, failures)
    if bounds is None or not bounds[0] < MIN_RESCUES <= bounds[1]:
        return ""
    return (f"; not settled: the interval spans the {MIN_RESCUES:.0%} that tells little-to-share from "
            "worth-a-sweep, and a larger sample (--check-rows) would say")


FLAT = Verdict("nothing-to-learn", "every sampled completion got the same reward: GRPO learns from differences "
               "between a prompt's completions and gets none; check that the reward function tells a better answer "
               "from a worse one, or try other rows or models")
"""The verdict where no threshold can be drawn (:func:`success_threshold` found one reward everywhere)."""


def check_lines(checks: list[PolicyCheck], n_rows: int, threshold: float | None, why: str = "") -> list[str]:
    """The check's lines: one per policy (its reward@1 with its interval), then the verdict, with the number of rows
    it rests on and the success threshold (``why``: how it was chosen; None: :data:`FLAT`)."""
    if threshold is None:
        return [f"  {FLAT.kind}: {FLAT.meaning} ({n_rows} rows, greedy; {why})"]
    lines = []
    for c in checks:
        low, high = wilson(round(c.accuracy * n_rows), n_rows) or (0.0, 1.0)
        lines.append(f"  {c.name}: reward@1 {c.accuracy:.2f} (95% interval {low:.2f} to {high:.2f}); a peer solves "
                     f"{c.rescued} of its {c.failures} failures")
    found = verdict(checks)
    rule = f"success = reward >= {threshold:g}" + (f", {why}" if why else "")
    lines.append(f"  {found.kind}: {found.meaning} ({n_rows} rows, greedy, {rule}: a rough look, not a measurement)")
    return lines
