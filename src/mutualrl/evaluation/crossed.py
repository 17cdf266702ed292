"""Seeds and prompts crossed: the interval and the test of a claim about the task, not only about these prompts.

Every run of a sweep scores the same held-out prompts, so one cell's scores (or a group's differences from its
baseline, seed by seed) form a (seeds × prompts) matrix whose two factors are *crossed*: a prompt's difficulty is
shared by every seed, and a seed's luck by every prompt. A claim about the task -- the expected reward@1 (or Δ)
over new seeds *and* new prompts of the same kind -- must pay for both draws. The grand mean's variance is

    σ²_seed / s + σ²_prompt / p + σ²_seed×prompt / (s · p)          (s seeds, p prompts)

and it is estimated by two parts, each from one factor's means:

- ``v_seed`` = (sample variance of the s per-seed means) / s, with s − 1 df: σ²_seed/s + σ²_seed×prompt/(s·p);
- ``v_prompt`` = (sample variance of the p per-prompt means over the seeds) / p, with p − 1 df:
  σ²_prompt/p + σ²_seed×prompt/(s·p).

Their sum counts the interaction once too often (conservative, as the pigeonhole bootstrap's variance is: Owen
2007, "The pigeonhole bootstrap", Ann. Appl. Stat. 1), and the interval gives each part its own Student quantile,
``sqrt(t(s − 1)² · v_seed + t(p − 1)² · v_prompt)`` (Banerjee 1960, Sankhyā 22: conservative for a sum of
independent variance estimates), so that at 3 seeds the seed part pays t(0.975, 2) = 4.30, which a bootstrap over 3
seeds (10 distinct resamples) cannot. Its p is the test the interval inverts: the smallest level whose interval
excludes 0. Coverage, measured by simulation (``benchmarks/report_coverage.py``, ``tests/test_report_crossed.py``):
0.94-0.99 for the task at 3, 5 and 10 seeds, near-deterministic prompts included
(benchmarks/results/report-coverage.md); not guaranteed at 2 seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95


@dataclass
class Components:
    """The crossed model's variance components (ANOVA mean squares, each floored at 0): what a plan for other
    numbers of seeds and prompts starts from."""

    seed: float
    prompt: float
    interaction: float

    def to_json(self) -> dict[str, float]:
        return {"seed": self.seed, "prompt": self.prompt, "seed_x_prompt": self.interaction}


@dataclass
class Crossed:
    """The mean of a (seeds × prompts) matrix with its crossed interval and p (None: no spread at all, or < 2
    seeds or prompts), the two variance parts and the components."""

    seeds: int
    prompts: int
    mean: float
    ci95: tuple[float, float] | None
    p: float | None
    v_seed: float
    v_prompt: float
    components: Components

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "prompts": self.prompts, "mean": self.mean,
                "ci95": list(self.ci95) if self.ci95 else None, "p": self.p, "v_seed": self.v_seed,
                "v_prompt": self.v_prompt, "components": self.components.to_json()}


def score_matrix(by_seed: Mapping[Any, Mapping[str, float]]) -> tuple[list[Any], list[str], Any]:
    """``seed -> prompt id -> score`` as a (seeds × prompts) array over the prompts every seed scored."""
    import numpy as np

    seeds = sorted(by_seed, key=str)
    if not seeds:
        return [], [], np.zeros((0, 0))
    prompts = sorted(set.intersection(*(set(by_seed[s]) for s in seeds)))
    matrix = np.array([[by_seed[s][p] for p in prompts] for s in seeds], dtype=float)
    return seeds, prompts, matrix.reshape(len(seeds), len(prompts))


def variance_parts(matrix: Any) -> tuple[Any, Any, Any]:
    """The grand mean, ``v_seed`` and ``v_prompt`` of a (..., seeds, prompts) array, over its last two axes (a
    stack of matrices at once: the simulation in the tests passes thousands)."""
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    seeds, prompts = m.shape[-2:]
    v_seed = m.mean(axis=-1).var(axis=-1, ddof=1) / seeds
    v_prompt = m.mean(axis=-2).var(axis=-1, ddof=1) / prompts
    return m.mean(axis=(-2, -1)), v_seed, v_prompt


def half_width(v_seed: Any, v_prompt: Any, seeds: int, prompts: int, alpha: float = 1 - CONFIDENCE) -> Any:
    """Half the crossed interval at level 1 − ``alpha``: each part times its own t quantile (vectorised)."""
    import numpy as np
    from scipy import stats

    t_seed, t_prompt = stats.t.isf(alpha / 2, seeds - 1), stats.t.isf(alpha / 2, prompts - 1)
    v_seed, v_prompt = np.asarray(v_seed, dtype=float), np.asarray(v_prompt, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):  # a part of variance 0 adds 0, whatever its quantile
        seed_part = np.where(v_seed > 0, t_seed ** 2 * v_seed, 0.0)
        prompt_part = np.where(v_prompt > 0, t_prompt ** 2 * v_prompt, 0.0)
    return np.sqrt(seed_part + prompt_part)


def crossed_p(mean: float, v_seed: float, v_prompt: float, seeds: int, prompts: int) -> float | None:
    """The two-sided p of "mean = 0": the smallest ``alpha`` whose crossed interval excludes 0 (so p < 0.05 exactly
    when the 95 % interval excludes 0); None without spread."""
    from scipy import optimize

    if v_seed + v_prompt <= 0:
        return None
    if mean == 0:
        return 1.0

    def gap(log_alpha: float) -> float:
        return float(half_width(v_seed, v_prompt, seeds, prompts, math.exp(log_alpha))) - abs(mean)

    low = -230.0  # exp(-230) ~ 1e-100: below it the p is "0" for every purpose
    if gap(low) <= 0:
        return 0.0
    return math.exp(optimize.brentq(gap, low, 0.0, xtol=1e-10))


def components(matrix: Any) -> Components:
    """σ²_seed, σ²_prompt and σ²_seed×prompt of a (seeds × prompts) matrix from the two-way ANOVA's mean squares
    (E[MS_seed] = σ²_inter + p·σ²_seed, E[MS_prompt] = σ²_inter + s·σ²_prompt, E[MS_error] = σ²_inter)."""
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    seeds, prompts = m.shape
    grand, rows, cols = m.mean(), m.mean(axis=1), m.mean(axis=0)
    ms_seed = prompts * float(((rows - grand) ** 2).sum()) / (seeds - 1)
    ms_prompt = seeds * float(((cols - grand) ** 2).sum()) / (prompts - 1)
    residual = m - rows[:, None] - cols[None, :] + grand
    ms_error = float((residual ** 2).sum()) / ((seeds - 1) * (prompts - 1))
    return Components(seed=max(0.0, (ms_seed - ms_error) / prompts),
                      prompt=max(0.0, (ms_prompt - ms_error) / seeds), interaction=ms_error)


def crossed_stats(matrix: Any) -> Crossed | None:
    """The crossed mean, interval and p of a (seeds × prompts) matrix; None below 2 seeds or 2 prompts (a claim
    about the task needs a spread over both)."""
    seeds, prompts = matrix.shape
    if seeds < 2 or prompts < 2:
        return None
    mean, v_seed, v_prompt = (float(x) for x in variance_parts(matrix))
    spread = v_seed + v_prompt > 1e-24 * max(1.0, mean * mean)  # equal cells leave float dust, not a spread
    half = float(half_width(v_seed, v_prompt, seeds, prompts)) if spread else None
    return Crossed(seeds=seeds, prompts=prompts, mean=mean,
                   ci95=(mean - half, mean + half) if half is not None else None,
                   p=crossed_p(mean, v_seed, v_prompt, seeds, prompts) if spread else None,
                   v_seed=v_seed, v_prompt=v_prompt, components=components(matrix))
