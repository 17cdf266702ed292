"""Where the task-level interval's assumptions fail at the edges, by seeded simulation in process with the report's
own functions: a failed run is named by what it is (one value, or its step-0 scores, on every prompt) at any number
of prompts, and normal runs are not; a 0-1 reward's mean near 0 or 1 is covered on the logit scale wherever 20
prompts or more carry variation (and the few-prompts caveat marks the rest); a collapse that no seed of a sweep
showed is not covered, and the notes say so in every format.

The generator is this file's own (probit, like a verifier's 0/1 reward of one greedy completion per prompt: prompt
``j`` solved by seed ``i`` when ``θ_j + u_i + ε_ij > 0``; a share of the prompts never (or always) solved)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from report_fakes import write_finished_run
from scipy import stats

from mutualrl.evaluation.crossed import informative_prompts, logit_interval, parts, report_half_width
from mutualrl.evaluation.crossed_caveats import FEW_INFORMATIVE, failed_runs
from mutualrl.evaluation.report.build import build_report
from mutualrl.evaluation.report.formats import latex_text, render
from mutualrl.evaluation.report.notes import CONDITION

#: θ of a never-solved prompt (its negative: always solved).
EXTREME = 4.0


def sweeps(rng: np.random.Generator, repeats: int, seeds: int, prompts: int, fixed: float, mu: float,
           seed_sd: float, sign: float = -1.0) -> tuple[np.ndarray, float]:
    """``repeats`` sweeps' 0/1 scores (repeats, seeds, prompts): a share ``fixed`` of the prompts at θ = sign × 4,
    the rest θ ~ N(mu, 1); seed skill N(0, seed_sd²); and the task's expected reward@1 (closed form)."""
    kind = rng.random((repeats, prompts))
    theta = np.where(kind < fixed, sign * EXTREME, rng.normal(mu, 1.0, (repeats, prompts)))  # (repeats, prompts)
    skill = rng.normal(0, seed_sd, (repeats, seeds, 1))  # (repeats, seeds, 1)
    scores = (theta[:, None, :] + skill + rng.normal(size=(repeats, seeds, prompts)) > 0).astype(float)
    truth = (fixed * stats.norm.cdf(sign * EXTREME / np.sqrt(1 + seed_sd ** 2))
             + (1 - fixed) * stats.norm.cdf(mu / np.sqrt(2 + seed_sd ** 2)))
    return scores, float(truth)


def by_seed(matrix: np.ndarray) -> dict[int, dict[str, float]]:
    """A (seeds × prompts) matrix as the report reads runs: ``seed -> prompt id -> score``."""
    return {seed: {f"p{j}": float(score) for j, score in enumerate(row)} for seed, row in enumerate(matrix)}


@pytest.mark.parametrize(("seeds", "prompts", "value"), [(3, 100, 0.0), (3, 20, 0.0), (5, 100, 1.0), (2, 100, 0.0)])
def test_a_run_at_0_or_1_on_every_prompt_is_named_and_normal_runs_are_not(seeds: int, prompts: int,
                                                                        value: float) -> None:
    """200 sweeps of a near-deterministic task (42 % of prompts always solved, 43 % never, as in the real runs):
    seed 0's run set to ``value`` on every prompt is named in every sweep (the issue asks ≥ 95 % at 3 × 100), and
    no normal seed of any sweep is."""
    rng = np.random.default_rng(seeds * prompts + int(value))
    kind = rng.random((200, prompts))
    theta = np.where(kind < 0.42, EXTREME, np.where(kind < 0.85, -EXTREME, rng.normal(0, 1, (200, prompts))))
    scores = (theta[:, None, :] + rng.normal(0, 0.3, (200, seeds, 1)) + rng.normal(size=(200, seeds, prompts))
              > 0).astype(float)  # (200, seeds, prompts)
    scores[:, 0, :] = value
    named = [failed_runs(by_seed(matrix)) for matrix in scores]
    assert np.mean([0 in found for found in named]) >= 0.95
    assert all(found.get(0) == f"scored {value:g} on every held-out prompt" for found in named)
    assert not any(set(found) - {0} for found in named)


