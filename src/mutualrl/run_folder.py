"""The run folder RUN, the interface between the launcher and its workers (docs/run-layout.md).

Every path under RUN is named here and nowhere else, and so is the one rule for a damaged line
of a metrics file: a line that is not one whole JSON object (a write cut short by a kill or a
full disk) is skipped and counted, never an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The run's metrics file, every policy's rows merged by the launcher.
METRICS_FILE = "metrics.jsonl"
#: Marks a folder as a mutualrl run: ``--overwrite`` deletes nothing else.
RUN_MARKER = ".mutualrl-run"
#: The run lock (machine K > 0 of several: ``.lock-machine-K``).
LOCK_NAME = ".lock"
#: Files through which the launchers of several machines coordinate.
MACHINES_DIR = ".machines"


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        """The resolved config (what workers and ``--resume`` read)."""
        return self.root / "config.yaml"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def metrics(self) -> Path:
        """Every policy's rows, merged by the launcher from :meth:`policy_metrics`."""
        return self.root / METRICS_FILE

    @property
    def metrics_dir(self) -> Path:
        return self.root / "metrics"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def comparison(self) -> Path:
        """``--baseline``: the run and its baseline side by side."""
        return self.root / "comparison.json"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def launch(self) -> Path:
        return self.root / "launch"

    @property
    def plan(self) -> Path:
        """The launch plan (``--dry-run`` shows the same)."""
        return self.launch / "plan.json"

    @property
    def marker(self) -> Path:
        return self.root / RUN_MARKER

    @property
    def machines_dir(self) -> Path:
        return self.root / MACHINES_DIR

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def policies(self) -> Path:
        return self.root / "policies"

    @property
    def eval_dir(self) -> Path:
        return self.root / "eval"

    @property
    def status_dir(self) -> Path:
        return self.root / "status"

    def see_root(self, configured: str | None = None) -> Path:
        """The exchange folder: ``see.dir`` when the config sets one, else ``RUN/see``."""
        return Path(configured) if configured else self.root / "see"

    def training_outputs(self) -> tuple[Path, ...]:
        """What a run produces while training (removed when a run without any checkpoint starts again)."""
        return (self.policies, self.metrics_dir, self.metrics, self.eval_dir, self.status_dir, self.summary,
                self.comparison)

    def accelerate_config(self, policy: str) -> Path:
        return self.launch / f"{policy}.accelerate.yaml"

    def deepspeed_config(self, policy: str) -> Path:
        return self.launch / f"{policy}.deepspeed.json"

    def planned_grpo(self, policy: str) -> Path:
        """GRPOConfig fields the launch plan decided for ``policy`` (batch derivation, device adaptation)."""
        return self.launch / f"{policy}.grpo.json"

    def policy_metrics(self, policy: str) -> Path:
        return self.metrics_dir / f"{policy}.jsonl"

    def merged_marker(self, policy: str) -> Path:
        """How many bytes of :meth:`policy_metrics` are merged into :attr:`metrics`."""
        return self.metrics_dir / f".{policy}.merged"

    def status(self, policy: str) -> Path:
        return self.status_dir / f"{policy}.json"

    def log(self, policy: str) -> Path:
        return self.logs / f"{policy}.log"

    def policy_dir(self, policy: str) -> Path:
        return self.policies / policy

    def final_model(self, policy: str) -> Path:
        return self.policy_dir(policy) / "final"

    def policy_eval_dir(self, policy: str) -> Path:
        """A policy's validation results, one ``step-<NNNNNN>.json`` per validated step."""
        return self.eval_dir / policy

    def eval_result(self, policy: str, step: int) -> Path:
        return self.policy_eval_dir(policy) / f"step-{step:06d}.json"


def machine_lock_name(machine: int) -> str:
    """The lock file of machine ``machine`` (0: the run lock) of a run on several machines."""
    return LOCK_NAME if machine == 0 else f"{LOCK_NAME}-machine-{machine}"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def parse_metric_row(line: str) -> dict[str, Any] | None:
    """One metrics line as its row; None when the line is damaged (not one whole JSON object)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def read_metric_rows(path: Path) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """(line, row) of every whole row of a metrics file (none when it does not exist), and how many damaged
    lines were skipped; blank lines are neither."""
    if not path.exists():
        return [], 0
    rows, damaged = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        row = parse_metric_row(line)
        if row is not None:
            rows.append((line, row))
        else:
            damaged += int(bool(line.strip()))
    return rows, damaged
