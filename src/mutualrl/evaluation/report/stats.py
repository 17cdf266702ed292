"""The seed-level statistics of ``mutualrl report``: what holds at the 3-10 seeds a comparison can afford, for a claim
about *these* held-out prompts (a claim about the task is :mod:`~mutualrl.evaluation.crossed`'s).

- A cell's mean (a group of runs, a policy, a task group): Student's t interval, ``mean ± t(0.975, n−1)·SD/√n``.
  A percentile bootstrap over n runs cannot be wider than their range (at n = 3 it *is* [min, max]) and covers a
  normal mean about 75 % of the time at n = 3; the t interval covers 95 % at every n ≥ 2 when the run-to-run
  spread is roughly normal. None when every run scored the same (SD 0): a point says nothing about a further seed,
  and on near-deterministic prompts that is where a point interval misses. The IQM (rliable; Agarwal et al.,
  2021) is given from n = 4.
- A group against its baseline, paired by seed: the mean difference Δ, its paired t interval and the paired t
  test's two-sided p (df n − 1: one test, so p < 0.05 exactly when the interval excludes 0; a t-based p has no
  floor, unlike a sign-flip p's 2/2ⁿ), and P(improve): the share of those same seed pairs where the group's run
  beats the baseline's (a tie counts half), so that it can never disagree with Δ's pairs; none from a single pair.
- Several comparisons in one table: Holm's step-down adjustment (Holm, 1979), over a family the table names.
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
#: The words every format uses for the seed-level interval.
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
    """A group against its baseline group on the seeds both have: the per-seed differences, their mean Δ, the
    paired t interval and the same test's p (None without an SD: fewer than 2 pairs, or every difference the same),
    and P(improve) on the same pairs."""

    seeds: list[Any]
    differences: list[float]
    mean_difference: float | None
    sd: float | None
    ci95: tuple[float, float] | None
    p: float | None
    probability_of_improvement: float | None
    note: str | None

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
        return (f"n = {n}: a t interval over {n} seeds is wide because an SD from {n} runs is itself uncertain "
                f"(t(0.975, {n - 1}) = {t_quantile(0.975, n - 1):.2f})")
    return None


#: Said where every run of a cell, or every seed's difference, is the same.
NO_SPREAD = ("SD 0 (every seed the same value): no t interval or p over seeds (a point would say nothing about a "
             "further seed)")


def no_spread(values: Sequence[float]) -> bool:
    """Every value the same, up to the float dust that equal values leave in a mean."""
    return len(values) > 1 and max(values) - min(values) <= 1e-12 * max(1.0, max(abs(v) for v in values))


def cell_stats(values: Sequence[float]) -> CellStats:
    """Mean, sample SD (n − 1), n, the 95 % t interval of the mean (n ≥ 2, some spread) and the IQM (n ≥ 4,
    rliable's)."""
    import numpy as np

    n = len(values)
    iqm = (float(rliable_metrics().aggregate_iqm(np.asarray(values, dtype=float).reshape(-1, 1)))
           if n >= MIN_RUNS_FOR_IQM else None)
    flat = no_spread(values)
    note = "\n".join(filter(None, [small_n_note(n), NO_SPREAD if flat else None])) or None
    return CellStats(n=n, mean=statistics.fmean(values), sd=statistics.stdev(values) if n > 1 else None,
                     ci95=None if flat else t_interval(values), iqm=iqm, note=note)


def t_test_p(differences: Sequence[float]) -> float | None:
    """The two-sided one-sample t test's p of "mean difference = 0" (df n − 1): p < 0.05 exactly when the 95 % t
    interval excludes 0. None below 2 values or without spread."""
    n = len(differences)
    if n < MIN_RUNS_FOR_INTERVAL or no_spread(differences):
        return None
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    return float(2 * scipy_stats().t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))


def paired_improvement(differences: Sequence[float]) -> float | None:
    """P(improve) on the pairs: the share of seeds where the group's run beats the baseline's, a tie half; None
    below 2 pairs (one pair's 1.00 or 0.00 is no share)."""
    if len(differences) < MIN_RUNS_FOR_INTERVAL:
        return None
    return sum(1.0 if d > 0 else 0.5 if d == 0 else 0.0 for d in differences) / len(differences)


def paired_stats(values: dict[Any, float], baseline: dict[Any, float]) -> PairedStats:
    """``values − baseline`` on every seed both have: Δ, the SD of the differences, their t interval and the same
    test's p, and P(improve) on the same pairs."""
    seeds = sorted(set(values) & set(baseline), key=str)
    differences = [values[s] - baseline[s] for s in seeds]
    flat = no_spread(differences)
    note = ("\n".join(filter(None, [small_n_note(len(differences)), NO_SPREAD if flat else None])) or None
            if differences else "no seed in common with the baseline: no paired difference")
    return PairedStats(seeds=seeds, differences=differences,
                       mean_difference=statistics.fmean(differences) if differences else None,
                       sd=statistics.stdev(differences) if len(differences) > 1 and not flat else None,
                       ci95=None if flat else t_interval(differences), p=t_test_p(differences),
                       probability_of_improvement=paired_improvement(differences), note=note)


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
