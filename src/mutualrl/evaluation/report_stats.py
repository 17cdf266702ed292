"""The seed-level statistics of ``mutualrl report``: intervals that hold at the 3-10 seeds a comparison can afford.

- A cell's mean (a group of runs, a policy, a task group): Student's t interval, ``mean ± t(0.975, n−1)·SD/√n``.
  A percentile bootstrap over n runs cannot be wider than their range (at n = 3 it *is* [min, max]) and covers a
  normal mean about 75 % of the time at n = 3; the t interval covers 95 % at every n ≥ 2 when the run-to-run
  spread is roughly normal. The IQM (rliable; Agarwal et al., 2021) is given from n = 4.
- A group against its baseline, paired by seed: the mean difference Δ with its t interval (the paired t), the
  exact two-sided sign-flip (permutation) p of Δ (every one of the 2^n sign patterns of the differences; at n = 3
  the smallest it can be is 0.25), and P(improve): the share of those same seed pairs where the group's run beats
  the baseline's (a tie counts half), so that it can never disagree with Δ's pairs.
- Several comparisons in one table: Holm's step-down adjustment of the sign-flip p (Holm, 1979).
- Power: the seeds a paired t test needs to detect the observed Δ at 80 % power (two-sided α = 0.05), from the
  observed SD of the per-seed differences (noncentral t).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mutualrl.errors import UsageError

CONFIDENCE = 0.95
#: Below this many runs no interval is given: one run has no spread to estimate.
MIN_RUNS_FOR_INTERVAL = 2
#: Below this many runs the t interval rests on an SD from so few runs that a note says so (it still covers: the
#: t quantile pays for it with width).
FEW_RUNS = 5
#: The interquartile mean trims a quarter at each end: with fewer than 4 runs it trims nothing and is the mean.
MIN_RUNS_FOR_IQM = 4
#: Up to this many pairs the sign-flip p enumerates every sign pattern (2^16 = 65 536); beyond, it draws
#: :data:`SIGN_FLIP_DRAWS` patterns from :data:`SIGN_FLIP_SEED` (the same runs give the same report).
EXACT_SIGN_FLIP = 16
SIGN_FLIP_DRAWS = 100_000
SIGN_FLIP_SEED = 0
POWER = 0.80
ALPHA = 0.05
#: The power search stops here: an effect that needs more seeds is reported as "more than" this.
MAX_POWER_SEEDS = 1000
#: The words every format uses for the interval.
INTERVAL_KIND = "Student t interval over seeds (df n − 1)"


@dataclass
class CellStats:
    """Mean, sample SD, n, the 95 % t interval of the mean and the IQM of one cell's final values; ``note``: what
    to be wary of, one caveat a line."""

    n: int
    mean: float
    sd: float | None
    ci95: tuple[float, float] | None
    iqm: float | None
    note: str | None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ci95"] = list(self.ci95) if self.ci95 else None
        return out


@dataclass
class PairedStats:
    """A group against its baseline group on the seeds both have: the per-seed differences and what they say."""

    seeds: list[Any]
    differences: list[float]
    mean_difference: float | None
    ci95: tuple[float, float] | None
    p_sign_flip: float | None
    probability_of_improvement: float | None
    seeds_for_power: int | None  # None: not computable (fewer than 2 pairs, no spread, or Δ = 0)
    note: str | None
    p_holm: float | None = None  # set by :func:`holm` over the table's comparisons

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ci95"] = list(self.ci95) if self.ci95 else None
        return out


def scipy_stats() -> Any:
    """scipy's ``stats`` (rliable's dependency); a one-line error when the extra is not installed."""
    try:
        from scipy import stats
    except ImportError as err:
        raise UsageError(f"mutualrl report needs scipy and rliable ({err}); install them: pip install "
                         "'mutualrl[experiments]' (setup.sh does)") from None
    return stats


def rliable_metrics() -> Any:
    """rliable's ``metrics`` module; a one-line error when the extra is not installed."""
    try:
        from rliable import metrics
    except ImportError as err:
        raise UsageError(f"mutualrl report needs rliable ({err}); install it: pip install 'mutualrl[experiments]' "
                         "(setup.sh does)") from None
    return metrics


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Student's t interval of the mean of ``values`` (None below 2 values; a point when they are all equal)."""
    n = len(values)
    if n < MIN_RUNS_FOR_INTERVAL:
        return None
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


@functools.lru_cache(maxsize=256)
def t_quantile(probability: float, df: int) -> float:
    """Student's t quantile (cached: a report asks for the same few degrees of freedom in every cell)."""
    return float(scipy_stats().t.ppf(probability, df))


