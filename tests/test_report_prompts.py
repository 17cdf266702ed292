"""`mutualrl report` beyond one number per run: the seeds × prompts (crossed) Δ and mean recomputed by hand from
the eval JSONs, the caveats of summary.json where the numbers are read (a letter per cause, in every format), the
natural baseline of each `--by` group, a misspelt `--by` refused, 80 columns."""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from report_fakes import write_finished_run
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import UsageError
from mutualrl.evaluation.grouped_plot import caption
from mutualrl.evaluation.prompt_paired import difference_matrix
from mutualrl.evaluation.report.build import build_report
from mutualrl.evaluation.report.caveats import STATISTICAL, cause_of
from mutualrl.evaluation.report.formats import render

#: Per regime and seed, tiny-bpe's scores on the same 6 held-out prompts (tiny-sp: the opposite).
SCORES = {"standalone": {1: [1, 0, 0, 0, 1, 0], 2: [1, 1, 0, 0, 0, 0], 3: [0, 0, 1, 0, 1, 0]},
          "hacpo": {1: [1, 1, 0, 0, 1, 0], 2: [1, 1, 1, 0, 0, 0], 3: [0, 1, 1, 0, 1, 1]}}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by the tests that only read it: hacpo used no peer sample for tiny-bpe; seed 2's tiny-sp restarted
    from its start."""
    root = tmp_path_factory.mktemp("prompts") / "sweep"
    for regime, by_seed in SCORES.items():
        for seed, scores in by_seed.items():
            run = write_finished_run(root / f"{regime}-seed{seed}", regime, seed,
                                     {"tiny-bpe": scores, "tiny-sp": [1 - s for s in scores]})
            if regime == "hacpo":
                write_summary(run, seed)
    return root


def write_summary(run: Path, seed: int) -> None:
    policies = {"tiny-bpe": {"peer_samples_used": 0.0, "steps_with_peer_figures": 3,
                             "steps_without_peer_samples": 3},
                "tiny-sp": {"peer_samples_used": 0.4, "steps_with_peer_figures": 3, "steps_without_peer_samples": 0}}
    summary = {"pool": "tiny", "regime": "hacpo", "seed": seed, "policies": policies,
               "warnings": ["hacpo used 0% of peer samples for tiny-bpe (none in 3 of 3 steps): it trained as "
                            "standalone"]}
    if seed == 2:
        summary["restarted"] = {"tiny-sp": [{"step": 2, "reason": "killed", "resumed_from": None}]}
    (run / "summary.json").write_text(json.dumps(summary))


def crossed_by_hand(matrix: np.ndarray) -> tuple[float, float, float]:
    """Mean and 95 % crossed interval written out: the variance of the per-seed means over s, of the per-prompt
    means over p, each times its own t quantile squared (Banerjee's sum), from a printed t table."""
    t_975 = {2: 4.302652729749464, 5: 2.570581835636314}  # df 2 (3 seeds), df 5 (6 prompts)
    s, p = matrix.shape
    rows, cols = matrix.mean(axis=1), matrix.mean(axis=0)
    v_seed = sum((r - rows.mean()) ** 2 for r in rows) / (s - 1) / s
    v_prompt = sum((c - cols.mean()) ** 2 for c in cols) / (p - 1) / p
    half = (t_975[s - 1] ** 2 * v_seed + t_975[p - 1] ** 2 * v_prompt) ** 0.5
    return float(matrix.mean()), float(matrix.mean() - half), float(matrix.mean() + half)


def test_the_task_level_delta_and_mean_recomputed_by_hand_from_the_eval_jsons(sweep: Path) -> None:
    rows = build_report([sweep]).rows
    row = next(r for r in rows if (r.group, r.policy, r.task_group) == ("hacpo", "tiny-bpe", "all"))
    by_hand = {}
    for regime in ("hacpo", "standalone"):  # each run's last validation, read as a user would
        for seed in (1, 2, 3):
            last = max((sweep / f"{regime}-seed{seed}" / "eval" / "tiny-bpe").glob("step-*.json"))
            by_hand[regime, seed] = {r["prompt_id"]: r["score"] for r in json.loads(last.read_text())["records"]}
    matrix = np.array([[by_hand["hacpo", s][p] - by_hand["standalone", s][p] for p in sorted(by_hand["hacpo", s])]
                       for s in (1, 2, 3)])
    crossed = row.task_delta
    assert (crossed.seeds, crossed.prompts) == (3, 6) and row.claim == "task"
    mean, low, high = crossed_by_hand(matrix)
    assert crossed.mean == pytest.approx(mean) == pytest.approx(row.vs_baseline.mean_difference)
    assert crossed.ci95 == pytest.approx((low, high)) and row.delta[1] == crossed.ci95
    assert (crossed.p < 0.05) == (low > 0 or high < 0)  # the p of the interval beside it
    ours = np.array([[by_hand["hacpo", s][p] for p in sorted(by_hand["hacpo", s])] for s in (1, 2, 3)])
    centre, low, high = crossed_by_hand(ours)  # a 0-1 mean's interval: the same half-width on the logit scale
    logit, spread = math.log(centre / (1 - centre)), (high - low) / 2 / (centre * (1 - centre))
    by_logit = (1 / (1 + math.exp(spread - logit)), 1 / (1 + math.exp(-logit - spread)))
    assert row.task_mean.ci95 == pytest.approx(by_logit) and row.mean_ci == row.task_mean.ci95
    add = next(r for r in rows if r.task_group == "add" and r.vs_baseline)
    assert add.task_delta is None and add.claim == "prompts" and add.delta[1] == add.vs_baseline.ci95


def test_only_prompts_every_paired_run_scored_are_compared() -> None:
    ours = {1: {"a": 1.0, "b": 0.0, "c": 1.0}, 2: {"a": 1.0, "b": 1.0, "c": 0.0}}
    theirs = {1: {"a": 0.0, "b": 0.0}, 2: {"a": 1.0, "b": 0.0, "c": 1.0}, 3: {"a": 1.0, "b": 1.0}}
    seeds, prompts, matrix = difference_matrix(ours, theirs)
    assert seeds == [1, 2] and prompts == ["a", "b"] and matrix.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_caveats_reach_every_format_and_the_figure_caption(sweep: Path) -> None:
    report = build_report([sweep])
    row = next(r for r in report.rows if (r.group, r.policy, r.task_group) == ("hacpo", "tiny-bpe", "all"))
    assert records(row.caveats) == ["hacpo, tiny-bpe: used 0% of its peers' samples (mean over 3 runs; marked below 10%); "
                           "none of its 3 runs used any: in those no peer sample moved the gradient, but hacpo still "
                           "ran and exchanged samples with its peers, so they are not standalone GRPO runs (their "
                           "reward@1 differs from standalone's run of the same seed by +0.167, +0.167, +0.333)"]
    assert "hacpo, tiny-sp, seed 2: restarted from its start (step 0) after leaving at step 2" in report.caveats
    markdown = render(report, "markdown")
    assert "| tiny-bpe †a,c |" in markdown and "| tiny-sp †b,c |" in markdown  # a letter per cause
    assert "| tiny-bpe †a |" in markdown  # a task-group row: the task-level caveat (c: 6 prompts) is not its own
    assert "- †c: few held-out prompts carry any variation" in markdown
    assert "- †a: a sharing method used few or none of its peers' samples" in markdown
    assert "- †a hacpo, tiny-bpe: used 0%" in markdown and "- †b hacpo, tiny-sp, seed 2: restarted" in markdown
    latex = render(report, "latex")
    assert r"tiny-bpe \textsuperscript{\dag a,c}" in latex and "hacpo, tiny-sp, seed 2: restarted" in latex
    assert latex.isascii() and "> " not in latex and "< " not in latex.replace("$<$", "")  # LaTeX-safe text
    assert "# †a hacpo, tiny-bpe: used 0%" in render(report, "csv")
    assert json.loads(render(report, "json"))["rows"][6]["caveats"] == row.caveats
    text = caption(report)
    assert "Note: hacpo, tiny-bpe: used 0% of its peers' samples" in text and "n = 3" in text
    assert "Student t interval" in text


def records(lines: list[str]) -> list[str]:
    """The caveats the runs' records give (the statistical ones, of the task-level interval, left out)."""
    return [line for line in lines if cause_of(line)[0] not in STATISTICAL]


def test_by_compares_each_group_with_the_standalone_of_its_own_settings(tmp_path: Path) -> None:
    for regime, temperature, seed in itertools.product(("standalone", "sgt"), (0.7, 1.0), (1, 2)):
        scores = [1, 0, 1, 0] if regime == "sgt" else [0, 0, 1, 0]
        write_finished_run(tmp_path / f"{regime}-T{temperature}-{seed}", regime, seed,
                           {"tiny-bpe": scores[seed - 1:] + scores[:seed - 1]}, grpo__temperature=temperature)
    write_finished_run(tmp_path / "sgt-T1.2-1", "sgt", 1, {"tiny-bpe": [1, 1, 1, 1]}, grpo__temperature=1.2)
    report = build_report([tmp_path], by=["regime", "grpo.temperature"])
    assert report.baselines["sgt (T 0.7)"] == "standalone (T 0.7)"
    assert report.baselines["sgt (T 1.0)"] == "standalone (T 1.0)" and report.baselines["sgt (T 1.2)"] is None
    row = next(r for r in report.rows if (r.group, r.task_group) == ("sgt (T 1.0)", "all"))
    assert row.vs_baseline.mean_difference == pytest.approx(0.25) and row.vs_baseline.probability_of_improvement == 1
    csv_head = render(report, "csv").splitlines()[0]
    assert "Δ vs baseline" in csv_head and "P(improve)" in csv_head
    markdown = render(report, "markdown")
    assert "sgt (T 0.7) vs standalone (T 0.7)" in markdown and "| sgt (T 1.2) | tiny-bpe | all | 1 |" in markdown
    assert "(no baseline)" in markdown
    by_regime = build_report([tmp_path], by=["regime", "grpo.temperature"], baseline="standalone")
    assert by_regime.baselines == report.baselines  # --baseline may name the regime


def test_a_misspelt_by_key_is_refused_naming_near_matches(sweep: Path) -> None:
    with pytest.raises(UsageError, match=r"^--by grpo\.learning_rat: no run has this setting; did you mean "
                                         r"grpo\.learning_rate\?$"):
        build_report([sweep], by=["regime", "grpo.learning_rat"])
    done = CliRunner().invoke(app, ["report", str(sweep), "--by", "a.misspelt.key"])
    assert done.exit_code != 0 and "--by a.misspelt.key: no run has this setting" in done.output
    assert len(done.output.strip().splitlines()) == 1
    plotted = CliRunner().invoke(app, ["plot", str(sweep), "--group-by", "regme"])
    assert plotted.exit_code != 0 and "--group-by regme: no run has this setting; did you mean regime" in plotted.output


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_the_terminal_table_at_80_columns_keeps_group_policy_task_group_and_n(sweep: Path) -> None:
    done = CliRunner().invoke(app, ["report", str(sweep), "--full-notes"], env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    table = lines[:lines.index(next(line for line in lines if line.startswith("narrow terminal")))]
    assert max(len(line) for line in table) <= 80
    assert "(Holm)" in table[3] and "(imp)" in table[3]  # no column cut off at the edge
    second = [[word for word in line.split() if not word.startswith("†")] for line in table]  # letters under policy
    assert [words[0] for words in second if words[:1] in (["T"], ["P"])] == ["T", "P", "P"] * 4
    named = []
    for line in table:
        words = [word for word in line.split() if not word.startswith("†")]
        policy = next((word for word in words if word in ("tiny-bpe", "tiny-sp")), None)
        if policy:  # a row's first line: its policy, task group and n, whole
            named.append((policy, words[words.index(policy) + 1], words[words.index(policy) + 2]))
    assert len(named) == 12 and {group for _, group, _ in named} == {"all", "add", "sub"}
    assert {n for _, _, n in named} == {"3"}
    assert sum(line.startswith(("standalone ", "hacpo ")) for line in table) == 2  # each group's label, once
    assert "P(improve)" not in table and "SD, IQM and the seeds for power are in" in done.output
    assert "power: --min-effect D gives each comparison" in " ".join(done.output.split())
    planned = CliRunner().invoke(app, ["report", str(sweep), "--min-effect", "0.2"], env={"COLUMNS": "80"})
    assert "plan: hacpo vs standalone, tiny-bpe: to detect ±0.2 with 80% power" in " ".join(planned.output.split())


def test_summary_without_caveats_marks_nothing(tmp_path: Path) -> None:
    for seed in (1, 2):
        write_finished_run(tmp_path / f"s{seed}", "standalone", seed, {"tiny-bpe": [1, 0]})
        write_finished_run(tmp_path / f"g{seed}", "sgt", seed, {"tiny-bpe": [1, seed - 1]})
    report = build_report([tmp_path])
    assert records(report.caveats) == []  # the records say nothing; 2 prompts: what the statistics say, marked
    assert {cause_of(line)[0] for line in report.caveats} == {"few prompts"}  # in the mean rows and in Δ
    table = render(report, "markdown")
    assert "| sgt | tiny-bpe †a |" in table and "standalone | tiny-bpe †a |" in table
    row = next(r for r in report.rows if (r.group, r.task_group) == ("sgt", "all"))
    assert statistics.fmean(row.vs_baseline.differences) == pytest.approx(0.25)
