"""A sweep knows which of its runs are live and never starts or submits them again: the same ``sweep --slurm``
command run while its task trains (or waits in the queue) resubmitted the run, whose second task then failed on the
run lock. Live: a job the sweep submitted (``SWEEP/jobs.json``) that Slurm's queue still holds, a task of submitit's
local executor still running here, or a run folder whose lock a live launch holds. Each live run is said in one line;
the others go on. In process: ``sbatch`` answered by echo and ``squeue`` by a script on PATH, nothing trains."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mutualrl.cli.main import app
from mutualrl.launch.rundir.lock import RunLock
from mutualrl.launch.sweep.grid import SweepSpec
from mutualrl.launch.sweep.live import JOBS_RECORD, live_runs, record_jobs, slurm_states
from mutualrl.launch.sweep.slurm import SlurmOptions, submit_array
from user_folders import USER_TASK, make_user_folder

ARGS = ["sweep", "--regimes", "standalone,sgt", "--seeds", "1", "--max-steps", "2", "-o", "sw",
        *[x for s in USER_TASK for x in ("--set", s)]]


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_user_folder(tmp_path, monkeypatch)


@pytest.fixture
def slurm(user_folder: Path, monkeypatch: pytest.MonkeyPatch):
    """Slurm here: submitit's own submission with ``sbatch`` answered by echo (job 4242), and ``squeue`` a script
    on PATH printing what the test sets (``slurm(lines)``)."""
    from submitit.slurm.slurm import SlurmExecutor

    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    monkeypatch.setattr(SlurmExecutor, "_make_submission_command",
                        lambda self, path: ["echo", "Submitted batch job 4242"])
    bin_dir = user_folder / "bin"
    bin_dir.mkdir()
    queue = user_folder / "queue.txt"
    queue.write_text("")
    (bin_dir / "squeue").write_text(f"#!/bin/sh\ncat {queue}\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def set_queue(lines: list[str]) -> None:
        queue.write_text("".join(f"{line}\n" for line in lines))

    return set_queue


def invoke(args: list[str]) -> tuple[int, str]:
    done = CliRunner().invoke(app, args, terminal_width=400)
    assert "Traceback" not in done.output, done.output
    return done.exit_code, done.output


@pytest.mark.slow
def test_the_same_slurm_sweep_run_again_while_its_tasks_train_submits_only_what_is_not_live(user_folder: Path,
                                                                                            slurm) -> None:
    code, first = invoke([*ARGS, "--slurm"])
    assert code == 0 and "submitted job array 4242 (2 runs" in first, first
    jobs = json.loads((user_folder / "sw" / JOBS_RECORD).read_text())["runs"]
    assert {name: entry["job_id"] for name, entry in jobs.items()} == {"standalone-seed1": "4242_0",
                                                                        "sgt-seed1": "4242_1"}

    slurm(["4242_0 RUNNING", "4242_1 PENDING", "777_3 RUNNING"])  # both live (one still queued), another job
    code, again = invoke([*ARGS, "--slurm"])
    lines = [line for line in again.splitlines() if line.startswith("sweep run ")]
    assert code == 0 and "nothing to submit" in again and "submitted job array" not in again, again
    assert lines == ["sweep run standalone-seed1: live (job 4242_0 is running in Slurm's queue): not started or "
                     "submitted again; the same command picks it up once that launch ends",
                     "sweep run sgt-seed1: live (job 4242_1 is pending in Slurm's queue): not started or submitted "
                     "again; the same command picks it up once that launch ends"]
    assert "0 to train, 2 live" in " ".join(again.split())

    slurm(["4242_0 RUNNING", "4242_1 COMPLETING"])
    assert invoke([*ARGS, "--slurm", "--dry-run"])[1].count(": live (") == 2
    slurm(["4242_0 RUNNING", "4242_1 FAILED"])  # over: submitted again, the live one still not
    code, third = invoke([*ARGS, "--slurm"])
    assert code == 0 and "submitted job array 4242 (1 runs" in third and "sweep run standalone-seed1: live" in third
    jobs = json.loads((user_folder / "sw" / JOBS_RECORD).read_text())["runs"]
    assert jobs["standalone-seed1"]["job_id"] == "4242_0" and jobs["sgt-seed1"]["job_id"] == "4242"


def test_a_run_whose_lock_a_live_launch_holds_is_left_to_it_by_a_sweep_here_or_on_slurm(user_folder: Path,
                                                                                         slurm) -> None:
    """No job recorded (another sweep, or train itself): the run folder's lock says who has the run."""
    lock = RunLock(user_folder / "sw" / "standalone-seed1").acquire("train")  # a live launch: this process
    try:
        code, out = invoke([*ARGS, "--slurm"])
        line = next(line for line in out.splitlines() if line.startswith("sweep run standalone-seed1"))
        assert code == 0 and "submitted job array 4242 (1 runs" in out and "sweep run sgt-seed1" not in out
        assert f"live (its folder is held by pid {os.getpid()} since" in line
        code, out = invoke(["sweep", "--regimes", "standalone", "--seeds", "1", "--max-steps", "2", "-o", "sw",
                            *[x for s in USER_TASK for x in ("--set", s)]])  # here: nothing else to start
        assert code == 1 and "sweep run standalone-seed1: live" in out and "training (" not in out
        assert "0/1 runs finished; 1 live, left to the launch that has it (standalone-seed1)" in " ".join(out.split())
    finally:
        lock.release()
    assert "standalone-seed1" not in live_runs(user_folder / "sw", ["standalone-seed1"])[0]


