"""Resuming a stopped run: what may change, where to restart, and rolling the folder back to it.

A run can stop anywhere (Ctrl-C, a killed launcher or worker, a dead node). ``--resume``
restarts every policy from the last checkpoint *common* to all of them (policies train in
lock-step through the SEE), or from step 0 when there is none yet, and rolls everything a
later step produced back to that point: SEE step folders, metric rows, validation results.
The rows are then produced again by the resumed training, so the merged metrics file ends with
exactly one train row per policy and step.

The run's identity may not change on resume (regime, pool, models, task, seed, learning
settings): :func:`config_changes` lists every difference and the launcher refuses them.
Fields that only say how long to train, how to report or where to run may change: each field declares which it is
(``resume`` in its metadata, :mod:`mutualrl.config.field_rules`).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.config.field_rules import MAY_CHANGE
from mutualrl.config.field_table import resume_rule
from mutualrl.config.typed import flatten
from mutualrl.run_folder import RunPaths
from mutualrl.see.consumption_log import CONSUMED_DIR
from mutualrl.see.files import FAILED_DIR, HEARTBEAT_DIR, JUDGEMENTS_DIR, STEP_DIR_RE
from mutualrl.ops.checkpoint_files import CHECKPOINT_NAME_RE, checkpoint_problem, shown, stray_files_line

EXCHANGE_ENTRY_RE = re.compile(
    rf"{STEP_DIR_RE.pattern}|^(?:{FAILED_DIR}|{HEARTBEAT_DIR}|{CONSUMED_DIR}|{JUDGEMENTS_DIR})$")
"""What an exchange writes in its folder: the rest of a ``see.dir`` is not the run's to remove."""

CHECKPOINT_RE = CHECKPOINT_NAME_RE
"""``checkpoint-<step>`` as Trainer names it: ASCII digits, no leading zero (``checkpoint-٣`` and ``checkpoint-03``
name no step: read as 3, the folder ``checkpoint-3`` would be looked for)."""


@dataclass(frozen=True)
class ConfigChange:
    """One difference between a run's stored config and the resumed one; prints as ``field: a -> b``."""

    key: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.key}: {self.before!r} -> {self.after!r}"


def config_changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[ConfigChange], list[ConfigChange]]:
    """(refused, allowed) differences between a run's stored config and the resumed one, sorted by field."""
    old, new = flatten(before), flatten(after)
    refused, allowed = [], []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        change = ConfigChange(key, old.get(key, "<unset>"), new.get(key, "<unset>"))
        (allowed if resume_rule(key) == MAY_CHANGE else refused).append(change)
    return refused, allowed


def changes_training(allowed: list[ConfigChange]) -> bool:
    """Whether the allowed changes (:func:`config_changes`) touch what is trained: ``output_dir`` only
    respells the folder being resumed (``runs/x`` -> ``/home/me/runs/x``)."""
    return any(change.key != "output_dir" for change in allowed)


def checkpoint_steps(policy_dir: Path) -> set[int]:
    """Steps of the checkpoint folders of a policy (complete or not: :func:`checkpoint_problem` judges them)."""
    if not policy_dir.exists():
        return set()
    return {int(m.group(1)) for child in policy_dir.iterdir() if (m := CHECKPOINT_RE.match(child.name))
            and child.is_dir()}


def other_checkpoint_names(policy_dir: Path) -> str | None:
    """One line naming what in ``policy_dir`` looks like a checkpoint folder but names no step
    (:data:`CHECKPOINT_RE`), or None."""
    if not policy_dir.is_dir():
        return None
    odd = sorted(child.name for child in policy_dir.iterdir() if child.name.startswith("checkpoint-")
                 and not (CHECKPOINT_RE.match(child.name) and child.is_dir()))
    if not odd:
        return None
    return (f"{policy_dir}: {shown(odd)} named like a checkpoint but naming no step (checkpoint-<ASCII digits>, as "
            "training writes it): not resumed from, left where it is")


