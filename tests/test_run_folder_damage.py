"""Issue 42: a damaged run folder (rows, status, logs, special files) costs no result and gives no traceback."""

from __future__ import annotations

import io
import json
import os

import pytest

from mutualrl.errors import RunFolderError
from mutualrl.evaluation.results import ModelEvalResult, PromptResult
from mutualrl.launch.rundir.metrics_merge import rollback_metrics
from mutualrl.launch.supervise.runner import PoolRunner, PoolSettings
from mutualrl.launch.supervise.worker_output import tail
from mutualrl.run_folder import RunPaths, read_json, read_json_or, read_metric_rows, read_status


def _eval_result(policy: str, step: int, scores: list[float]) -> ModelEvalResult:
    records = [PromptResult(f"p{i}", "t", "q", "c", "1", "1", s) for i, s in enumerate(scores)]
    return ModelEvalResult(model="m", records=records, policy=policy, step=step)


def test_a_damaged_eval_row_before_the_checkpoint_keeps_its_result_and_the_row_is_re_made(tmp_path):
    """Case 1: the step-2 eval line cut to 60 characters; resume from checkpoint 4 keeps eval/a/step-000002.json."""
    paths = RunPaths(tmp_path)
    paths.metrics_dir.mkdir()
    rows = [{"kind": "train", "policy": "a", "step": s, "regime": "sgt", "time": 100.0 + s} for s in range(1, 7)]
    eval_row = json.dumps({"kind": "eval", "policy": "a", "step": 2, "regime": "sgt", "time": 102.5,
                           "eval/reward@1": 0.5, "eval/n": 2})
    lines = [json.dumps(r) for r in rows[:2]] + [eval_row[:60]] + [json.dumps(r) for r in rows[2:]]
    paths.policy_metrics("a").write_text("\n".join(lines) + "\n")
    _eval_result("a", 2, [1.0, 0.0]).save(paths.eval_result("a", 2))
    _eval_result("a", 6, [1.0, 1.0]).save(paths.eval_result("a", 6))
    notes: list[str] = []

    dropped = rollback_metrics(paths, ["a"], step=4, notes=notes)

    assert paths.eval_result("a", 2).is_file()  # the intact result of a step that is not redone is kept
    assert not paths.eval_result("a", 6).exists()  # past the checkpoint: validated again
    assert dropped == 3  # steps 5 and 6, and the damaged line
    remade = [row for _, row in read_metric_rows(paths.policy_metrics("a"))[0] if row["kind"] == "eval"]
    assert [(r["step"], r["eval/reward@1"], r["regime"]) for r in remade] == [(2, 0.5, "sgt")]
    assert [row["step"] for _, row in read_metric_rows(paths.metrics)[0]] == [1, 2, 2, 3, 4]
    assert any("re-made from" in note and "step-000002.json" in note for note in notes)
    assert any("1 damaged line" in note for note in notes)


def test_an_unreadable_eval_result_is_moved_aside_by_name_not_deleted(tmp_path):
    paths = RunPaths(tmp_path)
    paths.policy_eval_dir("a").mkdir(parents=True)
    paths.eval_result("a", 1).write_text("[1, 2")
    notes: list[str] = []
    rollback_metrics(paths, ["a"], step=3, notes=notes)
    assert (paths.policy_eval_dir("a") / "step-000001.json.damaged").read_text() == "[1, 2"
    assert "step-000001.json" in notes[0] and "moved aside" in notes[0]


@pytest.mark.parametrize("content", ["null", "[1]", '"text"', "{cut", "\xff\xfe"])
def test_a_status_file_of_the_wrong_type_is_an_empty_status_not_a_crash(tmp_path, content):
    """Case 4: status/<policy>.json set to null mid-run crashed the launcher's progress read."""
    paths = RunPaths(tmp_path)
    paths.status_dir.mkdir()
    paths.status("a").write_text(content, errors="surrogateescape")
    runner = PoolRunner([], paths, PoolSettings(tmp_path / "see", stall_timeout_s=10.0))
    assert runner._status_of("a") == {}


