"""Build each policy's ``trl.GRPOConfig`` from the recipe (pass-through, never re-declared)."""

from __future__ import annotations

from typing import Any

from mutualrl.config.schema import PolicyConfig, RunConfig
from mutualrl.run_folder import RunPaths
from mutualrl.training.trackers import policy_run_name


def grpo_kwargs(config: RunConfig, policy: PolicyConfig, paths: RunPaths,
                plan_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Recipe ``grpo`` < policy ``grpo`` < launch-plan overrides (batch derivation, device adaptation).

    mutualrl owns only ``output_dir`` (per policy) and the tracker ``run_name`` (``<run>/<policy>``, see
    :func:`~mutualrl.training.trackers.policy_run_name`), and turns off TRL's own progress bar (the launcher
    shows one line per policy); everything else is the recipe's.
    """
    kwargs: dict[str, Any] = {**config.grpo, **policy.grpo, **(plan_overrides or {})}
    kwargs["output_dir"] = str(paths.policy_dir(policy.name))
    kwargs["run_name"] = (plan_overrides or {}).get("run_name") or policy_run_name(
        paths.root.name, policy.name, config.grpo, policy.grpo)
    kwargs.setdefault("report_to", [])
    kwargs.setdefault("disable_tqdm", True)
    return kwargs


def build_grpo_config(config: RunConfig, policy: PolicyConfig, paths: RunPaths,
                      plan_overrides: dict[str, Any] | None = None) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(**grpo_kwargs(config, policy, paths, plan_overrides))
