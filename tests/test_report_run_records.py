"""Two caveats of issue 66 that only the run folder knows: held-out prompts a policy's model was warm-started on
(summary.json's ``seen_prompts``) and a ``--resume`` that trained the run again from step 0 (run.json's
``resumes``). Recorded by the launcher's own code (no training), read into a † line under every format's table and
in the figure's caption; a run folder from before these fields has none of these lines."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from report_fakes import write_finished_run
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.evaluation.grouped_plot import caption
from mutualrl.evaluation.report.build import build_report
from mutualrl.evaluation.report.caveats import STATISTICAL, cause_of, read_caveats
from mutualrl.evaluation.report.formats import render
from mutualrl.launch.rundir.record import write_run_json
from mutualrl.launch.rundir.summary import summarise
from mutualrl.run_folder import RunPaths
from mutualrl.tasks.base import TaskExample
from mutualrl.tasks.synthetic import family_split
from mutualrl.training.data import EVAL_FILE, TRAIN_FILE, write_examples

#: tiny-bpe's model saw 3 of the 6 held-out prompts in its warm start (and every training prompt); the skill
#: measurement's overlap and a training-only overlap are recorded but are no caveat of a held-out score.
SEEN = [{"prompts": "synthetic-arith's train split", "seen_as": "warm start", "policies": ["tiny-bpe"],
         "training": 8, "training_of": 8, "held_out": 3, "held_out_of": 6},
        {"prompts": "synthetic-arith's test split", "seen_as": "skill measurement", "policies": ["tiny-bpe"],
         "training": 0, "training_of": 8, "held_out": 2, "held_out_of": 6}]
RESUMES = [{"from_step": 0, "at": "2025-03-04T05:06:07", "after": "interrupted"},
           {"from_step": 2, "at": "2025-03-04T06:00:00", "after": "failed"}]  # from a checkpoint: no caveat
WARM_LINE = ("scored on prompts its model was warm-started on (3 of 6 held-out prompts are in synthetic-arith's "
             "train split)")
RESUME_LINE = ("resumed from step 0 at 2025-03-04 05:06:07 after it was interrupted: no checkpoint was common to "
               "every policy, so it was trained again from its start")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """standalone and sgt × seeds 1-2: every sgt run scored tiny-bpe on warm-start prompts; sgt seed 2 was
    resumed from step 0; standalone's runs are from before these fields (no summary.json, no ``resumes``)."""
    root = tmp_path_factory.mktemp("records") / "sweep"
    for regime in ("standalone", "sgt"):
        for seed in (1, 2):
            scores = [1, 0, 1, 0, seed % 2, 1] if regime == "sgt" else [0, 0, 1, 0, seed % 2, 0]
            write_finished_run(root / f"{regime}-seed{seed}", regime, seed,
                               {"tiny-bpe": scores, "tiny-sp": scores[::-1]},
                               summary={"seen_prompts": SEEN} if regime == "sgt" else None,
                               resumes=RESUMES if (regime, seed) == ("sgt", 2) else None)
    return root


def test_the_lines_are_read_from_summary_and_run_json(sweep: Path) -> None:
    report = build_report([sweep])
    assert records(report.caveats) == [f"sgt, tiny-bpe, seeds 1, 2: {WARM_LINE}", f"sgt, seed 2: {RESUME_LINE}"]
    marked = {(r.group, r.policy) for r in report.rows if records(r.caveats)}
    assert marked == {("sgt", "tiny-bpe"), ("sgt", "tiny-sp")}  # the resume concerns every policy of the run
    sp = next(r for r in report.rows if (r.group, r.policy, r.task_group) == ("sgt", "tiny-sp", "all"))
    assert records(sp.caveats) == [f"sgt, seed 2: {RESUME_LINE}"]
    old = read_caveats(sweep / "standalone-seed1")  # an older run folder: none of these fields, no line
    assert old.events == {} and old.run_events == []


