"""`mutualrl report`: fake finished runs (tests/report_fakes.py) grouped, checked and put in every format; the
mean, SD, t interval, paired t p and P(improve) recomputed by hand from the eval JSONs."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
from report_fakes import write_finished_run
from scipy import stats
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.errors import UsageError
from mutualrl.evaluation.report.build import build_report
from mutualrl.evaluation.report.formats import FORMATS, render
from mutualrl.evaluation.report.notes import notes

#: Per regime and seed, the held-out scores of tiny-bpe's 6 prompts at the last validation.
SCORES = {
    "standalone": {1: [1, 0, 0, 0, 1, 0], 2: [1, 1, 0, 0, 0, 0], 3: [0, 0, 1, 0, 1, 0]},
    "sgt": {1: [1, 1, 1, 0, 1, 0], 2: [1, 1, 1, 1, 0, 0], 3: [1, 1, 1, 1, 1, 1]},
}


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    for regime, by_seed in SCORES.items():
        for seed, scores in by_seed.items():
            write_finished_run(tmp_path / "sweep" / f"{regime}-seed{seed}", regime, seed,
                               {"tiny-bpe": scores, "tiny-sp": [1 - s for s in scores]})
    return tmp_path / "sweep"


#: Student's t 0.975 quantile with 2 degrees of freedom, from a printed table (not from scipy).
T_975_DF2 = 4.302652729749464


def t_interval_by_hand(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    half = T_975_DF2 * statistics.stdev(values) / len(values) ** 0.5
    return mean - half, mean + half


def test_mean_sd_and_interval_recomputed_by_hand_from_the_eval_jsons(sweep: Path) -> None:
    report = build_report([sweep])
    row = next(r for r in report.rows if (r.group, r.policy, r.task_group) == ("sgt", "tiny-bpe", "all"))
    by_hand = []
    for seed in (1, 2, 3):  # the last validation's file of each run, read as a user would
        eval_dir = sweep / f"sgt-seed{seed}" / "eval" / "tiny-bpe"
        last = max(eval_dir.glob("step-*.json"))
        records = json.loads(last.read_text())["records"]
        by_hand.append(sum(r["score"] for r in records) / len(records))
    assert row.seeds == [1, 2, 3] and row.values == pytest.approx(by_hand)
    assert row.stats.n == 3
    assert row.stats.mean == pytest.approx(sum(by_hand) / 3)
    assert row.stats.sd == pytest.approx((sum((v - sum(by_hand) / 3) ** 2 for v in by_hand) / 2) ** 0.5)
    assert row.stats.ci95 == pytest.approx(t_interval_by_hand(by_hand))
    assert row.stats.iqm is None and "n = 3" in row.stats.note  # too few to trim; said plainly
    paired = row.vs_baseline
    base = [sum(SCORES["standalone"][s]) / 6 for s in (1, 2, 3)]
    differences = [a - b for a, b in zip(by_hand, base, strict=True)]
    assert paired.differences == pytest.approx(differences)
    assert paired.mean_difference == pytest.approx(statistics.fmean(differences))
    assert paired.ci95 == pytest.approx(t_interval_by_hand(differences))
    # the paired t test the interval inverts (no 2/2ⁿ floor as a sign-flip p over 3 seeds had)
    assert paired.p == pytest.approx(stats.ttest_1samp(differences, 0.0).pvalue)
    assert row.claim == "task" and row.delta[0] == pytest.approx(statistics.fmean(differences))
    assert paired.probability_of_improvement == pytest.approx(1.0)  # every pair improved


def test_the_iqm_is_rliables_from_four_runs(tmp_path: Path) -> None:
    from rliable import metrics

    for seed, scores in enumerate(([1, 0], [1, 1], [0, 0], [1, 0], [0, 1]), start=1):
        write_finished_run(tmp_path / f"sgt-{seed}", "sgt", seed, {"tiny-bpe": scores})
    row = build_report([tmp_path]).rows[0]
    assert row.stats.iqm == pytest.approx(metrics.aggregate_iqm(np.asarray(row.values).reshape(-1, 1)))


def test_task_groups_come_from_the_same_validation_step(sweep: Path) -> None:
    report = build_report([sweep])
    row = next(r for r in report.rows if (r.group, r.policy, r.task_group) == ("standalone", "tiny-bpe", "add"))
    assert row.values == pytest.approx([statistics.fmean(SCORES["standalone"][s][0::2]) for s in (1, 2, 3)])


def test_runs_differing_in_more_than_the_seed_are_refused_unless_by_names_it(tmp_path: Path) -> None:
    for seed, lr in ((1, 1e-4), (2, 1e-4), (3, 2e-4)):
        write_finished_run(tmp_path / f"sgt-{seed}", "sgt", seed, {"tiny-bpe": [1, 0]}, grpo__learning_rate=lr)
    with pytest.raises(UsageError, match=r"differ in more than the seed \(grpo.learning_rate: 0.0001 \(sgt-1, sgt-2\), "
                                         r"0.0002 \(sgt-3\)\).*--by regime,grpo.learning_rate"):
        build_report([tmp_path])
    report = build_report([tmp_path], by=["regime", "grpo.learning_rate"])
    assert sorted(report.groups) == ["sgt (lr 0.0001)", "sgt (lr 0.0002)"]


def test_the_same_data_under_another_path_is_one_input_and_other_data_is_a_difference(tmp_path: Path) -> None:
    write_finished_run(tmp_path / "a", "sgt", 1, {"tiny-bpe": [1, 0]}, task__source="/tmp/x/data")
    write_finished_run(tmp_path / "b", "sgt", 2, {"tiny-bpe": [1, 1]}, task__source="data")
    assert build_report([tmp_path]).groups["sgt"]  # pooled: same digests
    write_finished_run(tmp_path / "c", "sgt", 3, {"tiny-bpe": [0, 0]}, data_sha="d" * 64)
    with pytest.raises(UsageError, match=r"data:train.jsonl: sha256 aaaaaaaaaa… \(a, b\), sha256 dddddddddd… \(c\)"):
        build_report([tmp_path])


def test_unfinished_runs_are_left_out_and_named(sweep: Path) -> None:
    write_finished_run(sweep / "sgt-seed4", "sgt", 4, {"tiny-bpe": [1] * 6}, status="interrupted")
    report = build_report([sweep])
    assert [r.stats.n for r in report.rows if r.group == "sgt"][0] == 3
    assert report.left_out == [f"{sweep / 'sgt-seed4'}: not finished (run.json status interrupted); resume it, "
                               "then report"]


def test_one_run_per_group_says_no_interval_is_possible(tmp_path: Path) -> None:
    write_finished_run(tmp_path / "s", "sgt", 1, {"tiny-bpe": [1, 0]})
    write_finished_run(tmp_path / "b", "standalone", 1, {"tiny-bpe": [0, 0]})
    row = next(r for r in build_report([tmp_path]).rows if r.group == "sgt")
    assert row.stats.sd is None and row.stats.ci95 is None and "no interval" in row.stats.note
    assert row.vs_baseline.differences == [0.5] and row.vs_baseline.ci95 is None


def test_every_format(sweep: Path) -> None:
    report = build_report([sweep])
    rows = list(csv.reader(io.StringIO(render(report, "csv"))))
    assert rows[0][:8] == ["regime", "policy", "task group", "n", "claim", "mean", "SD", "95% CI"]  # no IQM < n = 4
    assert rows[0][8:] == ["Δ vs standalone", "95% CI of Δ", "p", "p (Holm)", "P(improve)"]  # no --min-effect
    table = [row for row in rows if not row[0].startswith("#")]
    assert len(table) == 1 + 2 * 2 * 3  # 2 regimes x 2 policies x (all, add, sub)
    assert [row[4] for row in table[1:4]] == ["task", "prompts", "prompts"]
    assert [line[2:] for line in render(report, "csv").splitlines() if line.startswith("# ")] == notes(report)
    markdown = render(report, "markdown")
    assert markdown.startswith("| regime | policy |") and "- SD: sample standard deviation" in markdown
    latex = render(report, "latex")
    assert r"\toprule" in latex and r"$\Delta$ vs standalone" in latex
    caption = latex[latex.index(r"\caption{"):]  # the notes are caption text, not % comments the PDF drops
    assert "n = 3: a t interval" in caption and "Student t interval" in caption and "2 comparisons" in caption
    assert "4 comparisons" in caption and "headline family" in caption
    assert not any(line.startswith("%") for line in latex.splitlines())
    data = json.loads(render(report, "json"))
    assert data["baseline"] == "standalone" and data["context"]["pool"] == "tiny"
    assert {r["group"] for r in data["rows"]} == {"standalone", "sgt"} and set(FORMATS) >= {"csv", "json"}


def test_report_cli_writes_each_format_and_refuses_a_bad_one(sweep: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    table = runner.invoke(app, ["report", str(sweep), "--full-notes"])  # the short form: test_report_short_notes
    assert table.exit_code == 0, table.output
    assert "P(improve)" in table.output and "Student t interval" in table.output
    done = runner.invoke(app, ["report", str(sweep), "--format", "json"])
    assert list(json.loads(done.output)["groups"]) == ["standalone", "sgt"]  # the baseline first
    out = tmp_path / "t.tex"
    assert runner.invoke(app, ["report", str(sweep), "-f", "latex", "-o", str(out)]).exit_code == 0
    assert out.read_text().startswith(r"\begin{table}")
    again = runner.invoke(app, ["report", str(sweep), "-f", "latex", "-o", str(out)])
    assert again.exit_code != 0 and "--overwrite" in again.output
    bad = runner.invoke(app, ["report", str(sweep), "--format", "docx"])
    assert bad.exit_code == 2 and "expected one of table, markdown, csv, latex, json" in bad.output


def test_runs_on_other_versions_are_named_under_the_table_and_in_the_caption(sweep: Path) -> None:
    from mutualrl.evaluation.report.notes import caption_caveats, notes

    usual = {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0", "trl": "1.16.0", "tested_set": "yes"}
    runs = sorted(sweep.iterdir())
    for run in runs:
        record = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**record, "versions": usual}))
    assert build_report([sweep]).versions == []  # all alike: nothing to say
    odd, resumed = runs[0], runs[1]
    record = json.loads((odd / "run.json").read_text())
    (odd / "run.json").write_text(json.dumps({**record, "versions": {**usual, "transformers": "5.25.0",
                                                                     "tested_set": "no: 1 differ (...)"}}))
    record = json.loads((resumed / "run.json").read_text())
    (resumed / "run.json").write_text(json.dumps({**record, "earlier_versions": [{**usual, "trl": "1.16.1"}]}))
    report = build_report([sweep])
    assert report.versions == [f"{odd.name}: ran on other versions: transformers 5.25.0 (most: 5.24.0)",
                               f"{odd.name}: not the tested set (no: 1 differ (...))",
                               f"{resumed.name}: resumed on other versions than it started with (1 change of versions)"]
    assert all(f"†a {line}" in notes(report) for line in report.versions)
    assert "†a: ran on other library versions, or not on the tested set" in notes(report)
    assert set(report.versions) <= set(caption_caveats(report))
