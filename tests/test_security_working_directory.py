"""A module in the working directory never shadows a library in a run's processes: workers (and the ranks accelerate
and torchrun start) run in Python's safe-path mode, a sweep's runs and a Slurm task with ``-P``, and the user's
own modules a command names are imported from the working directory by name, the working directory leaving
``sys.path`` again after (so a resumed run folder's planted ``argparse.py`` runs in no process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mutualrl.config import plugins
from mutualrl.config.loader import load_run_config
from mutualrl.launch.plan.launch_plan import make_launch_plan

pytestmark = pytest.mark.user_start  # its workers start as a user's run starts them (tests/conftest.py)

PLANTED = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


def plant(folder: Path, module: str) -> Path:
    """``folder/<module>.py`` that leaves a marker file when imported; returns the marker's path."""
    marker = folder / f"{module}-imported"
    (folder / f"{module}.py").write_text(PLANTED.format(marker=str(marker)))
    return marker


def test_a_worker_started_as_planned_takes_no_library_from_its_working_directory(tmp_path):
    """The tiny pool's worker command as the launcher starts it, in a folder holding an ``argparse.py``: the worker's
    own ``import argparse`` takes Python's (``--help`` answers), and the planted file never runs."""
    config = load_run_config("tiny").config
    plan = make_launch_plan(config, tmp_path / "run", gpus=0, cpu_cores=2, ram_gib=1000.0, dry_run=True)
    spec = plan.specs[0]
    assert spec.env["PYTHONSAFEPATH"] == "1"
    folder = tmp_path / "downloaded-run"
    folder.mkdir()
    marker = plant(folder, "argparse")
    env = {**os.environ, **spec.env}
    done = subprocess.run([sys.executable, "-m", "mutualrl.training.worker", "--help"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--run-dir" in done.stdout, done.stderr
    assert not marker.exists()
    # the same command without safe-path mode imports the planted file: the check above can fail
    unsafe = {key: value for key, value in env.items() if key != "PYTHONSAFEPATH"}
    subprocess.run([sys.executable, "-m", "mutualrl.training.worker", "--help"], cwd=folder, env=unsafe,
                   capture_output=True, timeout=120)
    assert marker.exists()


def test_a_sweep_run_and_a_slurm_task_start_python_in_safe_path_mode(tmp_path):
    from mutualrl.launch.sweep import SweepSpec, train_command
    from mutualrl.launch.verified_submit import python_command

    assert python_command("/usr/bin/python3", ["ab"]).startswith("/usr/bin/python3 -P ")
    spec = SweepSpec(tmp_path / "sw", ["standalone"], [1], max_steps=1)
    for point in spec.points():
        assert train_command(spec, point, resume=False)[:4] == [sys.executable, "-P", "-m", "mutualrl"]


def test_a_named_user_module_is_found_in_the_working_directory_which_leaves_sys_path_after(tmp_path, monkeypatch):
    (tmp_path / "my_rewards_for_safe_path.py").write_text("def exact(**kwargs):\n    return []\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    module = plugins.import_module_for("my_rewards_for_safe_path", "task.reward_funcs")
    assert module.exact() == []
    assert str(tmp_path) not in sys.path  # a library imported later is not looked up here
    marker = plant(tmp_path, "colorsys")  # a standard module nothing has imported yet
    sys.modules.pop("colorsys", None)
    import colorsys  # noqa: F401 - the import under test

    assert not marker.exists()
