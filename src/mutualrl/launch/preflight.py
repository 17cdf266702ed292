"""``mutualrl train --preflight``: plan the run as ``train`` would, write its folder, start every worker through its
real entry point up to the point where it would first touch a GPU or load weights, report, and leave nothing.

Run it on the machine the run will use, or on any machine (a login node, a laptop) with ``--gpus N --gpu-memory
GIB`` as ``--dry-run`` takes them. The run folder is written beside the one the run will use (same filesystem),
prepared as the run prepares it (prompts filtered with every policy's tokenizer, the resolved config, the plan's
files), and each command of the plan is started as the launcher starts it (its argv, ``accelerate launch`` where
the plan says so, its environment, its working folder) with :data:`~mutualrl.training.preflight.PREFLIGHT_ENV`
set: each rank checks its part (training/preflight.py) and leaves. The rendezvous ports are claimed as the launch
claims them. Then the folder is deleted, whatever happened; one a killed preflight left (SIGKILL runs no cleanup) is
deleted by the next preflight beside it (its lock file is held by no process), and ``mutualrl report`` never lists
a hidden folder as a run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from mutualrl.config.schema import RunConfig
from mutualrl.errors import UsageError
from mutualrl.launch.plan.commands import LaunchSpec
from mutualrl.launch.supervise import worker_process
from mutualrl.launch.supervise.machine_workers import note_launch
from mutualrl.launch.supervise.worker_output import TAIL_BYTES, describe_exit, spawn_dir, tail
from mutualrl.launch.supervise.worker_process import WorkerProcess
from mutualrl.ops.watchdog import LAUNCHER_PID_ENV
from mutualrl.run_folder import RunPaths
from mutualrl.training.preflight import PREFLIGHT_ENV, SIMULATED, preflight_report_path

PREFLIGHT_TIMEOUT_S = 900.0
"""How long every worker together may take to check (imports of torch, TRL, DeepSpeed and vLLM on each rank)."""


@dataclass
class PolicyPreflight:
    """What one policy's ranks reported."""

    policy: str
    ranks: int
    reports: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    error: str = ""
    log_tail: list[str] = field(default_factory=list)
    """A failed policy's last log lines, kept to print: the log goes with the folder."""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and len(self.reports) == self.ranks


def run_preflight(config: RunConfig, source: str, run_dir: Path, console: Console) -> int:
    """Check every worker of the run ``config`` plans (module docstring); 0 when all passed, 1 otherwise."""
    if config.launch.nodes > 1:  # the ranks of a policy spanning machines would wait for the others' forever
        raise UsageError("--preflight checks a run on one machine: preflight the pool with --nodes 1 and the "
                         "GPUs of one machine, and see the several machines' plan with --dry-run --nodes N")
    parent = run_dir.parent if run_dir.parent.is_dir() else Path(tempfile.gettempdir())
    sweep_stale_preflights(parent)
    folder = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}{PREFLIGHT_INFIX}", dir=parent))
    try:
        with held_by_this_preflight(folder):
            results = check_workers(config, source, RunPaths(folder), console)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print_results(results, console)
    failed = [r.policy for r in results if not r.passed]
    if failed:
        console.print(f"preflight: {', '.join(failed)} failed (the line under each says why, after the end of its "
                      f"log; the log was deleted with {folder.name})", highlight=False)
        return 1
    console.print(f"preflight: every worker of {len(results)} policies started and checked its settings; nothing "
                  "was left behind", highlight=False)
    return 0


PREFLIGHT_INFIX = ".preflight-"
PREFLIGHT_LOCK = ".preflight-lock"
"""A file in a preflight's folder whose OS lock (``flock``) the preflight holds while it lives: a folder whose lock
nobody holds was left by a preflight that was killed (SIGKILL runs no cleanup), and the next preflight removes it."""


