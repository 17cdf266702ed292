"""`mutualrl report`'s seed-level statistics: the stated 95 % covers at n = 3 (a seeded simulation on normal data),
the paired t test's p against scipy's and its interval (one test: p < 0.05 exactly when the interval excludes 0),
no interval from no spread, Holm's adjustment by hand, P(improve) on the pairs of Δ, the power search against
published sample sizes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from mutualrl.evaluation.power import MAX_SEEDS, seeds_for_t, t_power
from mutualrl.evaluation.report.stats import (
    cell_stats,
    holm,
    paired_improvement,
    paired_stats,
    t_interval,
    t_test_p,
)


def test_the_stated_95_percent_covers_at_three_seeds_on_normal_data() -> None:
    """4 000 samples of 3 runs from N(0.4, 0.1²): the t interval of the mean covers 0.4 at least 93 % of the time
    (a percentile bootstrap over 3 runs is their [min, max], which covers 1 − 2 · 2⁻³ = 75 %)."""
    rng = np.random.default_rng(66)
    samples = rng.normal(0.4, 0.1, size=(4000, 3))
    covered = [low <= 0.4 <= high for low, high in (t_interval(list(sample)) for sample in samples)]
    assert np.mean(covered) >= 0.93
    ranges = np.mean((samples.min(axis=1) <= 0.4) & (0.4 <= samples.max(axis=1)))
    assert ranges == pytest.approx(0.75, abs=0.03)  # what the old [min, max] "95 %" interval covered


def test_the_paired_difference_interval_covers_at_three_seeds() -> None:
    """1 500 sweeps of 3 seeds: a seed effect shared by both arms (the pairing), a true Δ of 0.05; the paired
    t interval of Δ covers 0.05 at least 93 % of the time, and so does the cell interval of each arm's mean."""
    rng = np.random.default_rng(67)
    hits, cell_hits = 0, 0
    for _ in range(1500):
        seed_effect = rng.normal(0, 0.1, size=3)
        base = 0.4 + seed_effect + rng.normal(0, 0.03, size=3)
        ours = 0.45 + seed_effect + rng.normal(0, 0.03, size=3)
        paired = paired_stats(dict(enumerate(ours)), dict(enumerate(base)))
        hits += paired.ci95[0] <= 0.05 <= paired.ci95[1]
        low, high = cell_stats(list(ours)).ci95
        cell_hits += low <= 0.45 <= high
    assert hits / 1500 >= 0.93 and cell_hits / 1500 >= 0.93


def test_the_p_is_the_paired_t_test_of_the_interval_beside_it() -> None:
    """scipy's one-sample t test on the differences gives the same p; over many draws the 95 % interval excludes 0
    exactly when p < 0.05 (one test, one verdict), and 3 positive differences can reach p < 0.05 (no 2/2ⁿ
    floor)."""
    rng = np.random.default_rng(3)
    for n in (2, 3, 5, 10):
        for _ in range(50):
            d = list(rng.normal(0.03, 0.05, size=n))
            p = t_test_p(d)
            assert p == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue, rel=1e-9)
            low, high = t_interval(d)
            assert (p < 0.05) == (low > 0 or high < 0)
    assert t_test_p([0.10, 0.11, 0.12]) < 0.01  # a sign-flip p over 3 seeds could not go below 0.25
    assert t_test_p([0.1, 0.1, 0.1]) is None and t_test_p([0.2]) is None  # no spread, one pair: no test


def test_no_interval_or_p_from_no_spread() -> None:
    """Every seed the same value: a t interval would be that point, which misses whenever a further seed differs
    (on near-deterministic prompts, the common case); none is given, and a note says why."""
    cell = cell_stats([0.5, 0.5, 0.5])
    assert cell.ci95 is None and cell.sd == 0 and "SD 0" in cell.note
    paired = paired_stats({1: 0.6, 2: 0.7}, {1: 0.5, 2: 0.6})
    assert paired.mean_difference == pytest.approx(0.1) and paired.ci95 is None and paired.p is None
    assert paired.sd is None and "SD 0" in paired.note


def test_p_improve_is_on_the_pairs_of_delta_and_never_disagrees_with_its_sign() -> None:
    """Unpaired, a group whose seeds each lose a little to their own baseline seed could still "beat" most
    baseline runs; on the pairs it cannot."""
    ours, base = {1: 0.50, 2: 0.70, 3: 0.90}, {1: 0.52, 2: 0.71, 3: 0.40}
    paired = paired_stats(ours, base)
    assert paired.differences == pytest.approx([-0.02, -0.01, 0.50])
    assert paired.probability_of_improvement == pytest.approx(1 / 3)
    assert paired_improvement([0.1, 0.0, -0.1, 0.2]) == pytest.approx((1 + 0.5 + 0 + 1) / 4)


def test_holm_adjusts_by_hand() -> None:
    # sorted 0.01, 0.02, 0.04, 0.30 of m = 4: 0.04, 0.06, 0.08, 0.30 (already non-decreasing)
    assert holm([0.30, 0.01, 0.04, 0.02]) == pytest.approx([0.30, 0.04, 0.08, 0.06])
    # the running maximum: 0.01 x 3 = 0.03, then 0.011 x 2 = 0.022 is raised to 0.03; capped at 1
    assert holm([0.011, 0.01, 0.9]) == pytest.approx([0.03, 0.03, 0.9])
    assert holm([0.25] * 12) == [1.0] * 12


def test_seeds_for_a_stated_effect_match_published_paired_t_sample_sizes() -> None:
    """Cohen's d of the per-seed differences 0.5, 0.8, 1.0 need 34, 15 and 10 pairs for 80 % power at
    two-sided α = 0.05 (G*Power's matched-pairs t test); at Holm's first threshold over 4 comparisons
    (α = 0.0125) more. The effect is the one stated, not the one observed."""
    for d, n in ((0.5, 34), (0.8, 15), (1.0, 10)):
        assert seeds_for_t(d, 1.0, 0.05) == n
        assert t_power(d, 1.0, n, 0.05) >= 0.8 > t_power(d, 1.0, n - 1, 0.05)
    holm_level = seeds_for_t(0.8, 1.0, 0.0125)
    assert holm_level > 15 and t_power(0.8, 1.0, holm_level, 0.0125) >= 0.8 > t_power(0.8, 1.0, holm_level - 1, 0.0125)
    assert seeds_for_t(0.05, None, 0.05) is None and seeds_for_t(0.0, 1.0, 0.05) is None  # n/a
    assert seeds_for_t(0.01, 1.0, 0.05) == MAX_SEEDS + 1  # more than the search goes: "> 1000"