def small_n_note(n: int) -> str | None:
    if n < MIN_RUNS_FOR_INTERVAL:
        return f"n = {n}: one run has no spread, so no interval; run more seeds"
    if n < FEW_RUNS:
        return (f"n = {n}: the t interval is wide because an SD from {n} runs is itself uncertain; a paired "
                f"sign-flip p cannot go below {2 / 2 ** n:.3g} with {n} seeds")
    return None


def cell_stats(values: Sequence[float]) -> CellStats:
    """Mean, sample SD (n − 1), n, the 95 % t interval of the mean (n ≥ 2) and the IQM (n ≥ 4, rliable's)."""
    import numpy as np

    n = len(values)
    iqm = (float(rliable_metrics().aggregate_iqm(np.asarray(values, dtype=float).reshape(-1, 1)))
           if n >= MIN_RUNS_FOR_IQM else None)
    sd = statistics.stdev(values) if n > 1 else None
    note = small_n_note(n)
    if sd == 0:  # the t interval is then a point: say it is no certainty
        note = "\n".join(filter(None, [note, "SD 0 (every run of a cell the same value): its t interval is that "
                                              "point, which says nothing about a further seed"]))
    return CellStats(n=n, mean=statistics.fmean(values), sd=sd, ci95=t_interval(values), iqm=iqm, note=note)


def sign_flip_p(differences: Sequence[float]) -> float | None:
    """The two-sided paired permutation p of the mean difference: the share of sign patterns of the differences
    whose mean is at least as far from 0 as the observed one (exact up to :data:`EXACT_SIGN_FLIP` pairs)."""
    import numpy as np

    d = np.asarray(differences, dtype=float)
    if d.size == 0:
        return None
    if d.size <= EXACT_SIGN_FLIP:
        bits = (np.arange(2 ** d.size)[:, None] >> np.arange(d.size)) & 1  # every pattern, one per row
        signs = 1 - 2 * bits
    else:
        signs = np.random.default_rng(SIGN_FLIP_SEED).choice([-1, 1], size=(SIGN_FLIP_DRAWS, d.size))
    observed = abs(d.mean())
    flipped = np.abs(signs @ d / d.size)
    return float(np.mean(flipped >= observed - 1e-12 * max(1.0, observed)))  # ties in float sums still count


def paired_improvement(differences: Sequence[float]) -> float | None:
    """P(improve) on the pairs: the share of seeds where the group's run beats the baseline's, a tie half."""
    if not differences:
        return None
    return sum(1.0 if d > 0 else 0.5 if d == 0 else 0.0 for d in differences) / len(differences)


def seeds_for_power(differences: Sequence[float], power: float = POWER, alpha: float = ALPHA) -> int | None:
    """The fewest seeds whose paired t test (two-sided ``alpha``) detects the observed mean difference with
    ``power``, taking the observed SD of the per-seed differences as the truth; None when it cannot be computed
    (fewer than 2 pairs, no spread, no difference); :data:`MAX_POWER_SEEDS` + 1 for "more than that"."""
    if len(differences) < 2:
        return None
    sd, mean = statistics.stdev(differences), statistics.fmean(differences)
    if sd <= 1e-12 * max(1.0, abs(mean)) or mean == 0:  # equal differences leave float dust, not a spread
        return None
    stats, effect = scipy_stats(), abs(mean) / sd
    # the normal approximation is a lower bound on the t test's n: search upward from it
    approx = ((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / effect) ** 2
    if approx > MAX_POWER_SEEDS:
        return MAX_POWER_SEEDS + 1
    for n in range(max(2, math.floor(approx)), MAX_POWER_SEEDS + 1):
        crit = stats.t.ppf(1 - alpha / 2, n - 1)
        noncentral = effect * math.sqrt(n)
        reached = stats.nct.sf(crit, n - 1, noncentral) + stats.nct.cdf(-crit, n - 1, noncentral)
        if reached >= power:
            return n
    return MAX_POWER_SEEDS + 1


def paired_stats(values: dict[Any, float], baseline: dict[Any, float]) -> PairedStats:
    """``values − baseline`` on every seed both have: Δ, its t interval, the sign-flip p, P(improve) on the
    same pairs, and the seeds 80 % power needs."""
    seeds = sorted(set(values) & set(baseline), key=str)
    differences = [values[s] - baseline[s] for s in seeds]
    note = (small_n_note(len(differences)) if differences
            else "no seed in common with the baseline: no paired difference")
    return PairedStats(seeds=seeds, differences=differences,
                       mean_difference=statistics.fmean(differences) if differences else None,
                       ci95=t_interval(differences), p_sign_flip=sign_flip_p(differences),
                       probability_of_improvement=paired_improvement(differences),
                       seeds_for_power=seeds_for_power(differences), note=note)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the order given: the i-th smallest of m is multiplied by
    m − i + 1, made non-decreasing, and capped at 1 (Holm, 1979)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
