"""The layout of a run folder (see docs/run-layout.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def launch(self) -> Path:
        return self.root / "launch"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def default_see(self) -> Path:
        return self.root / "see"

    def planned_grpo(self, policy: str) -> Path:
        """GRPOConfig fields the launch plan decided for ``policy`` (batch derivation, device adaptation)."""
        return self.launch / f"{policy}.grpo.json"

    def policy_metrics(self, policy: str) -> Path:
        return self.root / "metrics" / f"{policy}.jsonl"

    def status(self, policy: str) -> Path:
        return self.root / "status" / f"{policy}.json"

    def log(self, policy: str) -> Path:
        return self.logs / f"{policy}.log"

    def policy_dir(self, policy: str) -> Path:
        return self.root / "policies" / policy

    def final_model(self, policy: str) -> Path:
        return self.policy_dir(policy) / "final"

    def eval_result(self, policy: str, step: int) -> Path:
        return self.root / "eval" / policy / f"step-{step:06d}.json"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
