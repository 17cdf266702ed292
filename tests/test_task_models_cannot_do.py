"""A task the pool's models cannot do is said as such (issue 49 item 4): the README names the pools for one's own
text, the prompt-length error names the setting and the values that would fit, and a policy that scores nothing
for ``task.stop_after_no_reward_steps`` steps stops the run with one line and one completion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import ROOT, child_env
from mutualrl.config.loader import load_run_config
from mutualrl.launch.rundir.prepare import no_prompt_fits

WORD_PROBLEM = "Sam has three apples and buys four more at the market. How many apples does Sam have now?"


def test_the_readme_says_which_pool_to_use_for_ones_own_text():
    readme = (ROOT / "README.md").read_text()
    own = readme[readme.index("## Your own data"):readme.index("## GPU notes")]
    assert "--pool smol" in own and "task.max_prompt_tokens" in own and "task.stop_after_no_reward_steps" in own


def test_the_length_error_names_the_setting_and_the_values_that_fit():
    config = load_run_config("tiny").config
    lengths = {"a": {"x": 30, "y": 41}.get, "b": {"x": 35, "y": 20}.get}
    message = str(no_prompt_fits(config, ["x", "y"], lengths))
    assert "task.max_prompt_tokens=16" in message and "the shortest takes 35 tokens, the longest 41" in message
    assert "--set task.max_prompt_tokens=41" in message and "--pool smol" in message and "\n" not in message


def write_user_folder(root: Path, prompt: str, reward: str = "0.0") -> None:
    (root / "data").mkdir(parents=True)
    rows = [{"prompt": prompt.replace("three", str(i)), "solution": str(i + 4)} for i in range(12)]
    (root / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "never.py").write_text(f"def score(completions, **kwargs):\n    return [{reward}] * len(completions)\n")


def train(root: Path, *settings: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mutualrl", "train", "-o", "runs/mine", "--set", "task.name=dataset",
               "--set", "task.source=data/train.jsonl", "--set", "task.reward_funcs=[never.score]",
               "--set", "validation.limit=2", "--set", "validation.every_steps=0"]
    for setting in settings:
        command += ["--set", setting]
    return subprocess.run(command, cwd=root, env=child_env(), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_word_problems_on_the_tiny_pool_name_the_limit_that_fits(tmp_path):
    write_user_folder(tmp_path, WORD_PROBLEM)
    done = train(tmp_path)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    error = [line for line in done.stderr.splitlines() if "task.max_prompt_tokens=16" in line]
    assert error and "--set task.max_prompt_tokens=" in error[0] and "--pool smol" in error[0], done.stderr


@pytest.mark.slow
def test_a_policy_that_scores_nothing_stops_the_run_with_one_completion(tmp_path):
    write_user_folder(tmp_path, "2+3=")
    done = train(tmp_path, "task.stop_after_no_reward_steps=2", "grpo.max_steps=20")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    said = " ".join((done.stdout + done.stderr).split())  # the console wraps at its width
    assert "failed: policy tiny-bpe: no completion scored above 0 in 2 steps in a row" in said or \
        "failed: policy tiny-sp: no completion scored above 0 in 2 steps in a row" in said, done.stdout
    assert "One completion: '" in said and "task.stop_after_no_reward_steps=2" in said, done.stdout
    record = json.loads((tmp_path / "runs" / "mine" / "run.json").read_text())
    assert record["status"] == "failed" and "no completion scored above 0" in record["reason"]
