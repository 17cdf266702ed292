"""A researcher's folder outside the clone, as the sweep tests use it: data/train.jsonl, my_rewards.py, the cwd."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

EXACT = ("def exact(prompts, completions, completion_ids, answer, **kwargs):\n"
         "    return [1.0 if c.strip().startswith(str(a)) else 0.0 for c, a in zip(completions, answer)]\n")
USER_TASK = ["task.name=dataset", "task.source=data", "task.reward_funcs=[my_rewards.exact]"]


def make_user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rewards: str = EXACT) -> Path:
    """20 rows ``a+1=`` -> ``a+1`` and ``rewards`` as my_rewards.py, made the working directory and importable."""
    (tmp_path / "data").mkdir()
    rows = [{"prompt": f"{a}+1=", "answer": a + 1} for a in range(10, 30)]
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "my_rewards.py").write_text(rewards)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # A sweep plans every run in this process, importing my_rewards: another test's folder's module must not answer.
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)
    return tmp_path
