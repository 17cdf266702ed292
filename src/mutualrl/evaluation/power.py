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

A pilot's plan also gives the expected power at a few seed counts (:func:`expected_power`): the crossed power
averaged over what the pilot leaves uncertain, the figure a user can act on where a 3-seed pilot's range of seeds
spans a factor of 5-10 or more.

The level is Holm's first threshold α/m over the m comparisons of the row's family: a comparison whose raw p is below
α/m has a Holm-adjusted p below α whatever the other comparisons show, so the seeds given are enough for Holm's
test as the table applies it (they are what it needs when every other comparison of the family is null).
``tests/test_report_crossed.py`` checks each against a simulation of the test itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

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


#: The seed counts a pilot's expected power is shown at (:func:`expected_power`).
TABLE_SEEDS = (5, 10, 20, 40)
#: Quantile grids of what a pilot leaves uncertain (its seed and prompt mean squares), and of the planned sweep's
#: three χ² inside each (coarser than :func:`crossed_power`'s: the outer average smooths them).
PILOT_SEED_GRID, PILOT_PROMPT_GRID, INNER_GRID = 16, 4, (40, 8, 3)


def expected_power(effect: float, comps: Components, pilot: tuple[int, int], seeds: int, prompts: int,
                   alpha: float) -> float:
    """The power at ``seeds`` × ``prompts`` averaged over what a pilot of ``pilot`` (seeds, prompts) leaves
    uncertain: the true seed and prompt mean squares given the observed ones, each the observed times df / χ²(df)
    (a flat prior on their logs; the χ² on a fixed grid of quantiles, so the same pilot gives the same figure), the
    interaction as estimated (its many df), then :func:`crossed_power`'s integral over the planned sweep, all at
    once. A 3-seed pilot's seed mean square is uncertain by a factor of 30 between its 5 % and 95 % points: the
    average pays for it, where a plan from the observed components alone ignores it."""
    import numpy as np
    from scipy import stats

    pilot_seeds, pilot_prompts = pilot
    ms_seed = pilot_prompts * comps.seed + comps.interaction
    ms_prompt = pilot_seeds * comps.prompt + comps.interaction

    def draws(size: int, df: int, axis: int) -> Any:  # the true/observed ratios, on axis ``axis`` of five
        ratio = df / stats.chi2.ppf((np.arange(size) + 0.5) / size, df)  # (size,)
        return ratio.reshape([-1 if i == axis else 1 for i in range(5)])

    seed = np.maximum(ms_seed * draws(PILOT_SEED_GRID, pilot_seeds - 1, 0) - comps.interaction, 0) / pilot_prompts
    prompt = np.maximum(ms_prompt * draws(PILOT_PROMPT_GRID, pilot_prompts - 1, 1) - comps.interaction,
                        0) / pilot_seeds  # (1, G_prompt, 1, 1, 1)
    cells = seeds * prompts
    inner = []
    for size, df, axis, expected in ((INNER_GRID[0], seeds - 1, 2, (seed * prompts + comps.interaction) / cells),
                                     (INNER_GRID[1], prompts - 1, 3, (prompt * seeds + comps.interaction) / cells),
                                     (INNER_GRID[2], (seeds - 1) * (prompts - 1), 4, comps.interaction / cells)):
        quantiles = stats.chi2.ppf((np.arange(size) + 0.5) / size, df) / df  # (size,)
        inner.append(expected * quantiles.reshape([-1 if i == axis else 1 for i in range(5)]))
    half = report_half_width(Parts(seeds, prompts, effect, *inner), alpha)  # (G_seed, G_prompt, 40, 8, 3)
    sd = np.sqrt(seed / seeds + prompt / prompts + comps.interaction / cells)  # (G_seed, G_prompt, 1, 1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        power = stats.norm.cdf((abs(effect) - half) / sd) + stats.norm.cdf((-abs(effect) - half) / sd)
    return float(np.mean(np.where(sd > 0, power, 1.0)))


def power_table(effect: float, comps: Components, pilot: tuple[int, int], prompts: int, alpha: float,
                seed_counts: tuple[int, ...] = TABLE_SEEDS) -> str:
    """"expected power at 100 prompts, over the pilot's uncertainty: 5 seeds 0.31, 10 0.55, 20 0.78, 40 0.90"."""
    shown = ", ".join(f"{seeds} seeds {expected_power(effect, comps, pilot, seeds, prompts, alpha):.2f}"
                      if i == 0 else f"{seeds} {expected_power(effect, comps, pilot, seeds, prompts, alpha):.2f}"
                      for i, seeds in enumerate(seed_counts))
    return f"expected power at {prompts} prompts, averaged over the pilot's uncertainty: {shown}"


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
    """What a plan's range from a pilot and its expected-power table mean, said under them."""
    return (f"a range a-b of seeds: a, the pilot's variance components taken as true; b, the seed and prompt "
            f"components at their one-sided {PILOT_CONFIDENCE:.0%} upper confidence limits from a pilot of "
            f"{pilot_seeds} seeds. Simulated from 3-seed pilots, a reaches the seeds the truth needs in 35-59 % of "
            f"them and b in at least 80 %, at a median 5-10 times those seeds (tests/test_report_plans.py): the "
            f"range is wide, and a larger pilot narrows it. The expected power at a few seed counts averages the "
            f"power over what the pilot leaves uncertain (the chance of detecting the effect, given the pilot): "
            f"choose the seeds whose chance you accept")
