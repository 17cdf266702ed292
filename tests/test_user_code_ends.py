"""User code that ends a process (issue 50, items 6-8): how a run ends when a reward function exits, forks or is
interrupted, and what the next launch is told."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mutualrl
from mutualrl.errors import MutualRLError


def test_ctrl_c_during_the_python_api_raises_keyboard_interrupt(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner turns Ctrl-C into an "interrupted" outcome (workers stopped, run resumable); ``mutualrl.train``
    raises ``KeyboardInterrupt`` for it, so a sweep's ``except MutualRLError`` does not go on to the next run."""
    from mutualrl.launch.supervise import runner

    def ctrl_c_while_starting(self: runner.PoolRunner) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.PoolRunner, "start", ctrl_c_while_starting)
    with pytest.raises(KeyboardInterrupt, match="resumable") as caught:
        mutualrl.train("tiny", output_dir=tmp_path / "run", max_steps=1, progress=False)
    assert not isinstance(caught.value, MutualRLError)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "interrupted"
