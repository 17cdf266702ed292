"""A 2-step tiny run with TensorBoard: each policy's event file holds training and validation reward@1."""

from __future__ import annotations

import pytest

from e2e_helpers import assert_ok, tiny_regime_run


@pytest.mark.slow
def test_tensorboard_event_files_carry_validation_reward_per_policy(tmp_path_factory):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # the shared 2-step xgrpo run (test_train_e2e.py checks its training) reports to TensorBoard
    run_dir, done = tiny_regime_run(tmp_path_factory, "xgrpo")
    assert_ok(done)
    for policy in ("tiny-bpe", "tiny-sp"):
        files = list((run_dir / "policies" / policy).rglob("events.out.tfevents*"))
        assert files, f"{policy}: no TensorBoard event file"
        tags: set[str] = set()
        for path in files:
            events = EventAccumulator(str(path))
            events.Reload()
            tags |= set(events.Tags()["scalars"])
        assert {"eval/reward@1", "eval/group/add/reward@1", "eval/group/sub/reward@1", "train/reward"} <= tags, tags
