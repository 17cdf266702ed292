"""TRL's own reward functions train the default pool and the smol pool (one policy under its chat template, one
plain) on a dataset with the columns TRL documents (``prompt``, ``solution``), with conversational and with text
prompts; every call of a user's function, in every policy, training and held-out, gets the form GRPOTrainer would
give it for that dataset (issue 49 item 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import child_env

RECORDER = '''
import json, sys

def form(prompts, completions, completion_ids, solution, **kwargs):
    policy = sys.argv[sys.argv.index("--policy") + 1] if "--policy" in sys.argv else None
    training = getattr(kwargs.get("log_metric"), "__name__", "") != "not_logged"  # held-out: not_logged
    with open({log!r}, "a") as fh:
        fh.write(json.dumps({{"policy": policy, "training": training,
                             "prompt": type(prompts[0]).__name__, "completion": completions[0]}}) + "\\n")
    return [0.0] * len(completions)
'''


def write_folder(root: Path, conversational: bool) -> Path:
    (root / "data").mkdir(parents=True)
    for split, count in (("train", 16), ("test", 4)):
        rows = []
        for i in range(count):
            text = f"{i % 7}+{i % 5}="
            rows.append({"prompt": [{"role": "user", "content": text}] if conversational else text,
                         "solution": str(i % 7 + i % 5)})
        (root / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "form_log.py").write_text(RECORDER.format(log=str(root / "calls.jsonl")))
    return root / "calls.jsonl"


@pytest.mark.slow
@pytest.mark.parametrize("conversational", [True, False], ids=["chat-prompts", "text-prompts"])
# the smol pool with text prompts (~2 min on 2 cores) is run by hand, outside the 15-minute suite:
# pytest -m real_pool tests/test_trl_rewards_e2e.py
@pytest.mark.parametrize("pool", ["tiny", pytest.param("smol", marks=pytest.mark.real_pool)])
def test_trls_rewards_train_each_pool_and_every_call_gets_the_datasets_form(tmp_path, pool, conversational):
    log = write_folder(tmp_path, conversational)
    command = [sys.executable, "-m", "mutualrl", "train", "--pool", pool, "--max-steps", "1", "-o", "runs/x",
               "--set", "task.name=dataset", "--set", "task.source=data",
               "--set", "task.reward_funcs=[accuracy_reward,think_format_reward,form_log.form]",
               "--set", "validation.limit=4", "--set", "validation.every_steps=0", "--set", "validation.batch_size=4"]
    done = subprocess.run(command, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    policies = {"tiny": {"tiny-bpe", "tiny-sp"}, "smol": {"smollm2-135m", "gemma3-270m"}}[pool]
    assert {c["policy"] for c in calls if c["training"]} == policies
    assert {c["policy"] for c in calls if not c["training"]} == policies  # held-out validation too
    for call in calls:  # GRPOTrainer's form for this dataset, whatever the policy's chat template
        if conversational:
            assert call["prompt"] == "list" and isinstance(call["completion"], list), call
            assert [m["role"] for m in call["completion"]] == ["assistant"], call
        else:
            assert call["prompt"] == "str" and isinstance(call["completion"], str), call
    rows = [json.loads(line) for line in (tmp_path / "runs" / "x" / "metrics.jsonl").read_text().splitlines()]
    names = {key for row in rows for key in row}
    assert {"rewards/accuracy_reward/mean", "rewards/think_format_reward/mean", "rewards/form/mean"} <= names
