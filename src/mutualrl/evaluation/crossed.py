"""Seeds and prompts crossed: the interval and the test of a claim about the task, not only about these prompts.

Every run of a sweep scores the same held-out prompts, so one cell's scores (or a group's differences from its
baseline, seed by seed) form a (seeds × prompts) matrix whose two factors are *crossed*: a prompt's difficulty is
shared by every seed, and a seed's luck by every prompt. A claim about the task -- the expected reward@1 (or Δ)
over new seeds *and* new prompts of the same kind -- must pay for both draws. The grand mean's variance is

    σ²_seed / s + σ²_prompt / p + σ²_seed×prompt / (s · p)          (s seeds, p prompts)

and the two-way analysis of variance's mean squares estimate it (E[MS_seed] = σ²_inter + p·σ²_seed, E[MS_prompt] =
σ²_inter + s·σ²_prompt, E[MS_error] = σ²_inter). Two intervals are built from them:

- the *conservative* form: ``v_seed`` = MS_seed/(s·p) (the variance of the s per-seed means over s, s − 1 df) plus
  ``v_prompt`` = MS_prompt/(s·p) (p − 1 df), each part with its own Student quantile, ``sqrt(t(s − 1)² · v_seed +
  t(p − 1)² · v_prompt)``: the interaction counted twice (Owen 2007, "The pigeonhole bootstrap", Ann. Appl. Stat.
  1) and each part paying its own quantile (Banerjee 1960, Sankhyā 22);
- the *variance-analysis* form: σ̂²_seed/s + σ̂²_prompt/p + σ̂²_inter/(s·p), the components floored at 0
  (:func:`components`) -- a linear combination of the mean squares -- with Satterthwaite's degrees of freedom
  (Satterthwaite 1946, Biometrics Bull. 2): the interaction counted once and one quantile paid.

The report uses the conservative form at 2 seeds (there the other under-covers) and, from 3 seeds where the prompt
part is at least the seed part, the narrower of the two at each level (:func:`report_half_width`), so its power is
never below the conservative form's and is higher on near-deterministic prompts. The choice between the two forms
is made from the data (which part leads) and is validated by simulation only, not by a theorem. Its p is the test
the interval inverts: the smallest level whose interval excludes 0. A mean of 0-1 scores takes the same half-width
on the logit scale (:func:`logit_interval`), which stays in [0, 1] near a bound.

What it covers, by simulation (``benchmarks/report_grid.py``, benchmarks/results/report-grid.md; the suite's
``tests/test_report_crossed.py``, ``tests/test_report_boundary.py``): the task, for a method whose runs look like the
runs seen -- coverage ≥ 0.93 where 20 prompts or more carry variation, and a true null rejected at most about 0.05 of
the time (median about 0.01: the achieved size is well under the nominal one). Not covered: a failure that no seed
of the sweep showed (runs that collapse 1 time in 7-10: the sweeps that drew none covered the task's Δ in 0.00-0.63
of cases), which nothing in the runs can flag and the report's notes state as the interval's condition; and
few prompts carrying variation, which the report caveats, with failed and outlying runs (:mod:`.crossed_caveats`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    informative: int = 0  # prompts that carry variation (:func:`informative_prompts`)
    seed_means: list[float] = field(default_factory=list)  # per seed, over the prompts (a collapsed run shows here)

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "prompts": self.prompts, "mean": self.mean,
                "ci95": list(self.ci95) if self.ci95 else None, "p": self.p, "v_seed": self.v_seed,
                "v_prompt": self.v_prompt, "components": self.components.to_json(),
                "informative_prompts": self.informative, "seed_means": self.seed_means}


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
    stack of matrices at once: the simulations pass thousands)."""
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    seeds, prompts = m.shape[-2:]
    v_seed = m.mean(axis=-1).var(axis=-1, ddof=1) / seeds
    v_prompt = m.mean(axis=-2).var(axis=-1, ddof=1) / prompts
    return m.mean(axis=(-2, -1)), v_seed, v_prompt


def error_mean_square(matrix: Any) -> Any:
    """MS_error of a (..., seeds, prompts) array: the residual of the two-way additive fit, over (s − 1)(p − 1)."""
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    seeds, prompts = m.shape[-2:]
    residual = (m - m.mean(axis=-1, keepdims=True) - m.mean(axis=-2, keepdims=True)
                + m.mean(axis=(-2, -1), keepdims=True))  # (..., seeds, prompts)
    return (residual ** 2).sum(axis=(-2, -1)) / ((seeds - 1) * (prompts - 1))


