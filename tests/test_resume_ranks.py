"""``--resume`` on another number of ranks: a DeepSpeed ZeRO checkpoint saved by 2 CPU ranks per policy, resumed
with 1, is refused in the plan in one line naming the policy and both counts -- in ``--dry-run`` and before a real
launch rolls anything back or starts a worker. A checkpoint without DeepSpeed loads on any rank count.

The run folder is built as tests/test_resume_keeps_work.py builds one (resolved config + checkpoint folders), the
checkpoints holding the file names DeepSpeed 0.19's ``save_checkpoint`` writes for ZeRO-3 on 2 ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mutualrl.errors import PlacementError
from mutualrl.run_folder import RunPaths

SAVED = {"launch.cpu_processes": 2, "launch.deepspeed": "zero3", "grpo.max_steps": 3}


def zero3_checkpoint(paths: RunPaths, policy: str, step: int, ranks: int) -> Path:
    """The files a ZeRO-3 checkpoint of ``ranks`` ranks holds (empty: only their names are read here)."""
    folder = paths.policy_dir(policy) / f"checkpoint-{step}"
    shards = folder / f"global_step{step}"
    shards.mkdir(parents=True)
    (folder / "latest").write_text(f"global_step{step}")
    for rank in range(ranks):
        (shards / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt").write_bytes(b"")
        (shards / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
        (folder / f"rng_state_{rank}.pth").write_bytes(b"")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


@pytest.fixture()
def stopped(tmp_path: Path) -> RunPaths:
    """A tiny run of 2 CPU ranks per policy under ZeRO-3, stopped after its checkpoint-2."""
    from mutualrl.api import load_config
    from mutualrl.config.resolved import write_resolved_config

    paths = RunPaths(tmp_path / "run")
    config = load_config("tiny", overrides=SAVED)
    write_resolved_config(paths, config, "tiny")
    for policy in config.pool.policies:
        zero3_checkpoint(paths, policy.name, 2, ranks=2)
    return paths


def snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def resume(paths: RunPaths, dry_run: bool, *sets: str) -> int:
    from mutualrl.launch.run import TrainOptions, train_one

    options = TrainOptions(output_dir=paths.root, resume=True, dry_run=dry_run, overrides=list(sets))
    from rich.console import Console

    return train_one(options, Console(width=200))


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_two_rank_zero3_run_resumed_on_one_rank_is_refused_before_launch(stopped: RunPaths, dry_run, monkeypatch):
    import mutualrl.launch.run as run_module

    monkeypatch.setattr(run_module, "run_machine_workers", lambda *a, **k: pytest.fail("a worker was launched"))
    before = snapshot(stopped.root)
    with pytest.raises(PlacementError) as err:
        resume(stopped, dry_run, "launch.cpu_processes=1")
    text = str(err.value)
    assert "\n" not in text
    assert "policy tiny-bpe" in text and "saved by 2 ranks" in text and "runs it on 1" in text, text
    assert "launch.cpu_processes=2" in text, text
    assert snapshot(stopped.root) == before  # nothing rolled back, the stored config not rewritten


def test_the_same_rank_count_is_planned(stopped: RunPaths) -> None:
    from mutualrl.api import load_config
    from mutualrl.launch.plan.launch_plan import make_launch_plan

    from mutualrl.launch.rundir.resume import saved_ranks

    config = load_config("tiny", overrides=SAVED)
    saved = saved_ranks(stopped, [p.name for p in config.pool.policies])
    assert sorted(saved) == ["tiny-bpe", "tiny-sp"] and {ranks for ranks, _ in saved.values()} == {2}
    plan = make_launch_plan(config, stopped.root, dry_run=True, resume_ranks=saved)
    assert [p.placement.world_size for p in plan.policies] == [2, 2]


def test_a_checkpoint_without_deepspeed_loads_on_any_rank_count(tmp_path: Path) -> None:
    from mutualrl.api import load_config
    from mutualrl.launch.plan.launch_plan import make_launch_plan

    paths = RunPaths(tmp_path / "run")
    config = load_config("tiny", overrides={"launch.cpu_processes": 1, "grpo.max_steps": 3})
    for policy in config.pool.policies:  # DDP on 2 ranks: the whole optimizer in optimizer.pt
        folder = paths.policy_dir(policy.name) / "checkpoint-2"
        folder.mkdir(parents=True)
        for name in ("model.safetensors", "optimizer.pt", "rng_state_0.pth", "rng_state_1.pth"):
            (folder / name).write_bytes(b"")
    from mutualrl.launch.rundir.resume import saved_ranks

    assert saved_ranks(paths, [p.name for p in config.pool.policies]) == {}
    plan = make_launch_plan(config, paths.root, dry_run=True, resume_ranks={})
    assert [p.placement.world_size for p in plan.policies] == [1, 1]
