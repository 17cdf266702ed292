"""``RUN/run.json``: the run's record (what ran, since when, how it ended and why).

Its ``status`` is ``running`` while a launch holds the run, then ``done``, ``interrupted`` or
``failed``; a failed run also says why in ``reason`` (e.g. ``no space left on
RUN/<file> (12.0 MB free); ...``), so a look at the folder tells what happened without the console.
The record is written even on a full disk when it can be: atomically first, else in place
over the old one (which needs no new block on most filesystems).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.config.cadence import max_optimizer_steps
from mutualrl.config.schema import RunConfig
from mutualrl.errors import StorageError
from mutualrl.run_folder import RunPaths, read_json_or


def read_record(paths: RunPaths) -> dict[str, Any]:
    """The current record, or ``{}`` when there is none or it cannot be read (damaged, a FIFO, another type)."""
    return read_json_or(paths.run_json, {})


def finished_summary(paths: RunPaths, config: RunConfig) -> dict[str, Any] | None:
    """The run's summary when nothing is left to train with ``config``, else None: the run ended ``done``, its
    summary says every policy trained all of ``config``'s steps and none left the pool, and every final model is
    saved. (A stopped ``--resume --max-steps N`` leaves "done" with the longer config stored: the steps tell it
    apart.)"""
    target = max_optimizer_steps(config)
    if read_record(paths).get("status") != "done" or not isinstance(target, int) or target < 1:
        return None
    summary = read_json_or(paths.summary, None)
    if summary is None or summary.get("lost"):
        return None
    trained = summary.get("policies") if isinstance(summary.get("policies"), dict) else {}
    finished = all(trained.get(p.name, {}).get("steps", 0) >= target and paths.final_model(p.name).is_dir()
                   for p in config.pool.policies)
    return summary if finished else None


STOP_RULES = frozenset({"task.stop_after_no_reward_steps", "see.barrier_timeout_s", "see.peer_timeout_s",
                        "launch.stall_timeout_s", "launch.join_timeout_s", "pool.description"})
"""Settings that only decide when a run is stopped (or name it): a run that finished is the same run under any
value of them, so a sweep or ``--baseline`` that changes one reuses it."""


def settings_differences(paths: RunPaths, config: RunConfig, may_change: bool = True) -> list[str] | None:
    """How the finished run in ``paths`` differs from ``config`` in what it trains (``[]``: the same settings;
    :data:`STOP_RULES` left out); ``may_change`` False: only the differences a ``--resume`` refuses. None when the
    folder holds no readable run config."""
    from mutualrl.config.resolved import load_resolved_config
    from mutualrl.config.typed import to_plain
    from mutualrl.errors import MutualRLError
    from mutualrl.launch.rundir.resume import config_changes

    if not paths.config.is_file():
        return None
    try:
        stored = load_resolved_config(paths)
    except MutualRLError:
        return None
    refused, allowed = config_changes(to_plain(stored), to_plain(config))
    return [str(change) for change in [*refused, *(allowed if may_change else [])]
            if change.key != "output_dir" and change.key not in STOP_RULES]


def reusable_summary(paths: RunPaths, config: RunConfig) -> dict[str, Any] | None:
    """The summary of a run that finished in ``paths`` with ``config``'s settings (``--baseline`` shows it again
    instead of training it twice), else None."""
    if config.launch.nodes != 1 or settings_differences(paths, config) != []:
        return None
    return finished_summary(paths, config)


def write_run_json(paths: RunPaths, config: RunConfig, status: str, reason: str | None = None,
                   resumed_from: int | None = None) -> None:
    """Write the run's record; ``resumed_from``: this launch is a ``--resume`` of a run that launched before,
    going on from that checkpoint step (0: from the start), added to ``resumes`` (:func:`resumes_entry`)."""
    previous = read_record(paths)
    record = {
        "pool": config.pool.name, "regime": config.regime.name, "task": config.task.name,
        "policies": [{"name": p.name, "model": p.model, "tokenizer": p.tokenizer} for p in config.pool.policies],
        "started": previous.get("started") or time.strftime("%Y-%m-%dT%H:%M:%S"),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S") if status != "running" else None,
        "status": status, "argv": sys.argv, **versions_entry(previous), **resumes_entry(previous, resumed_from),
    }
    if reason:
        record["reason"] = reason
    write_record(paths, record)


def versions_entry(previous: dict[str, Any]) -> dict[str, Any]:
    """``versions``: what this launch runs with (versions.run_versions); a resume on other versions keeps the
    earlier ones under ``earlier_versions``, so a run that changed versions midway says so."""
    from mutualrl.versions import library_versions, run_versions

    current = run_versions()
    earlier = list(previous.get("earlier_versions", []))
    before = previous.get("versions")
    if isinstance(before, dict) and library_versions(before) != library_versions(current):
        earlier.append(before)
    return {"versions": current, **({"earlier_versions": earlier} if earlier else {})}


def resumes_entry(previous: dict[str, Any], resumed_from: int | None) -> dict[str, Any]:
    """``resumes``: one entry per ``--resume`` launch, ``{"from_step": N, "at": when it launched, "after": the
    status the stopped launch left}``, kept by every later write; ``from_step`` 0 means no checkpoint was common to
    every policy, so the run was trained again from its start (``mutualrl report`` marks such runs). Absent for a
    run never resumed."""
    kept = previous.get("resumes")
    resumes = [entry for entry in kept if isinstance(entry, dict)] if isinstance(kept, list) else []
    if resumed_from is not None:
        resumes.append({"from_step": resumed_from, "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                        "after": previous.get("status")})
    return {"resumes": resumes} if resumes else {}


def write_record(paths: RunPaths, record: dict[str, Any]) -> None:
    """Replace run.json atomically; on a full disk, overwrite it in place (its old blocks hold the new text)."""
    try:
        write_json_atomic(paths.run_json, record)
    except StorageError:
        if not paths.run_json.exists():
            raise
        data = json.dumps(record, indent=1, default=str).encode()
        fd = os.open(paths.run_json, os.O_WRONLY)
        try:
            os.write(fd, data)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)


def mark_interrupted(paths: RunPaths) -> None:
    """A run.json still saying "running" while we hold the lock was left by a killed launcher."""
    info = read_record(paths)
    if info.get("status") == "running":  # in place on a full disk, as every write of the record
        write_record(paths, {**info, "status": "interrupted"})


def mark_ended(paths: RunPaths, status: str, reason: str) -> bool:
    """A launch that stopped on an exception: a record still saying "running" (this launch's) says ``status``
    and why; a record that already says how the run ended is kept. False when nothing was written."""
    if read_record(paths).get("status") != "running":
        return False
    if status == "failed":
        return mark_run_failed(paths, reason)
    try:
        write_record(paths, {**read_record(paths), "status": status,
                             "finished": time.strftime("%Y-%m-%dT%H:%M:%S")})
    except (OSError, StorageError):
        return False
    return True


def mark_run_failed(paths: RunPaths, reason: str) -> bool:
    """Record a launch that stopped on an error of its own (e.g. a full disk); False when run.json could not
    be written either (``--resume`` then finds it "running" and marks it interrupted)."""
    info = read_record(paths)
    if not info:
        return False
    try:
        write_record(paths, {**info, "status": "failed", "reason": reason,
                             "finished": time.strftime("%Y-%m-%dT%H:%M:%S")})
    except (OSError, StorageError):
        return False
    return True
