"""Per-policy accelerate and DeepSpeed config files, written to ``RUN/launch/``.

Each policy is its own ``accelerate launch`` group (docs/launch.md),
so each gets its own accelerate config (``<policy>.accelerate.yaml``) and, with
``launch.deepspeed`` = zero2/zero3, its own DeepSpeed config (``<policy>.deepspeed.json``).

Rules learned from the installed accelerate (see docs/launch.md):

- ``gpu_ids`` other than ``all`` makes ``accelerate launch`` *overwrite*
  ``CUDA_VISIBLE_DEVICES`` with it, so ``gpu_ids`` is written with exactly the ids the
  launcher puts in ``CUDA_VISIBLE_DEVICES`` (never local ``0..N-1``, which would move a
  policy onto another policy's GPUs).
- With ``deepspeed_config_file``, accelerate refuses accelerate-side copies of DeepSpeed
  settings (``zero_stage``, ``zero3_save_16bit_model``, gradient settings, and a
  ``mixed_precision`` read from the file); they live in the JSON instead. Only
  ``zero3_init_flag`` stays in the YAML.
- Batch fields in the JSON are ``"auto"``: transformers fills them from the policy's
  GRPOConfig (``per_device_train_batch_size``, ``gradient_accumulation_steps``,
  ``max_grad_norm``) when the trainer starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml

from mutualrl.atomic_io import write_text_atomic
from mutualrl.launch.plan.mwra import PolicyPlacement

DeepSpeedChoice = Literal["none", "zero2", "zero3"]
ZERO_STAGES = {"none": 0, "zero2": 2, "zero3": 3}


def mixed_precision_of(grpo: dict[str, Any]) -> str:
    """accelerate's ``mixed_precision`` value for the policy's (device-adapted) GRPO fields."""
    if grpo.get("bf16"):
        return "bf16"
    if grpo.get("fp16"):
        return "fp16"
    return "no"


def deepspeed_config(stage: int, *, bf16: bool, fp16: bool = False) -> dict[str, Any]:
    """A DeepSpeed config for ZeRO ``stage`` (2 or 3), batch fields left to transformers ("auto").

    Precision is explicit (not "auto") so the file says what runs; transformers checks it
    against the GRPOConfig's ``bf16``/``fp16`` and fails on a mismatch. On CPU both are off
    (fp32). ZeRO-3 gathers the full 16-bit weights when saving, so checkpoints are plain
    ``save_pretrained`` folders.
    """
    if stage not in (2, 3):
        raise ValueError(f"ZeRO stage must be 2 or 3, got {stage}")
    zero: dict[str, Any] = {"stage": stage}  # DeepSpeed's defaults for everything else
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    return {
        "zero_optimization": zero,
        "bf16": {"enabled": bool(bf16)},
        "fp16": {"enabled": bool(fp16)},
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def accelerate_config(
    placed: PolicyPlacement,
    *,
    deepspeed: DeepSpeedChoice,
    mixed_precision: str,
    main_process_port: int,
    gpu_ids: str | None,
    deepspeed_file: Path | None = None,
    main_process_ip: str | None = None,
) -> dict[str, Any]:
    """The accelerate config (``accelerate launch --config_file``) of one policy.

    ``gpu_ids``: the ids the launcher also puts in ``CUDA_VISIBLE_DEVICES`` (see module doc).
    A policy on several machines (``placed.machines``) gets ``num_machines``, ``main_process_ip``
    (its first machine's address, when known) and DeepSpeed's ``standard`` multi-node launcher
    (torchrun on each machine; accelerate's default, pdsh, would ssh into the others); each
    machine's command passes its own ``--machine_rank`` and ``--gpu_ids``, which win over the file.
    On CPU the file is written for completeness (plain single process, ``use_cpu``); the
    CPU launcher runs the worker directly (see :mod:`mutualrl.launch.plan.commands`).
    """
    base: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "machine_rank": 0,
        "num_machines": len(placed.machines),
        "rdzv_backend": "static",
        "same_network": True,
        "main_training_function": "main",
        "main_process_port": int(main_process_port),
        "enable_cpu_affinity": False,
    }
    if len(placed.machines) > 1 and main_process_ip:
        base["main_process_ip"] = main_process_ip
    if placed.device_type == "cpu":
        distributed = "MULTI_CPU" if placed.num_processes > 1 else "NO"
        return {**base, "distributed_type": distributed, "num_processes": placed.num_processes, "use_cpu": True,
                "mixed_precision": "no"}
    base.update(num_processes=placed.num_processes, use_cpu=False, gpu_ids=gpu_ids or "all")
    if deepspeed != "none":
        if deepspeed_file is None:
            raise ValueError("a DeepSpeed accelerate config needs the DeepSpeed JSON path")
        # No `mixed_precision` key: accelerate rejects it next to deepspeed_config_file
        # (precision is in the JSON).
        return {
            **base,
            "distributed_type": "DEEPSPEED",
            "deepspeed_config": {
                "deepspeed_config_file": str(deepspeed_file),
                "zero3_init_flag": ZERO_STAGES[deepspeed] == 3,
                **({"deepspeed_multinode_launcher": "standard"} if len(placed.machines) > 1 else {}),
            },
        }
    distributed = "MULTI_GPU" if placed.num_processes > 1 else "NO"
    return {**base, "distributed_type": distributed, "mixed_precision": mixed_precision}


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    return write_text_atomic(path, yaml.safe_dump(data, sort_keys=True))


def write_json(path: Path, data: dict[str, Any]) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
