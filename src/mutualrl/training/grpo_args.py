"""Build each policy's ``trl.GRPOConfig`` from the recipe (pass-through, never re-declared)."""

from __future__ import annotations

from typing import Any

from mutualrl.config.schema import PolicyConfig, RunConfig
from mutualrl.training.paths import RunPaths


def grpo_kwargs(config: RunConfig, policy: PolicyConfig, paths: RunPaths,
                plan_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Recipe ``grpo`` < policy ``grpo`` < launch-plan overrides (batch derivation, device adaptation).

    mutualrl owns only ``output_dir`` (per policy) and turns off TRL's own progress bar
    (the launcher shows one line per policy); everything else is the recipe's.
    """
    kwargs: dict[str, Any] = {**config.grpo, **policy.grpo, **(plan_overrides or {})}
    kwargs["output_dir"] = str(paths.policy_dir(policy.name))
    kwargs.setdefault("report_to", [])
    kwargs.setdefault("disable_tqdm", True)
    return kwargs


def build_grpo_config(config: RunConfig, policy: PolicyConfig, paths: RunPaths,
                      plan_overrides: dict[str, Any] | None = None) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(**grpo_kwargs(config, policy, paths, plan_overrides))
