"""Generated accelerate / DeepSpeed configs pass accelerate's and DeepSpeed's own parsers.

The accelerate YAML is pushed through the same functions `accelerate launch` runs
(argument parsing, `_validate_launch_command`, the launcher's environment builder), and
the DeepSpeed plugin is then built from that environment, which is where accelerate
rejects conflicting settings. The DeepSpeed JSON, with its "auto" fields filled the way
transformers fills them, is parsed by `deepspeed.runtime.config.DeepSpeedConfig`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mutualrl.launch.plan.configs import deepspeed_config
from plan_helpers import dry_run


def accelerate_launch_env(argv: list[str]) -> tuple[object, dict[str, str]]:
    """What `accelerate launch ARGV` would set up, without starting anything."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import (
        prepare_deepspeed_cmd_env,
        prepare_multi_gpu_env,
        prepare_simple_launcher_cmd_env,
    )

    args = launch_command_parser().parse_args(argv)
    args, defaults, mp_from_config = _validate_launch_command(args)
    if args.use_deepspeed and not args.cpu:
        fields = list(defaults.deepspeed_config.keys()) + (["mixed_precision"] if mp_from_config else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = prepare_deepspeed_cmd_env(args)
    elif args.multi_gpu:
        env = prepare_multi_gpu_env(args)
    else:
        _, env = prepare_simple_launcher_cmd_env(args)
    return args, env


def deepspeed_plugin_from(env: dict[str, str], monkeypatch):
    from accelerate.utils import DeepSpeedPlugin

    for key, value in env.items():
        if key.startswith("ACCELERATE_"):
            monkeypatch.setenv(key, value)
    return DeepSpeedPlugin()


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    out = {}
    for ds in ("zero3", "zero2", "none"):
        for mapped in (False, True):
            run_dir = tmp_path_factory.mktemp(f"{ds}-{mapped}")
            device_map = "qwen2.5-math-1.5b=0;qwen3-1.7b-base=5" if mapped else None
            out[ds, mapped] = dry_run("2qwen", [f"launch.deepspeed={ds}"], gpus=8, device_map_text=device_map,
                                      run_dir=run_dir, write=True)
    return out


@pytest.mark.parametrize("ds", ["zero3", "zero2", "none"])
@pytest.mark.parametrize("mapped", [False, True])
def test_gpu_accelerate_config_goes_through_accelerate_launch(plans, ds, mapped, monkeypatch):
    plan = plans[ds, mapped]
    for policy in plan.policies:
        spec = policy.launch
        assert spec.argv[1:3] == ["-m", "mutualrl.host.accelerate_launch"]
        args, env = accelerate_launch_env(spec.argv[3:])
        # accelerate must leave the policy on exactly the GPUs the launcher gives it.
        assert env["CUDA_VISIBLE_DEVICES"] == spec.env["CUDA_VISIBLE_DEVICES"]
        assert int(args.num_processes) == policy.placement.num_processes
        assert int(args.main_process_port) == policy.main_process_port
        assert args.module and args.training_script == "mutualrl.training.worker"
        if ds == "none":
            assert not args.use_deepspeed
            assert args.multi_gpu == (policy.placement.num_processes > 1)
            assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
            continue
        assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
        assert env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == policy.deepspeed_config_path
        plugin = deepspeed_plugin_from(env, monkeypatch)
        assert plugin.zero_stage == {"zero2": 2, "zero3": 3}[ds]
        assert plugin.zero3_init_flag == (ds == "zero3")
        assert plugin.deepspeed_config["bf16"]["enabled"] is True


def test_the_accelerate_check_can_fail(plans, monkeypatch, tmp_path):
    """Sanity of the check above: the two mistakes it guards against are caught."""
    policy = plans["zero3", False].policy("qwen3-1.7b-base")
    # 1) A precision next to deepspeed_config_file is refused by accelerate's DeepSpeed plugin.
    bad = dict(policy.accelerate_config, mixed_precision="bf16")
    bad_path = tmp_path / "bad.yaml"
    bad_path.write_text(yaml.safe_dump(bad))
    argv = ["--config_file", str(bad_path), *policy.launch.argv[5:]]
    _, env = accelerate_launch_env(argv)
    with pytest.raises(ValueError, match="deepspeed_config_file"):
        deepspeed_plugin_from(env, monkeypatch)
    # 2) Local gpu ids (0..N-1) would move the second policy onto the first one's GPUs.
    local = dict(policy.accelerate_config, gpu_ids="0,1,2,3")
    local_path = tmp_path / "local.yaml"
    local_path.write_text(yaml.safe_dump(local))
    _, env = accelerate_launch_env(["--config_file", str(local_path), *policy.launch.argv[5:]])
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" != policy.launch.env["CUDA_VISIBLE_DEVICES"]


def test_written_files_match_the_plan(plans):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    for (ds, _), plan in plans.items():
        for policy in plan.policies:
            loaded = load_config_from_file(policy.accelerate_config_path)
            assert isinstance(loaded, ClusterConfig)
            assert loaded.num_processes == policy.placement.num_processes
            assert loaded.gpu_ids == policy.launch.env["CUDA_VISIBLE_DEVICES"]
            assert loaded.distributed_type.value == policy.accelerate_config["distributed_type"]
            if ds == "none":
                assert policy.deepspeed_config_path is None
            else:
                assert json.loads(Path(policy.deepspeed_config_path).read_text()) == policy.deepspeed_config



def resolve_deepspeed_auto(
    ds: dict[str, Any], *, micro_batch: int, grad_accum: int, grad_clip: float, world_size: int
) -> dict[str, Any]:
    """The ``"auto"`` batch fields filled as transformers fills them at start-up
    (``HfTrainerDeepSpeedConfig.trainer_config_process``; checked against it below)."""
    filled = json.loads(json.dumps(ds))
    values = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": grad_clip,
        "train_batch_size": micro_batch * grad_accum * world_size,
    }
    for key, value in values.items():
        if filled.get(key) == "auto":
            filled[key] = value
    return filled


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("bf16", [True, False])
def test_deepspeed_accepts_the_json(stage, bf16):
    from deepspeed.runtime.config import DeepSpeedConfig

    ds = deepspeed_config(stage, bf16=bf16)
    filled = resolve_deepspeed_auto(ds, micro_batch=10, grad_accum=128, grad_clip=1.0, world_size=1)
    parsed = DeepSpeedConfig(filled)
    assert parsed.zero_optimization_stage == stage
    assert parsed.bfloat16_config.enabled == bf16
    assert not parsed.float16_config.enabled
    assert parsed.train_micro_batch_size_per_gpu == 10
    assert parsed.gradient_accumulation_steps == 128
    assert parsed.train_batch_size == 1280
    assert parsed.gradient_clipping == 1.0
    if stage == 3:
        assert parsed.zero_config.gather_16bit_weights_on_model_save
    # Unfilled "auto" values are exactly what DeepSpeed itself cannot read.
    assert "auto" in json.dumps(ds)  # the refusal below is of a file with "auto" left in it
    with pytest.raises(Exception):  # noqa: B017 - DeepSpeed raises pydantic / ValueError variants
        DeepSpeedConfig(ds)


