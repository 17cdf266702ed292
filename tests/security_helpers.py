"""What the run-folder trust tests share: a stored tiny run folder, ``train --resume`` of it, and a machine joining
it, each with this test's own importer state."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mutualrl.config import plugins
from mutualrl.run_folder import RunPaths


def stored_run_maker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *base: str) -> Callable[..., RunPaths]:
    """``make(*overrides)``: a run folder of the tiny pool whose stored config has ``base`` then ``overrides``
    applied; ``sys.path`` and the plugin folders are this test's own."""
    from mutualrl.api import load_config
    from mutualrl.config.resolved import write_resolved_config

    monkeypatch.setattr(sys, "path", list(sys.path))
    for state in ("_DATA_FOLDERS", "_HINT_FOLDERS"):
        monkeypatch.setattr(plugins, state, [], raising=False)

    def make(*overrides: str) -> RunPaths:
        paths = RunPaths(tmp_path / "run")
        paths.policies.mkdir(parents=True, exist_ok=True)
        write_resolved_config(paths, load_config("tiny", overrides=[*base, *overrides]), "tiny")
        return paths

    return make


def resume(paths: RunPaths, *overrides: str, **options):
    """The config ``train -o PATHS --resume --set OVERRIDES`` resolves."""
    from mutualrl.launch.run import TrainOptions, resolve_config

    return resolve_config(TrainOptions(output_dir=paths.root, resume=True, overrides=list(overrides), **options))[0]


def joining_machine(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list]:
    """``run(paths, *overrides)``: machine 1 of 2's ``run_machine`` with its own command's ``overrides``; the session
    and the pool loop stood in for, the plan it would run kept in the returned list instead of started."""
    from rich.console import Console

    from mutualrl.api import load_config
    from mutualrl.launch import secondary_machine
    from mutualrl.launch.plan import launch_plan

    started: list = []
    monkeypatch.setattr(secondary_machine, "addresses", lambda session: None)
    monkeypatch.setattr(secondary_machine, "check_same_plan", lambda mine, machine0: None)
    monkeypatch.setattr(secondary_machine, "run_machine_workers", lambda config, plan, *rest: started.append(plan))
    monkeypatch.setattr(launch_plan.LaunchPlan, "read", staticmethod(lambda root: None))

    def run(paths: RunPaths, *overrides: str) -> list:
        own = load_config("tiny", overrides=["launch.nodes=2", "launch.machine_rank=1", *overrides])
        secondary_machine.run_machine(own, paths, Console(quiet=True), {}, None)
        return started

    return run
