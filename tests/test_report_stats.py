"""`mutualrl report`'s seed-level statistics: the stated 95 % covers at n = 3 (a seeded simulation on normal data),
the sign-flip p and Holm's adjustment recomputed by hand, P(improve) on the pairs of Δ, the power search against
published sample sizes."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest

from mutualrl.evaluation.report_stats import (
    cell_stats,
    holm,
    paired_improvement,
    paired_stats,
    seeds_for_power,
    sign_flip_p,
    t_interval,
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


def sign_flip_by_hand(differences: list[float]) -> float:
    """Every sign pattern written out: the share whose mean is at least as far from 0 as the observed one."""
    observed = abs(statistics.fmean(differences))
    patterns = list(itertools.product((1, -1), repeat=len(differences)))
    extreme = sum(abs(statistics.fmean(s * d for s, d in zip(signs, differences, strict=True))) >= observed - 1e-12
                  for signs in patterns)
    return extreme / len(patterns)


def test_the_sign_flip_p_is_every_sign_pattern_counted_by_hand() -> None:
    # 4 pairs: +0.3, +0.1, -0.05, +0.2 -> mean 0.1375; of the 16 patterns, those with |mean| >= 0.1375 are the
    # observed one, its mirror, and the two that flip only -0.05 (mean 0.1625) -> 4/16
    assert sign_flip_p([0.3, 0.1, -0.05, 0.2]) == pytest.approx(4 / 16)
    assert sign_flip_by_hand([0.3, 0.1, -0.05, 0.2]) == pytest.approx(4 / 16)
    assert sign_flip_p([0.1, 0.2, 0.3]) == pytest.approx(0.25)  # the smallest three seeds allow
    assert sign_flip_p([0.0, 0.0]) == 1.0 and sign_flip_p([]) is None
    rng = np.random.default_rng(3)
    for n in (2, 5, 7):
        d = list(rng.normal(0.02, 0.05, size=n))
        assert sign_flip_p(d) == pytest.approx(sign_flip_by_hand(d))


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


def test_seeds_for_power_matches_published_paired_t_sample_sizes() -> None:
    """Cohen's d of the per-seed differences 0.5, 0.8, 1.0 need 34, 15 and 10 pairs for 80 % power at
    two-sided α = 0.05 (G*Power's matched-pairs t test)."""
    unit = np.array([-1.0, 1.0]) / np.std([-1.0, 1.0], ddof=1)  # SD 1
    for d, n in ((0.5, 34), (0.8, 15), (1.0, 10)):
        assert seeds_for_power(list(unit + d)) == n
    assert seeds_for_power([0.1, 0.1, 0.1]) is None  # no spread: not computable, said as n/a
    assert seeds_for_power([0.1]) is None
    assert seeds_for_power(list(unit + 0.01)) == 1001  # more than the search goes: "> 1000"