def test_transformers_fills_auto_fields_like_we_do():
    """transformers' own "auto" filling agrees with resolve_deepspeed_auto (CPU fp32 config)."""
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig
    from trl import GRPOConfig

    ds = deepspeed_config(3, bf16=False)
    args = GRPOConfig(
        output_dir="unused",
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=10,
        gradient_accumulation_steps=4,
        steps_per_generation=8,
        num_generations=5,
        max_grad_norm=0.5,
        report_to=[],
    )
    hf = HfTrainerDeepSpeedConfig(json.loads(json.dumps(ds)))
    hf.trainer_config_process(args)
    ours = resolve_deepspeed_auto(ds, micro_batch=10, grad_accum=4, grad_clip=0.5, world_size=1)
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping", "train_batch_size"):
        assert hf.config[key] == ours[key], key


def test_cpu_accelerate_config_goes_through_accelerate_launch(tmp_path):
    plan = dry_run("tiny", gpus=0, run_dir=tmp_path, write=True)
    for policy in plan.policies:
        argv = ["--config_file", policy.accelerate_config_path, "-m", "mutualrl.training.worker"]
        args, env = accelerate_launch_env(argv)
        assert args.use_cpu and not args.use_deepspeed and not args.multi_gpu
        assert env["ACCELERATE_USE_CPU"] == "True" and env["ACCELERATE_MIXED_PRECISION"] == "no"
