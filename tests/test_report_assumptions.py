"""Where the task-level interval's assumptions fail, the report says so in every format, and each statistic does
what it claims by seeded simulation in process (small numbers of sweeps; the full grid is
benchmarks/report_grid.py): the report's test rejects a true null at most about 5 % of the time and covers the task,
is never less powerful than the conservative form and more powerful on near-deterministic prompts; the few-prompts
caveat marks the sweeps that under-cover; the outlying-seed flag finds a collapsed run and rarely marks normal
seeds; a plan from a 3-seed pilot reaches its power at the upper end of its range; non-finite inputs are refused."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from report_fakes import write_finished_run
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import UsageError
from mutualrl.evaluation.crossed import Components, components, half_width, informative_prompts, parts
from mutualrl.evaluation.crossed import report_half_width, variance_parts
from mutualrl.evaluation.crossed_caveats import FEW_INFORMATIVE, outlying_seeds
from mutualrl.evaluation.power import seeds_for_crossed, upper_components
from mutualrl.evaluation.report.build import build_report
from mutualrl.evaluation.report.formats import latex_text, render
from mutualrl.evaluation.seed_plan import plan_lines, stated_components

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from report_grid import SCENARIOS, draw  # noqa: E402

FORMATS = ("markdown", "csv", "latex", "json")


def sweep_of(root: Path, base: dict[int, list[int]], ours: dict[int, list[int]]) -> Path:
    """standalone and sgt runs of the given per-prompt scores (tiny-bpe), seed by seed."""
    for seed in base:
        write_finished_run(root / f"standalone-{seed}", "standalone", seed, {"tiny-bpe": base[seed]})
        write_finished_run(root / f"sgt-{seed}", "sgt", seed, {"tiny-bpe": ours[seed]})
    return root


def said_everywhere(root: Path, phrase: str) -> None:
    """``phrase`` is in every format's text and the terminal's, and the task row of sgt is marked with a letter."""
    report = build_report([root])
    row = next(r for r in report.rows if (r.group, r.task_group) == ("sgt", "all"))
    assert any(phrase in line for line in row.caveats), row.caveats
    for fmt in FORMATS:
        text = render(report, fmt) if fmt != "json" else " ".join(json.loads(render(report, fmt))["notes"])
        assert (latex_text(phrase) if fmt == "latex" else phrase) in " ".join(text.split()), fmt
    assert "tiny-bpe †" in render(report, "markdown")
    data = json.loads(render(report, "json"))
    assert any(phrase in line for r in data["rows"] if r["group"] == "sgt" and r["task_group"] == "all"
               for line in r["caveats"])
    # the terminal's notes are short by default (each caveat's cause once); --full-notes prints every line
    short = CliRunner().invoke(app, ["report", str(root)], env={"COLUMNS": "200"})
    assert short.exit_code == 0 and "†" in short.output and "--full-notes" in short.output, short.output
    table = CliRunner().invoke(app, ["report", str(root), "--full-notes"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and phrase in " ".join(table.output.split())
    narrow = CliRunner().invoke(app, ["report", str(root), "--full-notes"], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0 and "†" in narrow.output and phrase in " ".join(narrow.output.split())


def test_five_of_fifty_prompts_carrying_the_effect_caveat_the_task_row_in_every_format(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    fixed = [int(x) for x in rng.integers(0, 2, size=50)]
    base = {seed: list(fixed) for seed in (1, 2, 3)}
    ours = {seed: [1 if j < 5 and (j + seed) % 3 else v for j, v in enumerate(fixed)] for seed in (1, 2, 3)}
    for seed in ours:
        base[seed][0] = 0
    root = sweep_of(tmp_path / "sweep", base, ours)
    said_everywhere(root, "of 50 held-out prompts carry any variation in Δ against standalone")


def test_a_collapsed_seed_is_named_in_every_format(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    difficulty = rng.random(60)
    base = {seed: [int(d < 0.5 or rng.random() < 0.1) for d in difficulty] for seed in (1, 2, 3, 4)}
    ours = {seed: [int(d < 0.55 or rng.random() < 0.1) for d in difficulty] for seed in (1, 2, 3, 4)}
    ours[3] = [0] * 60  # seed 3's run collapsed: it solves nothing
    root = sweep_of(tmp_path / "sweep", base, ours)
    said_everywhere(root, "sgt, tiny-bpe: seed 3 scored 0 on every held-out prompt, where the other seeds' runs")
    report = build_report([root])
    row = next(r for r in report.rows if (r.group, r.task_group) == ("sgt", "all"))
    assert not any("lies far" in line for line in row.caveats)  # named once, by what it is
    baseline = next(r for r in report.rows if (r.group, r.task_group) == ("standalone", "all"))
    assert not any("seed 3" in line for line in baseline.caveats)  # only the run that collapsed
    ours[3] = [1] + [0] * 59  # a run that solves one prompt: not one value on every prompt, but far from the others
    near = sweep_of(tmp_path / "near", base, ours)
    said_everywhere(near, "of seed 3 (")
    row = next(r for r in build_report([near]).rows if (r.group, r.task_group) == ("sgt", "all"))
    assert any("lies far from the other seeds'" in line and "seed 3" in line for line in row.caveats)


def null_and_effect(name: str, seeds: int, prompts: int, repeats: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    effect, null = draw(rng, SCENARIOS[name], repeats, seeds, prompts), draw(rng, SCENARIOS[name], repeats, seeds,
                                                                           prompts, null=True)
    return effect.ours - effect.base, effect.task_delta, null.ours - null.base


@pytest.mark.parametrize(("name", "seeds", "prompts"), [("uniform", 3, 200), ("seed-dominated", 3, 200),
                                                         ("near-deterministic, small Δ", 5, 200),
                                                         ("uniform", 10, 50)])
def test_the_reports_test_holds_its_level_covers_and_is_at_least_as_powerful(name: str, seeds: int,
                                                                              prompts: int) -> None:
    """600 sweeps a cell: a null rejection above 0.05 + 2.5 SE (0.072) or a coverage under 0.93 fails."""
    diff, truth, null = null_and_effect(name, seeds, prompts, 600, seeds * prompts)
    found, null_found = parts(diff), parts(null)
    half, null_half = report_half_width(found), report_half_width(null_found)
    assert np.mean(np.abs(null_found.mean) > null_half) <= 0.072
    assert np.mean(np.abs(found.mean - truth) <= half) >= 0.93
    mean, v_seed, v_prompt = variance_parts(diff)
    conservative = half_width(v_seed, v_prompt, seeds, prompts)
    assert np.all(half <= conservative + 1e-12)  # never wider: never less power, sweep by sweep
    if name.startswith("near-deterministic"):
        gained = np.mean(np.abs(mean) > half) - np.mean(np.abs(mean) > conservative)
        assert gained > 0.05, gained


def test_at_two_seeds_the_conservative_form_is_kept() -> None:
    diff, _, _ = null_and_effect("uniform", 2, 50, 50, 1)
    mean, v_seed, v_prompt = variance_parts(diff)
    assert np.allclose(report_half_width(parts(diff)), half_width(v_seed, v_prompt, 2, 50))


def test_the_few_prompts_caveat_marks_the_case_that_under_covers() -> None:
    """The issue's case -- 90 % of 50 prompts always or never solved, the effect on 3 %, 10 seeds -- under-covers
    (every sweep of it has fewer than FEW_INFORMATIVE informative prompts, so every one is caveated), while at
    200 uniform prompts no sweep is."""
    diff, truth, _ = null_and_effect("few informative (90 % fixed, effect on 3 %)", 10, 50, 800, 9)
    found = parts(diff)
    assert np.mean(np.abs(found.mean - truth) <= report_half_width(found)) < 0.93
    assert np.all(informative_prompts(diff) < FEW_INFORMATIVE)
    uniform, _, _ = null_and_effect("uniform", 3, 200, 200, 2)
    assert np.all(informative_prompts(uniform) >= FEW_INFORMATIVE)


def test_informative_prompts_counts_those_off_the_most_common_mean() -> None:
    matrix = np.array([[0, 0, 1, 1, 0, 1.0], [0, 0, 1, 0, 0, 1.0]])  # per-prompt means 0, 0, 1, .5, 0, 1
    assert informative_prompts(matrix) == 3 and informative_prompts(np.stack([matrix, matrix * 0])).tolist() == [3, 0]


@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_a_collapsed_run_is_found_and_normal_seeds_rarely_flagged(seeds: int) -> None:
    rng = np.random.default_rng(seeds)
    normal = draw(rng, SCENARIOS["seed-dominated"], 400, seeds, 200)
    false_flags = np.mean(outlying_seeds(normal.ours - normal.base).any(axis=-1))
    assert false_flags <= 0.08, false_flags  # the grid's figure is at most ~0.04 (SE here 0.01)
    steady = draw(rng, SCENARIOS["near-deterministic"], 200, seeds, 200)
    ours = steady.ours.copy()
    ours[:, 1, :] = 0.0  # seed index 1 of every sweep collapsed: it solves nothing
    flagged = outlying_seeds(ours - steady.base)
    assert flagged[:, 1].mean() >= 0.9 and flagged[:, [0, 2]].mean() <= 0.02


@pytest.mark.slow
def test_a_plan_from_a_3_seed_pilot_reaches_its_power_at_the_top_of_its_range() -> None:
    """60 pilots of 3 seeds from a normal crossed model whose seed component leads (the hardest case: its upper
    limit rests on 2 df): the plan as observed reaches the seeds the truth needs in under 80 % of them (the
    issue's finding), the upper end of the range in at least 80 % (expected about 90 %, SE 0.04)."""
    comps, effect, prompts = Components(seed=0.004, prompt=0.0005, interaction=0.04), 0.05, 100
    need = seeds_for_crossed(effect, comps, prompts, 0.05)
    rng = np.random.default_rng(17)
    low = high = 0
    for _ in range(60):
        pilot = (rng.normal(0, math.sqrt(comps.seed), (3, 1)) + rng.normal(0, math.sqrt(comps.prompt), (1, prompts))
                 + rng.normal(0, math.sqrt(comps.interaction), (3, prompts)))
        found = components(pilot)
        low += seeds_for_crossed(effect, found, prompts, 0.05) >= need
        high += seeds_for_crossed(effect, upper_components(found, 3, prompts), prompts, 0.05) >= need
    assert low / 60 < 0.8 <= high / 60, (low, high)


@pytest.mark.parametrize("text", ["seed=inf", "seed=0.001,prompt=nan", "interaction=-inf"])
def test_non_finite_stated_variances_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match="each ≥ 0"):
        stated_components(text)


