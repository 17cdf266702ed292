"""`mutualrl report`'s claims hold for the quantity they name, by seeded simulation with the report's own functions:
the crossed seeds × prompts interval covers the task (new seeds and new prompts) at 3, 5 and 10 seeds, on
near-deterministic prompts too, and the t over seeds covers these prompts; the crossed p is the test its interval
inverts; the seeds-for-power plan agrees with a simulation of the table's own test with Holm's adjustment; and the
caveats say what the runs did (shares with their digits, runs that used none), in every format, LaTeX-safe."""

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
from mutualrl.evaluation.crossed import Components, crossed_stats, parts, report_half_width, variance_parts
from mutualrl.evaluation.power import crossed_power, seeds_for_crossed
from mutualrl.evaluation.report.build import build_report
from mutualrl.evaluation.report.caveats import share_text
from mutualrl.evaluation.report.formats import render

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from report_coverage import SCENARIOS, draw, seed_t_covers  # noqa: E402

#: Repeats per scenario and number of seeds: at a true coverage of 0.95 the Monte-Carlo SE is 0.005, so 0.93 is
#: 4 SE below; each assertion's figure is in benchmarks/results/report-coverage.md.
REPEATS = 2000


@pytest.mark.slow  # over 2 s: outside the fast tier
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_crossed_interval_covers_the_task_and_the_t_these_prompts(scenario: str) -> None:
    """At 3, 5 and 10 seeds (100 prompts; 200 uniform) the crossed 95 % interval holds the task's Δ and mean at
    least 93 % of the time, and the t over seeds (where it is given: some spread) holds these prompts' Δ and mean;
    the t interval of the mean does not hold the task on near-deterministic prompts (why a row says its claim)."""
    prompts = 200 if scenario == "uniform" else 100
    for seeds in (3, 5, 10):
        d = draw(np.random.default_rng(1000 + seeds), scenario, REPEATS, seeds, prompts)
        diff = d.ours - d.base
        for matrix, truth in ((diff, d.task_delta), (d.ours, d.task_mean)):
            found = parts(matrix)
            covered = np.mean(np.abs(found.mean - truth) <= report_half_width(found))
            assert covered >= 0.93, (scenario, seeds, covered)
        for matrix, fixed in ((diff, d.fixed_delta), (d.ours, d.fixed_mean)):
            hits, given = seed_t_covers(matrix, fixed)
            assert hits[given].mean() >= 0.93 and given.mean() > 0.85, (scenario, seeds, hits[given].mean())
        if scenario.startswith("near-deterministic") and seeds == 10:
            assert seed_t_covers(d.ours, d.task_mean)[0].mean() < 0.5


def test_the_stacked_and_the_single_matrix_computations_agree() -> None:
    """The simulation's stacked (vectorised) parts are the report's own for one matrix at a time."""
    stack = np.random.default_rng(5).integers(0, 2, size=(4, 3, 7)).astype(float)
    mean, v_seed, v_prompt = variance_parts(stack)
    for i, matrix in enumerate(stack):
        crossed = crossed_stats(matrix)
        assert (crossed.mean, crossed.v_seed, crossed.v_prompt) == pytest.approx((mean[i], v_seed[i], v_prompt[i]))


def test_the_crossed_p_is_the_level_at_which_its_interval_reaches_zero() -> None:
    """p < 0.05 exactly when the 95 % interval excludes 0, and at level p the interval's edge is 0."""
    rng = np.random.default_rng(11)
    for _ in range(80):
        matrix = rng.normal(0.1, 0.5, size=(int(rng.integers(2, 8)), int(rng.integers(3, 40))))
        crossed = crossed_stats(matrix)
        low, high = crossed.ci95
        assert (crossed.p < 0.05) == (low > 0 or high < 0)
        edge = report_half_width(parts(matrix), alpha=crossed.p)
        assert float(edge) == pytest.approx(abs(crossed.mean), rel=1e-6)
    flat = crossed_stats(np.zeros((3, 5)))
    assert flat.ci95 is None and flat.p is None  # every cell the same: nothing to measure


def holm_rejects(ours: np.ndarray, other: np.ndarray, alpha: float) -> np.ndarray:
    """Holm over two comparisons, from the crossed intervals: ours is rejected when its p < α/2, or when the
    other's p < α/2 and ours < α ("p < a" is "|mean| > the half-width at level a")."""
    def below(matrix: np.ndarray, level: float) -> np.ndarray:
        found = parts(matrix)
        return np.abs(found.mean) > report_half_width(found, alpha=level)

    return below(ours, alpha / 2) | (below(other, alpha / 2) & below(ours, alpha))


@pytest.mark.slow
def test_the_plan_agrees_with_a_simulation_of_the_tables_own_test() -> None:
    """Normal crossed data with known components: at the planned seeds the table's test (Holm over 2 headline
    comparisons, the other one null) rejects 80 % of the time within Monte-Carlo error, one seed fewer does not
    reach it, and the predicted power at each seed count matches the simulated raw-p < α/2 rate."""
    comps, effect, prompts, repeats = Components(seed=0.0008, prompt=0.0015, interaction=0.04), 0.03, 150, 3000
    need = seeds_for_crossed(effect, comps, prompts, 0.025)
    assert 4 <= need <= 40
    rng = np.random.default_rng(21)

    def sweeps(seeds: int, mean: float) -> np.ndarray:
        return (mean + rng.normal(0, math.sqrt(comps.seed), (repeats, seeds, 1))
                + rng.normal(0, math.sqrt(comps.prompt), (repeats, 1, prompts))
                + rng.normal(0, math.sqrt(comps.interaction), (repeats, seeds, prompts)))

    for seeds in (need - 1, need):
        ours, null = sweeps(seeds, effect), sweeps(seeds, 0.0)
        found = parts(ours)
        raw = np.mean(np.abs(found.mean) > report_half_width(found, alpha=0.025))
        predicted = crossed_power(effect, comps, seeds, prompts, 0.025)
        assert raw == pytest.approx(predicted, abs=0.025)  # 3 000 sweeps: SE 0.0075
        holm = holm_rejects(ours, null, 0.05).mean()
        assert holm >= raw - 1e-12  # Holm at least as powerful as its first threshold
        if seeds == need:
            assert holm >= 0.8 - 0.025
        else:
            assert predicted < 0.8 and raw < 0.8 + 0.025