def test_status_fields_of_the_wrong_type_are_dropped(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"step": "7", "max_steps": 5, "phase": ["x"], "reward_mean": 0.5, "x": {"a": 1}}))
    assert read_status(path) == {"max_steps": 5, "reward_mean": 0.5}


def test_a_fifo_or_a_folder_is_named_never_waited_on(tmp_path):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with pytest.raises(RunFolderError, match="run.json: not a regular file"):
        read_json(fifo)
    assert read_json_or(fifo, {"d": 1}) == {"d": 1}
    assert read_status(fifo) == {}
    assert tail(fifo) == ""
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(RunFolderError, match="dir.json"):
        read_json(tmp_path / "dir.json")
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")


def test_a_json_file_of_another_type_is_one_line_naming_it(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("[1, 2]")
    with pytest.raises(RunFolderError, match=r"summary.json: damaged, holds a JSON list where a dict belongs"):
        read_json(path)
    assert read_json(path, expect=list) == [1, 2]


def test_the_log_tail_is_bounded_whatever_the_worker_wrote(tmp_path):
    """Case 5: a 20 MB log line, then the worker dies: only the end is read, and lines are cut."""
    log = tmp_path / "a.log"
    with log.open("w") as fh:
        fh.write("start\n" + "x" * 20_000_000 + "\n" + "Traceback: boom\n")
    shown = tail(log)
    assert len(shown) < 2000
    assert shown.endswith("Traceback: boom")
    assert "more characters cut" in shown


def test_a_see_folder_deleted_mid_run_stops_the_run_saying_so(tmp_path):
    """Case 6: the SEE folder deleted mid-run was not noticed; the run ended "done" without its exchange."""
    import shutil
    import sys
    import threading
    import time

    from rich.console import Console

    from mutualrl.launch.supervise.runner import PolicyProcess

    see = tmp_path / "see"
    worker = tmp_path / "w.py"
    worker.write_text("import pathlib, sys, time\nfor _ in range(300):\n"
                      "    pathlib.Path(sys.argv[1], '_heartbeat').mkdir(parents=True, exist_ok=True)\n"
                      "    time.sleep(0.05)\n")
    procs = [PolicyProcess(name="a", argv=[sys.executable, str(worker), str(see)], env={},
                           log_path=tmp_path / "logs" / "a.log")]
    settings = PoolSettings(see, stall_timeout_s=60.0, grace_s=5.0, poll_s=0.05, watch_see=True)
    runner = PoolRunner(procs, RunPaths(tmp_path), settings, console=Console(file=io.StringIO()))
    threading.Timer(1.0, lambda: shutil.move(see, tmp_path / "gone")).start()  # atomic: the worker writes on
    started = time.time()
    outcome = runner.run()
    assert not outcome.ok and "SEE folder" in outcome.reason and "deleted" in outcome.reason
    assert time.time() - started < 20


def test_a_see_manifest_of_wrong_types_or_a_fifo_is_a_corrupt_shard_naming_it(tmp_path):
    from mutualrl.see.errors import CorruptShardError
    from mutualrl.see.shards import read_manifest

    manifest = tmp_path / "m.json"
    fields = {"schema_version": 1, "run_id": "r", "policy": "a", "step": "x", "rank": 0, "world_size": 1,
              "rows": 1, "bytes": 1, "checksum": "c"}
    manifest.write_text(json.dumps(fields))
    with pytest.raises(CorruptShardError, match="m.json is unreadable .*step is 'x'"):
        read_manifest(manifest)
    manifest.unlink()
    os.mkfifo(manifest)
    with pytest.raises(CorruptShardError, match="not a regular file"):
        read_manifest(manifest)


def test_damaged_consumption_log_lines_are_skipped_not_a_traceback(tmp_path):
    from mutualrl.see.consumption_log import log_path, parse_log, rollback_log

    path = log_path(tmp_path, "a")
    path.parent.mkdir(parents=True)
    path.write_text('null\n[1]\n{"step": "x"}\n{"step": 1, "kind": "skip", "until": "y"}\n{"step": 2, "kind": "read"}\n')
    assert parse_log(path) == [{"step": 2, "kind": "read"}]
    assert rollback_log(tmp_path, 1) == 1


def test_a_damaged_merged_marker_merges_the_policy_again_rather_than_stopping(tmp_path):
    from mutualrl.launch.rundir.metrics_merge import MetricsMerger

    paths = RunPaths(tmp_path)
    paths.metrics_dir.mkdir()
    paths.merged_marker("a").write_text("garbage")
    assert MetricsMerger(paths, ["a"]).offsets == {"a": 0}


def test_a_plan_file_deleted_under_a_launched_worker_is_named(tmp_path, monkeypatch):
    """Case 11 (the run's launch/ folder deleted during start-up): a worker never trains on unplanned defaults."""
    from mutualrl.errors import UsageError
    from mutualrl.training.grpo_args import planned_grpo_args

    monkeypatch.setenv("MUTUALRL_LAUNCHER_PID", "1")
    with pytest.raises(UsageError, match=r"a.grpo.json: the launch plan of policy 'a' was deleted"):
        planned_grpo_args(RunPaths(tmp_path), "a", dict)
    (tmp_path / "launch").mkdir()
    (tmp_path / "launch" / "a.grpo.json").write_text("[]")
    with pytest.raises(RunFolderError, match="a.grpo.json: damaged, holds a JSON list"):
        planned_grpo_args(RunPaths(tmp_path), "a", dict)
    old_plan = '{"learning_rate": 1e-6, "run_name": "r/a"}'  # as planned before issue 41
    (tmp_path / "launch" / "a.grpo.json").write_text(old_plan)
    with pytest.raises(UsageError, match=r"a.grpo.json: planned by an older mutualrl \(no output_dir, report_to, "
                       r"disable_tqdm\); `mutualrl train --resume` plans the run again"):
        planned_grpo_args(RunPaths(tmp_path), "a", dict)


def test_metric_rows_of_the_wrong_types_are_damaged_lines_for_every_reader(tmp_path):
    from mutualrl.run_folder import parse_metric_row

    assert parse_metric_row('{"kind": "train", "policy": "a", "step": 3}') is not None
    for line in ('{"step": "seven"}', '{"step": true}', '{"kind": 1, "step": 1}', '{"policy": null}', "[1]"):
        assert parse_metric_row(line) is None, line
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"kind": "train", "policy": "a", "step": 1}\n\xff\xfe garbage\n{"step": "x"}\n')
    rows, damaged = read_metric_rows(path)
    assert [row["step"] for _, row in rows] == [1] and damaged == 2


def test_the_merge_survives_bytes_that_are_not_text(tmp_path):
    from mutualrl.launch.rundir.metrics_merge import MetricsMerger

    paths = RunPaths(tmp_path)
    paths.metrics_dir.mkdir()
    paths.policy_metrics("a").write_bytes(b'\xff\xfe\n{"kind": "train", "policy": "a", "step": 1}\n')
    assert [row["step"] for row in MetricsMerger(paths, ["a"]).poll()] == [1]


def test_a_failure_marker_of_another_type_or_a_fifo_is_an_unreadable_marker(tmp_path):
    from mutualrl.ops.exchange_inspect import inspect_exchange
    from mutualrl.see.liveness import read_failure

    (tmp_path / "_failed").mkdir()
    (tmp_path / "_failed" / "a.json").write_text("null")
    os.mkfifo(tmp_path / "_failed" / "b.json")
    assert "unreadable" in read_failure(tmp_path, "b")["reason"]
    report = inspect_exchange(tmp_path)
    assert sorted(m["policy"] for m in report.failures) == ["a", "b"]
