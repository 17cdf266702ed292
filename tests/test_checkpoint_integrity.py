"""A checkpoint counts only when complete: every file of every kind of checkpoint, deleted, cut or emptied.

The damage is generated from the files each hand-built checkpoint holds (not a list of
cases): with a manifest every file is checked; without one (an older version's checkpoint)
the files the kind needs must be there and no file may be cut short.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from mutualrl.errors import UsageError
from mutualrl.launch.rundir.resume import common_checkpoint, restart_command
from mutualrl.run_folder import RunPaths
from mutualrl.ops.checkpoint_files import MANIFEST_NAME, checkpoint_problem, required_missing, write_manifest
from mutualrl.training.worker import check_resumable

KINDS = ("full", "sharded", "lora", "deepspeed")


def _torch_file(path: Path, size: int = 32) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state": torch.zeros(size)}, path)


def build_checkpoint(folder: Path, kind: str, step: int, manifest: bool = True) -> Path:
    """A checkpoint folder laid out as transformers saves one of ``kind`` (tiny tensors)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    _torch_file(folder / "training_args.bin", 4)
    if kind == "full":
        save_file({"w": torch.ones(16, 16)}, str(folder / "model.safetensors"))
    elif kind == "sharded":
        save_file({"a": torch.ones(8, 8)}, str(folder / "model-00001-of-00002.safetensors"))
        save_file({"b": torch.ones(8, 8)}, str(folder / "model-00002-of-00002.safetensors"))
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
            "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    elif kind == "lora":
        (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "peft_type": "LORA"}))
        save_file({"lora_A": torch.ones(4, 16)}, str(folder / "adapter_model.safetensors"))
    if kind == "deepspeed":  # two ranks: ZeRO shards of each, an RNG state per rank, scheduler inside
        (folder / "latest").write_text(f"global_step{step}")
        for rank in (0, 1):
            _torch_file(folder / f"global_step{step}" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
            _torch_file(folder / f"global_step{step}" / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
            _torch_file(folder / f"rng_state_{rank}.pth", 4)
    else:
        _torch_file(folder / "optimizer.pt")
        _torch_file(folder / "scheduler.pt", 2)
        _torch_file(folder / "rng_state.pth", 4)
    if manifest:
        write_manifest(folder, step)
    return folder


def files_of(kind: str, tmp_path: Path) -> list[str]:
    folder = build_checkpoint(tmp_path / f"probe-{kind}", kind, 2)
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
                  and p.name != MANIFEST_NAME)


def damage(path: Path, how: str) -> None:
    if how == "deleted":
        path.unlink()
    elif how == "cut":
        path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 2)])
    else:
        path.write_bytes(b"")


@pytest.mark.parametrize("kind", KINDS)
def test_a_complete_checkpoint_of_every_kind_counts_with_or_without_manifest(tmp_path, kind):
    assert checkpoint_problem(build_checkpoint(tmp_path / "with", kind, 2)) is None
    assert checkpoint_problem(build_checkpoint(tmp_path / "without", kind, 2, manifest=False)) is None


@pytest.mark.parametrize("kind", KINDS)
def test_with_a_manifest_any_file_deleted_cut_or_emptied_is_named(tmp_path, kind):
    for name in files_of(kind, tmp_path):
        for how in ("deleted", "cut", "emptied"):
            folder = build_checkpoint(tmp_path / f"{kind}-{how}-{name.replace('/', '_')}", kind, 2)
            damage(folder / name, how)
            problem = checkpoint_problem(folder)
            assert problem is not None and name.split("/")[-1] in problem, (name, how, problem)
            assert "\n" not in problem


@pytest.mark.parametrize("kind", KINDS)
def test_without_a_manifest_every_file_the_kind_needs_is_required_and_none_may_be_cut(tmp_path, kind):
    needed = 0
    for name in files_of(kind, tmp_path):
        folder = build_checkpoint(tmp_path / f"{kind}-{name.replace('/', '_')}", kind, 2, manifest=False)
        damage(folder / name, "deleted")
        if required_missing(folder):  # a file the resume needs (weights, optimizer, scheduler, RNG, state)
            needed += 1
            assert checkpoint_problem(folder) is not None
        cut = build_checkpoint(tmp_path / f"{kind}-cut-{name.replace('/', '_')}", kind, 2, manifest=False)
        damage(cut / name, "emptied")
        assert checkpoint_problem(cut) is not None, name
    assert needed >= 4  # trainer state, weights or shards, optimizer, RNG at least


def test_the_optimizer_state_is_never_dropped_silently(tmp_path):
    """A checkpoint without optimizer.pt or scheduler.pt is skipped (named), never resumed with a fresh AdamW."""
    paths = RunPaths(tmp_path)
    for policy in ("a", "b"):
        for step in (2, 4):
            build_checkpoint(paths.policy_dir(policy) / f"checkpoint-{step}", "full", step, manifest=False)
    (paths.policy_dir("b") / "checkpoint-4" / "optimizer.pt").unlink()
    (paths.policy_dir("a") / "checkpoint-4" / "model.safetensors").unlink()
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a", "b"], damaged=damaged) == 2
    assert any("optimizer state (optimizer.pt)" in d and "policies/b/checkpoint-4" in d for d in damaged)
    assert any("model weights (model.safetensors)" in d and "policies/a/checkpoint-4" in d for d in damaged)
    with pytest.raises(UsageError, match="optimizer.pt"):  # a worker given it by hand refuses too
        check_resumable(str(paths.policy_dir("b") / "checkpoint-4"))
    check_resumable(str(paths.policy_dir("b") / "checkpoint-2"))


