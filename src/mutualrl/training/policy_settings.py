"""What a policy's process reads of its run before it loads a model: its policy entry, its GRPOConfig arguments
(the plan's, or for a worker started by hand the recipe's with this process's device defaults), the tested library
versions, its tokenizer. Shared by the worker (:mod:`.worker`) and its preflight (:mod:`.preflight`)."""

from __future__ import annotations

import logging
from typing import Any

from mutualrl.config.resolved import load_resolved_config
from mutualrl.config.schema import PolicyConfig, RunConfig
from mutualrl.errors import UsageError
from mutualrl.run_folder import RunPaths
from mutualrl.versions import check_tested_versions

log = logging.getLogger("mutualrl.worker")


def find_policy(config: RunConfig, name: str) -> PolicyConfig:
    for policy in config.pool.policies:
        if policy.name == name:
            return policy
    raise UsageError(f"policy {name!r} is not in pool {config.pool.name!r}")


def device_defaults() -> dict[str, Any]:
    """Safe settings of a worker started by hand (no plan) when this process has no GPU: bf16 off; vLLM only
    with a usable CPU build, its CUDA-only settings off (docs/launch.md "vLLM on a CPU")."""
    import torch

    if torch.cuda.is_available():
        return {}
    from mutualrl.host.vllm_cpu import cpu_blocker

    out: dict[str, Any] = {"use_cpu": True, "bf16": False, "fp16": False,
                           "vllm_enable_sleep_mode": False, "vllm_tensor_parallel_size": 1}
    if cpu_blocker() is not None:
        out["use_vllm"] = False
    return out


def recipe_grpo_args(paths: RunPaths, policy_name: str) -> dict[str, Any]:
    """A worker started by hand on a run folder never planned: the recipe's GRPO fields, read from ``config.yaml``
    only then, with this process's :func:`device_defaults` (training/grpo_args.py ``unplanned_grpo_args``)."""
    from mutualrl.training.grpo_args import unplanned_grpo_args

    config = load_resolved_config(paths)
    return unplanned_grpo_args(config, find_policy(config, policy_name), paths, device_defaults())


def refuse_untested_versions(grpo: dict[str, Any]) -> None:
    """TRL, and vLLM where this policy generates with it, as tested (versions.py): a worker started by hand
    is refused as the launcher refuses; with the override, a warning in its log."""
    if untested := check_tested_versions(bool(grpo.get("use_vllm"))):
        log.warning(untested)


def load_tokenizer_only(policy: Any, args: Any) -> Any:
    """A policy's tokenizer, as the worker loads it beside its model (code shipped with it runs only with
    ``grpo.trust_remote_code``)."""
    from mutualrl.pools.loading import load_tokenizer_for

    return load_tokenizer_for(policy.model, policy.tokenizer, trust_remote_code=args.trust_remote_code is True)
