"""What a run keeps of its checkpoints (``grpo.save_total_limit``), and the disk it holds at its peak.

``--resume`` restarts every policy from the last checkpoint common to all of them and intact
(:func:`mutualrl.launch.rundir.resume.common_checkpoint`). In lock-step every policy saves at the same steps, so a
policy must keep its last two: the newest may be one its peers never finished (a kill mid-save), and the one
before is then the common one; with checkpoints closer than an exchange round (``save_steps`` < updates per round),
``1 + ceil(updates / save_steps)``, for a policy trains all of the round its stopped peer published (and S rounds
more under bounded staleness: ``1 + ceil((S + 1) x updates / save_steps)``). Under bounded staleness (``see.max_staleness`` = S rounds) a policy may be up to S
rounds, S x updates-per-round optimizer steps, ahead of the slowest, so it keeps ``ceil(S x updates / save_steps)``
more. transformers deletes the oldest beyond ``save_total_limit`` after writing a new one, so a policy holds
``limit + 1`` checkpoints at its peak.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.config.schema import RunConfig
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.grpo_decisions import GRPODecision

LOCKSTEP_KEEP = 2
WARN_ABOVE = 0.8  # of the free space


def resume_keep(config: RunConfig, grpo: Mapping[str, Any]) -> int:
    """Checkpoints per policy that ``--resume`` may need (module docstring), for a policy's planned ``grpo``."""
    staleness = int(config.see.max_staleness or 0)
    save_steps = grpo.get("save_steps")
    if not isinstance(save_steps, int | float) or save_steps < 1:
        return LOCKSTEP_KEEP
    ga = int(grpo.get("gradient_accumulation_steps") or 1)
    updates = max(1, int(grpo.get("steps_per_generation") or ga) // ga) * int(grpo.get("num_iterations") or 1)
    # the leader trains all of the last round a stopped peer published and S more, saving every save_steps
    lead = 1 + math.ceil((staleness + 1) * updates / save_steps)
    if staleness <= 0:
        return max(LOCKSTEP_KEEP, lead)
    return max(LOCKSTEP_KEEP + math.ceil(staleness * updates / save_steps), lead)


def keep_for_resume(config: RunConfig, planned: Mapping[str, Any], recipe_grpo: Mapping[str, Any],
                    policy: str) -> GRPODecision:
    """``save_total_limit`` = what resume needs for the ``planned`` fields, decided unless the recipe sets it; a
    note when the recipe's limit keeps fewer (resume may then find no common checkpoint)."""
    keep = resume_keep(config, planned)
    if "save_total_limit" not in recipe_grpo:
        return GRPODecision({"save_total_limit": keep})
    asked = recipe_grpo["save_total_limit"]
    if asked is not None and int(asked) < keep:
        return GRPODecision(notes=[f"{policy}: grpo.save_total_limit={asked} keeps fewer checkpoints than --resume may "
                              f"need ({keep}: the last common one and those a policy wrote past it); resume may "
                              f"start over"])
    return GRPODecision()


def checkpoint_bytes_per_param(device_type: str, deepspeed: str) -> float:
    """Bytes one checkpoint of a policy takes per parameter, all ranks together: ZeRO-3 writes the gathered 16-bit
    weights (2) and the fp32 master weights + Adam m + v (12); ZeRO-2 also its bf16 module states (2); DDP and the
    CPU, which train fp32 weights, the weights (4) and Adam m + v (8)."""
    if device_type == "cpu" or deepspeed == "none":
        return 12.0
    return 14.0 if deepspeed == "zero3" else 16.0


@dataclass(frozen=True)
class PolicyDisk:
    """One policy's checkpoints as the run holds them at its peak (``--save-plan`` JSON: ``disk.policies``)."""

    policy: str
    checkpoint_gib: float
    keep: int | None
    """``save_total_limit`` (None: every checkpoint is kept)."""
    saves: int | None
    """Checkpoints the run writes (None: the run length is not known before it starts)."""
    peak_gib: float


@dataclass(frozen=True)
class DiskPlan:
    """The disk a run holds at its peak against the free space of the run folder's filesystem."""

    peak_gib: float
    held_gib: float
    """What the run folder already holds of it (a resume)."""
    free_gib: float | None
    filesystem: str
    policies: list[PolicyDisk]

    @property
    def more_gib(self) -> float:
        return max(self.peak_gib - self.held_gib, 0.0)


def policy_disk(plan: Any, lora: bool) -> PolicyDisk | None:
    """The peak of ``plan``'s checkpoints and final weights (LoRA: adapters, not counted); None when its size is
    unknown or it never saves."""
    grpo = plan.grpo
    if plan.memory is None or grpo.get("save_strategy") == "no" or lora:
        return None
    params, device = plan.memory.params, plan.placement.device_type
    checkpoint = checkpoint_bytes_per_param(device, plan.deepspeed) * params / 2**30
    sixteen_bit = device == "cuda" and plan.deepspeed != "none" and (grpo.get("bf16") or grpo.get("fp16"))
    final = (2.0 if sixteen_bit else 4.0) * params / 2**30
    save_steps, max_steps = grpo.get("save_steps"), grpo.get("max_steps")
    saves = (int(max_steps) // int(save_steps) if isinstance(max_steps, int) and max_steps > 0
             and isinstance(save_steps, int | float) and save_steps >= 1 else None)
    keep = grpo.get("save_total_limit")
    held = [n for n in (saves, None if keep is None else int(keep) + 1) if n is not None]
    count = min(held) if held else 0  # every checkpoint of a run of unknown length: counted as none, said so
    return PolicyDisk(plan.name, round(checkpoint, 2), keep, saves, round(count * checkpoint + final, 2))


def disk_plan(config: RunConfig, plans: list[Any], policies_dir: Path) -> DiskPlan:
    """Every policy's peak, what ``policies_dir`` already holds, and the free space of its filesystem."""
    from mutualrl.launch.plan.detect import free_disk_gib

    lora = {p.name: p.lora is not None for p in config.pool.policies}
    policies = [d for p in plans if (d := policy_disk(p, lora[p.name])) is not None]
    free, filesystem = free_disk_gib(policies_dir)
    held = folder_gib(policies_dir) if policies_dir.is_dir() else 0.0
    return DiskPlan(round(sum(p.peak_gib for p in policies), 2), round(held, 2),
                    None if free is None else round(free, 2), filesystem, policies)


def folder_gib(path: Path) -> float:
    """Bytes under ``path`` (no symlink followed), in GiB."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total / 2**30


def check_disk(disk: DiskPlan, refuse: bool, force: bool) -> list[str]:
    """A warning when the run's peak takes most of the free space; a refusal (``refuse``: a real launch, not
    ``--force``) when it cannot fit."""
    if disk.free_gib is None or disk.more_gib <= WARN_ABOVE * disk.free_gib:
        return []
    who = ", ".join(f"{p.policy} {p.peak_gib:.1f}" for p in disk.policies)
    text = (f"the run holds about {disk.peak_gib:.1f} GiB of checkpoints and final weights at its peak ({who} GiB"
            f"{f'; {disk.held_gib:.1f} GiB already there' if disk.held_gib else ''}) against {disk.free_gib:.1f} GiB "
            f"free on {disk.filesystem}")
    if disk.more_gib <= disk.free_gib:
        return [text]
    if refuse and not force:
        raise PlacementError(text + "; free space, lower grpo.save_total_limit or raise schedule.save_every, put the "
                             "run folder (--output-dir) on a bigger filesystem, or --force")
    return [text + ": it will not fit" + (" (starting anyway: --force)" if refuse else "")]
