"""Seeds for a stated minimal effect, for the report's own tests: planning, not the post-hoc power of an observed Δ.

A row's test is one of two (``report/build.py``): the crossed seeds × prompts test of :mod:`.crossed` (a claim about the
task) or the paired t test over seeds (a claim about these prompts). For each, the seeds needed to detect a stated
effect ``±effect`` with 80 % probability, taking the observed variance as the truth:

- crossed: the components σ²_seed, σ²_prompt, σ²_seed×prompt (:func:`.crossed.components`); under the normal
  crossed model the mean and the three mean squares are independent (a scaled normal and three scaled χ²), so the
  power of "the report's interval at level 1 − α excludes 0" is an integral over the three χ², done on a fixed grid
  of their quantiles (no random draws: the same runs give the same plan). Fewer prompts than needed cannot be made
  up by seeds: the prompt part of the variance stays, and the search says so (more than :data:`MAX_SEEDS`). A plan
  from a pilot also gives the seeds for the pilot components' upper confidence limits (:func:`upper_components`):
  a 3-seed pilot's seed component is itself uncertain by a factor of several.
- paired t: the noncentral t with the observed SD of the per-seed differences (Cohen 1988).

The level is Holm's first threshold α/m over the m comparisons of the row's family: a comparison whose raw p is below
α/m has a Holm-adjusted p below α whatever the other comparisons show, so the seeds given are enough for Holm's
test as the table applies it (they are what it needs when every other comparison of the family is null).
``tests/test_report_crossed.py`` checks each against a simulation of the test itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mutualrl.evaluation.crossed import Components, Parts, report_half_width

POWER = 0.80
ALPHA = 0.05
#: The search stops here: an effect that needs more seeds is reported as "more than" this.
MAX_SEEDS = 1000
#: Quantile grid of the three χ² of the crossed power (seed part: few df, a fine grid; the others: many df, narrow).
SEED_GRID, PROMPT_GRID, ERROR_GRID = 120, 24, 6
#: The one-sided confidence of the upper limits a plan from a pilot also plans with (:func:`upper_components`).
PILOT_CONFIDENCE = 0.90


def crossed_power(effect: float, comps: Components, seeds: int, prompts: int, alpha: float) -> float:
    """The probability that the report's crossed interval (:func:`~.crossed.report_half_width`) at level
    1 − ``alpha`` of ``seeds`` × ``prompts`` excludes 0 when the true mean is ``effect`` and the variance components
    are ``comps`` (normal crossed model: the mean and the three mean squares independent, a scaled normal and three
    scaled χ², integrated on a fixed grid of the χ²'s quantiles)."""
    import numpy as np
    from scipy import stats

    var = comps.seed / seeds + comps.prompt / prompts + comps.interaction / (seeds * prompts)
    cells = seeds * prompts
    expected = ((comps.seed * prompts + comps.interaction) / cells,  # E[v_seed]
                (comps.prompt * seeds + comps.interaction) / cells,  # E[v_prompt]
                comps.interaction / cells)  # E[v_error]
    grids = []
    for size, df, axis in ((SEED_GRID, seeds - 1, 0), (PROMPT_GRID, prompts - 1, 1),
                           (ERROR_GRID, (seeds - 1) * (prompts - 1), 2)):
        quantiles = stats.chi2.ppf((np.arange(size) + 0.5) / size, df) / df  # (size,)
        grids.append(expected[axis] * quantiles.reshape([-1 if i == axis else 1 for i in range(3)]))
    found = Parts(seeds, prompts, effect, grids[0], grids[1], grids[2])
    half = report_half_width(found, alpha)  # (SEED_GRID, PROMPT_GRID, ERROR_GRID)
    sd = math.sqrt(var)
    return float(np.mean(stats.norm.cdf((abs(effect) - half) / sd) + stats.norm.cdf((-abs(effect) - half) / sd)))


def upper_components(comps: Components, seeds: int, prompts: int,
                     confidence: float = PILOT_CONFIDENCE) -> Components:
    """A pilot's components with the seed and the prompt ones at their one-sided ``confidence`` upper limits: each
    mean square (MS_seed = p·σ²_seed + σ²_inter, s − 1 df; MS_prompt = s·σ²_prompt + σ²_inter, p − 1 df) times
    df / χ²(1 − confidence, df), the interaction (from (s − 1)(p − 1) df) as estimated."""
    from scipy import stats

    def upper(mean_square: float, df: int) -> float:
        return mean_square * df / float(stats.chi2.ppf(1 - confidence, df))

    ms_seed = upper(prompts * comps.seed + comps.interaction, seeds - 1)
    ms_prompt = upper(seeds * comps.prompt + comps.interaction, prompts - 1)
    return Components(seed=max(0.0, (ms_seed - comps.interaction) / prompts),
                      prompt=max(0.0, (ms_prompt - comps.interaction) / seeds), interaction=comps.interaction)


def upper_sd(sd: float | None, runs: int, confidence: float = PILOT_CONFIDENCE) -> float | None:
    """The one-sided ``confidence`` upper limit of an SD from ``runs`` values (χ² with runs − 1 df)."""
    from scipy import stats

    if sd is None or runs < 2:
        return None
    return sd * math.sqrt((runs - 1) / float(stats.chi2.ppf(1 - confidence, runs - 1)))


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


def seeds_text(seeds: int | None, upper: int | None = None) -> str:
    """A seed count as the table writes it: ``n/a`` for none, ``> 1000`` beyond the search; with ``upper`` (the
    seeds for a pilot's upper confidence limits) a range, ``12-25`` (``12 to > 1000``)."""
    if seeds is None:
        return "n/a"
    low = f"> {MAX_SEEDS}" if seeds > MAX_SEEDS else str(seeds)
    if upper is None or upper == seeds:
        return low
    return f"{low}-{upper}" if upper <= MAX_SEEDS else f"{low} to > {MAX_SEEDS}"


def plan_options(effect: float, comps: Components, prompt_counts: list[int], alpha: float,
                 power: float = POWER, pilot: tuple[int, int] | None = None
                 ) -> list[tuple[int, int | None, int | None]]:
    """``(prompts, seeds needed, seeds needed at the pilot's upper confidence limits)`` for each number of
    prompts, in the order given; ``pilot``: its (seeds, prompts), None for stated components (no upper limits)."""
    upper = upper_components(comps, *pilot) if pilot else None
    return [(prompts, seeds_for_crossed(effect, comps, prompts, alpha, power),
             seeds_for_crossed(effect, upper, prompts, alpha, power) if upper else None)
            for prompts in prompt_counts]


def plan_words(effect: float, options: list[tuple[int, int | None, int | None]], alpha: float,
               power: float = POWER) -> str:
    """"to detect ±0.05 with 80% power (two-sided α = 0.025): 12 seeds × 200 prompts, or 8 × 500" (a pilot's:
    "12-25 seeds × 200 prompts, or 8-16 × 500")."""
    shown = []
    for prompts, seeds, upper in options:
        if seeds is None:
            shown.append(f"n/a × {prompts} prompts (no variance observed)")
        elif seeds > MAX_SEEDS:
            shown.append(f"more than {MAX_SEEDS} seeds × {prompts} prompts")
        else:
            count = seeds_text(seeds, upper)
            shown.append(f"{count} seeds × {prompts} prompts" if not shown else f"{count} × {prompts}")
    return (f"to detect ±{effect:g} with {power:.0%} power (two-sided α = {alpha:.3g}): "
            + ", or ".join(shown))


def pilot_words(pilot_seeds: int) -> str:
    """What a plan's range from a pilot means, said under it."""
    return (f"a range a-b of seeds: a, the pilot's variance components taken as true; b, the seed and prompt "
            f"components at their one-sided {PILOT_CONFIDENCE:.0%} upper confidence limits from a pilot of "
            f"{pilot_seeds} seeds. Simulated from 3-seed pilots (benchmarks/results/report-grid.md), a reaches the "
            f"stated power in 34-59 % of them and b in at least 80 %; a larger pilot narrows the range")
