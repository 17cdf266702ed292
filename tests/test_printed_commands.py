"""What the docs and the console print works as printed (issue 95): the resume line after a stop carries the
``--allow-code`` a run with its own reward code needs, and following it says no "changed output_dir"; the
README's and docs/tasks.md's example reward scores numbers right, as the docs show it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from e2e_helpers import ROOT
from mutualrl.launch.rundir.prepare import same_folder
from mutualrl.launch.rundir.resume import ConfigChange
from mutualrl.launch.rundir.summary import resume_hint
from mutualrl.run_folder import RunPaths


def test_the_resume_line_names_the_code_the_run_recorded(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run with space")
    paths.root.mkdir()
    assert resume_hint(paths).endswith(f"mutualrl train --resume -o {shlex.quote(str(paths.root))}")
    paths.inputs.write_text(json.dumps({"format": 1, "data": {}, "code": {
        "my_rewards": {"file": "my_rewards.py", "sha256": "c" * 64}, "my_plugin": None}}))
    line = resume_hint(paths)
    assert line.endswith(f"mutualrl train --resume -o {shlex.quote(str(paths.root))} --allow-code my_plugin,my_rewards")


def test_an_output_dir_spelt_another_way_is_the_same_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mutualrl.config.loader import load_run_config

    monkeypatch.chdir(tmp_path)
    config = load_run_config("tiny").config
    assert same_folder(ConfigChange("output_dir", "runs/mine", str(tmp_path / "runs" / "mine")), config)
    assert same_folder(ConfigChange("output_dir", "runs/{pool}-{regime}",
                                    str(tmp_path / "runs" / f"tiny-{config.regime.name}")), config)
    assert not same_folder(ConfigChange("output_dir", "runs/mine", str(tmp_path / "runs" / "other")), config)
    assert not same_folder(ConfigChange("grpo.max_steps", 4, 4), config)


def reward_block(path: Path) -> str:
    """The ``# my_rewards.py`` block of a doc, as a user copies it."""
    blocks = re.findall(r"```python\n(# my_rewards\.py.*?)```", path.read_text(), re.S)
    assert len(blocks) == 1, path
    return blocks[0]


@pytest.mark.parametrize("doc", ["README.md", "docs/tasks.md"])
def test_the_docs_example_reward_scores_numbers_right(doc: str) -> None:
    scope: dict = {}
    exec(compile(reward_block(ROOT / doc), doc, "exec"), scope)  # noqa: S102 - the doc's own code, as written
    completions = ["15", "1", " 1 apple", "1.5", "-3", "3", "x 1", "", "12"]
    answers = [1, 1, "1", 1, -3, -3, 1, 1, "12"]
    scores = scope["exact"](prompts=[""] * 9, completions=completions, completion_ids=[[]] * 9, answer=answers,
                            trainer_state=None, log_extra=None, log_metric=None, prompt_id=["p"] * 9)
    assert scores == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]


def test_the_sweep_says_each_runs_train_command_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from mutualrl.launch.sweep import grid

    started = []
    monkeypatch.setattr(grid.subprocess, "Popen", lambda command, **_: started.append(command) or object())
    spec = grid.SweepSpec(folder=tmp_path, regimes=["sgt"], seeds=[1], grid=[], pool="tiny", max_steps=2, sets=[])
    out = io.StringIO()
    grid.start_point(spec, spec.points()[0], False, 1, Console(file=out, width=300))
    assert started and started[0][3:5] == ["mutualrl", "train"]
    assert f"sgt-seed1: training (mutualrl train --regime sgt --seed 1" in out.getvalue()
    assert "mutualrl mutualrl" not in out.getvalue()
