"""``--resume`` deletes no finished work and applies or refuses what it is given: a run length below the steps
trained is refused (checkpoint, final model and rows kept); a smaller ``validation.limit`` is applied, a larger one
refused; a lengthened run follows one learning-rate schedule from its checkpoint on; a resumed policy's tracker runs
go on (one TensorBoard folder with the steps after the checkpoint purged, one W&B run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.errors import UsageError
from mutualrl.run_folder import RunPaths


@pytest.fixture()
def finished(tmp_path: Path) -> RunPaths:
    """A tiny run's folder that trained 3 steps: checkpoint-3 and a final model for each policy."""
    from mutualrl.api import load_config
    from mutualrl.config.resolved import write_resolved_config

    paths = RunPaths(tmp_path / "run")
    config = load_config("tiny", overrides={"grpo.max_steps": 3, "validation.limit": 10})
    write_resolved_config(paths, config, "tiny")
    for policy in config.pool.policies:
        (paths.policy_dir(policy.name) / "checkpoint-3").mkdir(parents=True)
        paths.final_model(policy.name).mkdir(parents=True)
        (paths.final_model(policy.name) / "trainer_state.json").write_text('{"global_step": 3}')
    return paths


def resumed(paths: RunPaths, **overrides):
    from mutualrl.api import load_config
    from mutualrl.launch.rundir.prepare import resume_changes

    config = load_config("tiny", overrides={"grpo.max_steps": 3, "validation.limit": 10, **overrides})
    return resume_changes(paths, config)


def test_a_shorter_run_length_is_refused_and_nothing_is_deleted(finished: RunPaths) -> None:
    before = sorted(p.relative_to(finished.root) for p in finished.root.rglob("*"))
    with pytest.raises(UsageError) as err:
        resumed(finished, **{"grpo.max_steps": 2})
    assert "trained 3 optimizer steps" in str(err.value) and "checkpoint-3" in str(err.value)
    assert "deletes no finished work" in str(err.value) and "\n" not in str(err.value)
    assert sorted(p.relative_to(finished.root) for p in finished.root.rglob("*")) == before
    assert [str(c) for c in resumed(finished, **{"grpo.max_steps": 5})] == ["grpo.max_steps: 3 -> 5"]


def test_a_final_model_alone_counts_as_trained(finished: RunPaths) -> None:
    for policy in ("tiny-bpe", "tiny-sp"):
        (finished.policy_dir(policy) / "checkpoint-3").rmdir()
    with pytest.raises(UsageError, match="final"):
        resumed(finished, **{"grpo.max_steps": 1})


def test_validation_limit_on_resume_is_applied_when_smaller_and_refused_when_larger(finished: RunPaths) -> None:
    assert [str(c) for c in resumed(finished, **{"validation.limit": 3})] == ["validation.limit: 10 -> 3"]
    for larger in (20, None):
        with pytest.raises(UsageError, match="validates on at most 10"):
            resumed(finished, **{"validation.limit": larger})


def scheduler(steps: int):
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    return optimizer, get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=steps)


def test_a_lengthened_run_follows_one_schedule_from_its_checkpoint() -> None:
    from mutualrl.training.resumed_run import continue_schedule

    old_optimizer, old = scheduler(40)
    for _ in range(40):
        old_optimizer.step()
        old.step()
    assert old_optimizer.param_groups[0]["lr"] == 0.0  # the planned schedule ended
    optimizer, new = scheduler(60)  # the trainer's schedule for --max-steps 60, its state from checkpoint-40
    new.load_state_dict(old.state_dict())
    assert optimizer.param_groups[0]["lr"] == 1e-3  # untouched by the load: not the rate step 41 trains at
    continue_schedule(new, optimizer)
    rates = [optimizer.param_groups[0]["lr"]]
    for _ in range(3):
        optimizer.step()
        new.step()
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([1e-3 * (60 - step) / 60 for step in (40, 41, 42, 43)])
    assert new.get_last_lr() == pytest.approx([rates[-1]])


def test_an_unchanged_schedule_is_unchanged_by_resuming() -> None:
    from mutualrl.training.resumed_run import continue_schedule

    first, old = scheduler(40)
    for _ in range(10):
        first.step()
        old.step()
    optimizer, new = scheduler(40)
    new.load_state_dict(old.state_dict())
    assert continue_schedule(new, optimizer) == pytest.approx(old.get_last_lr())


def test_a_resumed_policy_writes_one_tensorboard_run_and_purges_the_steps_after_its_checkpoint(tmp_path) -> None:
    from transformers.integrations import TensorBoardCallback

    from mutualrl.training.resumed_run import TENSORBOARD_FOLDER, PurgeOnce, continue_trackers

    started, resumed_cb = TensorBoardCallback(), TensorBoardCallback()
    continue_trackers([started], tmp_path, None, environ={})
    continue_trackers([resumed_cb], tmp_path, str(tmp_path / "checkpoint-10"), environ={})
    assert started.logging_dir == resumed_cb.logging_dir == str(tmp_path / "runs" / TENSORBOARD_FOLDER)
    assert not isinstance(started._SummaryWriter, PurgeOnce)
    made: list[dict] = []
    resumed_cb._SummaryWriter.writer = lambda **kwargs: made.append(kwargs)
    resumed_cb._init_summary_writer(None)
    resumed_cb._init_summary_writer(None)  # after training: the last validation's logs open a writer again
    assert made == [{"log_dir": resumed_cb.logging_dir, "purge_step": 11}, {"log_dir": resumed_cb.logging_dir}]
    mine = TensorBoardCallback()
    continue_trackers([mine], tmp_path, None, environ={"TENSORBOARD_LOGGING_DIR": "/elsewhere"})
    assert mine.logging_dir != str(tmp_path / "runs" / TENSORBOARD_FOLDER)  # the user's folder wins


def test_wandb_continues_one_run_per_policy() -> None:
    from mutualrl.training.resumed_run import wandb_run_env

    env = wandb_run_env(["wandb"], "run-abc", "tiny-bpe", {})
    assert env == wandb_run_env("wandb", "run-abc", "tiny-bpe", {}) and env["WANDB_RESUME"] == "allow"
    assert env["WANDB_RUN_ID"] != wandb_run_env(["wandb"], "run-abc", "tiny-sp", {})["WANDB_RUN_ID"]
    assert wandb_run_env(["tensorboard"], "run-abc", "tiny-bpe", {}) == {}
    assert wandb_run_env(["wandb"], "run-abc", "tiny-bpe", {"WANDB_RUN_ID": "mine"}) == {}
