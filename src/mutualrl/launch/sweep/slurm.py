"""``mutualrl sweep --slurm``: the sweep's runs as one Slurm job array, submitted by submitit (one array task per
run, at most ``--slurm-parallel`` at once), with the sweep folder as the only state the jobs share.

The state of every run (reuse, resume, new) is decided here before anything is submitted, as on a laptop; so are
the resources each task asks for (GPUs: what the runs' settings ask for, :mod:`mutualrl.launch.sweep.task_needs`), shown
before submission and recorded in ``sweep.json`` with the asset cache. Each array task checks its asset cache, then
runs its run's ``mutualrl train`` command in the folder the sweep was started from. submitit's local executor runs
the same array as processes on this machine (``--slurm-local``: how it is tested without Slurm).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from mutualrl.errors import UsageError
from mutualrl.launch.sweep.grid import SweepPoint, SweepSpec, plan_sweep, train_command
from mutualrl.launch.sweep.task_needs import (
    DEFAULT_CPUS,
    DEFAULT_TIME_MIN,
    cache_line,
    cache_record,
    fit_time_and_cpus,
    run_configs,
    task_cache_env,
    task_gpus,
    task_mem_gb,
)
from mutualrl.output_guards import folder_inside, refuse_links_below, write_new_inside

#: Where submitit keeps its job files (scripts, pickles, logs), inside the sweep folder.
SLURM_DIR = "slurm"


@dataclass
class SlurmOptions:
    """What each array task asks Slurm for."""

    partition: str | None = None
    time_min: int | None = None  # None: the runs' planned time (task_needs.fit_time_and_cpus), else 240
    gpus_per_task: int | None = None  # None: what the runs ask for (task_needs.task_gpus); 0 when submitted as is
    cpus_per_task: int | None = None  # None: 4 a GPU rank of the runs' plans, at least 4
    mem_gb: int | None = None  # None: the runs' host RAM + a margin (task_needs.task_mem_gb); CPU: the partition's
    parallel: int = 8  # array tasks running at once
    local: bool = False  # submitit's local executor instead of sbatch
    signal_s: int | None = None  # SIGUSR2 this long before the time limit; None: the runs' planned stop (stop_signal)


def executor_for(folder: Path, options: SlurmOptions) -> Any:
    """submitit's executor with these parameters (``cluster="local"``: processes on this machine)."""
    try:
        import submitit
    except ImportError as err:
        raise UsageError(f"mutualrl sweep --slurm needs submitit ({err}); install it: pip install "
                         "'mutualrl[experiments]' (setup.sh does)") from None
    folder_inside(folder, SLURM_DIR)  # a link planted there would take the job scripts and pickles out of the sweep
    try:
        executor = submitit.AutoExecutor(folder=folder / SLURM_DIR / "%j", cluster="local" if options.local else "slurm")
    except RuntimeError as err:  # no srun on this machine
        raise UsageError(f"--slurm: {err} Submit from a Slurm login node, try the array here with --slurm-local, or "
                         "run without --slurm") from None
    parameters: dict[str, Any] = {"timeout_min": options.time_min or DEFAULT_TIME_MIN,
                                  "cpus_per_task": options.cpus_per_task or DEFAULT_CPUS,
                                  "gpus_per_node": options.gpus_per_task or 0, "tasks_per_node": 1, "nodes": 1,
                                  "name": f"mutualrl-sweep-{folder.name}", "slurm_array_parallelism": options.parallel}
    if options.partition:
        parameters["slurm_partition"] = options.partition
    if options.mem_gb:
        parameters["mem_gb"] = options.mem_gb
    if options.signal_s:
        parameters["slurm_signal_delay_s"] = options.signal_s  # submitit's `#SBATCH --signal=USR2@N`
    executor.update_parameters(**parameters)
    return executor