@pytest.mark.parametrize("effect", ["nan", "inf", "-0.1", "0"])
def test_a_non_finite_or_non_positive_min_effect_is_refused_in_one_line(tmp_path: Path, effect: str) -> None:
    root = sweep_of(tmp_path / "sweep", {1: [0, 1], 2: [1, 1]}, {1: [1, 1], 2: [1, 0]})
    with pytest.raises(UsageError, match="a finite number above 0"):
        plan_lines("seed=0.001", float(effect))
    for command in (["report", str(root), "--min-effect", effect],
                    ["sweep", "--plan-seeds", "seed=0.001", "--min-effect", effect]):
        done = CliRunner().invoke(app, command)
        assert done.exit_code != 0 and "a finite number above 0" in done.output, done.output
        assert len(done.output.strip().splitlines()) == 1


def test_an_interval_beyond_the_scores_range_is_said_unclipped(tmp_path: Path) -> None:
    root = sweep_of(tmp_path / "sweep", {1: [1, 1, 1, 0], 2: [1, 1, 1, 1], 3: [1, 1, 0, 1]},
                    {1: [1, 1, 1, 1], 2: [1, 1, 1, 1], 3: [1, 0, 1, 1]})
    report = build_report([root])
    assert any((row.mean_ci or (0, 0))[1] > 1 for row in report.rows)
    for fmt in FORMATS:
        assert "unclipped: these intervals reach beyond the scores' range [0, 1]" in render(report, fmt), fmt


