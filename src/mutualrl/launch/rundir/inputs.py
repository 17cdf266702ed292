"""What a run's user code and data were, recorded as it starts (``RUN/inputs.json``) and checked on ``--resume``
and ``eval``.

A run's rewards come from the user's modules (``task.reward_funcs``, ``plugins``, a ``task.name`` class) and its
prompts from its own copy of the data (``RUN/data/``). A module edited between the run and ``--resume``, or the
same name found elsewhere (resumed from another working directory), silently changes what is rewarded mid-run;
a data copy edited by hand changes what is trained on. So each module's file and content hash (the named ones and
every module of the working directory they import: a helper beside the reward module), and each data
file's hash, are recorded, and a difference is named: ``--resume`` and ``eval`` refuse it, before any of the
modules is imported. Every reader of a run's config imports only the modules recorded here, unchanged
(:mod:`mutualrl.config.recorded_code`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_text_atomic
from mutualrl.config.recorded_code import file_hash, module_file, module_hash, named_modules, sibling_modules
from mutualrl.errors import DataError, RunFolderError, UsageError
from mutualrl.inputs_record_reader import recorded_inputs
from mutualrl.run_folder import RunPaths, is_sparse, read_json
from mutualrl.tasks.reward_funcs import TRL_REWARDS
from mutualrl.tasks.shipped_rewards import is_shipped

RECORD_FORMAT = 1


def user_modules(config: Any) -> list[str]:
    """The user's modules a config names: reward functions' modules, plugins, a ``task.name`` class's module."""
    funcs = [name for name in config.task.reward_funcs
             if name not in TRL_REWARDS and not is_shipped(name)]  # a shipped function has no module file
    return [module for module, _ in named_modules(funcs, config.plugins or [], config.task.name)]


def data_files(paths: RunPaths) -> list[Path]:
    return sorted(p for p in paths.data.glob("*.jsonl") if p.is_file())


def current_inputs(paths: RunPaths, modules: list[str]) -> dict[str, Any]:
    code = {}
    for module in modules:
        found = module_file(module)
        code[module] = {"file": str(found), "sha256": module_hash(found)} if found and found.is_file() else None
    data = {p.name: file_hash(p) for p in data_files(paths)}
    return {"format": RECORD_FORMAT, "code": code, "data": data}


def record_inputs(paths: RunPaths, config: Any) -> None:
    """Write ``RUN/inputs.json`` for a run whose data copy was just written: the named modules and every module of the
    working directory they import (:func:`~mutualrl.config.recorded_code.sibling_modules`)."""
    named = user_modules(config)
    write_text_atomic(paths.inputs, json.dumps(current_inputs(paths, [*named, *sibling_modules(named)]), indent=1)
                      + "\n")


def code_changes(paths: RunPaths) -> list[str]:
    """Each recorded module that is now another file or has other content, as one phrase naming it."""
    record = recorded_inputs(paths)
    changes = []
    for module, was in (record or {}).get("code", {}).items():
        if was is None:
            continue  # not found as the run started: nothing to compare
        now = current_inputs(paths, [str(module)])["code"][str(module)]
        if now is None:
            continue  # not found: the import error names it
        if now["file"] != was.get("file"):
            changes.append(f"module {module!r} is now {now['file']}, the run used {str(was.get('file'))[:300]}")
        elif now["sha256"] != was.get("sha256"):
            changes.append(f"module {module!r} ({now['file']}) changed since the run started")
    return changes


def refuse_sparse(path: Path) -> None:
    """A data copy whose size is far beyond the blocks it holds (a sparse file: ``truncate -s 4T``,
    :func:`~mutualrl.run_folder.is_sparse`) is refused before hashing it would read terabytes of zeros."""
    stat = path.stat()
    if is_sparse(stat):
        raise DataError(f"{path}: {stat.st_size:,} bytes but only {stat.st_blocks * 512:,} on disk (a sparse file), "
                        "not a data copy a run wrote; restore the run's data or start a new run")


def check_data_copy(paths: RunPaths) -> None:
    """Refuse a run whose data copy (``RUN/data/*.jsonl``) is not what it recorded."""
    record = recorded_inputs(paths)
    if record is None:
        return
    files = data_files(paths)
    for path in files:
        refuse_sparse(path)
    now = {p.name: file_hash(p) for p in files}
    for name in sorted(set(now) | set(record["data"])):
        if now.get(name) != record["data"].get(name):
            state = "is missing" if name not in now else "was added" if name not in record["data"] else "changed"
            raise DataError(f"{paths.data / name} {state} since the run started (its hash is in {paths.inputs}); "
                            "the run's own data copy is what it trains and is evaluated on: restore it")


def check_resume_inputs(paths: RunPaths) -> None:
    """``--resume``: refuse user code or a data copy that is not what the run recorded, before any module of it
    is imported (a module of the same name in another working directory is never run)."""
    changes = code_changes(paths)
    if changes:
        raise UsageError(f"--resume: {paths.root} would go on with other user code than it started with: "
                         f"{'; '.join(changes)} ({paths.inputs}); run from the folder the run started in, restore "
                         "the module, or start a new run with --output-dir")
    check_data_copy(paths)


def held_out_copy(paths: RunPaths, limit: int | None) -> list[Any]:
    """The run's own held-out prompts (``RUN/data/eval.jsonl``, as its validation saw them), checked against the
    record; empty when the run has none."""
    from mutualrl.training.data import EVAL_FILE, read_examples

    check_data_copy(paths)
    if not (paths.data / EVAL_FILE).is_file():
        return []
    examples = read_examples(paths.data / EVAL_FILE)
    return examples if limit is None else examples[:limit]
