"""Helpers for end-to-end tests: a two-policy pool of tiny random models with different tokenizers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def write_recipe(path: Path, models: dict[str, Path], regime: str = "xgrpo", steps: int = 3,
                 extra: dict[str, Any] | None = None) -> Path:
    """A small recipe over ``models`` ({policy name: model folder}) on the synthetic task."""
    recipe: dict[str, Any] = {
        "pool": {"name": "e2e", "description": "two tiny random policies",
                 "policies": [{"name": name, "model": str(folder)} for name, folder in models.items()]},
        "regime": {"name": regime},
        "task": {"name": "synthetic-arith", "max_prompt_tokens": 64, "train_limit": 160},
        "grpo": {"learning_rate": 1e-3, "num_generations": 4, "per_device_train_batch_size": 8,
                 "max_completion_length": 5, "max_steps": steps, "logging_steps": 1, "save_strategy": "no",
                 "seed": 5, "loss_type": "grpo", "report_to": []},
        "validation": {"every_steps": 0, "at_start": True, "limit": 8, "batch_size": 8},
        "see": {"barrier_timeout_s": 120, "retention_steps": None},
    }
    for key, value in (extra or {}).items():
        node = recipe
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(recipe))
    return path


def train_command(recipe: Path, run_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mutualrl", "train", "--pool", str(recipe), "-o", str(run_dir), *args]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run_train(recipe: Path, run_dir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(train_command(recipe, run_dir, *args), env=child_env(), capture_output=True, text=True,
                          timeout=timeout)


def metric_lines(run_dir: Path, kind: str = "train") -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [line for line in lines if line.get("kind") == kind]
