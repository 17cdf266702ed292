"""A run folder is data: opening one (eval, distill, the API, a worker, ``train --resume``, even ``--dry-run``)
imports no code from inside it, nor from a folder only the run folder names (its plan's working directory).

Each hostile module writes a marker file when imported: the marker must never appear, and the refusal is one line
naming the module and the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mutualrl.config import plugins
from mutualrl.errors import UsageError
from mutualrl.run_folder import RunPaths

HOSTILE = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\ndef score(completions, **kw):\n    return [1.0] * len(completions)\n"


@pytest.fixture
def hostile_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RunPaths, Path]:
    """A run folder of the tiny pool holding ``evil_plugin.py`` and ``evil_rewards.py``; the working directory is
    elsewhere; the importer's state is this test's own."""
    from mutualrl.api import load_config
    from mutualrl.config.resolved import write_resolved_config

    paths = RunPaths(tmp_path / "run")
    paths.policies.mkdir(parents=True)
    marker = tmp_path / "MARKER"
    for name in ("evil_plugin", "evil_rewards"):
        (paths.root / f"{name}.py").write_text(HOSTILE.format(marker=str(marker)))
    write_resolved_config(paths, load_config("tiny"), "tiny")
    monkeypatch.chdir(tmp_path.parent)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for state in ("_DATA_FOLDERS", "_HINT_FOLDERS", "_RUN_FOLDERS"):  # raising=False: 3474d10 has other names
        monkeypatch.setattr(plugins, state, [], raising=False)
    yield paths, marker
    for name in ("evil_plugin", "evil_rewards"):
        sys.modules.pop(name, None)
    sys.modules.pop("mutualrl_regime_evil_plugin", None)


def name_in_config(paths: RunPaths, plugins_entry: str | None = None, reward: str | None = None) -> None:
    import yaml

    text = paths.config.read_text()
    header, body = text.split("\n", 1)
    data = yaml.safe_load(body)
    if plugins_entry is not None:
        data["plugins"] = [plugins_entry]
    if reward is not None:
        data["task"]["reward_funcs"] = [reward]
    paths.config.write_text(header + "\n" + yaml.safe_dump(data, sort_keys=False))


def test_eval_of_a_run_whose_config_names_a_py_file_inside_it_imports_nothing(hostile_run) -> None:
    from mutualrl.launch.evaluate import run_folder_targets

    paths, marker = hostile_run
    name_in_config(paths, plugins_entry=str(paths.root / "evil_plugin.py"))
    with pytest.raises(UsageError) as err:
        run_folder_targets(str(paths.root), None, None)
    assert "evil_plugin.py" in str(err.value) and "inside the run folder" in str(err.value)
    assert "\n" not in str(err.value) and not marker.exists()


def test_a_run_whose_config_names_a_module_inside_it_is_refused_even_from_inside_it(
        hostile_run, monkeypatch: pytest.MonkeyPatch) -> None:
    """The working directory is the run folder (``cd RUN; mutualrl eval .``): it is not searched for code."""
    from mutualrl.config.resolved import load_resolved_config

    paths, marker = hostile_run
    name_in_config(paths, plugins_entry="evil_plugin")
    monkeypatch.chdir(paths.root)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    with pytest.raises(UsageError, match=r"plugins\[0\]: .*evil_plugin"):
        load_resolved_config(paths)
    assert not marker.exists()


def test_a_plan_whose_cwd_is_the_run_folder_does_not_make_reward_funcs_import_from_it(hostile_run) -> None:
    """``launch/plan.json`` recorded the run folder as the workers' working directory; ``task.reward_funcs``
    names a module there. Reading the run imports nothing from it; the error names the folder instead."""
    from mutualrl.config.resolved import load_resolved_config
    from mutualrl.tasks.reward_funcs import reward_functions, reward_spec

    paths, marker = hostile_run
    name_in_config(paths, reward="evil_rewards.score")
    paths.plan.parent.mkdir(parents=True, exist_ok=True)
    paths.plan.write_text(json.dumps({"policies": [{"launch": {"cwd": str(paths.root), "env": {}}}]}))
    with pytest.raises(UsageError) as err:  # refused as the config is read: inputs.json recorded no such module
        config = load_resolved_config(paths)
        reward_functions(reward_spec(config.task, config.grpo))
    assert "evil_rewards" in str(err.value) and not marker.exists()
    assert str(paths.root) not in sys.path


def test_a_module_outside_the_run_folder_is_imported_and_said_where_from(
        hostile_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The user's own code (on PYTHONPATH) still imports; stderr says which file."""
    from mutualrl.config.resolved import load_resolved_config
    from mutualrl.tasks.reward_funcs import resolve_reward_func

    paths, marker = hostile_run
    code = tmp_path / "code"
    code.mkdir()
    (code / "own_rewards_sec.py").write_text("def score(completions, **kw):\n    return [0.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(code))
    name_in_config(paths, reward="own_rewards_sec.score")
    from mutualrl.launch.rundir.inputs import current_inputs

    paths.inputs.write_text(json.dumps(current_inputs(paths, ["own_rewards_sec"])))  # the run recorded it as it started
    monkeypatch.setenv("MUTUALRL_ALLOW_CODE", "own_rewards_sec")  # and the command names it (--allow-code)
    load_resolved_config(paths)
    assert callable(resolve_reward_func("own_rewards_sec.score"))
    assert f"importing 'own_rewards_sec' from {code / 'own_rewards_sec.py'}" in capsys.readouterr().err
    sys.modules.pop("own_rewards_sec", None)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_train_resume_dry_run_of_a_hostile_run_folder_runs_none_of_its_code(hostile_run, tmp_path: Path) -> None:
    paths, marker = hostile_run
    name_in_config(paths, plugins_entry="evil_plugin", reward="evil_rewards.score")
    paths.plan.parent.mkdir(parents=True, exist_ok=True)
    paths.plan.write_text(json.dumps({"policies": [{"launch": {"cwd": str(paths.root), "env": {}}}]}))
    # even a path the user gave is not searched inside a run folder
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(paths.root)]))}
    for cwd in (tmp_path, paths.root):
        done = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--resume", "-o", str(paths.root),
                               "--dry-run"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode != 0, done.stdout
        assert "Traceback" not in done.stderr and "evil_plugin" in done.stderr, done.stderr
        assert not marker.exists()
