"""A reward of None (docs/tasks.md: "not scored"; TRL: NaN, left out by ``nansum``) in every regime: the SEE keeps it
as NaN, and each regime treats such a completion as not scored (docs/regimes.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from e2e_helpers import assert_ok, child_env
from mutualrl.see.errors import InvalidRecordError
from mutualrl.see.records import RolloutBatch

REWARDS = '''
def sometimes(prompts, completions, completion_ids, **kwargs):
    """None (not scored) for every third completion, else 1.0 or 0.0."""
    return [None if i % 3 == 0 else float(len(c) % 2) for i, c in enumerate(completions)]
'''


def _batch(rewards: list[float]) -> RolloutBatch:
    n = len(rewards)
    return RolloutBatch(prompt_id=[f"p{i}" for i in range(n)], sample_index=list(range(n)), prompt_text=["q"] * n,
                        response_text=["x"] * n, response_token_ids=[[1]] * n, response_token_spans=[[0, 1]] * n,
                        reward=rewards, finished=[True] * n)


def test_the_exchange_keeps_a_reward_not_scored_as_nan_and_refuses_an_infinite_one() -> None:
    kept = _batch([1.0, float("nan"), 0.0]).to_table()
    assert np.isnan(kept.column("reward").to_numpy()[1])
    with pytest.raises(InvalidRecordError, match=r"reward.*inf \(must be finite, or NaN: not scored\)"):
        RolloutBatch.from_table(_batch([1.0, float("inf")]).to_table())  # a table from outside is checked


def test_prp_keeps_an_unscored_peer_row_in_its_place_with_advantage_0() -> None:
    """Every rank holds M·B rows, scored or not, so every rank runs the same forwards (ZeRO-3's all-gathers match)."""
    from mutualrl.regimes.prp.adapter import PRPAdapter

    view = SimpleNamespace(pool_order=["a", "b"])
    rows = torch.arange(4).view(1, 1, 4)  # int64 [P, M-1, K]: peer b's four rollouts of one prompt
    advantages = torch.tensor([[[0.5, -0.5, 1.0, -1.0], [1.0, 0.0, 0.0, -1.0]]])  # [P, M, K]
    scored = torch.tensor([[[True, False, False, True]]])
    sources, prompts, adv, kept = PRPAdapter._peer_rows(view, ["b"], rows, advantages, range(1), 4, scored)
    assert sources == [("b", 0), ("b", 1), ("b", 2), ("b", 3)] and prompts == [0, 0, 0, 0]
    assert adv == [1.0, 0.0, 0.0, -1.0] and kept == [True, False, False, True]


RANK_ONE_UNSCORED = '''
import os


def rank_one_unscored(prompts, completions, completion_ids, **kwargs):
    """None (not scored) for every completion of rank 1's groups, else 1.0 or 0.0."""
    if os.environ.get("RANK") == "1":
        return [None] * len(completions)
    return [float(len(c) % 2) for c in completions]
'''


@pytest.mark.slow
def test_unscored_peer_rows_on_one_rank_under_zero3_finish_and_are_counted(tmp_path: Path) -> None:
    """HACPO on two gloo ranks per policy under ZeRO-3, a reward of None for all of rank 1's rollouts (so rank 1's peer
    rows are unscored, rank 0's scored), the reference model on (beta > 0): every rank runs the same snapshot forwards,
    the run finishes, all 8 prompts x K = 4 peer rows are counted each step and at most half are used; HACPO's own
    metrics are logged and its status shows the kept share. (PRP's batch surgery is the same; HACPO adds its loss term
    and skips the reference pass over peer rows.)"""
    (tmp_path / "rank_rewards.py").write_text(RANK_ONE_UNSCORED)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+{i}="}) + "\n"
                                                           for i in range(40)))
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--pool", "tiny", "--regime", "hacpo",
                           "--max-steps", "1", "-o", str(run), "--set", "task.name=dataset", "--set", "task.source=data",
                           "--set", "task.reward_funcs=[rank_rewards.rank_one_unscored]", "--set", "validation.limit=4",
                           "--set", "validation.at_start=false", "--set", "launch.cpu_processes=2",
                           "--set", "launch.deepspeed=zero3", "--set", "grpo.beta=0.04"],
                          cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=900)
    assert_ok(done)
    assert "kept" in done.stdout  # HACPO's status metric on the live progress line
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [row for row in rows if row.get("kind") == "train"]
    assert sorted(row["policy"] for row in train) == ["tiny-bpe", "tiny-sp"]
    for row in train:
        assert row["hacpo/peer_rows"] == 32
        peer = next(key for key in row if key.startswith("hacpo/from/") and key.endswith("/used_share"))
        assert row[peer] <= 0.5  # rank 1's rows (half the prompts) are unscored: never used
        assert 0 < row["hacpo/capability"] <= 1 and row["hacpo/capability_ratio"] > 0
        assert 0 < row["hacpo/cross_ratio"] and 0 <= row["hacpo/cross_kept"] <= 0.5
    summary = json.loads((run / "summary.json").read_text())
    assert all("peer_samples_used" in entry for entry in summary["policies"].values())
