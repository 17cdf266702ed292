"""Stand-in worker for the launch tests: vanilla TRL GRPOTrainer, a few steps, from a launch plan.

Run as ``python tests/_grpo_steps.py --run-dir RUN --policy NAME`` under exactly the
environment a :class:`~mutualrl.launch.commands.LaunchSpec` gives (or through
``accelerate launch``). It trains the policy's model (a local folder) with the
GRPOConfig fields of ``RUN/launch/plan.json`` and writes ``RUN/result-<policy>.json``:
whether DeepSpeed wrapped the model, the ZeRO stage, how many weights changed, and the
batch sizes TRL ended up with. The test asserts on that file and the exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--policy", required=True)
    args = parser.parse_args()
    started = time.time()

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from mutualrl.launch.plan.launch_plan import LaunchPlan

    plan = LaunchPlan.read(args.run_dir).policy(args.policy)
    model_dir = plan.model
    before = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(model_dir).state_dict().items()}
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    grpo = dict(plan.grpo)
    config = GRPOConfig(**{**grpo, "save_strategy": "no"})  # the plan's arguments, output_dir included
    prompts = Dataset.from_dict({"prompt": [f"{i} plus {i} is" for i in range(64)]})

    def reward_alternating(completions, **_):  # both values in every group, whatever the model samples
        return [float(i % 2) for i in range(len(completions))]

    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=reward_alternating,
        args=config,
        train_dataset=prompts,
        processing_class=tokenizer,
    )
    trainer.train()

    engine = trainer.model_wrapped
    unwrapped = trainer.accelerator.unwrap_model(engine)
    if trainer.is_deepspeed_enabled:
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(unwrapped.parameters())):
            after = {k: v.detach().clone() for k, v in unwrapped.state_dict().items()}
        stage = trainer.accelerator.state.deepspeed_plugin.zero_stage
    else:
        after = {k: v.detach().clone() for k, v in unwrapped.state_dict().items()}
        stage = 0
    changed = [k for k in before if k in after and not torch.equal(before[k], after[k].to(before[k].dtype))]
    result = {
        "engine": type(engine).__name__,
        "deepspeed": trainer.is_deepspeed_enabled,
        "zero_stage": stage,
        "distributed_type": str(trainer.accelerator.state.distributed_type),
        "device": str(config.device),
        "bf16": bool(config.bf16),
        "use_vllm": bool(config.use_vllm),
        "changed": len(changed),
        "params": len(before),
        "global_step": trainer.state.global_step,
        "generation_batch_size": config.generation_batch_size,
        "steps_per_generation": config.steps_per_generation,
        "per_device_train_batch_size": config.per_device_train_batch_size,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "omp_threads": torch.get_num_threads(),
        "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")},
        "seconds": time.time() - started,
    }
    (args.run_dir / f"result-{args.policy}.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
