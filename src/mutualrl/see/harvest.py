"""Harvest verified successes from a recorded exchange (the paper's sequential peer distillation, Phase 1).

Paper, App. "Online Gating versus Sequential Peer Distillation": two models are trained
independently with standalone GRPO, and "all distinct successful trajectories generated
during their MATH-train runs are harvested". A standalone run records its rollouts with
``--set see.record_standalone=true`` (keep every step with ``see.retention_steps=null``);
:func:`harvest_successes` reads every committed step of that exchange and returns, per
policy, each distinct ``(prompt_id, response_text)`` whose reward is above the success
threshold (SGT's ``r > success_threshold``, default 0.8).

Shards are read and verified like a peer reads them (size, xxh3_128 checksum, schema); a
step where a policy has not committed every rank (a run killed mid-step) is skipped and
listed in :attr:`Harvest.incomplete`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from mutualrl.errors import DataError, UsageError
from mutualrl.see import files
from mutualrl.see.shards import ShardInfo, complete_shards, load_shard, read_manifest

#: The columns a harvest reads.
HARVEST_COLUMNS = ("prompt_id", "prompt_text", "response_text", "reward", "finished")


@dataclass(frozen=True)
class Success:
    """One distinct successful trajectory of a policy: a prompt and the response text that solved it."""

    prompt_id: str
    prompt_text: str
    response_text: str
    reward: float  # the highest reward it got
    finished: bool  # some generation of this text ended with EOS
    first_step: int  # the step it was first generated at
    count: int  # how many rollouts produced exactly this text for this prompt


@dataclass
class Harvest:
    """Every distinct success per policy, in order of first generation (step, rank, row)."""

    root: Path
    run_id: str | None
    success_threshold: float
    steps: list[int] = field(default_factory=list)  # steps with records, ascending
    records: dict[str, int] = field(default_factory=dict)  # rollouts read per policy
    successes: dict[str, list[Success]] = field(default_factory=dict)
    incomplete: list[tuple[int, str]] = field(default_factory=list)  # (step, policy) skipped: ranks missing

    @property
    def policies(self) -> list[str]:
        return sorted(self.records)

    def prompts(self, policy: str) -> set[str]:
        """Prompt ids the policy solved at least once."""
        return {s.prompt_id for s in self.successes.get(policy, [])}

    def summary(self, policy: str) -> dict[str, object]:
        found = self.successes.get(policy, [])
        return {
            "see": str(self.root),
            "run_id": self.run_id,
            "success_threshold": self.success_threshold,
            "steps": len(self.steps),
            "first_step": self.steps[0] if self.steps else None,
            "last_step": self.steps[-1] if self.steps else None,
            "rollouts": self.records.get(policy, 0),
            "successful_rollouts": sum(s.count for s in found),
            "distinct_successes": len(found),
            "prompts_solved": len(self.prompts(policy)),
            "incomplete_steps": [step for step, p in self.incomplete if p == policy],
        }


def see_root_of(path: Path | str) -> Path:
    """``path/see`` for a run folder, or ``path`` when it is an exchange folder (it must exist)."""
    root = files.find_see_root(path)
    if root is None:
        raise UsageError(f"{path}: no recorded experience (no {Path(path) / 'see'} with step folders); train the run "
                         "with --set see.record_standalone=true --set see.retention_steps=null")
    return root


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    steps = []
    with os.scandir(root) as entries:
        for entry in entries:
            m = files.STEP_DIR_RE.match(entry.name)
            if m and entry.is_dir():
                steps.append((int(m.group(1)), Path(entry.path)))
    return sorted(steps)


def _committed(folder: Path) -> dict[str, dict[int, dict[int, ShardInfo]]]:
    """The committed shards in one (step, policy) folder: run id -> world size -> rank -> shard."""
    found: dict[str, dict[int, dict[int, ShardInfo]]] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            m = files.MANIFEST_RE.match(entry.name)
            if not m:
                continue
            try:
                info = read_manifest(Path(entry.path))
            except FileNotFoundError:
                continue
            found.setdefault(info.run_id, {}).setdefault(info.world_size, {})[info.rank] = info
    return found


def harvest_successes(
    path: Path | str,
    success_threshold: float = 0.8,
    policies: Iterable[str] | None = None,
    run_id: str | None = None,
) -> Harvest:
    """Every distinct ``(prompt_id, response_text)`` with ``reward > success_threshold``, per policy.

    Args:
        path: a run folder (its exchange is ``path/see``) or an exchange folder.
        success_threshold: a rollout is a success when its reward is strictly above this (SGT's rule).
        policies: read only these policies (default: every policy with records).
        run_id: read only shards of this run id. Default: the exchange's only run id; an exchange
            holding several (a reused ``see.dir``) is refused, naming them.

    Raises :class:`UsageError` when there is no exchange or no committed step, :class:`DataError`
    for several run ids, and :class:`~mutualrl.see.CorruptShardError` for a shard that fails
    verification.
    """
    root = see_root_of(path)
    wanted = None if policies is None else {files.check_policy_name(p) for p in policies}
    cells = _cells(root, wanted)
    run_id = _one_run_id(root, cells, run_id)
    harvest = Harvest(root=root, run_id=run_id, success_threshold=float(success_threshold))
    seen: dict[str, dict[tuple[str, str], int]] = {}  # policy -> key -> index in harvest.successes[policy]
    steps: set[int] = set()
    verified: set[tuple[object, ...]] = set()
    for step, policy, found in cells:
        shards = complete_shards(found.get(run_id, {}))
        if shards is None:
            if found.get(run_id):
                harvest.incomplete.append((step, policy))
            continue
        steps.add(step)
        out = harvest.successes.setdefault(policy, [])
        index = seen.setdefault(policy, {})
        for info in shards:
            table = load_shard(info, verified).select(list(HARVEST_COLUMNS))
            harvest.records[policy] = harvest.records.get(policy, 0) + table.num_rows
            add_successes(out, index, table, step, success_threshold)
    harvest.steps = sorted(steps)
    return harvest


Cell = tuple[int, str, dict[str, dict[int, dict[int, ShardInfo]]]]
"""A (step, policy) folder of the exchange: its step, its policy, and its committed shards (run id -> world size ->
rank -> shard)."""


def _cells(root: Path, wanted: set[str] | None) -> list[Cell]:
    """Every (step, policy) folder of the exchange in step and name order; only ``wanted``'s policies unless None."""
    cells: list[Cell] = []
    for step, folder in _step_dirs(root):
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_dir() and (wanted is None or entry.name in wanted):
                cells.append((step, entry.name, _committed(Path(entry.path))))
    return cells


def _one_run_id(root: Path, cells: list[Cell], run_id: str | None) -> str:
    """The run to harvest: ``run_id``, else the exchange's only one; refused when several runs share the exchange
    (:class:`DataError`) or the run committed nothing (:class:`UsageError`)."""
    run_ids = sorted({rid for _, _, found in cells for rid in found})
    if run_id is None:
        if len(run_ids) > 1:
            raise DataError(f"{root}: shards of several runs share this exchange ({', '.join(run_ids)}); "
                            "harvest one run at a time")
        run_id = run_ids[0] if run_ids else None
    if run_id is None or run_id not in run_ids:
        raise UsageError(f"{root}: no committed records" + (f" of run {run_id!r}" if run_id else "")
                         + "; was the run trained with --set see.record_standalone=true?")
    return run_id


def add_successes(out: list[Success], index: dict[tuple[str, str], int], table: pa.Table, step: int,
                  success_threshold: float) -> None:
    """Add the successes among one shard's rows (``table``, read at ``step``) to a policy's ``out``: a new
    (prompt id, text) at its end, one seen before (``index``: its place in ``out``) counted into its entry."""
    # Compared in float32, the SEE's reward type, as SGT's gate compares a float32 tensor:
    # a reward of 0.8 stored as float32 is not above a threshold of 0.8.
    rewards = table.column("reward").to_numpy(zero_copy_only=False).astype(np.float32)
    rows = np.flatnonzero(rewards > np.float32(success_threshold))
    if not len(rows):
        return
    cols = {name: table.column(name).take(rows).to_pylist() for name in HARVEST_COLUMNS}
    for pid, prompt, text, reward, done in zip(*(cols[c] for c in HARVEST_COLUMNS), strict=True):
        key = (pid, text)
        at = index.get(key)
        if at is None:
            index[key] = len(out)
            out.append(Success(pid, prompt, text, float(reward), bool(done), step, 1))
        else:
            old = out[at]
            out[at] = Success(old.prompt_id, old.prompt_text, old.response_text, max(old.reward, reward),
                              old.finished or bool(done), old.first_step, old.count + 1)
