"""A full disk at each write site: one line naming the path and the free space, nothing half-written.

Sites in process (the end-to-end run with ``MUTUALRL_DEBUG_DISK_FULL`` is the slow test at
the end): atomic files (status, run.json, eval results), appended metric rows (a worker's
and the launcher's merged file), SEE shards (tests/test_see_exchange.py), checkpoints.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from mutualrl.atomic_io import append_text, write_json_atomic
from mutualrl.fault_injection import DISK_FULL_ENV
from mutualrl.errors import StorageError
from mutualrl.run_folder import RunPaths
from mutualrl.write_failures import DISK_FULL_EXIT, storage_error


def assert_one_line_naming(err: StorageError, path: Path) -> None:
    message = str(err)
    assert message.startswith(f"no space left on {path} (") and " free)" in message and "\n" not in message


def test_an_atomic_file_keeps_its_old_content_and_leaves_no_temporary(tmp_path, disk_full):
    target = write_json_atomic(tmp_path / "status" / "a.json", {"step": 3})
    disk_full("status/a.json")
    with pytest.raises(StorageError) as info:
        write_json_atomic(target, {"step": 4})
    assert_one_line_naming(info.value, target)
    assert json.loads(target.read_text()) == {"step": 3}
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.json"]


def test_a_metrics_row_is_appended_whole_or_not_at_all(tmp_path, monkeypatch):
    """A real partial write (the first half of the row fits, then ENOSPC) is cut back: no half line."""
    from mutualrl.training.callbacks import append_jsonl

    path = tmp_path / "a.jsonl"
    append_jsonl(path, {"step": 1})
    real_write = os.write

    def half_then_full(fd, data):
        if len(data) > 4:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(StorageError) as info:
        append_jsonl(path, {"step": 2, "reward_mean": 0.5})
    monkeypatch.undo()
    assert_one_line_naming(info.value, path)
    assert path.read_text() == '{"step": 1}\n'
    append_text(path, '{"step": 2}\n')  # space freed: the row goes in after the last whole one
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2]


def test_the_launchers_merge_loses_no_row_when_the_disk_fills_and_then_frees(tmp_path, disk_full, monkeypatch):
    from mutualrl.launch.rundir.metrics_merge import MetricsMerger

    paths = RunPaths(tmp_path)
    paths.policy_metrics("a").parent.mkdir(parents=True)
    merger = MetricsMerger(paths, ["a"])
    append_text(paths.policy_metrics("a"), '{"step": 1}\n')
    merger.poll()
    append_text(paths.policy_metrics("a"), '{"step": 2}\n{"step": 3}\n')
    disk_full(str(paths.metrics))
    with pytest.raises(StorageError) as info:
        merger.poll()
    assert_one_line_naming(info.value, paths.metrics)
    assert paths.metrics.read_text() == '{"step": 1}\n'  # nothing half merged
    monkeypatch.delenv(DISK_FULL_ENV)
    merger.poll()
    assert [json.loads(line)["step"] for line in paths.metrics.read_text().splitlines()] == [1, 2, 3]
    assert int((tmp_path / "metrics" / ".a.merged").read_text()) == paths.policy_metrics("a").stat().st_size


def test_an_eval_result_names_its_file(tmp_path, disk_full):
    from mutualrl.evaluation.results import ModelEvalResult

    path = RunPaths(tmp_path).eval_result("a", 4)
    disk_full("eval/a/")
    with pytest.raises(StorageError) as info:
        ModelEvalResult(model="m", records=[], policy="a", step=4).save(path)
    assert_one_line_naming(info.value, path)
    assert not path.parent.exists() or list(path.parent.iterdir()) == []


def test_a_write_failure_without_errno_is_named_only_when_the_disk_is_nearly_full(tmp_path, monkeypatch):
    """torch.save reports ENOSPC as a RuntimeError ("unexpected pos ..."); other errors keep their traceback."""
    from mutualrl import write_failures as errors

    cut = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    monkeypatch.setattr(errors, "free_bytes", lambda path: 4096)
    assert str(storage_error(cut, tmp_path / "checkpoint-4")).startswith(f"no space left on {tmp_path}/checkpoint-4")
    assert storage_error(RuntimeError("CUDA out of memory"), tmp_path) is None
    assert storage_error(ValueError("no space left, but not a write"), tmp_path) is None
    quota = storage_error(OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp_path / "x")), tmp_path)
    assert str(quota).startswith(f"disk quota exceeded on {tmp_path / 'x'} (4.1 KB free)")


def test_a_worker_stopped_by_a_full_disk_is_reported_from_its_log_or_its_exit_code(tmp_path):
    from mutualrl.launch.supervise.worker_output import storage_reason

    log = tmp_path / "a.log"
    log.write_text("step 3\nerror: no space left on /run/see/step-000003/a (0 B free); free some space\n")
    assert storage_reason(log, 1, tmp_path).startswith("no space left on /run/see/step-000003/a")
    log.write_text("")  # the log could not hold the line either
    assert storage_reason(log, DISK_FULL_EXIT, tmp_path).startswith(f"no space left on {tmp_path} (")
    assert storage_reason(log, 1, tmp_path) is None  # any other failure: its own description


def test_run_json_says_failed_and_why_even_when_no_new_file_fits(tmp_path, monkeypatch):
    from mutualrl.launch.rundir import record as run_record

    paths = RunPaths(tmp_path)
    write_json_atomic(paths.run_json, {"status": "running", "started": "then", "pool": "tiny"})

    def full(path, data, **kwargs):
        raise StorageError(f"no space left on {path} (0 B free)")

    monkeypatch.setattr(run_record, "write_json_atomic", full)  # only an in-place rewrite can work
    assert run_record.mark_run_failed(paths, f"no space left on {tmp_path}/metrics.jsonl (0 B free)")
    record = json.loads(paths.run_json.read_text())
    assert record["status"] == "failed" and record["reason"].startswith("no space left on ")
    assert record["started"] == "then" and record["pool"] == "tiny"


def test_a_launch_on_a_full_disk_still_marks_a_killed_launchers_record_interrupted(tmp_path, monkeypatch):
    """The record a SIGKILLed launcher left "running" is the first thing a launch writes (before its lock's work): on
    a full disk it is rewritten in place too, so the one-line error is not followed by a record that still runs
    (benchmarks/chaos.py, ``disk_full:run.json@1`` after an ``all``)."""
    from mutualrl.launch.rundir import record as run_record

    paths = RunPaths(tmp_path)
    write_json_atomic(paths.run_json, {"status": "running", "started": "then"})
    monkeypatch.setenv(DISK_FULL_ENV, "run.json@1")
    with pytest.raises(StorageError):  # a new file cannot be made, as on a full disk
        write_json_atomic(paths.run_json, {"status": "probe"})
    run_record.mark_interrupted(paths)
    assert json.loads(paths.run_json.read_text()) == {"status": "interrupted", "started": "then"}


def test_a_worker_error_from_a_full_disk_becomes_one_line_and_exit_28(tmp_path, monkeypatch, capsys):
    """Anywhere in the worker (here: loading its config fails to write nothing but raises ENOSPC)."""
    from mutualrl.training import worker

    def fail(paths, policy, resume_from=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(paths.root / "policies" / "a" / "final"))

    monkeypatch.setattr(worker, "run_policy", fail)
    monkeypatch.setattr(worker, "start_launcher_watchdog", lambda: None)
    monkeypatch.setattr(worker, "mark_this_policy_failed", lambda *args: None)
    assert worker.main(["--run-dir", str(tmp_path), "--policy", "a"]) == DISK_FULL_EXIT
    err = capsys.readouterr().err
    assert err.startswith(f"error: no space left on {tmp_path}/policies/a/final (") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_disk_full_mid_checkpoint_then_resume_loses_nothing(tmp_path):
    """The disk fills while step 4's checkpoint is saved (weights written, optimizer not): one line naming the
    file, run.json failed with the reason, the lock free, no half metrics line. After freeing space, --resume
    names the incomplete checkpoint, goes on from checkpoint-2 (its optimizer state), and every row is there
    once; every checkpoint left is complete and carries its manifest."""
    import subprocess
    import sys

    from e2e_helpers import TINY, child_env, metric_lines
    from mutualrl.launch.rundir.lock import RunLock
    from mutualrl.ops.checkpoint_files import MANIFEST_NAME, checkpoint_problem

    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "mutualrl", "train", "-o", str(run_dir), *TINY, "--max-steps", "5",
               "--set", "grpo.save_steps=2"]
    env = {k: v for k, v in child_env().items() if not k.startswith("MUTUALRL_DEBUG")}
    full = subprocess.run(command, env={**env, DISK_FULL_ENV: "checkpoint-4"}, capture_output=True, text=True,
                          timeout=900)
    assert full.returncode == 1, full.stdout[-3000:] + full.stderr[-3000:]
    errors = [line for line in (full.stdout + full.stderr).splitlines() if "no space left on" in line]
    assert errors and "checkpoint-4/optimizer.pt (" in errors[0] and " free)" in errors[0], errors
    assert "Traceback" not in full.stdout + full.stderr
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "failed" and record["reason"].startswith("no space left on "), record
    with RunLock(run_dir).acquire("check", wait_for_orphans_s=5):  # released: no process of the run holds it
        pass
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        json.loads(line)  # no half line

    resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "checkpoint-4: incomplete, missing" in resumed.stdout and "optimizer state (optimizer.pt)" in resumed.stdout
    assert "resuming every policy from checkpoint-2" in resumed.stdout
    rows = metric_lines(run_dir)
    for policy in ("tiny-bpe", "tiny-sp"):
        assert sorted(r["step"] for r in rows if r["policy"] == policy) == [1, 2, 3, 4, 5]
    checkpoints = sorted((run_dir / "policies").glob("*/checkpoint-*"))
    assert checkpoints and all((c / MANIFEST_NAME).exists() and checkpoint_problem(c) is None for c in checkpoints)
