"""Machine K > 0 of a run on several machines (``mutualrl train --nodes N --machine-rank K``).

It joins the run machine 0 creates in the shared run folder (:mod:`mutualrl.launch.supervise.nodes`),
plans the run's stored config for itself, checks the placement agrees with machine 0's plan,
starts only the workers placed on this machine and watches them (and, through the shared
folder, the policies elsewhere). It writes no run-level file: machine 0 keeps ``run.json``,
the merged metrics and ``summary.json``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from rich.console import Console

from mutualrl.config.schema import RunConfig
from mutualrl.errors import UsageError
from mutualrl.launch.rundir.lock import RunLock
from mutualrl.launch.supervise.nodes import RemoteWatch, addresses, join_session, local_address, machines_of, reporting
from mutualrl.launch.supervise.pool import run_pool
from mutualrl.run_folder import RunPaths, machine_lock_name


def join_run(config: RunConfig, paths: RunPaths, console: Console) -> int:
    """Join machine 0's run as machine ``config.launch.machine_rank``; the exit code of this machine's workers."""
    from mutualrl.launch.rundir.summary import print_failure

    launch, machine = config.launch, config.launch.machine_rank
    if machine >= launch.nodes:
        raise UsageError(f"--machine-rank {machine} is not a machine of --nodes {launch.nodes} (0..{launch.nodes - 1})")
    with RunLock(paths.root, machine_lock_name(machine)).acquire(f"join as machine {machine}") as lock:
        if lock.warning:
            console.print(f"[yellow]warning:[/] {lock.warning}", highlight=False)
        session = join_session(paths.root, machine, launch.nodes, local_address(launch.main_address),
                               launch.join_timeout_s, say=lambda text: console.print(text, highlight=False))
        watch = RemoteWatch(paths.root, paths.see_root(), session, machine, {}, wait_for=(), peer_timeout_s=None)
        with reporting(watch):  # a failure from here on stops the other machines at once
            outcome = run_machine(config, paths, console, session, lock)
    if not outcome.ok:
        print_failure(outcome, paths, console)
        return 130 if outcome.reason == "interrupted" else 1
    console.print(f"machine {machine}: its workers finished; machine 0 writes the run's summary", highlight=False)
    return 0


def run_machine(config: RunConfig, paths: RunPaths, console: Console, session: dict[str, Any], lock: RunLock) -> Any:
    """Plan the stored run for this machine, check it against machine 0's plan, run this machine's workers."""
    from mutualrl.launch.plan.launch_plan import LaunchPlan, make_launch_plan
    from mutualrl.config.resolved import load_resolved_config

    launch, machine = config.launch, config.launch.machine_rank
    stored = load_resolved_config(paths)  # machine 0's resolved config: every machine runs the same run
    for what, mine, theirs in (("pool", config.pool.name, stored.pool.name),
                               ("regime", config.regime.name, stored.regime.name)):
        if mine != theirs:
            raise UsageError(f"machine 0 runs {paths.root} with {what} {theirs!r}, this launcher asks for "
                             f"{mine!r}: start every machine with the same options")
    from mutualrl.config.validate import validate_run_config
    from mutualrl.pools.loading import refuse_stored_remote_code, trusts_remote_code

    stored = validate_run_config(stored, str(paths.config))  # the shared folder's settings, checked as a recipe's
    refuse_stored_remote_code(stored, bool(trusts_remote_code(config)), paths.root)  # this machine's command says
    run_config = replace(stored, launch=replace(stored.launch, machine_rank=machine))
    plan = make_launch_plan(run_config, paths.root, gpus=run_config.launch.gpus, addresses=addresses(session))
    check_same_plan(plan, LaunchPlan.read(paths.root))
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    here = [spec.policy for spec in plan.specs]
    console.print(f"[bold]mutualrl train[/] machine {machine} of {launch.nodes}: runs {', '.join(here) or 'nothing'}"
                  f" of pool [cyan]{stored.pool.name}[/], run folder {paths.root}", highlight=False)
    remote = RemoteWatch(paths.root, paths.see_root(run_config.see.dir), session, machine,
                         machines_of(plan), wait_for=(), peer_timeout_s=stored.see.peer_timeout_s)
    return run_pool(run_config, plan, paths, session.get("resume_step"), lock, console, remote)


def check_same_plan(mine: Any, machine0: Any) -> None:
    """This machine's plan must place and configure every policy as machine 0's did (same GPUs, same software)."""
    if str(mine.run_dir) != str(machine0.run_dir):
        raise UsageError(f"machine 0 planned the run in {machine0.run_dir}, this machine sees it at {mine.run_dir}: "
                         "mount the shared run folder at the same path on every machine")
    theirs = {p.name: p for p in machine0.policies}
    for p in mine.policies:
        other = theirs.get(p.name)
        if other is None:
            raise UsageError(f"machine 0's plan has no policy {p.name!r}: start every machine with the same options")
        placed, placed0 = p.placement, other.placement
        where = (placed.machines, placed.devices, placed.num_processes)
        if where != (placed0.machines, placed0.devices, placed0.num_processes):
            raise UsageError(f"policy {p.name!r}: this machine places it on machines {placed.machines} devices "
                             f"{placed.devices} ({placed.num_processes} processes), machine 0 on {placed0.machines} "
                             f"{placed0.devices} ({placed0.num_processes}): give every machine the same --gpus")
        grpo = json.loads(json.dumps(p.grpo))  # as machine 0 wrote it
        if grpo != other.grpo:
            diff = sorted(k for k in set(grpo) | set(other.grpo) if grpo.get(k) != other.grpo.get(k))
            raise UsageError(f"policy {p.name!r}: this machine plans other GRPO settings than machine 0 "
                             f"({', '.join(diff)}): install the same software (e.g. vllm) on every machine")