def test_a_run_at_its_step_0_scores_is_named_when_the_others_moved() -> None:
    rng = np.random.default_rng(4)
    start = (rng.random((3, 60)) < 0.3).astype(float)  # (seeds, prompts): the untrained model, seed by seed
    final = np.maximum(start, (rng.random((3, 60)) < 0.3).astype(float))  # (seeds, prompts): each learned some
    final[1] = start[1]  # seed 1's run never moved
    named = failed_runs(by_seed(final), by_seed(start))
    assert named == {1: "scored its step-0 score on every held-out prompt (did it train?)"}
    assert failed_runs(by_seed(start), by_seed(start)) == {}  # none moved: nothing stands out


def test_a_hard_task_with_few_solved_prompts_names_no_normal_run() -> None:
    """97 % of 20 prompts never solved: a normal seed at 0 on every prompt is what the others make likely."""
    scores, _ = sweeps(np.random.default_rng(6), 300, 3, 20, fixed=0.97, mu=-1.0, seed_sd=0.3)
    assert np.mean([bool(failed_runs(by_seed(matrix))) for matrix in scores]) <= 0.02


#: Cells (fixed share, mu, seed SD, sign, seeds, prompts) near a bound, with the gain over the symmetric interval
#: asserted (negative: no loss beyond it): an easy task (mean 0.94) and hard ones (0.30, 0.04, 0.14); the seed SD
#: large, which skews the seeds' means.
BOUNDARY_CELLS = [((0.0, 2.5, 0.8, 1.0, 3, 500), 0.03), ((0.0, -1.0, 1.2, -1.0, 3, 500), 0.03),
                  ((0.8, -1.5, 0.8, -1.0, 3, 500), 0.0), ((0.0, -2.0, 1.2, -1.0, 3, 100), -0.01)]


@pytest.mark.parametrize(("cell", "gain"), BOUNDARY_CELLS)
def test_a_mean_near_0_or_1_is_covered_on_the_logit_scale(cell: tuple[float, ...], gain: float) -> None:
    """1 000 sweeps a cell (SE 0.007 at 0.95): among the sweeps the few-prompts caveat leaves unmarked the report's
    interval of a 0-1 mean (logit scale) covers the task at least 0.94 of the time (0.96-0.99 here), where the
    symmetric one covered 0.92 at 500 prompts."""
    fixed, mu, seed_sd, sign, seeds, prompts = cell
    scores, truth = sweeps(np.random.default_rng([int(seeds), int(prompts), int(10 * seed_sd)]), 1000, int(seeds),
                           int(prompts), fixed, mu, seed_sd, sign)
    found = parts(scores)
    half, mean = report_half_width(found), found.mean  # (1000,), (1000,)
    bounds = np.array([logit_interval(float(m), float(h)) for m, h in zip(mean, half, strict=True)])  # (1000, 2)
    covered = (bounds[:, 0] <= truth) & (truth <= bounds[:, 1])
    unmarked = informative_prompts(scores) >= FEW_INFORMATIVE
    assert unmarked.mean() > 0.5
    assert covered[unmarked].mean() >= 0.94, (cell, covered[unmarked].mean())
    assert covered[unmarked].mean() - np.mean(np.abs(mean - truth)[unmarked] <= half[unmarked]) >= gain
    assert np.all((bounds >= 0) & (bounds <= 1))  # inside the reward's range, unlike the symmetric one


def test_few_solved_prompts_are_marked_where_even_the_logit_interval_under_covers() -> None:
    """97 % of 100 prompts never solved, 5 seeds: coverage about 0.8 on either scale, and every sweep has under
    FEW_INFORMATIVE prompts carrying variation, so every one is caveated."""
    scores, truth = sweeps(np.random.default_rng(11), 1000, 5, 100, fixed=0.97, mu=-1.0, seed_sd=0.8)
    found = parts(scores)
    half = report_half_width(found)
    bounds = np.array([logit_interval(float(m), float(h)) for m, h in zip(found.mean, half, strict=True)])
    assert np.mean((bounds[:, 0] <= truth) & (truth <= bounds[:, 1])) < 0.9
    assert np.mean(informative_prompts(scores) < FEW_INFORMATIVE) >= 0.99


