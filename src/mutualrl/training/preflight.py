"""A worker's preflight: everything it does before it would first touch a GPU or load weights, then stop.

``mutualrl train --preflight`` starts every worker through its real entry point (the launcher's command,
environment and files; ``accelerate launch`` where the plan says so) with :data:`PREFLIGHT_ENV` set; each rank
then runs :func:`preflight_policy` instead of training: its planned settings read and their digest verified,
``GRPOConfig`` built, the DeepSpeed config checked against it as transformers checks it when the trainer is made;
on the policy's rank 0 also (the same on every rank) the tokenizer, prompts and reward functions loaded and one batch
of the dataset formed and scored, and the colocated vLLM engine's arguments passed through vLLM's own checks. It writes what passed to
``RUN/preflight/<policy>-rank<R>.json`` and exits; a check that fails raises as training would.

On a machine without the plan's GPUs (a login node, ``--gpus N``), transformers' bf16 and tf32 capability questions
are answered as an Ampere-or-newer card answers them (every card the paper recipes are planned for); those are the
only answers that differ from the node's, and the report says so.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_text_atomic
from mutualrl.run_folder import RunPaths

PREFLIGHT_ENV = "MUTUALRL_PREFLIGHT"
"""Set by ``mutualrl train --preflight`` in every worker it starts: check, report, exit without training."""
SIMULATED = "simulated"
""":data:`PREFLIGHT_ENV`'s value where the plan is for a node with more GPUs than this machine has (``--gpus N``):
each rank hides this machine's GPUs (:func:`hide_gpus_of_this_machine`)."""


def preflight_report_path(paths: RunPaths, policy: str, rank: int) -> Path:
    return paths.root / "preflight" / f"{policy}-rank{rank}.json"


def in_preflight() -> bool:
    return bool(os.environ.get(PREFLIGHT_ENV))


def hide_gpus_of_this_machine() -> bool:
    """A rank checking a plan made for another node (:data:`SIMULATED`) sees no GPU, as on a login node without one:
    ``accelerate launch`` hands each rank the plan's GPU ids, and on a machine with fewer cards a rank's local index
    named none of them (``torch.cuda.set_device``: invalid device ordinal) or a card unlike the plan's (a login node's
    T4 refusing bf16). Before anything asks CUDA; returns whether it hid them."""
    if os.environ.get(PREFLIGHT_ENV) != SIMULATED:
        return False
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    return True


@contextlib.contextmanager
def planned_gpu_capability(grpo: dict[str, Any]) -> Iterator[str | None]:
    """Around ``GRPOConfig(...)``: where the plan puts the policy on GPUs and this process sees none, transformers'
    ``is_torch_bf16_gpu_available`` (``bf16``) and ``is_torch_tf32_available`` (``tf32``, whose switch it then leaves
    alone: nothing here computes) answer as an Ampere-or-newer card does; yields the note saying so (None: the
    process's own answers stand)."""
    import torch

    asked = [name for name, wanted in (("bf16", grpo.get("bf16") or grpo.get("bf16_full_eval")),
                                       ("tf32", grpo.get("tf32"))) if wanted]
    if grpo.get("use_cpu") or torch.cuda.is_available() or not asked:
        yield None
        return
    from transformers import training_args

    real = {name: getattr(training_args, name) for name in ("is_torch_bf16_gpu_available", "is_torch_tf32_available",
                                                            "enable_tf32")}
    training_args.is_torch_bf16_gpu_available = lambda *args, **kwargs: True
    training_args.is_torch_tf32_available = lambda *args, **kwargs: True
    training_args.enable_tf32 = lambda *args, **kwargs: None
    try:
        yield f"no GPU here: {' and '.join(asked)} support answered as an Ampere-or-newer card answers it"
    finally:
        for name, value in real.items():
            setattr(training_args, name, value)


def deepspeed_check(args: Any) -> str:
    """The DeepSpeed config ``accelerate launch`` hands this rank, filled and checked against ``args`` as the trainer
    does (``transformers.integrations.deepspeed.propagate_args_to_deepspeed``); mismatches raise as they would."""
    plugin = getattr(args, "deepspeed_plugin", None)
    if plugin is None:
        return "not used"
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    config = HfTrainerDeepSpeedConfig(plugin.hf_ds_config.config)
    config.trainer_config_process(args)
    return f"ZeRO-{config.config.get('zero_optimization', {}).get('stage', 0)}, agrees with GRPOConfig"