def test_the_lines_reach_every_format_and_the_caption(sweep: Path) -> None:
    report = build_report([sweep])
    markdown = render(report, "markdown")
    assert "| sgt | tiny-bpe †a,b,c |" in markdown and "| sgt | tiny-sp †b,c |" in markdown  # a letter per cause
    assert f"- †a sgt, tiny-bpe, seeds 1, 2: {WARM_LINE}" in markdown
    assert f"- †b sgt, seed 2: {RESUME_LINE}" in markdown
    assert "- †a: scored on held-out prompts its model was warm-started on" in markdown
    latex = render(report, "latex")
    notes = latex[latex.index(r"\caption{"):]
    assert r"tiny-bpe \textsuperscript{\dag a,b,c}" in latex
    assert r"\textsuperscript{\dag a} sgt, tiny-bpe, seeds 1, 2: scored on prompts its model was warm-started" in notes
    assert r"sgt, seed 2: resumed from step 0 at 2025-03-04 05:06:07 after it was interrupted" in notes
    rows = list(csv.reader(io.StringIO(render(report, "csv"))))
    assert ["sgt", "tiny-bpe †a,b,c"] in [row[:2] for row in rows]  # csv carries the marks and, as # lines, the notes
    assert f"\n# †b sgt, seed 2: {RESUME_LINE}\n" in render(report, "csv")
    data = json.loads(render(report, "json"))
    row = next(r for r in data["rows"] if (r["group"], r["policy"], r["task_group"]) == ("sgt", "tiny-bpe", "all"))
    assert records(row["caveats"]) == records(report.caveats) and f"†b sgt, seed 2: {RESUME_LINE}" in data["notes"]
    assert row["caveat_letters"] == "a,b,c" and data["caveat_letters"]["b"].startswith("a run was trained again")
    table = CliRunner().invoke(app, ["report", str(sweep), "--full-notes"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    flat = " ".join(table.output.split())
    assert f"†a sgt, tiny-bpe, seeds 1, 2: {WARM_LINE}" in flat and f"†b sgt, seed 2: {RESUME_LINE}" in flat
    text = caption(report)
    assert f"Note: sgt, tiny-bpe, seeds 1, 2: {WARM_LINE}." in text and f"Note: sgt, seed 2: {RESUME_LINE}." in text


def records(lines: list[str]) -> list[str]:
    """The caveats the runs' records give (the statistical ones, of the task-level interval, left out)."""
    return [line for line in lines if cause_of(line)[0] not in STATISTICAL]


def examples(prompts: list[str]) -> list[TaskExample]:
    return [TaskExample(prompt_id=f"p{i}", prompt=p, answer="0", task="dataset") for i, p in enumerate(prompts)]


def test_the_summary_records_held_out_prompts_a_warm_started_model_saw(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    warm = [e.prompt for e in family_split("add", "train")[:3]]
    measured = [e.prompt for e in family_split("sub", "test")[:1]]
    paths.data.mkdir(parents=True)
    write_examples(paths.data / TRAIN_FILE, examples(warm[:2] + ["2 plus 2?"]))
    write_examples(paths.data / EVAL_FILE, examples(warm + measured + ["7 minus 1?"]))
    paths.metrics.write_text("")
    policies = [SimpleNamespace(name="bpe", model="builtin:tiny-bpe"), SimpleNamespace(name="big", model="org/llm")]
    config = SimpleNamespace(pool=SimpleNamespace(name="mine", policies=policies),
                             regime=SimpleNamespace(name="sgt"), grpo={"seed": 2})
    summary = summarise(paths, config, SimpleNamespace(seconds=1.0, extra={}))
    assert summary["seen_prompts"] == [
        {"prompts": "synthetic-arith's train split", "seen_as": "warm start", "policies": ["bpe"],
         "training": 2, "training_of": 3, "held_out": 3, "held_out_of": 5},
        {"prompts": "synthetic-arith's test split", "seen_as": "skill measurement", "policies": ["bpe"],
         "training": 0, "training_of": 3, "held_out": 1, "held_out_of": 5}]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert read_caveats(tmp_path).events == {"bpe": ["scored on prompts its model was warm-started on (3 of 5 "
                                                     "held-out prompts are in synthetic-arith's train split)"]}
    config.pool.policies = policies[1:]  # no model of ours: nothing read, nothing recorded
    assert "seen_prompts" not in summarise(paths, config, SimpleNamespace(seconds=1.0, extra={}))


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_run_json_records_each_resume_and_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = RunPaths(tmp_path)
    config = SimpleNamespace(pool=SimpleNamespace(name="tiny", policies=[]), regime=SimpleNamespace(name="sgt"),
                             task=SimpleNamespace(name="synthetic-arith"))
    now = ["2025-03-04T05:00:00"]
    monkeypatch.setattr("mutualrl.launch.rundir.record.time.strftime", lambda fmt: now[0])
    write_run_json(paths, config, status="running")  # the first launch: never resumed, no field
    assert "resumes" not in json.loads(paths.run_json.read_text())
    write_run_json(paths, config, status="interrupted", reason="interrupted")
    now[0] = "2025-03-04T05:06:07"
    write_run_json(paths, config, status="running", resumed_from=0)  # --resume found no common checkpoint
    write_run_json(paths, config, status="failed", reason="x")
    now[0] = "2025-03-04T06:00:00"
    write_run_json(paths, config, status="running", resumed_from=2)
    write_run_json(paths, config, status="done")
    record = json.loads(paths.run_json.read_text())
    assert record["resumes"] == [{"from_step": 0, "at": "2025-03-04T05:06:07", "after": "interrupted"},
                                 {"from_step": 2, "at": "2025-03-04T06:00:00", "after": "failed"}]
    assert record["started"] == "2025-03-04T05:00:00"
    assert read_caveats(tmp_path).run_events == [RESUME_LINE]


def test_the_launch_passes_a_resume_from_step_0_to_the_record(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """launch_claimed: a ``--resume`` with no checkpoint (``resume_step`` None) is recorded as ``from_step`` 0;
    a new run records no resume."""
    from mutualrl.launch import run as launch_run

    written = []
    monkeypatch.setattr(launch_run, "write_run_json", lambda *args, **kwargs: written.append(kwargs))
    monkeypatch.setattr(launch_run, "run_machine_workers",
                        lambda *args: SimpleNamespace(ok=False, reason="boom", extra={}))
    monkeypatch.setattr("mutualrl.tasks.shipped_rewards.write_shipped", lambda *args: None)
    monkeypatch.setattr("mutualrl.launch.rundir.summary.print_failure", lambda *args: None)
    config = SimpleNamespace(launch=SimpleNamespace(nodes=1), task=SimpleNamespace(reward_funcs=[]))
    plan = SimpleNamespace(write=lambda: None, warnings=[])
    for resumed, step, expected in ((True, None, 0), (True, 4, 4), (False, None, None)):
        written.clear()
        launch_run.launch_claimed(config, RunPaths(tmp_path), step, None, None, plan, resumed=resumed)
        assert written[0] == {"status": "running", "resumed_from": expected}
