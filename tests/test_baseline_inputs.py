"""``--baseline`` reuses a finished run only when it would train the same thing: the settings name a reward module
and a data file, not their content, so a run whose module or data was edited since is refused by name instead of
being compared, as 'the same settings', with a baseline trained on the edited ones."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from e2e_helpers import child_env

REWARD = "def exact(completions, answer, **kwargs):\n    return [float(c.strip() == a) for c, a in zip(completions, answer)]\n"


def train(root, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mutualrl", "train", "-o", "runs/mine", "--set", "task.name=dataset",
               "--set", "task.source=data/train.jsonl", "--set", "task.reward_funcs=[rew.exact]",
               "--set", "validation.limit=2", "--set", "validation.every_steps=0", "--set", "grpo.max_steps=1", *extra]
    return subprocess.run(command, cwd=root, env=child_env(), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_run_whose_data_or_reward_module_changed_is_not_reused(tmp_path):
    (tmp_path / "data").mkdir()
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(6) for b in range(6)]
    data = tmp_path / "data" / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rew.py").write_text(REWARD)
    done = train(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    data.write_text(data.read_text().replace('"answer": "4"', '"answer": "5"'))  # the user fixes some labels
    done = train(tmp_path, "--baseline", "standalone")
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and "using it as it is" not in said, said[-2000:]
    assert "data/train.jsonl now gives other" in said and "holds a run with other settings or inputs" in said, said
    assert not (tmp_path / "runs" / "mine-standalone" / "summary.json").exists()

    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rew.py").write_text(REWARD.replace("float(", "0.5 * float("))  # the user rescales the reward
    done = train(tmp_path, "--baseline", "standalone")
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and "module 'rew'" in said and "changed since the run started" in said, said[-2000:]

    (tmp_path / "rew.py").write_text(REWARD)  # both as the run had them: reused, only the baseline trains
    done = train(tmp_path, "--baseline", "standalone")
    assert done.returncode == 0 and "using it as it is" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
