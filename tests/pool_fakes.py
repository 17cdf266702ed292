"""Stand-ins for policy processes in launcher tests: they sleep or run a script, then finish as a worker does (a
status saying the last step was trained: the launcher counts an exit 0 before it as a failure)."""

from __future__ import annotations

import sys
from pathlib import Path

from mutualrl.launch.supervise.runner import PolicyProcess

FINISH = '''
import json as _json, pathlib as _pathlib
def finish(run, name):
    status = _pathlib.Path(run) / "status"
    status.mkdir(parents=True, exist_ok=True)
    (status / f"{name}.json").write_text(_json.dumps({"policy": name, "step": 1, "max_steps": 1, "phase": "finished"}))
'''
"""Python source defining ``finish(run_dir, policy)``: the finished status a worker leaves."""


def sleeper(run: Path, name: str, seconds: float) -> PolicyProcess:
    """Policy ``name``: no progress of its own for ``seconds`` (waiting at the barrier), then finished."""
    code = f"{FINISH}\nimport time\ntime.sleep({seconds})\nfinish({str(run)!r}, {name!r})\n"
    return PolicyProcess(name, [sys.executable, "-c", code], {}, run / "logs" / f"{name}.log")
