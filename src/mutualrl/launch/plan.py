"""TEMPORARY minimal CPU launch plan (replaced by the MWRA planner from the `launch` branch)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class LaunchSpec:
    policy: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None


@dataclass
class LaunchPlan:
    specs: list[LaunchSpec]
    warnings: list[str] = field(default_factory=list)

    def write(self, run_dir: Path) -> None:
        (run_dir / "launch").mkdir(parents=True, exist_ok=True)
        (run_dir / "launch" / "plan.json").write_text(json.dumps({"policies": {s.policy: {"grpo": {}} for s in self.specs}}))


def make_launch_plan(config: Any, run_dir: Path, gpus: int | None = None) -> LaunchPlan:
    cores = os.cpu_count() or 1
    threads = max(1, cores // len(config.pool.policies))
    src = str(Path(__file__).resolve().parents[2])
    specs = []
    for policy in config.pool.policies:
        env = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONUNBUFFERED": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        argv = [sys.executable, "-m", "mutualrl.training.worker", "--run-dir", str(run_dir), "--policy", policy.name]
        specs.append(LaunchSpec(policy.name, argv, env))
    return LaunchPlan(specs)


def render_plan(plan: LaunchPlan, console: Any, config: Any = None) -> None:
    for spec in plan.specs:
        console.print(spec.policy, " ".join(spec.argv))