def test_the_variance_analysis_form_by_hand() -> None:
    """A 3 × 5 matrix worked by hand: the mean squares, their floored sum and Satterthwaite's df; a seed mean
    square below MS_error keeps its s − 1 df (the estimate rests on it); the p inverts the interval."""
    from scipy import stats

    from mutualrl.evaluation.crossed import anova_variance, crossed_stats

    m = np.array([[1.0, 0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0, 1.0]])  # seeds alike
    s, p = m.shape
    grand, rows, cols = m.mean(), m.mean(axis=1), m.mean(axis=0)
    ms_seed = p * ((rows - grand) ** 2).sum() / (s - 1)  # 0: every seed's mean is 0.6
    ms_prompt = s * ((cols - grand) ** 2).sum() / (p - 1)
    residual = m - rows[:, None] - cols[None, :] + grand
    ms_error = (residual ** 2).sum() / ((s - 1) * (p - 1))
    assert ms_seed < ms_error < ms_prompt  # the seed component floors at 0 here
    seed_part, prompt_part, error_part = ms_error / (s * p), ms_prompt / (s * p), ms_error / (s * p)
    variance = seed_part + prompt_part - error_part  # = MS_prompt / (s·p)
    df = variance ** 2 / (seed_part ** 2 / (s - 1) + prompt_part ** 2 / (p - 1) + error_part ** 2 / ((s - 1) * (p - 1)))
    found_variance, found_df = anova_variance(ms_seed / (s * p), ms_prompt / (s * p), ms_error / (s * p), s, p)
    assert (float(found_variance), float(found_df)) == pytest.approx((variance, df))
    assert variance == pytest.approx(ms_prompt / (s * p)) and df < p - 1  # not the df of a known-0 seed part
    crossed = crossed_stats(m)
    anova_half = stats.t.isf(0.025, df) * math.sqrt(variance)
    conservative = half_width(ms_seed / (s * p), ms_prompt / (s * p), s, p)
    assert crossed.ci95[1] - crossed.mean == pytest.approx(min(anova_half, float(conservative)))
    assert float(report_half_width(parts(m), alpha=crossed.p)) == pytest.approx(abs(crossed.mean), rel=1e-6)


