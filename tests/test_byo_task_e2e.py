"""Issue 39's acceptance: a user's own JSONL (two splits) and reward module, in a folder outside the repository,
train the default tiny pool with SGT through ``mutualrl.train`` and on through the CLI's ``--resume``; the reward
function runs in every policy's worker with the dataset's extra columns, scores held-out validation, and
``mutualrl eval RUN``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import child_env

REWARD_MODULE = '''
import json, os, sys

LOG = {log!r}

def exact(prompts, completions, completion_ids, answer, family, **kwargs):
    policy = sys.argv[sys.argv.index("--policy") + 1] if "--policy" in sys.argv else None
    training = getattr(kwargs.get("log_metric"), "__name__", "") != "not_logged"  # held-out: not_logged
    with open(LOG, "a") as fh:
        fh.write(json.dumps({{"policy": policy, "training": training, "family": sorted(set(family)),
                             "ids": all(isinstance(i, list) for i in completion_ids)}}) + "\\n")
    return [1.0 if str(c).strip().startswith(str(a)) else 0.0 for c, a in zip(completions, answer)]
'''


def write_user_folder(root: Path) -> Path:
    """``root/data/{train,test}.jsonl`` (prompt, answer, family) and ``root/byo_accept.py``."""
    (root / "data").mkdir(parents=True)
    for split, count in (("train", 24), ("test", 4)):
        rows = [{"prompt": f"{i % 7}+{i % 5}+1=", "answer": i % 7 + i % 5 + 1, "family": ("add", "odd")[i % 2]}
                for i in range(count)]
        (root / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "byo_accept.py").write_text(REWARD_MODULE.format(log=str(root / "calls.jsonl")))
    return root / "calls.jsonl"


def calls(log: Path) -> list[dict]:
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    log.unlink()
    return lines


def check_calls(lines: list[dict]) -> None:
    for policy in ("tiny-bpe", "tiny-sp"):
        mine = [c for c in lines if c["policy"] == policy]
        assert any(c["training"] for c in mine), f"{policy}: the reward function never scored a training step"
        assert any(not c["training"] for c in mine), f"{policy}: held-out validation did not use it"
    assert all(c["family"] and c["ids"] for c in lines)  # the extra column and completion_ids reached it


SETTINGS = ["validation.limit=4", "validation.every_steps=0", "validation.batch_size=4"]


@pytest.mark.slow
def test_own_dataset_and_reward_function_train_through_the_api_then_the_cli(tmp_path: Path, monkeypatch) -> None:
    """One run: ``mutualrl.train`` with the module's function, then ``mutualrl train --resume`` and ``mutualrl eval``
    by the module's name. (README's section, tests/test_readme_byo.py, trains through the CLI from the start.)"""
    import mutualrl

    user = tmp_path / "user"
    log = write_user_folder(user)
    run = tmp_path / "run-api"
    monkeypatch.chdir(user)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "byo_accept", raising=False)
    from mutualrl.config.plugins import import_module_for

    exact = import_module_for("byo_accept", "test").exact
    result = mutualrl.train("tiny", regime="sgt", max_steps=2, output_dir=run, progress=False,
                            overrides={"task.name": "dataset", "task.source": str(user / "data"),
                                       "validation.limit": 4, "validation.every_steps": 0,
                                       "validation.batch_size": 4, "grpo.save_steps": 1},
                            reward_funcs=[exact])
    check_calls(calls(log))
    assert set(json.loads((run / "summary.json").read_text())["policies"]) == {"tiny-bpe", "tiny-sp"}
    assert set(result.models) == {"tiny-bpe", "tiny-sp"} and all((p / "config.json").is_file()
                                                                  for p in result.models.values())
    assert result.rows("eval", "tiny-sp") and result.summary["regime"] == "sgt"
    assert set(result.held_out()) == {"tiny-bpe", "tiny-sp"}

    # Train it longer from its checkpoint: the rescue counter goes on, and the summary counts every step's rescues.
    argv = [sys.executable, "-m", "mutualrl", "train", "--regime", "sgt", "-o", str(run)]
    done = subprocess.run([*argv, "--resume", "--max-steps", "4", "--allow-code", "byo_accept"], cwd=user,
                          env=child_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "resuming every policy from checkpoint-2" in done.stdout, done.stdout[-3000:]
    check_calls(calls(log))  # the module by its name, in every policy's worker, training and held-out
    summary = json.loads((run / "summary.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for policy, entry in summary["policies"].items():
        mine = [r for r in rows if r.get("kind") == "train" and r["policy"] == policy]
        assert [r["step"] for r in mine] == [1, 2, 3, 4]
        totals = [r["sgt/rescues_total"] for r in mine]
        assert totals == sorted(totals) and totals[-1] == sum(r["sgt/rescues"] for r in mine) == entry["sgt_rescues"]
    assert summary["policies"]["tiny-sp"]["sgt_rescues"] > 0  # tiny-sp's blind spot: rescued from the first step

    elsewhere = tmp_path / "elsewhere"  # not the folder the reward module is in: the user puts that on PYTHONPATH
    elsewhere.mkdir()  # (a run folder's plan is never searched; the module must be the file the run recorded)
    env = child_env()
    env["PYTHONPATH"] += os.pathsep + str(user)
    done = subprocess.run([sys.executable, "-m", "mutualrl", "eval", str(run), "-o", str(tmp_path / "ev.json"),
                           "--allow-code", "byo_accept"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert {c["policy"] for c in calls(log)} == {None}  # eval scored with the run's reward function, here
    meta = json.loads((tmp_path / "ev.json").read_text())
    assert meta["verifier"] == "byo_accept.exact" and meta["tasks"] == ["dataset"]

    evaluated = mutualrl.evaluate(result, progress=False)  # the run's held-out rows, scored by its function
    assert set(evaluated["reward@1"]) == {"tiny-bpe/final", "tiny-sp/final"}
    assert evaluated["meta"]["verifier"] == "byo_accept.exact"
    assert {c["policy"] for c in calls(log)} == {None}