@contextlib.contextmanager
def held_by_this_preflight(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s :data:`PREFLIGHT_LOCK` (close-on-exec: no worker keeps it) while the block runs."""
    import fcntl

    fd = os.open(folder / PREFLIGHT_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        with contextlib.suppress(OSError):  # a filesystem without locks: nothing marks it live, nothing sweeps it
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def sweep_stale_preflights(parent: Path) -> list[Path]:
    """Remove the folders killed preflights left in ``parent`` (hidden, named ``.<run>.preflight-*``, holding a
    :data:`PREFLIGHT_LOCK` that no process holds: a live preflight's is held); the ones removed."""
    import fcntl

    removed = []
    for folder in sorted(parent.glob(f".*{PREFLIGHT_INFIX}*")):
        lock = folder / PREFLIGHT_LOCK
        if folder.is_symlink() or not folder.is_dir() or lock.is_symlink() or not lock.is_file():
            continue
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:  # another account's: not ours to judge
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a preflight still checking (or no locks here: left alone)
            os.close(fd)
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)
        removed.append(folder)
    return removed


def check_workers(config: RunConfig, source: str, paths: RunPaths, console: Console) -> list[PolicyPreflight]:
    """Prepare ``paths`` as the run would, plan it, start every command and collect what each rank reported."""
    from mutualrl.launch.plan.detect import detect_gpus
    from mutualrl.launch.plan.launch_plan import make_launch_plan
    from mutualrl.launch.ports import claim_run_ports
    from mutualrl.launch.rundir.prepare import prepare_launch, prepared_train_prompts
    from mutualrl.tasks.shipped_rewards import write_shipped

    # its own exchange in the folder: a see.dir the recipe shares with a live run is never claimed
    config = replace(config, see=replace(config.see, dir=None))
    config, _ = prepare_launch(paths, config, source, False, [], console)
    simulate = config.launch.gpus is not None and config.launch.gpus > detect_gpus()  # as --dry-run --gpus N
    config, ports = claim_run_ports(config)
    with ports:
        plan = make_launch_plan(config, paths.root, gpus=config.launch.gpus, simulate=simulate,
                                vllm_available=True if simulate else None, train_prompts=prepared_train_prompts(paths),
                                prompts_source=f"{paths.data} (the prompts kept by the length filter)")
        plan.write()
        write_shipped(config.task.reward_funcs, paths.shipped_rewards)
        results = {p.name: PolicyPreflight(p.name, p.placement.num_processes) for p in plan.policies}
        note_launch(paths.root)
        started = start_all(plan.specs, paths, simulate)
        console.print(f"preflight: {len(started)} policies started in {paths.root}, "
                      f"{sum(r.ranks for r in results.values())} ranks", highlight=False)
        wait_for(started, results, PREFLIGHT_TIMEOUT_S)
    for name, result in results.items():
        reports = [preflight_report_path(paths, name, rank) for rank in range(result.ranks)]
        result.reports = [json.loads(path.read_text()) for path in reports if path.is_file()]
        if not result.passed:
            log = Path(plan.policy(name).launch.log_path)
            result.error = result.error or last_error(log)
            result.log_tail = log_tail(log)
    return list(results.values())


def start(spec: LaunchSpec, paths: RunPaths, simulated: bool = False) -> WorkerProcess:
    """``spec``'s command as the launcher starts it (launch/supervise/runner.py, through the same
    :func:`~mutualrl.launch.supervise.worker_process.start_worker_process`), with the preflight flag (``simulated``:
    the plan is for a node with more GPUs than this machine's, whose GPUs its ranks then hide)."""
    log_path = Path(spec.log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **spec.env, LAUNCHER_PID_ENV: str(os.getpid()), PREFLIGHT_ENV: SIMULATED if simulated else "1"}
    with log_path.open("ab") as log:
        return worker_process.start_worker_process(
            spec.argv, env, spawn_dir(paths.root, Path(spec.cwd) if spec.cwd else None), log)


def start_all(specs: list[LaunchSpec], paths: RunPaths, simulated: bool = False) -> dict[str, WorkerProcess]:
    """Every command started (:func:`start`); a stop (Ctrl-C, SIGTERM) or an error while starting them ends those
    already started before it goes on."""
    started: dict[str, WorkerProcess] = {}
    try:
        for spec in specs:
            started[spec.policy] = start(spec, paths, simulated)
    except BaseException:
        stop_all(started)
        raise
    return started


def stop_all(started: dict[str, WorkerProcess]) -> None:
    """Kill every started command's process group (its accelerate launch and ranks) and wait for each: none writes
    into the folder once it is being deleted."""
    for proc in started.values():
        with contextlib.suppress(ProcessLookupError):  # the group ended already
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in started.values():
        proc.wait()


def wait_for(started: dict[str, WorkerProcess], results: dict[str, PolicyPreflight], timeout_s: float) -> None:
    """Every command's exit code into ``results``; one still running after ``timeout_s`` is killed and said."""
    deadline = time.monotonic() + timeout_s
    for name, proc in started.items():
        try:
            results[name].exit_code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop_all({name: proc})
            results[name].exit_code = -9
            results[name].error = f"still checking after {timeout_s:.0f} s: stopped"
        except BaseException:  # a stop (Ctrl-C, SIGTERM): every worker ends before the folder goes
            stop_all(started)
            raise
        if results[name].exit_code not in (0, None) and not results[name].error:
            results[name].error = describe_exit(results[name].exit_code)


LOG_TAIL_LINES = 20


def log_tail(log_path: Path) -> list[str]:
    """The last :data:`LOG_TAIL_LINES` lines of a worker's log, each at most 300 characters (the runner's bounded
    :func:`~mutualrl.launch.supervise.worker_output.tail`: only the file's end is read); none without a log."""
    return tail(log_path, LOG_TAIL_LINES, line_chars=300).splitlines()


LAUNCHER_ERRORS = ("ChildFailedError", "CalledProcessError")
"""What ``accelerate launch`` and torchrun say last when a rank failed (the rank's own error came before)."""


def last_error(log_path: Path) -> str:
    """The worker's own one-line error (``error: ...``) or the last line of its traceback; not the line
    ``accelerate launch`` or torchrun adds after a rank failed (:data:`LAUNCHER_ERRORS`), which names no reason."""
    if not log_path.is_file():
        return f"{log_path}: no log"
    end = tail(log_path, lines=TAIL_BYTES, max_bytes=TAIL_BYTES)  # every line of its last 64 KiB
    lines = [line.strip() for line in end.splitlines() if line.strip()]
    said = [line for line in lines if (line.startswith("error:") or "Error:" in line)
            and not any(name in line for name in LAUNCHER_ERRORS)]
    return (said or lines or ["no output"])[-1][:400]


CHECKS = ("settings", "GRPOConfig", "DeepSpeed", "data", "rewards", "vLLM")


def print_results(results: list[PolicyPreflight], console: Console) -> None:
    """Per policy: its ranks that reported against those started, then what rank 0 checked (or why it failed)."""
    for result in results:
        mark = "[green]passed[/]" if result.passed else "[red]failed[/]"
        console.print(f"{result.policy}: {mark}, {len(result.reports)}/{result.ranks} ranks reported",
                      highlight=False)
        checks = result.reports[0]["checks"] if result.reports else {}
        for key in CHECKS:
            if key in checks:
                console.print(f"  {key}: {checks[key]}", highlight=False, soft_wrap=True)
        if not result.passed:
            for line in result.log_tail:
                console.print(f"  | {line}", highlight=False, soft_wrap=True, markup=False)
            console.print(f"  [red]error:[/] {result.error or 'no report'}", highlight=False, soft_wrap=True)