def test_a_collapse_no_seed_showed_is_not_covered_and_the_notes_say_so(tmp_path: Path) -> None:
    """A method whose runs collapse (to 0 on every prompt) 1 time in 10: among 5-seed sweeps that drew no collapse
    (nothing to name) the interval of Δ covers the task's Δ, which includes the collapses, well under 0.95; the
    condition is said under every format's table."""
    rng = np.random.default_rng(12)
    base, base_truth = sweeps(rng, 800, 5, 500, fixed=0.0, mu=0.5, seed_sd=0.1, sign=1.0)
    ours, ours_truth = sweeps(rng, 800, 5, 500, fixed=0.0, mu=0.7, seed_sd=0.1, sign=1.0)
    collapsed = rng.random((800, 5)) < 0.1  # (sweeps, seeds)
    ours[collapsed] = 0.0
    truth = 0.9 * ours_truth - base_truth
    diff = ours - base
    found = parts(diff)
    covered = np.abs(found.mean - truth) <= report_half_width(found)
    unseen = ~collapsed.any(axis=1)
    assert 0.5 < unseen.mean() < 0.75 and covered[unseen].mean() < 0.6  # 0.57 of the sweeps; 0.38 of them covered
    for seed in (1, 2, 3, 4, 5):
        write_finished_run(tmp_path / f"standalone-{seed}", "standalone", seed, {"tiny-bpe": list(base[0, seed - 1])})
        write_finished_run(tmp_path / f"sgt-{seed}", "sgt", seed, {"tiny-bpe": list(ours[0, seed - 1])})
    report = build_report([tmp_path])
    for fmt in ("markdown", "csv", "latex"):
        assert (latex_text(CONDITION) if fmt == "latex" else CONDITION) in " ".join(render(report, fmt).split()), fmt
    assert CONDITION in json.loads(render(report, "json"))["notes"]


def test_a_seed_that_scored_fewer_prompts_is_said_and_one_pair_gives_no_share(tmp_path: Path) -> None:
    """A seed that scored 45 of 50 prompts: the row says its mean and its task interval are over other prompt sets;
    a regime with one seed gets no P(improve) (one pair is no share); the first N prompts are said to be no random
    draw."""
    rng = np.random.default_rng(21)
    for seed in (1, 2, 3):
        base, ours = (list((rng.random(50) < 0.5).astype(float)) for _ in range(2))
        write_finished_run(tmp_path / "sweep" / f"standalone-{seed}", "standalone", seed,
                           {"tiny-bpe": base if seed != 2 else base[:45]}, validation__limit=50)
        write_finished_run(tmp_path / "sweep" / f"sgt-{seed}", "sgt", seed, {"tiny-bpe": ours}, validation__limit=50)
    write_finished_run(tmp_path / "sweep" / "xgrpo-1", "xgrpo", 1, {"tiny-bpe": [1.0] * 50}, validation__limit=50)
    report = build_report([tmp_path / "sweep"])
    baseline = next(row for row in report.rows if (row.group, row.task_group) == ("standalone", "all"))
    assert any("45-50 prompts, 45 in common" in line for line in baseline.caveats), baseline.caveats
    assert baseline.task_mean.prompts == 45
    one = next(row for row in report.rows if (row.group, row.task_group) == ("xgrpo", "all"))
    assert one.vs_baseline.differences and one.vs_baseline.probability_of_improvement is None
    sgt = next(row for row in report.rows if (row.group, row.task_group) == ("sgt", "all"))
    assert sgt.vs_baseline.seeds == [1, 3]  # seed 2's pair scored other prompts: not paired over seeds
    assert sgt.task_delta.seeds == 3 and sgt.task_delta.prompts == 45  # over the prompts all scored
    text = " ".join(render(report, "markdown").split())
    assert "the held-out prompts are the split's first 50 (validation.limit), not a random draw" in text


def test_twenty_prompts_that_all_vary_count_twenty_and_carry_no_caveat() -> None:
    """The count of prompts carrying variation reaches p: 20 prompts of 3 seeds that all vary are all informative
    (the caveat's threshold), while a prompt every seed scored alike at the most common value counts out."""
    rng = np.random.default_rng(30)
    matrix = (rng.random((3, 20)) < 0.5).astype(float)  # (seeds, prompts)
    matrix[0] = 1 - matrix[1]  # every prompt scored 0 by one seed and 1 by another
    assert informative_prompts(matrix) == FEW_INFORMATIVE == 20
    matrix[:, :3] = 0.0  # three prompts every seed scored 0
    assert informative_prompts(matrix) == 17