def informative_prompts(matrix: Any) -> Any:
    """Per matrix of a (..., seeds, prompts) stack: the prompts that carry variation -- all but those every seed
    scored alike at the most common such value (on near-deterministic prompts most prompts score the same in every
    seed -- in Δ, 0 in every seed -- and add nothing to the prompt part of the variance). Every prompt counts where
    none is constant: the count reaches p."""
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    means = np.round(m.mean(axis=-2), 9)  # (..., prompts)
    constant = np.round(m.max(axis=-2) - m.min(axis=-2), 9) == 0  # (..., prompts)
    ordered = np.sort(np.where(constant, means, np.inf), axis=-1)  # the varying prompts last, each its own run
    index = np.arange(ordered.shape[-1])
    with np.errstate(invalid="ignore"):  # inf − inf: nan, which starts a run
        steps = np.diff(ordered, axis=-1) != 0
    starts = np.concatenate([np.ones(ordered.shape[:-1] + (1,), bool), steps], axis=-1)
    run_start = np.maximum.accumulate(np.where(starts, index, 0), axis=-1)  # (..., prompts): where each run began
    lengths = np.where(np.isfinite(ordered), index - run_start + 1, 0)  # (..., prompts): 0 for a varying prompt
    return ordered.shape[-1] - lengths.max(axis=-1)


def half_width(v_seed: Any, v_prompt: Any, seeds: int, prompts: int, alpha: float = 1 - CONFIDENCE) -> Any:
    """Half the conservative crossed interval at level 1 − ``alpha``: each part times its own t quantile
    (vectorised)."""
    import numpy as np
    from scipy import stats

    t_seed, t_prompt = stats.t.isf(alpha / 2, seeds - 1), stats.t.isf(alpha / 2, prompts - 1)
    v_seed, v_prompt = np.asarray(v_seed, dtype=float), np.asarray(v_prompt, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):  # a part of variance 0 adds 0, whatever its quantile
        seed_part = np.where(v_seed > 0, t_seed ** 2 * v_seed, 0.0)
        prompt_part = np.where(v_prompt > 0, t_prompt ** 2 * v_prompt, 0.0)
    return np.sqrt(seed_part + prompt_part)


def anova_variance(v_seed: Any, v_prompt: Any, v_error: Any, seeds: int, prompts: int) -> tuple[Any, Any]:
    """The variance-analysis estimate of the mean's variance and its Satterthwaite df (vectorised). ``v_seed``,
    ``v_prompt``, ``v_error``: the mean squares over s·p. The estimate v_seed' + v_prompt' − v_error, each of the
    first two floored at v_error (a component floored at 0, :func:`components`), and its df from all three terms:
    a seed mean square that fell below MS_error still says the seed component is uncertain, with s − 1 df (counting
    it as a known 0 rejects a true null up to 8 % of the time at 3 seeds)."""
    import numpy as np

    seed_part, prompt_part = np.maximum(v_seed, v_error), np.maximum(v_prompt, v_error)
    variance = seed_part + prompt_part - v_error
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = (seed_part ** 2 / (seeds - 1) + prompt_part ** 2 / (prompts - 1)
                  + v_error ** 2 / ((seeds - 1) * (prompts - 1)))
        df = np.where(spread > 0, variance ** 2 / spread, np.inf)
    return variance, np.maximum(df, 1.0)


@dataclass
class Parts:
    """What both forms of a (stack of) matrices need: the mean and the three mean squares over s·p."""

    seeds: int
    prompts: int
    mean: Any
    v_seed: Any
    v_prompt: Any
    v_error: Any


def parts(matrix: Any) -> Parts:
    """:class:`Parts` of a (..., seeds, prompts) array (vectorised)."""
    seeds, prompts = matrix.shape[-2:]
    mean, v_seed, v_prompt = variance_parts(matrix)
    v_error = error_mean_square(matrix) / (seeds * prompts)
    return Parts(seeds, prompts, mean, v_seed, v_prompt, v_error)


def report_half_width(found: Parts, alpha: float = 1 - CONFIDENCE) -> Any:
    """Half the report's interval at level 1 − ``alpha``: the conservative form at 2 seeds, else the narrower of
    the conservative and the variance-analysis forms (vectorised)."""
    import numpy as np
    from scipy import stats

    conservative = half_width(found.v_seed, found.v_prompt, found.seeds, found.prompts, alpha)
    if found.seeds < 3:
        return conservative
    variance, df = anova_variance(found.v_seed, found.v_prompt, found.v_error, found.seeds, found.prompts)
    led = prompt_led(found)
    shape = np.broadcast_shapes(np.shape(conservative), np.shape(variance), np.shape(led))
    half = np.array(np.broadcast_to(conservative, shape), dtype=float)  # (...) a writable copy
    led = np.broadcast_to(led, shape)  # (...)
    # t's quantile only where the form may be used: a power plan's grid is mostly seed-led, and the quantile is
    # most of its cost
    anova = stats.t.isf(np.broadcast_to(alpha, shape)[led] / 2, np.broadcast_to(df, shape)[led]) * np.sqrt(
        np.maximum(np.broadcast_to(variance, shape)[led], 0.0))  # (n_led,)
    half[led] = np.minimum(half[led], anova)
    return half


