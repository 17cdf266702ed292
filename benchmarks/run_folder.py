"""A benchmark's run folder: finished (reused), stopped mid-way (resumed with its own settings) or new."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def run_state(run_dir: Path) -> str:
    """``done`` (finished: reused), ``started`` (stopped mid-way: a reboot, Ctrl-C; resumed) or ``new``."""
    record = run_dir / "run.json"
    status = json.loads(record.read_text()).get("status") if record.is_file() else None
    if status == "done" and (run_dir / "summary.json").is_file():
        return "done"
    return "started" if (run_dir / "config.yaml").is_file() else "new"


def resume_command(run_dir: Path) -> list[str]:
    """``mutualrl train --resume``: on from the run's last checkpoint with the settings its folder holds (nothing
    else is given, so a resumed run cannot change its own settings)."""
    return [sys.executable, "-m", "mutualrl", "train", "--resume", "-o", str(run_dir)]