def test_a_lock_recorded_on_another_machine_counts_until_the_scheduler_says_its_job_is_over(user_folder: Path,
                                                                                            slurm) -> None:
    run = user_folder / "sw" / "standalone-seed1"
    run.mkdir(parents=True)
    (run / ".lock").write_text(json.dumps({"pid": 12, "host": "node-elsewhere", "since": "2026-11-27T10:00:00"}))
    held = os.open(run / ".lock", os.O_RDONLY)  # that node's launcher holds the OS lock (tests/test_lock_liveness.py:
    fcntl.flock(held, fcntl.LOCK_EX)  # a record whose lock nobody holds is no live launch)
    try:
        live, note = live_runs(user_folder / "sw", ["standalone-seed1"])
        assert note is None and "held by pid 12 on node-elsewhere" in live["standalone-seed1"]
        (user_folder / "sw" / JOBS_RECORD).write_text(json.dumps({"runs": {"standalone-seed1": {
            "job_id": "4242_0", "cluster": "slurm", "host": socket.gethostname()}}}))
        slurm(["4242_0 RUNNING"])
        assert "job 4242_0 is running" in live_runs(user_folder / "sw", ["standalone-seed1"])[0]["standalone-seed1"]
        slurm([])  # the job left the queue: its node's record is stale, the run is not live
        assert live_runs(user_folder / "sw", ["standalone-seed1"]) == ({}, None)
    finally:
        os.close(held)


def test_without_squeue_the_locks_decide_and_it_is_said(user_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(user_folder / "no-bin"))
    assert slurm_states(["1"]) is None
    (user_folder / "sw").mkdir()
    (user_folder / "sw" / JOBS_RECORD).write_text(json.dumps({"runs": {"a": {"job_id": "9", "cluster": "slurm"}}}))
    live, note = live_runs(user_folder / "sw", ["a"])
    assert live == {} and note is not None and "cannot ask squeue" in note


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_task_of_submitits_local_executor_is_live_while_it_runs(tmp_path: Path) -> None:
    spec = SweepSpec(tmp_path / "sw", ["standalone"], [1], max_steps=1)
    stop = tmp_path / "stop"
    command = [sys.executable, "-c", f"import pathlib, time\nwhile not pathlib.Path({str(stop)!r}).exists(): "
               "time.sleep(0.1)"]
    (job,) = submit_array(spec, [command], SlurmOptions(local=True, time_min=5))
    record_jobs(spec.folder, {"standalone-seed1": job}, local=True)
    try:
        live = live_runs(spec.folder, ["standalone-seed1"])[0]
        assert live == {"standalone-seed1": f"its task (pid {job.job_id}) still runs here"}
    finally:
        stop.write_text("")
    assert job.result() == 0
    deadline = time.monotonic() + 30
    while live_runs(spec.folder, ["standalone-seed1"])[0]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
