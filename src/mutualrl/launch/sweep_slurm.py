"""``mutualrl sweep --slurm``: the sweep's runs as one Slurm job array, submitted by submitit (one array task per
run, at most ``--slurm-parallel`` at once), with the sweep folder as the only state the jobs share.

The state of every run (reuse, resume, new) is decided here before anything is submitted, as on a laptop; each
array task runs that run's ``mutualrl train`` command in the folder the sweep was started from. submitit's local
executor runs the same array as processes on this machine (``--slurm-local``: how it is tested without Slurm).
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from mutualrl.errors import UsageError
from mutualrl.launch.sweep import SweepSpec, plan_sweep, train_command

#: Where submitit keeps its job files (scripts, pickles, logs), inside the sweep folder.
SLURM_DIR = "slurm"


@dataclass
class SlurmOptions:
    """What each array task asks Slurm for."""

    partition: str | None = None
    time_min: int = 240
    gpus_per_task: int = 0
    cpus_per_task: int = 4
    mem_gb: int | None = None
    parallel: int = 8  # array tasks running at once
    local: bool = False  # submitit's local executor instead of sbatch


def executor_for(folder: Path, options: SlurmOptions) -> Any:
    """submitit's executor with these parameters (``cluster="local"``: processes on this machine)."""
    try:
        import submitit
    except ImportError as err:
        raise UsageError(f"mutualrl sweep --slurm needs submitit ({err}); install it: pip install "
                         "'mutualrl[experiments]' (setup.sh does)") from None
    try:
        executor = submitit.AutoExecutor(folder=folder / SLURM_DIR / "%j", cluster="local" if options.local else "slurm")
    except RuntimeError as err:  # no srun on this machine
        raise UsageError(f"--slurm: {err} Submit from a Slurm login node, try the array here with --slurm-local, or "
                         "run without --slurm") from None
    parameters: dict[str, Any] = {"timeout_min": options.time_min, "cpus_per_task": options.cpus_per_task,
                                  "gpus_per_node": options.gpus_per_task, "tasks_per_node": 1, "nodes": 1,
                                  "name": f"mutualrl-sweep-{folder.name}", "slurm_array_parallelism": options.parallel}
    if options.partition:
        parameters["slurm_partition"] = options.partition
    if options.mem_gb:
        parameters["mem_gb"] = options.mem_gb
    executor.update_parameters(**parameters)
    return executor


def train_job(command: list[str], cwd: str) -> int:
    """One array task: the run's ``mutualrl train`` in the sweep's working directory; a failure fails the task."""
    done = subprocess.run(command, cwd=cwd, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} exited {done.returncode}")
    return done.returncode


def submit_array(spec: SweepSpec, commands: list[list[str]], options: SlurmOptions) -> list[Any]:
    """One job array of ``commands`` (each a run's train command); the submitted jobs, in order."""
    executor = executor_for(spec.folder, options)
    cwd = str(Path.cwd())
    with executor.batch():
        jobs = [executor.submit(train_job, command, cwd) for command in commands]
    return jobs


def submit_sweep(spec: SweepSpec, options: SlurmOptions, console: Console) -> list[Any]:
    """Decide each run's state, then submit the runs that are not finished as one array."""
    points, states = plan_sweep(spec, console)
    todo = [p for p in points if states[p.name] != "reused"]
    if not todo:
        console.print("every run of the sweep finished; nothing to submit", highlight=False)
        return []
    commands = [train_command(spec, p, states[p.name] == "resume") for p in todo]
    jobs = submit_array(spec, commands, options)
    first = str(jobs[0].job_id).split("_")[0]
    console.print(f"submitted job array {first} ({len(jobs)} runs, at most {options.parallel} at once); submitit's "
                  f"files: {spec.folder / SLURM_DIR}; when it is done: mutualrl report {shlex.quote(str(spec.folder))}"
                  "; to continue after a failure or a time limit, run the same command again", highlight=False,
                  soft_wrap=True)
    return jobs