def resources_line(tasks: int, options: SlurmOptions) -> str:
    """The job array's resources in one line, as submitted (the dry run shows the same)."""
    memory = f"{options.mem_gb} GB memory" if options.mem_gb else "the partition's default memory"
    at_once = max(1, min(options.parallel, tasks))  # submitit caps the array's parallelism at its size
    return (f"job array: {tasks} task{'s' if tasks != 1 else ''} (at most {at_once} at once), each "
            f"{options.gpus_per_task or 0} GPU{'s' if options.gpus_per_task != 1 else ''}, "
            f"{options.cpus_per_task or DEFAULT_CPUS} CPUs, {memory}, {options.time_min or DEFAULT_TIME_MIN} min, "
            f"partition {options.partition or '(the default)'}"
            f"{f', stop signal {options.signal_s} s before the limit' if options.signal_s else ''}"
            f"{'; submitit local executor' if options.local else ''}")


def train_job(command: list[str], cwd: str, cache: dict[str, Any] | None = None) -> int:
    """One array task: its asset cache checked against the sweep's ``cache`` record (a cache that lacks the runs'
    assets refuses the task in one line, before anything), then the run's ``mutualrl train`` in the sweep's working
    directory; a failure fails the task."""
    env = None
    if cache is not None:
        try:
            env, note = task_cache_env(cache, os.environ)
        except UsageError as err:
            print(f"mutualrl sweep: {err}", file=sys.stderr, flush=True)
            raise
        if note:
            print(f"mutualrl sweep: {note}", file=sys.stderr, flush=True)
    returncode = run_passing_stop_on(command, cwd, env)
    if returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} exited {returncode}")
    return returncode


def run_passing_stop_on(command: list[str], cwd: str, env: dict[str, str] | None) -> int:
    """``command``'s exit code. submitit's local executor cancels a task with SIGINT to it alone, then SIGKILL a
    second later (``submitit/local/local.py`` ``kill_tasks``): the run gets a SIGTERM, so it saves its checkpoint at the
    step in flight on its own, and outlives this task if it must (subprocess.run would SIGKILL it at once). Under
    Slurm, ``scancel`` signals the run itself. The warning before the time limit (SIGUSR2, ``SlurmOptions.signal_s``)
    is passed on to the run too (under Slurm it reaches the run itself as well: twice within a second counts once)
    and the task waits for the run to save and end: submitit's own handler would end the task at once, and Slurm
    then every process of its step."""
    import signal

    from mutualrl.training.stop_request import GRACE_S

    process, cancelled = start_holding_sigint(command, cwd, env)
    warned = _pass_on(signal.SIGUSR2, process)
    try:
        if cancelled:
            raise KeyboardInterrupt
        return process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=GRACE_S + 10)
        except subprocess.TimeoutExpired:
            pass
        raise
    finally:
        if warned is not None:
            signal.signal(signal.SIGUSR2, warned)


