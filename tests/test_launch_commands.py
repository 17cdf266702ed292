"""Launch commands, environments and device adaptations of the GRPO fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutualrl.config.loader import load_run_config
from mutualrl.assets.deepspeed_ops import torch_extensions_dir
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.commands import (
    GPU_VLLM_CORRECTION,
    WORKER_MODULE,
    adapt_grpo_to_device,
    build_machine_specs,
    resolve_vllm,
    visible_devices,
)
from mutualrl.launch.plan.mwra import PolicyPlacement, plan_placement

GPU = PolicyPlacement("p", "cuda", (0, 1), 2, 4)
CPU = PolicyPlacement("p", "cpu", (), 1, 2)
GPU_RECIPE = {"bf16": True, "use_vllm": True, "vllm_mode": "colocate", "tf32": True, "learning_rate": 1e-6}


def config_for(pool: str, *overrides: str):
    return load_run_config(pool, overrides).config


def first_machine_specs(*args, **kwargs):
    """Each policy's spec on its first machine (the only one on a single machine), in pool order."""
    return [per_machine[0] for per_machine in build_machine_specs(*args, **kwargs)]


def test_gpu_specs_launch_one_accelerate_group_per_policy(tmp_path):
    config = config_for("2qwen")
    placement = plan_placement([(p.name, 1.0) for p in config.pool.policies], gpus=8, cpu_cores=16)
    specs = first_machine_specs(config, placement, tmp_path, python="/py", parent_visible_devices=None, cwd=tmp_path)
    assert [s.policy for s in specs] == ["qwen2.5-math-1.5b", "qwen3-1.7b-base"]
    first, second = specs
    run = str(tmp_path.resolve())
    assert first.argv == [
        "/py", "-m", "mutualrl.host.accelerate_launch",
        "--config_file", f"{run}/launch/qwen2.5-math-1.5b.accelerate.yaml",
        "--num_processes", "4",
        "--main_process_port", "29500",
        "-m", WORKER_MODULE, "--run-dir", run, "--policy", "qwen2.5-math-1.5b",
    ]  # fmt: skip
    assert second.argv[second.argv.index("--main_process_port") + 1] == "29501"
    assert (first.env["CUDA_VISIBLE_DEVICES"], second.env["CUDA_VISIBLE_DEVICES"]) == ("0,1,2,3", "4,5,6,7")
    assert first.env["OMP_NUM_THREADS"] == "2"  # 8 threads for the group / 4 processes
    assert first.env["TORCH_EXTENSIONS_DIR"] == str(torch_extensions_dir())  # the paper recipe uses zero3
    assert first.log_path == f"{run}/logs/qwen2.5-math-1.5b.log"
    assert "RANK" not in first.env  # accelerate launch sets the launcher variables on GPU


def test_parent_mask_is_translated_for_children(tmp_path):
    config = config_for("2qwen")
    placement = plan_placement([(p.name, 1.0) for p in config.pool.policies], gpus=4)
    specs = first_machine_specs(config, placement, tmp_path, parent_visible_devices="2,3,5,7")
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in specs] == ["2,3", "5,7"]


def test_visible_devices_errors_when_the_mask_is_shorter():
    assert visible_devices((1,), "GPU-a,GPU-b") == "GPU-b"
    with pytest.raises(PlacementError, match="CUDA_VISIBLE_DEVICES=4,5"):
        visible_devices((2,), "4,5")


def test_cpu_specs_run_the_worker_directly(tmp_path):
    config = config_for("tiny")
    placement = plan_placement([(p.name, 1.0) for p in config.pool.policies], gpus=0, cpu_cores=4)
    specs = first_machine_specs(config, placement, tmp_path, python="/py")
    assert [spec.policy for spec in specs] == [p.name for p in config.pool.policies]  # one per policy: none unchecked
    for spec in specs:
        assert spec.argv == ["/py", "-m", WORKER_MODULE, "--run-dir", str(tmp_path.resolve()), "--policy", spec.policy]
        assert spec.env["CUDA_VISIBLE_DEVICES"] == ""
        assert spec.env["OMP_NUM_THREADS"] == spec.env["MKL_NUM_THREADS"] == "2"
        assert "ACCELERATE_USE_DEEPSPEED" not in spec.env and "RANK" not in spec.env
        assert Path(spec.log_path).name == f"{spec.policy}.log"


def test_cpu_deepspeed_env(tmp_path):
    config = config_for("tiny", "launch.deepspeed=zero3", "launch.main_process_port=31000")
    placement = plan_placement([(p.name, 1.0) for p in config.pool.policies], gpus=0, cpu_cores=2)
    specs = first_machine_specs(config, placement, tmp_path)
    run = tmp_path.resolve()
    assert len(specs) == len(config.pool.policies) == 2
    for i, spec in enumerate(specs):
        env = spec.env
        assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")} == {
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
        }
        assert env["MASTER_PORT"] == str(31000 + i)
        assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
        assert env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == str(run / "launch" / f"{spec.policy}.deepspeed.json")
        assert env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == "true"
        assert env["DS_ACCELERATOR"] == "cpu"
        assert env["TORCH_EXTENSIONS_DIR"] == str(torch_extensions_dir())
        assert spec.notes and "DeepSpeed's CPU ops compiled once" in spec.notes[0]


