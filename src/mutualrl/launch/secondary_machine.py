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
from mutualrl.launch.supervise.machine_workers import run_machine_workers
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
    refuse_other_code(paths, config)  # before machine 0's config is read: reading it imports what it names
    stored = load_resolved_config(paths)  # machine 0's resolved config: every machine runs the same run
    from mutualrl.config.validate import validate_run_config
    from mutualrl.pools.loading import refuse_stored_remote_code, trusts_remote_code

    stored = validate_run_config(stored, str(paths.config))  # the shared folder's settings, checked as a recipe's
    refuse_stored_remote_code(stored, bool(trusts_remote_code(config)), paths.root)  # this machine's command says
    refuse_other_settings(paths, stored, config)  # the whole config: this machine's command decides it too
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
    return run_machine_workers(run_config, plan, paths, session.get("resume_step"), lock, console, remote)


PER_MACHINE = ("launch.machine_rank", "launch.force", "launch.join_timeout_s", "output_dir")
"""What may differ between machines' commands: which machine, its own flags, and the spelling of the run folder
(one folder: :func:`check_same_plan` checks every machine plans it at the same path)."""


def refuse_other_settings(paths: RunPaths, stored: RunConfig, config: RunConfig) -> None:
    """Machine 0's stored config against the one this machine resolved from its own command: one line naming the
    first differing keys. The shared folder is data: whatever this machine runs, its own command says."""
    from mutualrl.config.typed import to_plain
    from mutualrl.launch.rundir.resume import flatten

    theirs, mine = flatten(to_plain(stored)), flatten(to_plain(config))
    differing = [key for key in sorted(set(theirs) | set(mine))
                 if key not in PER_MACHINE and theirs.get(key, "<unset>") != mine.get(key, "<unset>")]
    if differing:
        shown = "; ".join(f"{key}: {_short(theirs.get(key, '<unset>'))} there, {_short(mine.get(key, '<unset>'))} "
                          "here" for key in differing[:4])
        more = f"; ... {len(differing) - 4} more" if len(differing) > 4 else ""
        raise UsageError(f"{paths.config}: machine 0 runs {paths.root} with other settings than this machine's "
                         f"command ({shown}{more}): start every machine with the same options")


def refuse_other_code(paths: RunPaths, config: RunConfig) -> None:
    """A module machine 0's stored config names that this machine's own command does not: refused by name before
    the stored config is read (reading it imports its plugins)."""
    from mutualrl.config.recorded_code import config_modules, named_modules
    from mutualrl.config.yaml_strict import load_yaml
    from mutualrl.run_folder import read_bytes

    try:
        data = load_yaml(read_bytes(paths.config).decode("utf-8", errors="replace"), str(paths.config))
    except FileNotFoundError:
        return  # no config: reading it names the missing file
    if not isinstance(data, dict):
        return  # damaged: reading it names the file
    own = {module for module, _ in named_modules(config.task.reward_funcs, config.plugins or [], config.task.name)}
    for module, key in config_modules(data):
        if module not in own:
            raise UsageError(f"{paths.config}: {key} names module {module[:200]!r}, which this machine's command "
                             "does not: start every machine with the same options")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
