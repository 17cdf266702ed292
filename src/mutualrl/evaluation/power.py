"""Seeds for a stated minimal effect, for the report's own tests: planning, not the post-hoc power of an observed Δ.

A row's test is one of two (``report/build.py``): the crossed seeds × prompts test of :mod:`.crossed` (a claim about the
task) or the paired t test over seeds (a claim about these prompts). For each, the seeds needed to detect a stated
effect ``±effect`` with 80 % probability, taking the observed variance as the truth:

- crossed: the components σ²_seed, σ²_prompt, σ²_seed×prompt (:func:`.crossed.components`); under the normal
  crossed model the mean and the two variance parts are independent (a scaled normal and two scaled χ²), so the
  power of "the interval at level 1 − α excludes 0" is an integral over the two χ², done on a fixed grid of their
  quantiles (no random draws: the same runs give the same plan). Fewer prompts than needed cannot be made up by
  seeds: the prompt part of the variance stays, and the search says so (more than :data:`MAX_SEEDS`).
- paired t: the noncentral t with the observed SD of the per-seed differences (Cohen 1988).

The level is Holm's first threshold α/m over the m comparisons of the row's family: a comparison whose raw p is below
α/m has a Holm-adjusted p below α whatever the other comparisons show, so the seeds given are enough for Holm's
test as the table applies it (they are what it needs when every other comparison of the family is null).
``tests/test_report_crossed.py`` checks each against a simulation of the test itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mutualrl.evaluation.crossed import Components

POWER = 0.80
ALPHA = 0.05
#: The search stops here: an effect that needs more seeds is reported as "more than" this.
MAX_SEEDS = 1000
#: Quantile grid of the two χ² of the crossed power (seed part: few df, a fine grid; prompt part: many df, narrow).
SEED_GRID, PROMPT_GRID = 400, 64


def crossed_power(effect: float, comps: Components, seeds: int, prompts: int, alpha: float) -> float:
    """The probability that the crossed interval at level 1 − ``alpha`` of ``seeds`` × ``prompts`` excludes 0 when
    the true mean is ``effect`` and the variance components are ``comps`` (normal crossed model)."""
    import numpy as np
    from scipy import stats

    var = comps.seed / seeds + comps.prompt / prompts + comps.interaction / (seeds * prompts)
    per_seed = (comps.seed + comps.interaction / prompts) / seeds  # E[v_seed]
    per_prompt = (comps.prompt + comps.interaction / seeds) / prompts  # E[v_prompt]
    w_seed = stats.chi2.ppf((np.arange(SEED_GRID) + 0.5) / SEED_GRID, seeds - 1) / (seeds - 1)
    w_prompt = stats.chi2.ppf((np.arange(PROMPT_GRID) + 0.5) / PROMPT_GRID, prompts - 1) / (prompts - 1)
    t_seed, t_prompt = stats.t.isf(alpha / 2, seeds - 1), stats.t.isf(alpha / 2, prompts - 1)
    half = np.sqrt(t_seed ** 2 * per_seed * w_seed[:, None] + t_prompt ** 2 * per_prompt * w_prompt[None, :])
    sd = math.sqrt(var)
    return float(np.mean(stats.norm.cdf((abs(effect) - half) / sd) + stats.norm.cdf((-abs(effect) - half) / sd)))


def t_power(effect: float, sd: float, seeds: int, alpha: float) -> float:
    """The power of the two-sided paired t test (df ``seeds`` − 1) at level ``alpha`` for a true mean difference
    ``effect`` when the per-seed differences have SD ``sd`` (noncentral t)."""
    from scipy import stats

    crit = stats.t.isf(alpha / 2, seeds - 1)
    noncentral = abs(effect) / sd * math.sqrt(seeds)
    return float(stats.nct.sf(crit, seeds - 1, noncentral) + stats.nct.cdf(-crit, seeds - 1, noncentral))


def fewest_seeds(power_at: Callable[[int], float], power: float = POWER) -> int:
    """The fewest seeds (from 2) whose power reaches ``power``, by doubling then bisection (the power grows with
    the seeds); :data:`MAX_SEEDS` + 1 when even that many do not reach it."""
    if power_at(2) >= power:
        return 2
    low, high = 2, 4
    while power_at(high) < power:
        if high >= MAX_SEEDS:
            return MAX_SEEDS + 1
        low, high = high, min(2 * high, MAX_SEEDS)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if power_at(middle) >= power else (middle, high)
    return high


def seeds_for_crossed(effect: float, comps: Components, prompts: int, alpha: float,
                      power: float = POWER) -> int | None:
    """The fewest seeds with which the crossed test over ``prompts`` prompts at level ``alpha`` detects ``±effect``
    with ``power``; None when nothing varies (no component to plan from) or ``effect`` is 0; :data:`MAX_SEEDS` + 1
    for more than that (or never, at these prompts)."""
    if effect == 0 or comps.seed + comps.prompt + comps.interaction <= 0 or prompts < 2:
        return None
    return fewest_seeds(lambda seeds: crossed_power(effect, comps, seeds, prompts, alpha), power)


def seeds_for_t(effect: float, sd: float | None, alpha: float, power: float = POWER) -> int | None:
    """The fewest seeds with which the paired t test at level ``alpha`` detects ``±effect`` with ``power`` when
    the per-seed differences have SD ``sd``; None without an SD (fewer than 2 pairs, or none of spread) or with
    ``effect`` 0; :data:`MAX_SEEDS` + 1 for more than that."""
    if effect == 0 or sd is None or sd <= 0:
        return None
    return fewest_seeds(lambda seeds: t_power(effect, sd, seeds, alpha), power)


def seeds_text(seeds: int | None) -> str:
    """A seed count as the table writes it: ``n/a`` for none, ``> 1000`` beyond the search."""
    if seeds is None:
        return "n/a"
    return f"> {MAX_SEEDS}" if seeds > MAX_SEEDS else str(seeds)


def plan_options(effect: float, comps: Components, prompt_counts: list[int], alpha: float,
                 power: float = POWER) -> list[tuple[int, int | None]]:
    """``(prompts, seeds needed)`` for each number of prompts, in the order given."""
    return [(prompts, seeds_for_crossed(effect, comps, prompts, alpha, power)) for prompts in prompt_counts]


def plan_words(effect: float, options: list[tuple[int, int | None]], alpha: float, power: float = POWER) -> str:
    """"to detect ±0.05 with 80% power (two-sided α = 0.025): 12 seeds × 200 prompts, or 8 × 500"."""
    shown = []
    for prompts, seeds in options:
        if seeds is None:
            shown.append(f"n/a × {prompts} prompts (no variance observed)")
        elif seeds > MAX_SEEDS:
            shown.append(f"more than {MAX_SEEDS} seeds × {prompts} prompts")
        else:
            shown.append(f"{seeds} seeds × {prompts} prompts" if not shown else f"{seeds} × {prompts}")
    return (f"to detect ±{effect:g} with {power:.0%} power (two-sided α = {alpha:.3g}): "
            + ", or ".join(shown))