def vllm_check(args: Any, model: str, caps: tuple[int | None, int | None]) -> str:
    """The colocated engine's arguments, as TRL 1.16 builds them (``VLLMGeneration._init_vllm``) with the caps the
    worker gives it, through vLLM's own checks: ``EngineArgs`` (names and types) and ``SchedulerConfig`` (batch
    budget against sequences and model length). The model's context is read from its config, as vLLM reads it."""
    if not args.use_vllm:
        return "not used"
    if args.vllm_mode != "colocate":
        return f"{args.vllm_mode} mode: the server is started and checked by you"
    from vllm.config import SchedulerConfig
    from vllm.engine.arg_utils import EngineArgs

    from mutualrl.training.vllm_engine import engine_caps, trl_max_num_seqs

    wish = trl_max_num_seqs(args.per_device_train_batch_size, args.vllm_tensor_parallel_size, args.steps_per_generation)
    seqs, tokens = engine_caps(wish, *caps)
    EngineArgs(model=model, tensor_parallel_size=args.vllm_tensor_parallel_size,
               gpu_memory_utilization=args.vllm_gpu_memory_utilization, max_model_len=args.vllm_max_model_length,
               max_num_seqs=seqs, enable_sleep_mode=args.vllm_enable_sleep_mode, model_impl=args.vllm_model_impl,
               distributed_executor_backend="external_launcher", max_num_batched_tokens=tokens,
               logprobs_mode="processed_logprobs", trust_remote_code=args.trust_remote_code is True)
    length = args.vllm_max_model_length or model_context(model, args.trust_remote_code is True)
    SchedulerConfig(max_num_seqs=seqs, max_num_batched_tokens=tokens, max_model_len=length, is_encoder_decoder=False)
    return f"max_num_seqs {seqs}, max_num_batched_tokens {tokens}, max_model_len {length}, share " \
           f"{args.vllm_gpu_memory_utilization:g}"


def model_context(model: str, trust_remote_code: bool) -> int:
    """The model's own context length (``max_position_embeddings``), which vLLM takes when none is given."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    return int(getattr(config.get_text_config(), "max_position_embeddings"))


def first_batch(paths: RunPaths, config: Any, policy: Any, args: Any, grpo: dict[str, Any]) -> tuple[str, str]:
    """(data, rewards): the prompts read and the first per-device batch formed as TRL gets it, each prompt within
    ``task.max_prompt_tokens``; the reward functions built and called on that batch."""
    from mutualrl.tasks.reward_form import dataset_form_rewards
    from mutualrl.tasks.reward_funcs import reward_spec, score_batch
    from mutualrl.training.data import EVAL_FILE, TRAIN_FILE, prompt_token_length, read_examples, to_trl_rows
    from mutualrl.training.data import uses_chat_template
    from mutualrl.training.policy_settings import load_tokenizer_only

    tokenizer = load_tokenizer_only(policy, args)
    chat = uses_chat_template(tokenizer, policy.chat_template)
    train = read_examples(paths.data / TRAIN_FILE)
    evals = read_examples(paths.data / EVAL_FILE) if (paths.data / EVAL_FILE).exists() else []
    batch = train[:args.per_device_train_batch_size]
    rows = to_trl_rows(batch, chat)
    longest = max(prompt_token_length(tokenizer, ex.for_policy(chat), chat) for ex in batch)
    if longest > config.task.max_prompt_tokens:
        raise ValueError(f"a prompt of {longest} tokens in the first batch, over task.max_prompt_tokens "
                         f"{config.task.max_prompt_tokens}")
    spec = reward_spec(config.task, grpo)
    funcs = dataset_form_rewards(spec, [*train, *evals], tokenizer, args.max_completion_length)
    completions = [[{"role": "assistant", "content": ""}] if chat else "" for _ in rows]
    columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}
    scores = score_batch(spec, [row["prompt"] for row in rows], completions, [[] for _ in rows], columns, funcs)
    return (f"{len(train)} train, {len(evals)} held-out prompts; a batch of {len(rows)}, longest {longest} tokens",
            f"{len(funcs)} function(s) scored {len(scores)} empty completions")


def preflight_policy(paths: RunPaths, policy_name: str) -> dict[str, Any]:
    """Run this rank's preflight (module docstring) and write its report; returns it."""
    from mutualrl.config.resolved import load_resolved_config
    from mutualrl.training.grpo_args import PLANNED_GRPO_ENV, build_grpo_config, planned_grpo_args
    from mutualrl.training.policy_settings import find_policy, recipe_grpo_args, refuse_untested_versions

    hidden = hide_gpus_of_this_machine()
    rank = int(os.environ.get("RANK", "0"))
    config = load_resolved_config(paths, grpo=False)
    policy = find_policy(config, policy_name)
    checks: dict[str, str] = {}
    grpo = planned_grpo_args(paths, policy_name, lambda: recipe_grpo_args(paths, policy_name))
    checks["settings"] = ("the planned file, its digest verified" if os.environ.get(PLANNED_GRPO_ENV)
                          else "the planned file (no digest: started by hand)")
    refuse_untested_versions(grpo)
    with planned_gpu_capability(grpo) as stand_in:
        args = build_grpo_config(grpo)
    checks["GRPOConfig"] = "built" + (f" ({stand_in})" if stand_in else "") + (
        "; this machine's GPUs hidden: the plan is for another node" if hidden else "")
    checks["DeepSpeed"] = deepspeed_check(args)
    if rank == 0:  # the same files and engine arguments on every rank of the policy: checked once
        checks["data"], checks["rewards"] = first_batch(paths, config, policy, args, grpo)
        checks["vLLM"] = vllm_check(args, policy.model, (config.launch.vllm_max_num_seqs,
                                                         config.launch.vllm_max_num_batched_tokens))
    report = {"policy": policy_name, "rank": rank, "world_size": int(os.environ.get("WORLD_SIZE", "1")),
              "checks": checks}
    write_text_atomic(preflight_report_path(paths, policy_name, rank), json.dumps(report, indent=2) + "\n")
    return report