def test_a_pilots_plan_is_a_range_and_says_what_its_ends_mean(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    base = {seed: [int(x) for x in rng.integers(0, 2, size=40)] for seed in (1, 2, 3)}
    ours = {seed: [max(b, int(rng.random() < 0.2)) for b in base[seed]] for seed in (1, 2, 3)}
    root = sweep_of(tmp_path / "pilot", base, ours)
    lines = plan_lines(str(root), 0.1, prompts=[40, 400])
    assert "sgt vs standalone, tiny-bpe (pilot: 3 seeds × 40 prompts;" in lines[0]
    low, high = (int(x) for x in lines[0].split("): ")[-1].split(" seeds × 40")[0].split("-"))
    assert low < high  # 3 seeds: the upper confidence limits ask for more
    assert "90% upper confidence limits from a pilot of 3 seeds" in " ".join(lines)
    assert lines[1].startswith("  expected power at 40 prompts, averaged over the pilot's uncertainty: 5 seeds ")
    assert any(line.startswith("pilot caveat: sgt, tiny-bpe: only ") for line in lines)  # its few-prompts caveat
    stated = plan_lines("seed=0.0008,prompt=0.0015,interaction=0.04", 0.03, prompts=[150])
    assert "-" not in stated[0].split("): ")[-1] and "taking the stated variance components as true" in stated[-1]