def prompt_led(found: Parts) -> Any:
    """Where the variance-analysis form may be used: the prompt part at least the seed part (where the seed part
    leads it gains little power, its Satterthwaite df rests on s − 1 seeds, and in simulation the narrower of the
    two rejected a true null up to 0.058 of the time on seed-dominated prompts, 1 000 sweeps a cell)."""
    import numpy as np

    return np.asarray(found.v_prompt) >= np.asarray(found.v_seed)


def crossed_p(found: Parts) -> float | None:
    """The two-sided p of "mean = 0" of one matrix's parts: the smallest ``alpha`` whose interval excludes 0 (so
    p < 0.05 exactly when the 95 % interval excludes 0): the conservative form's, found by root search, and from 3
    seeds, where the prompt part leads, the smaller of it and the variance-analysis t test's. None without
    spread."""
    from scipy import optimize, stats

    mean = float(found.mean)
    if found.v_seed + found.v_prompt <= 0:
        return None
    if mean == 0:
        return 1.0

    def gap(log_alpha: float) -> float:
        return float(half_width(found.v_seed, found.v_prompt, found.seeds, found.prompts,
                                math.exp(log_alpha))) - abs(mean)

    low = -230.0  # exp(-230) ~ 1e-100: below it the p is "0" for every purpose
    conservative = 0.0 if gap(low) <= 0 else math.exp(optimize.brentq(gap, low, 0.0, xtol=1e-10))
    if found.seeds < 3:
        return conservative
    variance, df = anova_variance(found.v_seed, found.v_prompt, found.v_error, found.seeds, found.prompts)
    if variance <= 0 or not prompt_led(found):
        return conservative
    return min(conservative, float(2 * stats.t.sf(abs(mean) / math.sqrt(float(variance)), float(df))))


def components(matrix: Any) -> Components:
    """σ²_seed, σ²_prompt and σ²_seed×prompt of a (seeds × prompts) matrix from the two-way ANOVA's mean squares
    (E[MS_seed] = σ²_inter + p·σ²_seed, E[MS_prompt] = σ²_inter + s·σ²_prompt, E[MS_error] = σ²_inter)."""
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    seeds, prompts = m.shape
    grand, rows, cols = m.mean(), m.mean(axis=1), m.mean(axis=0)
    ms_seed = prompts * float(((rows - grand) ** 2).sum()) / (seeds - 1)
    ms_prompt = seeds * float(((cols - grand) ** 2).sum()) / (prompts - 1)
    ms_error = float(error_mean_square(m))
    return Components(seed=max(0.0, (ms_seed - ms_error) / prompts),
                      prompt=max(0.0, (ms_prompt - ms_error) / seeds), interaction=ms_error)


def logit_interval(mean: float, half: float) -> tuple[float, float]:
    """The interval of a mean of scores in [0, 1] on the logit scale: logit(mean) ± half / (mean·(1 − mean)) (the
    delta method), mapped back. It stays in (0, 1) and leans away from the near bound, where the seeds' means are
    skewed: in simulation (tests/test_report_boundary.py; 130 cells of 3-10 seeds × 20-500 prompts, means 0.01-0.3
    and 0.7-0.99) the symmetric interval covered a mean near 0 or 1 down to 0.84-0.90 where 20 prompts or more carry
    variation, this one 0.93 or more in most such cells and 0.90 at worst, where seeds differ widely (a probit seed
    SD of 1.2: seeds' means from 3 % to 30 %)."""
    scale = mean * (1 - mean)
    if scale <= 0:
        return mean - half, mean + half
    centre, spread = math.log(mean / (1 - mean)), half / scale
    return expit(centre - spread), expit(centre + spread)


def expit(x: float) -> float:
    """1 / (1 + e^−x), without overflow at either end."""
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def crossed_stats(matrix: Any) -> Crossed | None:
    """The crossed mean, interval and p of a (seeds × prompts) matrix; None below 2 seeds or 2 prompts (a claim
    about the task needs a spread over both)."""
    seeds, prompts = matrix.shape
    if seeds < 2 or prompts < 2:
        return None
    found = parts(matrix)
    mean, v_seed, v_prompt = float(found.mean), float(found.v_seed), float(found.v_prompt)
    spread = v_seed + v_prompt > 1e-24 * max(1.0, mean * mean)  # equal cells leave float dust, not a spread
    half = float(report_half_width(found)) if spread else None
    return Crossed(seeds=seeds, prompts=prompts, mean=mean,
                   ci95=(mean - half, mean + half) if half is not None else None,
                   p=crossed_p(found) if spread else None, v_seed=v_seed, v_prompt=v_prompt,
                   components=components(matrix), informative=int(informative_prompts(matrix)),
                   seed_means=[float(x) for x in matrix.mean(axis=1)])
