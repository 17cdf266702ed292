"""Issue 42: an odd start (a failed one before, a deleted folder, empty data, a read-only folder) is one clear
line, and the launcher leaves run.json true whatever stops it."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from mutualrl.errors import UsageError
from mutualrl.errors import DataError
from mutualrl.launch import run as launch_run
from mutualrl.launch.rundir.lock import RunLock, mark_run_folder
from mutualrl.launch.rundir.prepare import check_run_dir
from mutualrl.launch.run import TrainOptions, resolve_config, train_one
from mutualrl.run_folder import RunPaths
from mutualrl.tasks.sources import read_local
from mutualrl.write_failures import storage_error

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)


def _failed_start(root: Path) -> RunPaths:
    """What a start refused for bad data leaves: the lock file and the marker, no config."""
    RunLock(root).acquire("train into").release()
    mark_run_folder(root)
    return RunPaths(root)


def test_the_corrected_command_starts_a_folder_whose_start_failed(tmp_path):
    """Case 8: the corrected command was refused ("already exists: use --resume")."""
    paths = _failed_start(tmp_path / "run")
    (paths.data).mkdir()  # prompts written before the failure
    check_run_dir(paths, resume=False, overwrite=False)  # no error
    (paths.root / "notes.txt").write_text("mine")
    paths.config.write_text("x")  # a folder that did start is still refused
    with pytest.raises(UsageError, match="already exists"):
        check_run_dir(paths, resume=False, overwrite=False)


def test_a_bare_resume_of_a_folder_whose_start_failed_is_refused_not_the_default_pool(tmp_path):
    """Case 8: a bare --resume of that folder silently trained the default pool."""
    paths = _failed_start(tmp_path / "run")
    with pytest.raises(UsageError, match="holds no run to resume"):
        resolve_config(TrainOptions(output_dir=paths.root, resume=True))


def test_a_launcher_error_leaves_run_json_failed_not_running(tmp_path, monkeypatch):
    """Case 4 / 11 class: whatever stops the launcher (an AttributeError here), run.json is not left "running"."""
    root = tmp_path / "run"

    def crash(options, config, source, paths, console, lock, allowed):
        mark_run_folder(paths.root)
        paths.run_json.write_text(json.dumps({"status": "running", "pool": "tiny"}))
        raise AttributeError("'NoneType' object has no attribute 'get'")

    monkeypatch.setattr(launch_run, "launch_locked", crash)
    with pytest.raises(AttributeError):
        train_one(TrainOptions(output_dir=root), Console(file=io.StringIO()))
    record = json.loads((root / "run.json").read_text())
    assert record["status"] == "failed" and "AttributeError" in record["reason"]


def test_a_deleted_working_folder_is_one_line_not_a_traceback(tmp_path):
    """Case 11: the folder the command was started from deleted (before or during start-up)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(f"cd {gone} && rmdir {gone} && {sys.executable} -m mutualrl train --dry-run",
                          shell=True, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "current folder no longer exists" in proc.stderr


def test_workers_start_in_the_run_folder_when_the_launch_folder_is_gone(tmp_path, monkeypatch):
    from mutualrl.launch.plan.commands import launch_dir
    from mutualrl.launch.supervise import worker_output

    assert worker_output.spawn_dir(tmp_path, tmp_path / "deleted") == tmp_path  # the planned folder is gone
    assert worker_output.spawn_dir(tmp_path, Path.cwd()) == Path.cwd()
    monkeypatch.setattr(worker_output.os, "getcwd", lambda: (_ for _ in ()).throw(FileNotFoundError(errno.ENOENT, "")))
    assert worker_output.spawn_dir(tmp_path) == tmp_path
    monkeypatch.setattr(Path, "cwd", classmethod(lambda cls: (_ for _ in ()).throw(FileNotFoundError(errno.ENOENT, ""))))
    assert launch_dir(tmp_path) == tmp_path  # the plan of a launch whose folder was deleted during start-up


def test_an_empty_data_file_says_it_is_empty(tmp_path):
    """Case 12: an empty dataset file said "no training prompt fits task.max_prompt_tokens=200"."""
    empty = tmp_path / "train.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="train.jsonl: holds no rows"):
        read_local(empty, "train")


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_read_only_run_folder_is_not_told_to_free_space(tmp_path, code):
    """Case 12: a read-only run folder said "free some space"."""
    err = storage_error(OSError(code, os.strerror(code), str(tmp_path / "run.json")), tmp_path)
    assert err is not None and "make it writable" in str(err) and "free some space" not in str(err)
    assert str(tmp_path / "run.json") in str(err)


def test_max_prompt_tokens_above_the_model_context_is_refused_by_the_dry_run(tmp_path):
    """Case 7: task.max_prompt_tokens above the tiny models' 256 positions was accepted (IndexError in the run)."""
    from mutualrl.errors import PlacementError

    options = TrainOptions(output_dir=tmp_path / "run", dry_run=True, overrides=["task.max_prompt_tokens=300"])
    with pytest.raises(PlacementError, match=r"max_prompt_tokens=300 \+ grpo.max_completion_length=4 = 304 tokens: "
                                             r"more than policy .* 256 positions"):
        resolve_config(options)
    resolve_config(TrainOptions(output_dir=tmp_path / "run", overrides=["task.max_prompt_tokens=200"]))  # fits
    assert not (tmp_path / "run").exists()


def test_the_corrected_command_clears_what_the_failed_start_left_then_launches(tmp_path, monkeypatch):
    """Case 8 end to end up to the launch: the leftovers go, the lock is taken, the launch proceeds."""
    paths = _failed_start(tmp_path / "run")
    (paths.data).mkdir()
    (paths.data / "train.jsonl").write_text("{}\n")
    launched = []
    monkeypatch.setattr(launch_run, "launch_locked", lambda *args, **kwargs: launched.append(args[3]) or 0)
    assert train_one(TrainOptions(output_dir=paths.root), Console(file=io.StringIO())) == 0
    assert launched == [paths] and not paths.data.exists() and not paths.marker.exists()


def test_a_rendezvous_port_past_65535_is_refused_by_the_dry_run(tmp_path):
    from mutualrl.errors import PlacementError

    options = TrainOptions(output_dir=tmp_path / "run", dry_run=True, overrides=["launch.main_process_port=65535"])
    with pytest.raises(PlacementError, match="2 policies reach 65536, past 65535"):
        resolve_config(options)