def test_shares_keep_their_digits_below_the_mark() -> None:
    assert share_text(0.0979) == "9.8%" and share_text(0.09996) == "9.996%"  # never "10%" under a "< 10%" mark
    assert share_text(0.0010) == "0.10%" and share_text(0.0004) == "0.04%" and share_text(0.00004) == "0.004%"
    assert share_text(0.0) == "0%" and share_text(0.25) == "25.0%"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """standalone and hacpo × 5 seeds on 8 prompts; hacpo's tiny-bpe used 0.10 % of its peers' samples on average,
    none in seeds 1, 3 and 4 (which still differ from standalone's runs of those seeds)."""
    root = tmp_path_factory.mktemp("crossed") / "sweep"
    rng = np.random.default_rng(4)
    shares = {1: 0.0, 2: 0.003, 3: 0.0, 4: 0.0, 5: 0.002}
    for seed in range(1, 6):
        base = [int(x) for x in rng.integers(0, 2, size=8)]
        ours = [max(b, int(x)) for b, x in zip(base, rng.integers(0, 2, size=8), strict=True)]
        write_finished_run(root / f"standalone-seed{seed}", "standalone", seed, {"tiny-bpe": base})
        run = write_finished_run(root / f"hacpo-seed{seed}", "hacpo", seed, {"tiny-bpe": ours})
        summary = {"pool": "tiny", "regime": "hacpo", "seed": seed,
                   "policies": {"tiny-bpe": {"peer_samples_used": shares[seed]}}}
        (run / "summary.json").write_text(json.dumps(summary))
    return root


def test_a_share_used_by_few_runs_says_what_the_runs_that_used_none_did(sweep: Path) -> None:
    report = build_report([sweep])
    row = next(r for r in report.rows if (r.group, r.task_group) == ("hacpo", "all"))
    line = row.caveats[0]
    assert line.startswith("hacpo, tiny-bpe: used 0.10% of its peers' samples (mean over 5 runs; marked below 10%); "
                           "3 of 5 runs (seeds 1, 3, 4) used none: in those no peer sample moved the gradient, but "
                           "hacpo still ran and exchanged samples with its peers, so they are not standalone GRPO runs")
    differences = dict(zip(row.vs_baseline.seeds, row.vs_baseline.differences, strict=True))
    assert line.endswith(f"differs from standalone's run of the same seed by "
                         f"{', '.join(f'{differences[s]:+.3f}' for s in (1, 3, 4))})")
    assert "trained as standalone" not in render(report, "markdown")


@pytest.mark.slow
def test_min_effect_gives_the_plan_in_every_format_and_latex_stays_ascii(sweep: Path) -> None:
    report = build_report([sweep], min_effect=0.05)
    row = next(r for r in report.rows if (r.group, r.task_group) == ("hacpo", "all"))
    assert row.claim == "task" and row.seeds_needed == seeds_for_crossed(
        0.05, row.task_delta.components, row.task_delta.prompts, 0.05)  # one headline comparison: α/1
    markdown = render(report, "markdown")
    assert "seeds for 80% power, ±0.05" in markdown
    assert "- plan: hacpo vs standalone, tiny-bpe: to detect ±0.05" in markdown
    data = json.loads(render(report, "json"))
    tested = next(r for r in data["rows"] if r["group"] == "hacpo" and r["task_group"] == "all")["test"]
    assert tested["seeds_needed"] == row.seeds_needed and tested["holm_family"] == "headline"
    assert "# plan: hacpo vs standalone, tiny-bpe" in render(report, "csv")
    latex = render(report, "latex")
    assert latex.isascii() and r"$\pm$0.05" in latex
    huge = build_report([sweep], min_effect=0.0001)
    assert "$>$ 1000" in render(huge, "latex") and "> 1000" in render(huge, "markdown")


def test_sweep_plans_seeds_from_a_pilot_or_stated_variances(sweep: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(app, ["sweep", "--plan-seeds", str(sweep), "--min-effect", "0.1", "--plan-prompts", "8,80"])
    assert done.exit_code == 0, done.output
    flat = " ".join(done.output.split())
    assert "hacpo vs standalone, tiny-bpe (pilot: 5 seeds × 8 prompts;" in flat
    assert "to detect ±0.1 with 80% power (two-sided α = 0.05):" in flat and "× 80" in flat
    stated = runner.invoke(app, ["sweep", "--plan-seeds", "seed=0.0008,prompt=0.0015,interaction=0.04",
                                 "--min-effect", "0.03", "--plan-prompts", "150", "--plan-comparisons", "2"])
    need = seeds_for_crossed(0.03, Components(0.0008, 0.0015, 0.04), 150, 0.025)
    assert stated.exit_code == 0 and f"{need} seeds × 150 prompts" in stated.output
    bad = runner.invoke(app, ["sweep", "--plan-seeds", "seed=x", "--min-effect", "0.03"])
    assert bad.exit_code != 0 and "seed=V,prompt=V,interaction=V" in bad.output
    alone = runner.invoke(app, ["sweep", "--plan-seeds", str(sweep)])
    assert alone.exit_code != 0 and "--plan-seeds and --min-effect go together" in alone.output