def test_a_checkpoint_killed_while_saving_is_named_and_a_restart_takes_the_previous_one(tmp_path):
    paths = RunPaths(tmp_path)
    build_checkpoint(paths.policy_dir("a") / "checkpoint-2", "lora", 2)
    partial = build_checkpoint(paths.policy_dir("a") / "checkpoint-4", "lora", 4, manifest=False)
    (partial / "trainer_state.json").unlink()  # written last by transformers: the kill came before
    (partial / "rng_state.pth").unlink()
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a"], damaged=damaged) == 2
    assert damaged == [f"{partial}: incomplete, missing trainer state (trainer_state.json); RNG state (rng_state.pth)"]

    class Process:
        name, argv = "a", ["python", "-m", "mutualrl.training.worker", "--policy", "a"]

    argv, step = restart_command([Process()], paths, "a")
    assert step == 2 and argv[-1] == str(paths.policy_dir("a") / "checkpoint-2")


def test_a_manifest_written_for_a_folder_saved_again_is_dropped_first(tmp_path):
    """A resumed run saving the same step again: until its new manifest, the folder is judged by its files."""
    from mutualrl.ops.checkpoint_files import drop_manifest

    folder = build_checkpoint(tmp_path / "checkpoint-4", "full", 4)
    drop_manifest(folder)
    assert not (folder / MANIFEST_NAME).exists()
    (folder / "scheduler.pt").unlink()  # the new save stopped before its scheduler
    assert "scheduler state (scheduler.pt)" in checkpoint_problem(folder)
    manifest = json.loads(write_manifest(folder, 4).read_text())
    assert "scheduler.pt" not in manifest["files"] and manifest["step"] == 4


def test_a_resume_proves_the_optimizer_state_came_with_it(tmp_path):
    """MutualGRPOTrainer._load_optimizer_and_scheduler's check: Trainer skips a missing optimizer.pt silently."""
    from mutualrl.ops.checkpoint_files import resumed_optimizer_step

    folder = build_checkpoint(tmp_path / "checkpoint-4", "full", 4)
    weight = torch.nn.Parameter(torch.ones(3))
    adam = torch.optim.AdamW([weight])
    for _ in range(4):
        weight.grad = torch.ones(3)
        adam.step()
    assert resumed_optimizer_step(folder, adam.state) == 4
    assert resumed_optimizer_step(folder, torch.optim.SGD([weight]).state) is None  # keeps no step count
    (folder / "optimizer.pt").unlink()
    with pytest.raises(UsageError, match="checkpoint-4: no optimizer state"):
        resumed_optimizer_step(folder, {})


def test_a_checkpoint_whose_trainer_state_names_another_step_is_skipped(tmp_path):
    """Issue 42 case 2: global_step 3 inside checkpoint-4 was used silently (a duplicate train row for step 4)."""
    paths = RunPaths(tmp_path)
    for step in (2, 4):
        build_checkpoint(paths.policy_dir("a") / f"checkpoint-{step}", "full", step, manifest=False)
    state = paths.policy_dir("a") / "checkpoint-4" / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 3, "log_history": []}))
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a"], damaged=damaged) == 2
    assert "says global_step 3, but the folder is step 4" in damaged[0]
    state.write_text("null")
    assert "holds no global_step" in checkpoint_problem(state.parent)


def test_a_corrupt_optimizer_of_the_right_size_falls_back_to_an_older_checkpoint(tmp_path):
    """Issue 42 case 3: bytes changed inside optimizer.pt (same size) made every --resume fail on it."""
    paths = RunPaths(tmp_path)
    for step in (2, 4):
        build_checkpoint(paths.policy_dir("a") / f"checkpoint-{step}", "full", step)
    optimizer = paths.policy_dir("a") / "checkpoint-4" / "optimizer.pt"
    data = bytearray(optimizer.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(16)
    optimizer.write_bytes(bytes(data))
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a"], damaged=damaged) == 2
    assert "optimizer.pt: damaged" in damaged[0] and "checksum" in damaged[0]


def test_a_fifo_in_a_checkpoint_is_named_not_waited_on(tmp_path):
    import os

    folder = build_checkpoint(tmp_path / "checkpoint-2", "full", 2, manifest=False)
    os.mkfifo(folder / "config.json.tmp.json")
    assert "not a regular file" in checkpoint_problem(folder)


def test_weights_with_a_byte_changed_are_caught_by_the_manifest_hash(tmp_path):
    """Found by benchmarks/chaos_tamper.py: 32 bytes changed inside model.safetensors (same size) were resumed from,
    and the policy died at its first generation on every --resume."""
    paths = RunPaths(tmp_path)
    for step in (2, 4):
        build_checkpoint(paths.policy_dir("a") / f"checkpoint-{step}", "full", step)
    weights = paths.policy_dir("a") / "checkpoint-4" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-64:-32] = bytes(range(32))
    weights.write_bytes(bytes(data))
    damaged: list[str] = []
    assert common_checkpoint(paths, ["a"], damaged=damaged) == 2
    assert "model.safetensors: damaged (its content changed" in damaged[0]
