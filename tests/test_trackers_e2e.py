"""TensorBoard event files of 2-policy tiny runs: one TensorBoard run per policy, on its own step axis, holding
its training metrics, held-out reward@1 per task group, SGT's rescues and the exchange's age metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e_helpers import assert_ok

POLICIES = ("tiny-bpe", "tiny-sp")
VALIDATION_TAGS = {"eval/reward@1", "eval/group/add/reward@1", "eval/group/sub/reward@1"}
SGT_TAGS = {"train/sgt/rescues", "train/sgt/rescues_total", "train/sgt/gated_prompts"}
EXCHANGE_TAGS = {"train/mutual/peer_age", "train/mutual/stale", "train/mutual/peers_active", "train/mutual/waited"}


def tensorboard_runs(run_dir: Path) -> dict[Path, dict[str, list[tuple[int, float]]]]:
    """Every TensorBoard run (a folder of event files) under ``run_dir``: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs: dict[Path, dict[str, list[tuple[int, float]]]] = {}
    for folder in sorted({path.parent for path in run_dir.rglob("events.out.tfevents*")}):
        events = EventAccumulator(str(folder))
        events.Reload()
        runs[folder.relative_to(run_dir)] = {tag: [(e.step, e.value) for e in events.Scalars(tag)]
                                             for tag in events.Tags()["scalars"]}
    return runs


def policy_rows(run_dir: Path, policy: str, kind: str) -> list[dict]:
    lines = (run_dir / "metrics" / f"{policy}.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if row.get("kind") == kind]


@pytest.mark.slow
def test_each_policy_is_its_own_tensorboard_run_with_its_metrics(sgt_3_steps_off_lock_step):
    # the 3-step SGT run off the lock-step path (test_async_exchange_e2e.py checks its training)
    run_dir, done = sgt_3_steps_off_lock_step
    assert_ok(done)
    runs = tensorboard_runs(run_dir)
    by_policy = {policy: [folder for folder in runs if folder.parts[:2] == ("policies", policy)] for policy in POLICIES}
    assert all(len(folders) == 1 for folders in by_policy.values()), runs.keys()  # one run each ...
    assert len(runs) == len(POLICIES)  # ... and none shared or elsewhere
    for policy, (folder,) in by_policy.items():
        scalars = runs[folder]
        assert VALIDATION_TAGS | SGT_TAGS | EXCHANGE_TAGS | {"train/reward"} <= scalars.keys(), sorted(scalars)
        # its own step axis: optimizer steps 1..3, validation before training and at the end
        assert [step for step, _ in scalars["train/reward"]] == [1, 2, 3]
        assert [step for step, _ in scalars["eval/reward@1"]] == [0, 3]
        # the values are this policy's (metrics/<policy>.jsonl), not its peer's
        train = {row["step"]: row for row in policy_rows(run_dir, policy, "train")}
        for tag in ("train/reward", "train/sgt/rescues", "train/sgt/rescues_total", "train/mutual/peer_age"):
            key = {"train/reward": "reward_mean"}.get(tag, tag.removeprefix("train/"))
            assert [(s, pytest.approx(v, abs=1e-6)) for s, v in scalars[tag]] == [
                (s, train[s][key]) for s in sorted(train)], tag
        held_out = {row["step"]: row for row in policy_rows(run_dir, policy, "eval")}
        assert [(s, pytest.approx(v, abs=1e-6)) for s, v in scalars["eval/group/sub/reward@1"]] == [
            (s, held_out[s]["eval/group/sub/reward@1"]) for s in sorted(held_out)]
    # the two policies' held-out curves differ (complementary blind spots): nothing was merged
    first, second = (runs[folders[0]]["eval/group/add/reward@1"] for folders in by_policy.values())
    assert first != second


@pytest.mark.slow
@pytest.mark.parametrize("tiny_regime_2_steps", ["xgrpo"], indirect=True)
def test_tensorboard_event_files_carry_validation_reward_per_policy(tiny_regime_2_steps):
    # the shared 2-step xgrpo run (test_train_e2e.py checks its training) reports to TensorBoard
    run_dir, done = tiny_regime_2_steps
    assert_ok(done)
    runs = tensorboard_runs(run_dir)
    for policy in POLICIES:
        tags = set().union(*(scalars for folder, scalars in runs.items() if folder.parts[:2] == ("policies", policy)))
        xgrpo = {"train/xgrpo/sign_flip_rate", "train/xgrpo/clip_fraction"}
        assert VALIDATION_TAGS | xgrpo | {"train/reward"} <= tags, tags
