"""Faults of ``chaos.py`` beyond kills: damaged checkpoints, a full disk, and the silent optimizer reset check.

- :func:`damage_checkpoint`: in the newest complete checkpoint of a random policy (after a kill, before
  ``--resume``), delete or cut to half one file of a kind the trainer needs: weights,
  optimizer, scheduler, RNG or trainer state (:data:`CHECKPOINT_FILES`).
- :func:`disk_full_spec`: ENOSPC at a random write, through the project's own fault injection
  (``MUTUALRL_DEBUG_DISK_FULL=<path text>@<n>``: the n-th write of each process to a path of
  one site of :data:`DISK_FULL_SITES` fails, as on a full disk).
- :func:`optimizer_resets`: a resume that went on without the optimizer's state leaves
  checkpoints whose AdamW step count is behind the trainer's ``global_step`` (a fresh AdamW
  counts from 1 again). Counted from the files themselves, independent of what the run logged.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any

# Kind -> the file names it may have in a one-process checkpoint (the first one present is hit).
CHECKPOINT_FILES: dict[str, tuple[str, ...]] = {
    "weights": ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin"),
    "optimizer": ("optimizer.pt",),
    "scheduler": ("scheduler.pt",),
    "rng": ("rng_state.pth", "rng_state_0.pth"),
    "trainer_state": ("trainer_state.json",),
}
DAMAGE_MODES = ("missing", "truncated")
# Substrings of the paths of every kind of write of a run: metric rows (a worker's and the merged file),
# status files, checkpoints (optimizer and manifest), SEE shards, the consumption log, validation results,
# the run record, and the SEE heartbeat (best effort: a warning, the run goes on).
DISK_FULL_SITES = ("metrics", "status/", "checkpoint-", "see/step-", "see/_consumed", "eval/", "run.json",
                   "_heartbeat")
HEARTBEAT_WARNING = "could not write the SEE heartbeat"  # mutualrl.see.exchange: its best-effort warning
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def checkpoints(policy_dir: Path) -> list[Path]:
    """A policy's checkpoint folders, oldest first."""
    found = [(int(m.group(1)), p) for p in policy_dir.glob("checkpoint-*") if (m := CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def complete_checkpoints(policy_dir: Path) -> list[Path]:
    """A policy's complete checkpoints, oldest first (a kill can leave the newest one half-saved)."""
    from mutualrl.ops.checkpoint_files import checkpoint_problem

    return [folder for folder in checkpoints(policy_dir) if checkpoint_problem(folder) is None]


def damage_checkpoint(run_dir: Path, rng: random.Random, kind: str | None = None,
                      mode: str | None = None) -> dict[str, Any] | None:
    """Delete or truncate one file of the newest complete checkpoint of a random policy (the one a resume
    would take); None when no policy has one."""
    policies = [p for p in sorted((run_dir / "policies").glob("*")) if complete_checkpoints(p)]
    if not policies:
        return None
    policy = rng.choice(policies)
    folder = complete_checkpoints(policy)[-1]
    kind = kind or rng.choice(sorted(CHECKPOINT_FILES))
    mode = mode or rng.choice(DAMAGE_MODES)
    target = next((folder / n for n in CHECKPOINT_FILES[kind] if (folder / n).is_file()), None)
    if target is None:
        return None
    if mode == "missing":
        target.unlink()
    else:
        os.truncate(target, target.stat().st_size // 2)
    common = all((p / folder.name).is_dir() for p in (run_dir / "policies").glob("*") if p.is_dir())
    return {"kind": kind, "mode": mode, "file": str(target), "folder": str(folder),
            "step": int(folder.name.rpartition("-")[2]), "common": common}


def disk_full_spec(rng: random.Random) -> str:
    """``<site>@<n>``: the n-th write (n in 1..4) of each process to a path of a random site fails."""
    return f"{rng.choice(DISK_FULL_SITES)}@{rng.randint(1, 4)}"


def judge_damage(damage: dict[str, Any], segment: str) -> dict[str, int] | None:
    """How the first launch after a damage dealt with it (None: it stopped before choosing where to resume).

    ``damage_unreported``: the damaged folder was a resume candidate (common to every policy)
    but the launch did not name it; ``damaged_checkpoint_used``: it resumed from it anyway.
    """
    flat = "".join(segment.split())  # rich wraps long lines of a non-TTY console
    chosen = re.search(r"resumingeverypolicyfromcheckpoint-(\d+)", flat)
    if chosen is None and "resume:nocheckpointcommon" not in flat:
        return None
    named = "".join(damage["folder"].split()) in flat
    return {"damage_unreported": int(damage["common"] and not named),
            "damaged_checkpoint_used": int(chosen is not None and int(chosen.group(1)) == damage["step"])}


def judge_disk_full(segment: str, returncode: int | None, record: dict[str, Any],
                    worker_logs: str = "") -> dict[str, int] | None:
    """How a launch under an injected full disk ended (None: the injection never fired).

    ``segment``: the launch's own output; ``worker_logs``: what its workers logged. A failed
    write must stop the launch with a one-line ``error: no space left on <path> (... free)``,
    no traceback anywhere, and ``run.json`` failed with that reason (unless the disk was full
    before ``run.json`` was first written); a heartbeat write is best effort: a warning in the
    worker's log, and the launch goes on to the end. Anything else counts in ``disk_full_unclear``.
    """
    errors = [line for line in segment.splitlines() if line.startswith("error: no space left on ")]
    traceback = "Traceback" in segment + worker_logs
    if not errors and HEARTBEAT_WARNING in worker_logs:
        return {"disk_full_unclear": int(returncode != 0 or traceback)}
    if not errors and returncode == 0:
        return None
    recorded = not record or (record.get("status") == "failed"
                              and str(record.get("reason", "")).startswith("no space left on "))
    clear = len(errors) == 1 and " free)" in errors[0] and returncode == 1 and not traceback and recorded
    return {"disk_full_unclear": int(not clear)}


def optimizer_step(folder: Path) -> int | None:
    """The largest AdamW step count in ``folder/optimizer.pt`` (None: no readable optimizer state)."""
    import torch

    try:
        state = torch.load(folder / "optimizer.pt", map_location="cpu", weights_only=True)["state"]
    except (OSError, RuntimeError, KeyError, TypeError, EOFError):
        return None
    steps = [float(s["step"]) for s in state.values() if isinstance(s, dict) and "step" in s]
    return int(max(steps)) if steps else 0


def optimizer_resets(run_dir: Path) -> list[str]:
    """Checkpoints (every policy's) whose optimizer state is behind their step: a resume dropped it."""
    resets = []
    for policy in sorted((run_dir / "policies").glob("*")):
        for folder in checkpoints(policy):
            try:
                global_step = int(json.loads((folder / "trainer_state.json").read_text())["global_step"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a damaged checkpoint left behind: resume skips it; not a reset
            step = optimizer_step(folder)
            if step is not None and step < global_step:
                resets.append(f"{folder}: optimizer state at step {step}, trainer at step {global_step}")
    return resets
