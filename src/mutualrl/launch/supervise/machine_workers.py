"""The loop every machine of a run runs: start the workers a plan places on this machine and watch them until they
end.

Machine 0 (:mod:`mutualrl.launch.run`) and the other machines of a run (:mod:`mutualrl.launch.secondary_machine`)
both call :func:`run_machine_workers`; they differ only in what comes before (prepare or join) and after (summary).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from mutualrl.config.cadence import max_optimizer_steps
from mutualrl.config.schema import RunConfig
from mutualrl.host.count_logs import note_line
from mutualrl.launch.rundir.lock import RunLock
from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings, RunOutcome
from mutualrl.launch.supervise.signals import stop_signals
from mutualrl.regimes.core.registry import get_regime
from mutualrl.run_folder import RunPaths

LAUNCH_LOG_ENV = "MUTUALRL_LAUNCH_LOG"
"""When set, a file each launch appends one line to as it starts its workers (a machine's share of a run, or a
``--preflight``): how the test suite counts its end-to-end runs (``tests/conftest.py``, ``LAUNCH_BUDGET``)."""


def note_launch(run_dir: Path) -> None:
    """One line, ``PID "RUN"`` (the folder as JSON: a name holding a newline is still one line), in the file
    :data:`LAUNCH_LOG_ENV` names; nothing when it is unset."""
    note_line(LAUNCH_LOG_ENV, f"{os.getpid()} {json.dumps(str(run_dir))}")


def run_machine_workers(config: RunConfig, plan: Any, paths: RunPaths, resume_step: int | None, lock: RunLock,
             console: Console, remote: Any = None) -> RunOutcome:
    """Start and watch the workers ``plan`` places on this machine until they end (machine 0 of several: until
    every machine ended); a failure is reported to the other machines through ``remote``."""
    from mutualrl.launch.rundir.resume import restart_command

    note_launch(paths.root)
    processes = processes_from_plan(plan, paths, resume_step)
    settings = watch_settings(config, paths, lock, plan=plan,
                              restart_argv=lambda policy: restart_command(processes, paths, policy))
    runner = PoolRunner(processes, paths, settings, console=console, remote=remote)
    try:
        with stop_signals():  # Ctrl-C, SIGTERM, SIGHUP: workers stopped, run left resumable
            outcome = runner.run()
    finally:  # the workers ended: whatever they started and left behind keeps no run folder busy
        lock.forget_workers()
    if remote is not None and not outcome.ok:
        remote.report(False, outcome.reason, outcome.failed_policy, outcome.returncodes)
    return outcome


def watch_settings(config: RunConfig, paths: RunPaths, lock: RunLock,
                   restart_argv: Callable[[str], tuple[list[str], int | None]], plan: Any = None) -> PoolSettings:
    """How the runner watches this run's pool, from its config (and ``plan``'s checkpoints: a stop's grace)."""
    from mutualrl import fault_injection
    from mutualrl.launch.supervise.stop_grace import budget_for

    return PoolSettings(stop=budget_for(plan, fault_injection.stop_grace()), see_root=paths.see_root(config.see.dir),
                        stall_timeout_s=config.launch.stall_timeout_s or config.see.barrier_timeout_s + 60.0,
                        grace_s=min(60.0, config.see.barrier_timeout_s + 10.0),
                        on_spawn=lock.add_worker,
                        max_steps=max_optimizer_steps(config), peer_timeout_s=config.see.peer_timeout_s,
                        merge_metrics=config.launch.machine_rank == 0, on_peer_failure=config.see.on_peer_failure,
                        max_restarts=config.see.max_restarts, restart_argv=restart_argv,
                        watch_see=get_regime(config.regime.name).needs_exchange or config.see.record_standalone)


def processes_from_plan(plan: Any, paths: RunPaths, resume_step: int | None) -> list[PolicyProcess]:
    """The processes of the workers ``plan`` places on this machine, resuming from ``checkpoint-<resume_step>``."""
    processes = []
    for spec in plan.specs:
        argv = list(spec.argv)
        if resume_step is not None:
            argv += ["--resume-from", str(paths.policy_dir(spec.policy) / f"checkpoint-{resume_step}")]
        processes.append(PolicyProcess(name=spec.policy, argv=argv, env=dict(spec.env), log_path=Path(spec.log_path),
                                       cwd=Path(spec.cwd) if spec.cwd else None))
    return processes
