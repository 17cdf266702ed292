"""A 2-step tiny run with TensorBoard: each policy's event file holds training and validation reward@1."""

from __future__ import annotations

import subprocess
import sys

import pytest

from e2e_helpers import child_env


@pytest.mark.slow
def test_tensorboard_event_files_carry_validation_reward_per_policy(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "mutualrl", "train", "--pool", "tiny", "--max-steps", "2",
                           "--set", "grpo.report_to=[tensorboard]", "--set", "validation.limit=20",
                           "--set", "validation.every_steps=2", "-o", str(run_dir)],
                          env=child_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for policy in ("tiny-bpe", "tiny-sp"):
        files = list((run_dir / "policies" / policy).rglob("events.out.tfevents*"))
        assert files, f"{policy}: no TensorBoard event file"
        tags: set[str] = set()
        for path in files:
            events = EventAccumulator(str(path))
            events.Reload()
            tags |= set(events.Tags()["scalars"])
        assert {"eval/reward@1", "eval/group/add/reward@1", "eval/group/sub/reward@1", "train/reward"} <= tags, tags
