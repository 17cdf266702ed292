"""When the crossed interval's assumptions fail, and the report must say so beside the row.

- **Few informative prompts** (in Δ, or in a mean near 0 or 1): when most prompts score alike in every seed (and, in
  Δ, alike in both arms), the prompt part of the variance rests on the few that differ, a skewed handful that a t
  quantile does not fit; in simulation (``benchmarks/report_grid.py``) the interval's coverage of the task falls
  below 0.93 under :data:`FEW_INFORMATIVE` informative prompts
  (:func:`~mutualrl.evaluation.crossed.informative_prompts`).
- **An outlying seed** (a collapsed run, say): the interval assumes seeds drawn from one normal spread. At 3 or 4
  seeds, a seed whose mean lies further from the other seeds' mean than :data:`OUTLIER_RATIO_FEW` times the spread
  a further seed would show by theirs; from 5 seeds, one further from the median of the seed means than
  :data:`OUTLIER_RATIO` times their scaled median absolute deviation (robust to a second collapsed run); each
  spread floored at the seed × prompt noise of a seed's mean, sqrt(MS_error / p). 2 seeds say nothing about which
  is odd. The ratios are set by simulation so that normal seeds are flagged in at most about 4 % of sweeps in
  every scenario of the grid while a single collapsed run is found (benchmarks/results/report-grid.md). By distance
  alone a run at 0 can hide: at 100 prompts or fewer its gap from the others is about the threshold.
- **A failed run, by what it is** (:func:`failed_runs`): one value on every prompt (a run at 0, or at 1), or its
  step-0 scores on every prompt, where the other seeds' runs make that unlikely: named at any number of prompts.

None of these can name a failure that no seed of the sweep showed: the interval covers a method whose runs look like
the runs seen, and the report's notes say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mutualrl.evaluation.crossed import error_mean_square

#: Below this many informative prompts the task-level interval's coverage is not what it says (simulated).
FEW_INFORMATIVE = 20
#: At 3-4 seeds: a seed further than this many of the others' spreads from their mean is flagged (simulated).
OUTLIER_RATIO_FEW = 10.0
#: From 5 seeds: a seed further than this many scaled MADs from the seeds' median is flagged (simulated).
OUTLIER_RATIO = 8.0
#: From this many seeds the robust rule.
ROBUST_FROM = 5


def outlier_scores(matrix: Any) -> Any:
    """Per seed of a (..., seeds, prompts) stack (3-4 seeds): its mean's distance from the other seeds' mean, in
    units of the spread a further seed would show (the others' SD of seed means, floored at the seed × prompt
    noise sqrt(MS_error / p), times sqrt(1 + 1/(s − 1)))."""
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    seeds, prompts = m.shape[-2:]
    means = m.mean(axis=-1)  # (..., seeds)
    total, squares = means.sum(axis=-1, keepdims=True), (means ** 2).sum(axis=-1, keepdims=True)
    others = (total - means) / (seeds - 1)  # (..., seeds)
    others_var = np.maximum((squares - means ** 2 - (seeds - 1) * others ** 2) / (seeds - 2), 0.0)
    floor = (error_mean_square(m) / prompts)[..., None]  # (..., 1)
    scale = np.sqrt(np.maximum(others_var, floor) * (1 + 1 / (seeds - 1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(scale > 0, np.abs(means - others) / scale, np.where(means != others, np.inf, 0.0))


def robust_scores(matrix: Any) -> Any:
    """Per seed of a (..., seeds, prompts) stack: its mean's distance from the median seed mean in units of
    1.4826 × the median absolute deviation (the SD of normal seeds), floored at sqrt(MS_error / p)."""
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    means = m.mean(axis=-1)  # (..., seeds)
    middle = np.median(means, axis=-1, keepdims=True)
    spread = 1.4826 * np.median(np.abs(means - middle), axis=-1, keepdims=True)
    scale = np.maximum(spread, np.sqrt(error_mean_square(m) / m.shape[-1])[..., None])  # (..., 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(scale > 0, np.abs(means - middle) / scale, np.where(means != middle, np.inf, 0.0))


def outlying_seeds(matrix: Any) -> Any:
    """Per seed of a (..., seeds, prompts) stack: is it an outlier (module docstring); none below 3 seeds."""
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    seeds = m.shape[-2]
    if seeds < 3:
        return np.zeros(m.shape[:-1], dtype=bool)
    if seeds < ROBUST_FROM:
        return outlier_scores(m) > OUTLIER_RATIO_FEW
    return robust_scores(m) > OUTLIER_RATIO


#: A run is named as failed when the other seeds' runs make what it did less likely than this (:func:`match_chance`).
FAILED_CHANCE = 0.001


def match_chance(others: Sequence[Mapping[str, bool]], prompts: Sequence[str]) -> float:
    """The chance that a run like the other seeds' does on every one of ``prompts`` what a candidate did (``others``:
    per other run, ``prompt id -> whether it did it there``), multiplied over the prompts (independent given the
    runs; a weak seed's runs correlate them, which the small factors below pay for): 1 on a prompt where every other
    run did it too (it says nothing against the candidate), else the share of the other runs that did, shrunk towards
    ½ ((count + ½) / (runs + 1): a prompt where none did still leaves a chance). A run at 0 where two other seeds
    both solve some prompts: 0.17 for each such prompt, below 0.001 from 4 of them."""
    chance = 1.0
    for prompt in prompts:
        did = [run[prompt] for run in others if prompt in run]
        if not all(did):
            chance *= (sum(did) + 0.5) / (len(did) + 1)
    return chance


def failed_runs(scores: Mapping[Any, Mapping[str, float]],
                start: Mapping[Any, Mapping[str, float]] | None = None) -> dict[Any, str]:
    """``seed -> what its run did`` for the runs of one cell (``seed -> prompt id -> score``; ``start``: each run's
    step-0 validation, where known) that failed by what they are, not by distance: a run that scored one value on
    every prompt (a run at 0, or at 1), or its step-0 score on every prompt, where the other seeds' runs make that
    less likely than :data:`FAILED_CHANCE` (:func:`match_chance`). Named at any number of seeds from 2 and of
    prompts: at 3 seeds × 100 prompts a run at 0 on every prompt is named in every simulated sweep
    (tests/test_report_boundary.py)."""
    out: dict[Any, str] = {}
    start = start or {}
    for seed, run in scores.items():
        others = {key: other for key, other in scores.items() if key != seed}
        values = set(run.values())
        if len(run) > 1 and len(values) == 1 and others:
            value = next(iter(values))
            did = [{prompt: score == value for prompt, score in other.items()} for other in others.values()]
            if match_chance(did, list(run)) < FAILED_CHANCE:
                out[seed] = f"scored {value:g} on every held-out prompt"
                continue
        if start.get(seed) == dict(run) and len(run) > 1:
            did = [{prompt: score == start[key].get(prompt) for prompt, score in other.items()}
                   for key, other in others.items() if start.get(key)]
            if did and match_chance(did, list(run)) < FAILED_CHANCE:
                out[seed] = "scored its step-0 score on every held-out prompt (did it train?)"
    return out