def common_checkpoint(paths: RunPaths, policies: list[str], max_steps: int | None = None,
                      damaged: list[str] | None = None, notes: list[str] | None = None) -> int | None:
    """The last checkpoint step every policy has complete and intact (not past ``max_steps``), or None.

    Incomplete or damaged checkpoints are skipped (an earlier common one is used: never one
    without its optimizer state) and each is described in ``damaged``, newest first. ``notes``: one line for each
    folder named like a checkpoint that names no step, and for what the chosen checkpoints hold besides the files
    their manifests list (neither changes the choice).
    """
    common: set[int] | None = None
    for policy in policies:
        steps = checkpoint_steps(paths.policy_dir(policy))
        common = steps if common is None else common & steps
        if notes is not None:
            notes.extend(filter(None, [other_checkpoint_names(paths.policy_dir(policy))]))
    usable = sorted((s for s in common or () if max_steps is None or max_steps <= 0 or s <= max_steps), reverse=True)
    for step in usable:
        problems = [p for p in (checkpoint_problem(paths.policy_dir(name) / f"checkpoint-{step}") for name in policies)
                    if p is not None]
        if not problems:
            if notes is not None:
                notes.extend(filter(None, (stray_files_line(paths.policy_dir(name) / f"checkpoint-{step}")
                                           for name in policies)))
            return step
        if damaged is not None:
            damaged.extend(problems)
    return None


def saved_ranks(paths: RunPaths, policies: list[str]) -> dict[str, tuple[int, str]]:
    """{policy: (ranks, newest ZeRO checkpoint folder)} over the checkpoints common to every policy (what
    ``--resume`` chooses from); a policy with no DeepSpeed ZeRO checkpoint there is left out. The plan refuses a
    resume on another rank count (:mod:`mutualrl.launch.plan.resume_ranks`).

    The largest rank count of a policy's checkpoints is taken: every checkpoint of a run is saved by one world size
    (a resume on another is refused), and one cut short by a kill holds fewer rank files, not more. Only file names
    are read, so a dry run stays fast beside large checkpoints.
    """
    from mutualrl.ops.checkpoint_files import is_zero_checkpoint, judged_names, plausible_world

    steps = [checkpoint_steps(paths.policy_dir(name)) for name in policies]
    common = sorted(set.intersection(*steps) if steps else set(), reverse=True)
    found: dict[str, tuple[int, str]] = {}
    for name in policies:
        named = [(folder, judged_names(folder)) for folder in (paths.policy_dir(name) / f"checkpoint-{step}"
                                                               for step in common)]
        # the files a manifest lists (a stray rank file is none of them); a rank far beyond the others counts none
        zero = [(folder, world) for folder, names in named if is_zero_checkpoint(folder, names)
                and (world := plausible_world(names)) is not None]
        if zero:
            found[name] = (max(world for _, world in zero), str(zero[0][0]))
    return found


def furthest_step(paths: RunPaths, policies: list[str]) -> tuple[int, str] | None:
    """The furthest step any policy of the run trained to and what says so (its newest checkpoint folder, or its
    final model's ``trainer_state.json``); None before any step was saved."""
    from mutualrl.run_folder import read_json_or

    found: list[tuple[int, bool, str]] = []  # (step, a checkpoint: named first at a tie, where)
    for policy in policies:
        steps = checkpoint_steps(paths.policy_dir(policy))
        if steps:
            found.append((max(steps), True, str(paths.policy_dir(policy) / f"checkpoint-{max(steps)}")))
        state = paths.final_model(policy) / "trainer_state.json"
        final = read_json_or(state, {}).get("global_step") if state.is_file() else None
        if isinstance(final, int) and not isinstance(final, bool):
            found.append((final, False, str(paths.final_model(policy))))
    return max(found)[::2] if found else None


def clear_training_outputs(paths: RunPaths, see_root: Path) -> None:
    """Forget every step of a run that has no checkpoint yet (prompts, config and logs stay). An exchange outside
    the run folder (``see.dir``, which a config names: any folder) loses only what an exchange writes there."""
    for target in paths.training_outputs():
        remove(target)
    if see_root.is_dir() and see_root.resolve().is_relative_to(paths.root.resolve()):
        shutil.rmtree(see_root)
    elif see_root.is_dir():
        for child in see_root.iterdir():
            if EXCHANGE_ENTRY_RE.match(child.name):
                remove(child)


def remove(target: Path) -> None:
    """A file, a folder or a link (removed, never followed)."""
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)


def restart_command(processes: list[Any], paths: RunPaths, policy: str) -> tuple[list[str], int | None]:
    """The command that starts ``policy`` again into its running pool (see.max_restarts), resuming from its newest
    intact checkpoint (or from its start), and that checkpoint's step."""
    argv = next(p.argv for p in processes if p.name == policy)
    if "--resume-from" in argv:  # this launch resumed the run: drop that (older) checkpoint
        at = argv.index("--resume-from")
        argv = argv[:at] + argv[at + 2:]
    for step in sorted(checkpoint_steps(paths.policy_dir(policy)), reverse=True):
        folder = paths.policy_dir(policy) / f"checkpoint-{step}"
        if checkpoint_problem(folder) is None:
            return [*argv, "--resume-from", str(folder)], step
    return list(argv), None
