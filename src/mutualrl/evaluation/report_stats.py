"""The statistics of ``mutualrl report``, rliable's (Agarwal et al., 2021, "Deep RL at the Edge of the Statistical
Precipice"): a 95 % percentile-bootstrap interval of the mean over runs, the interquartile mean where there are
enough runs to trim, and the probability of improvement over a baseline (Mann-Whitney over runs), beside the plain
mean and sample standard deviation. The point statistics are ``rliable.metrics``'s; the bootstrap is scipy's with
rliable's definition (:func:`bootstrap_interval` says why).

Each cell (a group of runs, a policy, a task group) is one rliable "task" with ``n`` runs: a score matrix of
shape ``(n, 1)``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mutualrl.errors import UsageError

#: Bootstrap resamples per interval (rliable's default is 50 000; with a handful of runs the percentiles of 2 000
#: differ from it in the third decimal, and a report of 100 cells stays within seconds).
BOOTSTRAP_REPS = 2000
CONFIDENCE = 0.95
#: Below this many runs no interval is given: two values resample to three means.
MIN_RUNS_FOR_INTERVAL = 3
#: Below this many runs the interval is shown with a warning: n values resample to at most C(2n-1, n) means, and a
#: percentile bootstrap of so few under-covers.
FEW_RUNS = 5
#: The interquartile mean trims a quarter at each end: with fewer than 4 runs it trims nothing and is the mean.
MIN_RUNS_FOR_IQM = 4
#: Every interval draws from this seed: the same runs give the same report.
BOOTSTRAP_SEED = 0


@dataclass
class CellStats:
    """Mean, sample SD, n and the interval of one cell's final values."""

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
    """A group against the baseline group: the per-seed difference and the probability of improvement."""

    seeds: list[Any]
    differences: list[float]
    mean_difference: float | None
    ci95: tuple[float, float] | None
    probability_of_improvement: float | None
    poi_ci95: tuple[float, float] | None
    note: str | None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("ci95", "poi_ci95"):
            out[key] = list(out[key]) if out[key] else None
        return out


def rliable_metrics() -> Any:
    """rliable's ``metrics`` module; a one-line error when the extra is not installed."""
    try:
        from rliable import metrics
    except ImportError as err:
        raise UsageError(f"mutualrl report needs rliable ({err}); install it: pip install 'mutualrl[experiments]' "
                         "(setup.sh does)") from None
    return metrics


def small_n_note(n: int) -> str | None:
    if n < MIN_RUNS_FOR_INTERVAL:
        return (f"n = {n}: too few runs for an interval to mean anything (two values resample to three means); "
                "run more seeds")
    if n < FEW_RUNS:
        return (f"n = {n}: a bootstrap interval over {n} runs is coarse and too narrow more often than 5 % of the "
                "time; read it as a description of these runs, not as a test")
    return None


def bootstrap_interval(samples: Sequence[Sequence[float]], statistic: Any) -> tuple[float, float]:
    """The percentile bootstrap of rliable's ``get_interval_estimates``, by scipy: each sample resampled on its own
    (rliable's stratified bootstrap with one task per cell, and its independent-samples bootstrap for two groups).
    ``statistic`` takes the samples and ``axis`` (vectorised, as scipy asks). rliable's own ``library`` is not
    imported: it needs arch < 8, whose 7.x series fails to import under pandas 3."""
    import numpy as np
    from scipy.stats import bootstrap

    data = tuple(np.asarray(sample, dtype=float) for sample in samples)
    if all(np.ptp(sample) == 0 for sample in data):  # every resample is the same: the interval is that point
        point = float(statistic(*data, axis=-1))
        return point, point
    result = bootstrap(data, statistic, n_resamples=BOOTSTRAP_REPS, confidence_level=CONFIDENCE,
                       method="percentile", paired=False, vectorized=True,
                       random_state=np.random.RandomState(BOOTSTRAP_SEED))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def mean_of(x: Any, axis: int = -1) -> Any:
    import numpy as np

    return np.mean(x, axis=axis)


def improvement_of(x: Any, y: Any, axis: int = -1) -> Any:
    """rliable's ``probability_of_improvement`` for one task, over resamples at once: P(X > Y) + P(X = Y) / 2,
    the Mann-Whitney U over the number of pairs."""
    import numpy as np

    x, y = np.moveaxis(np.asarray(x), axis, -1), np.moveaxis(np.asarray(y), axis, -1)  # (..., n_x), (..., n_y)
    pairs_x, pairs_y = x[..., :, None], y[..., None, :]  # (..., n_x, 1), (..., 1, n_y)
    return np.mean((pairs_x > pairs_y) + 0.5 * (pairs_x == pairs_y), axis=(-2, -1))  # (...)


def cell_stats(values: Sequence[float]) -> CellStats:
    """Mean, sample SD (n - 1), n, the 95 % bootstrap interval of the mean (n >= 3) and the IQM (n >= 4)."""
    import numpy as np

    metrics = rliable_metrics()
    n = len(values)
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if n > 1 else None
    ci = (bootstrap_interval([values], mean_of)
          if n >= MIN_RUNS_FOR_INTERVAL else None)
    iqm = float(metrics.aggregate_iqm(np.asarray(values, dtype=float).reshape(-1, 1))) if n >= MIN_RUNS_FOR_IQM else None
    return CellStats(n=n, mean=mean, sd=sd, ci95=ci, iqm=iqm, note=small_n_note(n))


def paired_stats(values: dict[Any, float], baseline: dict[Any, float]) -> PairedStats:
    """``values - baseline`` on every seed both have (the paired difference, its mean and interval), and the
    probability that a run of ``values`` beats one of ``baseline`` (rliable's, over all their runs)."""
    import numpy as np

    metrics = rliable_metrics()
    seeds = sorted(set(values) & set(baseline), key=str)
    differences = [values[s] - baseline[s] for s in seeds]
    mean = statistics.fmean(differences) if differences else None
    ci = (bootstrap_interval([differences], mean_of)
          if len(differences) >= MIN_RUNS_FOR_INTERVAL else None)
    ours, theirs = list(values.values()), list(baseline.values())
    poi = poi_ci = None
    if ours and theirs:
        poi = float(metrics.probability_of_improvement(np.asarray(ours).reshape(-1, 1),
                                                       np.asarray(theirs).reshape(-1, 1)))
        if min(len(ours), len(theirs)) >= MIN_RUNS_FOR_INTERVAL:
            poi_ci = bootstrap_interval([ours, theirs], improvement_of)
    note = small_n_note(len(differences)) if differences else "no seed in common with the baseline: no paired difference"
    return PairedStats(seeds=seeds, differences=differences, mean_difference=mean, ci95=ci,
                       probability_of_improvement=poi, poi_ci95=poi_ci, note=note)


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