def test_adapt_on_cpu_turns_off_gpu_features(monkeypatch):
    from mutualrl.host import vllm_cpu

    monkeypatch.setattr(vllm_cpu, "cpu_blocker", lambda build=None: "vLLM is not installed")
    decided = adapt_grpo_to_device(GPU_RECIPE, CPU, deepspeed="zero3", vllm_available=True)
    assert decided.fields == {"use_vllm": False, "bf16": False, "fp16": False, "use_cpu": True}  # only these
    assert decided.dropped == ("tf32",)
    assert GPU_RECIPE["bf16"] is True and "tf32" in GPU_RECIPE  # the input is not mutated
    notes = decided.notes
    assert any("bf16 turned off" in n for n in notes) and any("vLLM generation turned off" in n for n in notes)


def test_adapt_on_gpu_keeps_vllm_only_when_installed():
    stated = {**GPU_RECIPE, "vllm_importance_sampling_correction": False}
    kept = adapt_grpo_to_device(stated, GPU, vllm_available=True)
    assert kept.fields == {} and kept.dropped == () and kept.notes == []  # the recipe's use_vllm and bf16 stand
    silent = adapt_grpo_to_device(GPU_RECIPE, GPU, vllm_available=True)  # TRL's correction unset: said how it differs
    assert silent.fields == {} and [note.split(": ", 1)[1] for note in silent.notes] == [GPU_VLLM_CORRECTION]
    dropped = adapt_grpo_to_device(GPU_RECIPE, GPU, vllm_available=False)
    assert dropped.fields == {"use_vllm": False}
    assert "not installed" in dropped.notes[0]


def test_adapt_on_gpu_makes_trls_bf16_default_explicit_and_keeps_the_recipes():
    assert adapt_grpo_to_device({}, GPU).fields == {"bf16": True}
    assert adapt_grpo_to_device({"fp16": True}, GPU).fields == {"bf16": False}
    assert adapt_grpo_to_device({"bf16": False, "use_cpu": True}, GPU).fields == {"use_cpu": False}


def test_vllm_not_requested_is_left_alone():
    decided = resolve_vllm({"use_vllm": False}, CPU)
    assert decided.fields == {} and decided.notes == []


def test_vllm_tensor_parallel_must_divide_processes():
    with pytest.raises(PlacementError, match="vllm_tensor_parallel_size \\(4\\)"):
        resolve_vllm({"use_vllm": True, "vllm_tensor_parallel_size": 4}, GPU, vllm_available=True)


def test_vllm_server_mode_is_flagged():
    decided = resolve_vllm({"use_vllm": True, "vllm_mode": "server"}, GPU, vllm_available=True)
    assert decided.fields == {} and "trl vllm-serve" in decided.notes[0]


def test_a_rank_with_several_cores_tokenizes_on_them(tmp_path, monkeypatch):
    """THL's retokenization (PRP's and SGT's host work) runs on the tokenizer's Rayon pool: the rank's threads where
    it has several and no data-loader worker forks after the pool is used; one thread otherwise."""
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    config = config_for("2qwen")
    placement = plan_placement([(p.name, 1.0) for p in config.pool.policies], gpus=8, cpu_cores=16)
    first = first_machine_specs(config, placement, tmp_path, python="/py", parent_visible_devices=None,
                                cwd=tmp_path)[0]
    assert (first.env["TOKENIZERS_PARALLELISM"], first.env["RAYON_NUM_THREADS"]) == ("true", "2")
    forking = config_for("2qwen", "grpo.dataloader_num_workers=2")
    first = first_machine_specs(forking, placement, tmp_path, python="/py", parent_visible_devices=None,
                                cwd=tmp_path)[0]
    assert first.env["TOKENIZERS_PARALLELISM"] == "false" and "RAYON_NUM_THREADS" not in first.env
    tiny = config_for("tiny")
    one_core = first_machine_specs(tiny, plan_placement([(p.name, 1.0) for p in tiny.pool.policies], gpus=0,
                                                        cpu_cores=2), tmp_path, python="/py",
                                   parent_visible_devices=None, cwd=tmp_path)[0]
    assert one_core.env["TOKENIZERS_PARALLELISM"] == "false"
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # the user's own choice is inherited, not overridden
    first = first_machine_specs(config, placement, tmp_path, python="/py", parent_visible_devices=None,
                                cwd=tmp_path)[0]
    assert "TOKENIZERS_PARALLELISM" not in first.env and "RAYON_NUM_THREADS" not in first.env
