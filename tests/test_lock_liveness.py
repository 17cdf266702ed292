"""Liveness from the operating system, locks others cannot take, waits that end and say for whom (issue 93, class 2):
a lock record a launcher killed on another node left blocked a sweep forever; a colleague's identical ``sweep
--slurm`` resubmitted a live task (squeue was asked about the current user's jobs only); ``.sweep-lock`` was
world-readable and waited on in silence, without end; cached tokenizers and data were locked on every read. In
process: a lock "held elsewhere" is an ``flock`` this test holds on a descriptor of its own, as another process's
would be; ``squeue`` is a script on PATH."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from mutualrl.assets.cache import asset_lock, cache_dir
from mutualrl.errors import AssetError, UsageError
from mutualrl.host.file_lock import lock_held, open_lock_file, write_holder
from mutualrl.launch.rundir.lock import RunLock
from mutualrl.launch.sweep.live import JOBS_RECORD, live_runs, slurm_states
from mutualrl.launch.sweep.slurm import SWEEP_LOCK, sweep_lock


def hold(path: Path) -> int:
    """An exclusive ``flock`` on ``path`` through a descriptor of its own (another process's, as the kernel sees it)."""
    fd = open_lock_file(path)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_a_record_left_by_a_launcher_killed_on_another_node_does_not_keep_a_run_live(tmp_path: Path) -> None:
    run = tmp_path / "sw" / "sgt-seed1"
    run.mkdir(parents=True)
    lock = run / ".lock"
    lock.write_text(json.dumps({"pid": 12, "host": "node-elsewhere", "since": "2026-11-27T10:00:00"}))
    assert lock_held(lock) is False
    assert live_runs(tmp_path / "sw", ["sgt-seed1"]) == ({}, None)  # nobody holds it: the sweep starts the run
    with RunLock(run).acquire("resume") as taken:  # as train --resume takes it
        assert taken.fd is not None and json.loads(lock.read_text())["pid"] == os.getpid()

    lock.write_text(json.dumps({"pid": 12, "host": "node-elsewhere", "since": "2026-11-27T10:00:00"}))
    fd = hold(lock)  # that node's launcher alive: its lock held
    try:
        live, _ = live_runs(tmp_path / "sw", ["sgt-seed1"])
        assert "held by pid 12 on node-elsewhere" in live["sgt-seed1"]
    finally:
        os.close(fd)


def test_squeue_is_asked_about_the_recorded_job_ids_whoever_submitted_them(tmp_path: Path, monkeypatch) -> None:
    """A colleague's sweep: squeue by ``--user`` listed only their own jobs, so a live task of the first submitter's
    was submitted again. The fake squeue answers only about the jobs it is asked for by id."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "asked.txt"
    (bin_dir / "squeue").write_text(f'#!/bin/sh\necho "$@" > {asked}\ncase "$*" in *"--jobs 4242_0,4242_1"*) '
                                    'echo "4242_0 RUNNING"; echo "4242_1 COMPLETED";; esac\n')
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert slurm_states(["4242_1", "4242_0", "4242_0"]) == {"4242_0": "RUNNING", "4242_1": "COMPLETED"}
    assert "--user" not in asked.read_text().split()
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / JOBS_RECORD).write_text(json.dumps({"runs": {
        "standalone-seed1": {"job_id": "4242_0", "cluster": "slurm", "host": "login-1"},
        "sgt-seed1": {"job_id": "4242_1", "cluster": "slurm", "host": "login-1"}}}))
    live, note = live_runs(sweep, ["standalone-seed1", "sgt-seed1"])
    assert note is None and live == {"standalone-seed1": "job 4242_0 is running in Slurm's queue"}


def test_the_sweep_lock_is_not_world_takeable_and_a_wait_says_whom_and_ends(tmp_path: Path) -> None:
    folder = tmp_path / "sw"
    said: list[str] = []
    with sweep_lock(folder, said.append, wait_s=1.0):
        path = folder / SWEEP_LOCK
        assert stat.S_IMODE(path.stat().st_mode) & 0o007 == 0
        record = json.loads(path.read_text())
        assert record["pid"] == os.getpid() and record["user"]
    assert said == []  # free: taken at once, nothing said

    fd = hold(folder / SWEEP_LOCK)  # another submission of the same sweep
    write_holder(fd)
    try:
        start = time.monotonic()
        with pytest.raises(UsageError) as err:
            with sweep_lock(folder, said.append, wait_s=0.6):
                pass
        assert time.monotonic() - start < 30
    finally:
        os.close(fd)
    assert len(said) == 1 and said[0].startswith(f"waiting for {folder / SWEEP_LOCK}")
    assert f"pid {os.getpid()} of " in said[0] and "at most 1 s" in said[0]
    message = str(err.value)
    assert message.startswith(f"{folder / SWEEP_LOCK}: still held by pid {os.getpid()}") and "\n" not in message


def test_an_older_world_readable_lock_file_loses_the_others_bits(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").write_text("")
    (run / ".lock").chmod(0o644)
    with RunLock(run).acquire("train into"):
        assert stat.S_IMODE((run / ".lock").stat().st_mode) & 0o007 == 0


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch) -> Path:
    """A cache of the test's own holding a copy of the built GPT-2 tokenizer."""
    source = cache_dir() / "tokenizers" / "gpt2"
    monkeypatch.setenv("MUTUALRL_CACHE", str(tmp_path / "cache"))
    shutil.copytree(source, cache_dir() / "tokenizers" / "gpt2")
    return cache_dir()


def test_a_complete_cached_asset_is_read_without_its_lock(own_cache: Path) -> None:
    from mutualrl.assets.tokenizers import fetch_tokenizer

    (own_cache / ".locks").mkdir()
    fd = hold(own_cache / ".locks" / "tokenizers--gpt2.lock")  # a slow fetch elsewhere holds the build lock
    try:
        start = time.monotonic()
        assert fetch_tokenizer("gpt2") == own_cache / "tokenizers" / "gpt2"
        assert time.monotonic() - start < 30  # not waited for: 1,800 s before
    finally:
        os.close(fd)


def test_a_wait_for_a_build_says_what_it_waits_for_and_ends_naming_the_holder(own_cache: Path, capsys) -> None:
    (own_cache / ".locks").mkdir()
    path = own_cache / ".locks" / "models--m.lock"
    fd = hold(path)
    write_holder(fd)
    try:
        with pytest.raises(AssetError) as err:
            with asset_lock("models", "m", timeout_s=0.4):
                pass
    finally:
        os.close(fd)
    waited = capsys.readouterr().err
    assert f"waiting for {path} (another process is building models 'm'), held by pid {os.getpid()}" in waited
    assert str(err.value).startswith(f"{path}: still held by pid {os.getpid()}") and "\n" not in str(err.value)
    with asset_lock("models", "m", timeout_s=0.4):  # free again: taken
        assert stat.S_IMODE(path.stat().st_mode) & 0o007 == 0


def test_a_wait_for_a_stopped_launchs_workers_says_what_it_waits_for(tmp_path: Path, capsys) -> None:
    import socket
    import subprocess
    import sys

    from mutualrl.launch.rundir.lock import RunBusyError, process_start

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # the stopped launcher: its pid is no process now
    worker = subprocess.Popen(["sleep", "30"], start_new_session=True)  # its worker, still running
    try:
        run = tmp_path / "run"
        run.mkdir()
        (run / ".lock").write_text(json.dumps({
            "pid": gone.pid, "host": socket.gethostname(), "since": "2026-11-28T10:00:00",
            "workers": {"tiny-bpe": {"pgid": worker.pid, "start": process_start(worker.pid)}}}))
        with pytest.raises(RunBusyError, match=f"policy tiny-bpe's worker \\(pid {worker.pid}\\) still runs"):
            RunLock(run).acquire("resume", wait_for_orphans_s=0.6)
    finally:
        worker.kill()
        worker.wait()
    said = capsys.readouterr().err
    assert said.count("waiting up to") == 1 and f"{run / '.lock'}: waiting up to" in said
    assert f"for the workers of the stopped launch (pid {gone.pid}) to end: policy tiny-bpe's worker " \
           f"(pid {worker.pid})" in said
