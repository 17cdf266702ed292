"""Which runs of a sweep are live: training now, or submitted and waiting in the scheduler's queue.

The same ``mutualrl sweep`` command run again while a run trains must not start or submit that run a second time
(its second launch would fail on the run lock, after waiting in the queue, and its task be counted failed). Two
records say a run is live:

- the run folder's lock (``RUN/.lock``, :mod:`mutualrl.launch.rundir.lock`), asked of the operating system first
  (:func:`~mutualrl.host.file_lock.lock_held`, a non-blocking probe): a lock no process holds is no live launch,
  whatever its record says (a launcher killed on another node leaves its record, not its lock; ``train --resume``
  takes such a lock, and so the sweep starts the run). A held lock is live when its recorded holder here is alive
  (pid and start time checked), or is on another machine (a cluster node) and the scheduler does not say the run's
  job is over; a stopped launch's workers still running here keep the run live too;
- the jobs a ``--slurm`` sweep submitted, recorded in ``SWEEP/jobs.json`` (:data:`JOBS_RECORD`) as each submission
  returns: a Slurm job still in ``squeue`` (pending, running, completing, suspended ...; asked by job id, so a
  colleague running the same sweep sees the jobs of whoever submitted them), or a task of submitit's local executor
  (``--slurm-local``, its job id is the pid of the process that runs it) still alive here.

A live run is said in one line and left to the launch that has it; the sweep goes on with the others.
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.run_folder import LOCK_NAME, read_json_or

JOBS_RECORD = "jobs.json"
JOBS_FORMAT = "mutualrl-sweep-jobs"
#: Slurm job states (``squeue %T``) of a job that is over: anything else squeue lists is waiting or running.
OVER = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                  "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT"})
SQUEUE_TIMEOUT_S = 60
SLURM_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")
"""A job id as Slurm gives it (``4242``, an array task ``4242_3``): anything else in a record is not put in a command."""


def read_jobs(folder: Path) -> dict[str, dict[str, Any]]:
    """``run name -> its last submission`` from the sweep's :data:`JOBS_RECORD` (empty without one; entries of
    another shape are left out: a damaged record cannot make a run live)."""
    data = read_json_or(Path(folder) / JOBS_RECORD, {})
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, dict):
        return {}
    return {str(name): entry for name, entry in runs.items()
            if isinstance(entry, dict) and isinstance(entry.get("job_id"), str) and entry["job_id"]}


def record_jobs(folder: Path, submitted: Mapping[str, Any], local: bool) -> None:
    """Add each run's submitted job (``run name -> submitit job``) to the sweep's :data:`JOBS_RECORD`, keeping the
    other runs' entries; a local task's pid start time is kept, so that a reused pid is not taken for it."""
    from mutualrl.launch.rundir.lock import process_start

    runs = read_jobs(folder)
    for name, job in submitted.items():
        job_id = str(job.job_id)
        entry: dict[str, Any] = {"job_id": job_id, "cluster": "local" if local else "slurm",
                                 "host": socket.gethostname()}
        if local and job_id.isascii() and job_id.isdigit():
            entry["start"] = process_start(int(job_id))
        runs[name] = entry
    write_json_atomic(Path(folder) / JOBS_RECORD, {"format": JOBS_FORMAT, "version": 1, "runs": runs})


def slurm_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """``job id -> state`` of the recorded jobs ``job_ids`` that squeue lists (array tasks one by one), whoever
    submitted them (asked by id, not by user: a colleague's identical sweep must not resubmit a live task); None
    when squeue cannot be asked (not installed, an error): the caller says so. Jobs squeue no longer knows (it
    answers "Invalid job id" for those) are not listed."""
    if not job_ids:
        return {}
    ids = sorted({job_id for job_id in job_ids if SLURM_JOB_ID.fullmatch(job_id)})
    if not ids:
        return {}
    try:
        done = subprocess.run(["squeue", "--noheader", "--array", "--jobs", ",".join(ids), "--format", "%i %T"],
                              capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return {} if "invalid job id" in (done.stderr or "").lower() else None
    states = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            states[parts[0]] = parts[1]
    return states


def job_live(entry: Mapping[str, Any], states: Mapping[str, str] | None) -> str | None:
    """Why the recorded job ``entry`` is live (a clause), or None when it is over (or cannot be asked: None
    ``states`` for a Slurm job)."""
    from mutualrl.launch.rundir.lock import same_process

    job_id = entry["job_id"]
    if entry.get("cluster") == "local":
        if entry.get("host") != socket.gethostname() or not (job_id.isascii() and job_id.isdigit()):
            return None
        return f"its task (pid {job_id}) still runs here" if same_process(int(job_id), entry.get("start")) else None
    state = (states or {}).get(job_id)
    return f"job {job_id} is {state.lower()} in Slurm's queue" if state is not None and state not in OVER else None


def lock_live(run: Path, job_over: bool) -> str | None:
    """Why the run folder's lock says the run is live (a clause), or None. The operating system's lock decides first
    (:func:`~mutualrl.host.file_lock.lock_held`): held by no process, only a stopped launch's workers still running
    here keep it live. ``job_over``: the scheduler said the run's recorded job is over, so a holder recorded on
    another machine is a stale record (its node is gone)."""
    from mutualrl.host.file_lock import lock_held
    from mutualrl.launch.rundir.lock import describe_holder, describe_workers, holder_alive, live_workers, read_holder

    path = Path(run) / LOCK_NAME
    holder = read_holder(path)
    if not holder:
        return None
    if lock_held(path) is False:  # no launch holds it, on any machine: its record is what a killed launcher left
        return describe_workers(holder).split("; its watchdog")[0] if live_workers(holder) else None
    elsewhere = holder.get("host") not in (None, socket.gethostname())
    if elsewhere and job_over:
        return None
    if holder_alive(holder) or live_workers(holder):
        return f"its folder is {describe_holder(holder).split(';')[0]}"
    return None


def live_runs(folder: Path, names: Sequence[str]) -> tuple[dict[str, str], str | None]:
    """``run name -> why it is live`` for those of ``names`` (run folders of sweep ``folder``) that a launch has
    now, and a line when the scheduler could not be asked (None: it could, or nothing needed it)."""
    jobs = read_jobs(folder)
    slurm = [jobs[name]["job_id"] for name in names if name in jobs and jobs[name].get("cluster") != "local"]
    states = slurm_states(slurm) if slurm else {}
    note = None
    if states is None:
        note = ("cannot ask squeue whether the sweep's submitted jobs still run; only the run folders' locks say "
                "which runs are live")
    live = {}
    for name in names:
        entry = jobs.get(name)
        why = job_live(entry, states) if entry is not None else None
        job_over = entry is not None and why is None and (entry.get("cluster") == "local" or states is not None)
        why = why or lock_live(Path(folder) / name, job_over)
        if why is not None:
            live[name] = why
    return live, note


def live_line(name: str, why: str) -> str:
    """The one line a live run gets."""
    return (f"sweep run {name}: live ({why}): not started or submitted again; the same command picks it up once "
            "that launch ends")