def _pass_on(signum: int, process: subprocess.Popen) -> Any:
    """In the main thread: ``signum`` is sent on to ``process`` until restored; the handler it replaced (None
    elsewhere, where Python allows no handler)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.signal(signum, lambda received, frame: process.send_signal(received))
    return signal.SIG_DFL if previous is None else previous


def stop_signal(options: SlurmOptions, plans: list[Any]) -> SlurmOptions:
    """``options`` with the warning before the time limit that lets the runs of ``plans`` finish a step and save
    (:func:`mutualrl.launch.supervise.stop_grace.warning_s`, the largest checkpoints of any run), unless given."""
    from mutualrl.launch.supervise.stop_grace import planned_save_gib, warning_s

    if options.signal_s is not None:
        return options
    return replace(options, signal_s=warning_s(max(map(planned_save_gib, plans), default=0.0),
                                               options.time_min or DEFAULT_TIME_MIN))


def start_holding_sigint(command: list[str], cwd: str, env: dict[str, str] | None) -> tuple[subprocess.Popen, bool]:
    """Start ``command``; a SIGINT while it starts is held and returned (True), not raised inside ``Popen``, where
    it would leave the started run unknown and so never passed the stop (seen on a loaded box: the run went on)."""
    import signal
    import threading

    held: list[int] = []
    holding = (threading.current_thread() is threading.main_thread()
               and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum)) if holding else None
    try:
        process = subprocess.Popen(command, cwd=cwd, env=env)
    finally:
        if holding:
            signal.signal(signal.SIGINT, previous)
    return process, bool(held)


def submit_array(spec: SweepSpec, commands: list[list[str]], options: SlurmOptions,
                 cache: dict[str, Any] | None = None) -> list[Any]:
    """One job array of ``commands`` (each a run's train command, each task checking ``cache`` first); the
    submitted jobs, in order."""
    executor = executor_for(spec.folder, options)
    cwd = str(Path.cwd())
    with digests_in_command(executor), job_files_inside(spec.folder / SLURM_DIR), executor.batch():
        jobs = [executor.submit(train_job, command, cwd, cache) for command in commands]
    return jobs


@contextmanager
def digests_in_command(executor: Any) -> Iterator[list[str]]:
    """While submitting: each pickle submitit writes into the sweep folder is made here from the bytes whose sha256
    is then put in the task's python command (:mod:`mutualrl.launch.verified_submit`), so a task loads only a pickle
    this process wrote, whoever can write the shared folder. submitit reads the command after it has written an
    array's pickles (and each single job's), and Slurm keeps its own copy of the script it was given."""
    import hashlib
    import pickle

    import cloudpickle
    from submitit.core.utils import DelayedSubmission

    from mutualrl.launch.verified_submit import python_command

    inner = getattr(executor, "_executor", executor)  # AutoExecutor wraps the cluster's own executor
    digests: list[str] = []
    original = DelayedSubmission.dump

    def dump(self: Any, filepath: str | Path) -> None:
        data = cloudpickle.dumps(self, pickle.HIGHEST_PROTOCOL)  # as submitit's own cloudpickle_dump writes it
        digests.append(hashlib.sha256(data).hexdigest())
        inner.python = python_command(sys.executable, digests)
        write_new_inside(Path(filepath), data)  # a fresh name in the checked slurm/ folder: no link followed

    DelayedSubmission.dump = dump  # type: ignore[method-assign]
    try:
        yield digests
    finally:
        DelayedSubmission.dump = original  # type: ignore[method-assign]


SWEEP_LOCK = ".sweep-lock"
SWEEP_LOCK_WAIT_S = 600.0
"""How long a submission waits for another one of the same sweep folder (planning and submitting an array takes
seconds to minutes); then one line names the lock and its holder."""


@contextmanager
def sweep_lock(folder: Path, say: Callable[[str], None] = lambda line: None,
               wait_s: float = SWEEP_LOCK_WAIT_S) -> Iterator[None]:
    """Hold ``folder``'s :data:`SWEEP_LOCK` (an OS file lock only its owner and group can open and so take) while a
    submission plans and submits; a wait says once what it waits for and whom, and ends after ``wait_s``."""
    from mutualrl.host.file_lock import LockTimeout, account_name, open_lock_file, wait_for_lock, write_holder

    Path(folder).mkdir(parents=True, exist_ok=True)
    path = Path(folder) / SWEEP_LOCK
    try:
        fd = open_lock_file(path)
    except OSError as err:
        if path.is_symlink():
            refuse_links_below(Path(folder), path)
        try:
            owner = f"; it is {account_name(path.stat().st_uid)}'s"
        except OSError:
            owner = ""
        raise UsageError(f"{path}: cannot open the sweep's lock ({err.strerror}{owner}): submit from the account "
                         "that owns the sweep folder, or use a sweep folder of your own") from None
    try:
        try:
            if wait_for_lock(fd, path, "another submission of this sweep plans and submits", wait_s, say):
                write_holder(fd)  # who holds it, for the next submission's wait
        except LockTimeout as err:
            raise UsageError(str(err)) from None
        yield
    finally:
        os.close(fd)


@contextmanager
def job_files_inside(root: Path) -> Iterator[None]:
    """While submitting: each job's folder submitit moves a script or pickle into (``slurm/<job id>``, a name known
    only once Slurm answered, so it cannot be checked before) is made with the one write rule
    (:func:`mutualrl.output_guards.folder_inside`): a link planted at that name, or at the file's, is refused in
    one line and nothing is moved through it."""
    from submitit.core.utils import JobPaths

    root = Path(root).absolute()
    original = JobPaths.move_temporary_file

    def move(self: Any, tmp_path: str | Path, name: str, keep_as_symlink: bool = False) -> None:
        folder = Path(self.folder).absolute()
        if folder != root and root in folder.parents:
            folder_inside(root, folder.relative_to(root).as_posix())
        target = Path(getattr(self, name))
        if target.is_symlink():
            refuse_links_below(root, target)
        original(self, tmp_path, name, keep_as_symlink)

    JobPaths.move_temporary_file = move  # type: ignore[method-assign]
    try:
        yield
    finally:
        JobPaths.move_temporary_file = original  # type: ignore[method-assign]


def plan_array(spec: SweepSpec, options: SlurmOptions, console: Console, dry_run: bool = False,
               ) -> tuple[list[SweepPoint], dict[str, str], SlurmOptions, dict[str, Any]]:
    """Before anything is submitted: the GPUs each task needs (``--slurm-gpus`` checked), the asset cache, each
    run's state and settings (planned on a node of the task's GPUs); all recorded in ``sweep.json`` (not with
    ``dry_run``) and the array's resources and cache said. Returns the runs to submit, every run's state, the
    options as submitted, and the cache record."""
    refuse_links_below(spec.folder, spec.folder / SLURM_DIR)  # said before anything is planned or written
    configs = run_configs(spec)
    options = replace(options, gpus_per_task=task_gpus(configs, options.gpus_per_task, spec.pool))
    options = replace(options, mem_gb=task_mem_gb(configs, options.gpus_per_task, options.mem_gb, spec.folder))
    cache = cache_record(configs)
    plans: dict[str, Any] = {}  # filled as each run is planned, before the record (with the stop signal) is written
    points, states = plan_sweep(spec, console, extra=lambda: {"cache": cache, "slurm": asdict(stop_signal(
        fit_time_and_cpus(options, list(plans.values()))[0], list(plans.values())))}, dry_run=dry_run,
        gpus=options.gpus_per_task or 0, plans=plans)
    options, notes = fit_time_and_cpus(options, list(plans.values()))
    options = stop_signal(options, list(plans.values()))
    for note in notes:
        console.print(f"warning: {note}", highlight=False, soft_wrap=True, markup=False)
    todo = [p for p in points if states[p.name] not in ("reused", "live")]  # a live run is left to its launch
    console.print(resources_line(len(todo), options), highlight=False, soft_wrap=True, markup=False)
    console.print(cache_line(cache), highlight=False, soft_wrap=True, markup=False)
    return todo, states, options, cache


def submit_sweep(spec: SweepSpec, options: SlurmOptions, console: Console) -> list[Any]:
    """Decide each run's state and the array's resources, then submit the runs that are neither finished nor live
    (training, or waiting in the queue: :mod:`mutualrl.launch.sweep.live`) as one array, and record their jobs.
    Two submissions of one sweep folder take turns (a lock on ``SWEEP/.sweep-lock``), so the second sees the
    first's jobs."""
    from mutualrl.launch.sweep.live import record_jobs

    with sweep_lock(spec.folder, lambda line: console.print(line, highlight=False, soft_wrap=True, markup=False)):
        todo, states, options, cache = plan_array(spec, options, console)
        if not todo:
            live = sum(state == "live" for state in states.values())
            console.print(f"every run of the sweep finished{' or is live' if live else ''}; nothing to submit",
                          highlight=False)
            return []
        commands = [train_command(spec, p, states[p.name] == "resume") for p in todo]
        jobs = submit_array(spec, commands, options, cache)
        record_jobs(spec.folder, {p.name: job for p, job in zip(todo, jobs, strict=True)}, options.local)
    first = str(jobs[0].job_id).split("_")[0]
    console.print(f"submitted job array {first} ({len(jobs)} runs, at most {options.parallel} at once); submitit's "
                  f"files: {spec.folder / SLURM_DIR}; when it is done: mutualrl report {shlex.quote(str(spec.folder))}"
                  "; to continue after a failure or a time limit, run the same command again", highlight=False,
                  soft_wrap=True)
    return jobs
