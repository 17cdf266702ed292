"""A module in the working directory never shadows a library in a run's processes: workers (and the ranks accelerate
and torchrun start) run in Python's safe-path mode, a sweep's runs and a Slurm task with ``-P``, and the user's
own modules a command names are imported from the working directory by name, the working directory then going
behind every library on ``sys.path`` (so a resumed run folder's planted ``argparse.py`` runs in no process, and what
the user's code imports later from beside it is still found)."""

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
    from mutualrl.launch.sweep.grid import SweepSpec, train_command
    from mutualrl.launch.verified_submit import python_command

    assert python_command("/usr/bin/python3", ["ab"]).startswith("/usr/bin/python3 -P ")
    spec = SweepSpec(tmp_path / "sw", ["standalone"], [1], max_steps=1)
    for point in spec.points():
        assert train_command(spec, point, resume=False)[:4] == [sys.executable, "-P", "-m", "mutualrl"]


def test_a_named_user_module_is_found_in_the_working_directory_which_then_goes_behind_every_library(tmp_path,
                                                                                                    monkeypatch):
    (tmp_path / "my_rewards_for_safe_path.py").write_text("def exact(**kwargs):\n    return []\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    module = plugins.import_module_for("my_rewards_for_safe_path", "task.reward_funcs")
    assert module.exact() == []
    assert sys.path[-1] == str(tmp_path) and sys.path.count(str(tmp_path)) == 1  # a library is found first
    marker = plant(tmp_path, "colorsys")  # a standard module nothing has imported yet
    sys.modules.pop("colorsys", None)
    import colorsys  # noqa: F401 - the import under test

    assert not marker.exists()
    plugins.import_module_for("my_rewards_for_safe_path", "task.reward_funcs")  # again: still once, still last
    assert sys.path[-1] == str(tmp_path) and sys.path.count(str(tmp_path)) == 1


LAZY_USER_CODE = {
    "lazy_rewards.py": "def exact(completions, **kwargs):\n    import lazy_helpers\n"
                       "    return [lazy_helpers.score(c) for c in completions]\n",
    "lazy_helpers.py": "def score(text):\n    return float(text == '4')\n",
    "lazy_plugin.py": "from mutualrl.tasks.registry import register_task\n"
                      "register_task('lazy-task', 'lazy_task_impl:LazyTask')\n",
    "lazy_task_impl.py": "from mutualrl.tasks.synthetic import SyntheticArithTask\n\n\n"
                         "class LazyTask(SyntheticArithTask):\n    pass\n",
}


def test_what_a_named_module_imports_later_from_beside_it_is_found_in_a_safe_path_worker(tmp_path):
    """A worker's view (``python -P``, the working directory holding the user's code): a reward function that imports
    its sibling module in its body, and a plugin registering a task by ``"module:Factory"`` in a sibling module, both
    import after the named module's import is over; a planted ``argparse.py`` beside them still runs nowhere."""
    for name, text in LAZY_USER_CODE.items():
        (tmp_path / name).write_text(text)
    marker = plant(tmp_path, "argparse")
    code = ("from mutualrl.config import plugins\n"
            "fn = plugins.import_object('lazy_rewards.exact', 'task.reward_funcs[0]')\n"
            "print(fn(['4', '5']))\n"
            "plugins.import_plugins(['lazy_plugin'])\n"
            "from mutualrl.tasks.registry import get_task\n"
            "print(type(get_task('lazy-task')).__name__)\n"
            "import argparse\n")
    done = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[1.0,", "0.0]", "LazyTask"], done.stdout
    assert not marker.exists()
