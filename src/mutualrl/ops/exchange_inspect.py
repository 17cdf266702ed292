"""Inspect a Shared Experience Exchange on disk: contents, integrity and consistency.

Backs ``mutualrl see inspect``. Reads every committed shard (verifying size and checksum
against its manifest, like a peer would), and reports what is there -- steps, records and
reward means per policy, files, schema versions, provenance -- and every inconsistency:
missing shards or ranks, checksum or size mismatches, unreadable files, row counts that
differ from the manifest, data files never committed, stray temporary files of killed
writers, failure markers, mixed run ids or world sizes, and steps whose policies saw
different prompt ids (the paper requires identical prompts at every step).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from mutualrl.atomic_io import TEMP_RE
from mutualrl.errors import UsageError
from mutualrl.run_folder import read_json_or
from mutualrl.see import files
from mutualrl.see.consumption_log import read_consumption
from mutualrl.see.errors import CorruptShardError
from mutualrl.ops.exchange_inspect_report import (
    FileEntry,
    InspectReport,
    Issue,
    PolicyStep,
    finish_provenance,
    mean_or_none,
    merge_provenance,
)
from mutualrl.see.shards import ShardInfo, load_shard, read_manifest
from mutualrl.ops.exchange_retention import retention_note
from mutualrl.ops.exchange_inspect_judgements import inspect_judgements
from mutualrl.ops.peer_offpolicy_stats import offpolicy_stats_by_peer, run_folder_of

__all__ = ["FileEntry", "InspectReport", "Issue", "PolicyStep", "inspect_exchange", "resolve_see_root"]


def resolve_see_root(path: Path | str) -> Path:
    """``path/see`` for a run folder, or ``path`` itself when it is an exchange folder."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist")
    root = files.find_see_root(path)
    if root is None:
        raise UsageError(f"no Shared Experience Exchange in {path}: expected {path / 'see'} or step-NNNNNN folders")
    return root


def _temp_or(name: str, kind: str) -> str:
    """A file's kind: ``temp`` when its name is a writer's temporary, else ``kind``."""
    return "temp" if TEMP_RE.match(name) else kind


@dataclass
class _Inspection:
    """The running state of one inspection: the report being filled, and what the walk gathers for the checks and
    summaries that can only run once every step has been read."""

    root: Path
    report: InspectReport
    verify_checksums: bool
    reward_sum: dict[tuple[int, str], float] = field(default_factory=lambda: defaultdict(float))
    reward_count: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))  # scored records
    prompt_ids: dict[int, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(dict))
    schema_versions: set[int] = field(default_factory=set)
    run_ids: set[str] = field(default_factory=set)
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    folders: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))  # policy folders per step

    def add_file(self, p: Path, kind: str) -> int:
        """List ``p`` in the report's files (its size 0 when it vanished meanwhile); returns the size."""
        try:
            size = p.stat().st_size
        except OSError:
            size = 0
        self.report.files.append(FileEntry(self.rel(p), size, kind))
        return size

    def issue(self, kind: str, message: str, **where: Any) -> None:
        self.report.issues.append(Issue(kind, message, **where))

    def rel(self, p: Path) -> str:
        return str(p.relative_to(self.root))


@dataclass
class _Cell:
    """What the committed shards of one policy at one step add up to, while they are read."""

    shards: dict[int, dict[int, ShardInfo]] = field(default_factory=lambda: defaultdict(dict))  # world -> rank -> info
    records: int = 0
    scored: int = 0  # records with a reward: None ("not scored") is stored as NaN and left out of the means
    total_reward: float = 0.0
    nbytes: int = 0
    ids: set[str] = field(default_factory=set)
    any_ok: bool = False
    corrupt: list[int] = field(default_factory=list)


def inspect_exchange(path: Path | str, *, verify_checksums: bool = True) -> InspectReport:
    """Inspect the exchange under ``path`` (a run folder or its ``see/`` folder).

    Walks the folder once (every step, failure marker, heartbeat and stray file), then runs the checks that need the
    whole exchange (stray temporaries, missing policies, prompt ids, mixed runs) and fills in the summaries, with
    the per-source diagnostics the run folder's metrics hold (:mod:`mutualrl.ops.peer_offpolicy_stats`) and the peers'
    judgements it holds (OPD's; :mod:`mutualrl.ops.exchange_inspect_judgements`).
    """
    root = resolve_see_root(path)
    state = _Inspection(root, InspectReport(root=str(root), checksums_verified=verify_checksums), verify_checksums)
    _walk(state)
    _check_stray_temps(state)
    _check_across_policies(state)
    _summarise(state)
    state.report.sources = offpolicy_stats_by_peer(run_folder_of(path, root))
    state.report.retention = retention_note(run_folder_of(path, root), state.report.steps)
    judged, issues, listed = inspect_judgements(root, verify_checksums, inspect_exchange)
    state.report.judgements, state.report.issues, state.report.files = judged, state.report.issues + issues, \
        state.report.files + listed
    state.report.total_bytes += sum(entry.bytes for entry in listed)
    return state.report


def _walk(state: _Inspection) -> None:
    """Read the top of the exchange in name order: ``step-NNNNNN`` folders policy by policy, failure markers,
    heartbeats, and any other file (listed, and reported when it is a temporary)."""
    for entry in sorted(os.scandir(state.root), key=lambda e: e.name):
        m = files.STEP_DIR_RE.match(entry.name)
        if m and entry.is_dir():
            _inspect_step(state, int(m.group(1)), entry.path)
        elif entry.name == files.FAILED_DIR and entry.is_dir():
            _read_failure_markers(state, entry.path)
        elif entry.name == files.HEARTBEAT_DIR and entry.is_dir():
            for hentry in sorted(os.scandir(entry.path), key=lambda e: e.name):
                state.add_file(Path(hentry.path), _temp_or(hentry.name, "heartbeat"))
        elif entry.is_file():
            state.add_file(Path(entry.path), _temp_or(entry.name, "other"))


def _inspect_step(state: _Inspection, step: int, folder: str) -> None:
    """One ``step-NNNNNN`` folder: each policy folder in it (committed or not, remembered for the missing-policy
    check), and any loose file."""
    state.report.steps.append(step)
    state.report.cells[step] = {}
    for pentry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not pentry.is_dir():
            state.add_file(Path(pentry.path), _temp_or(pentry.name, "other"))
            continue
        state.folders[step].add(pentry.name)
        _inspect_policy_step(state, step, Path(pentry.path))


def _read_failure_markers(state: _Inspection, folder: str) -> None:
    """The ``_failed`` folder: every marker is a policy that gave up, so each is a ``failure_marker`` issue (an
    unreadable marker still names its policy, from its file name)."""
    for fentry in sorted(os.scandir(folder), key=lambda e: e.name):
        state.add_file(Path(fentry.path), _temp_or(fentry.name, "failure"))
        if TEMP_RE.match(fentry.name) or not fentry.name.endswith(".json"):
            continue
        marker = read_json_or(Path(fentry.path), None)  # damaged, another type, a FIFO: said so
        if marker is None:
            marker = {"policy": fentry.name[: -len(".json")], "reason": "unreadable failure marker"}
        marker.setdefault("policy", fentry.name[: -len(".json")])
        state.report.failures.append(marker)
        state.issue(
            "failure_marker",
            f"policy {marker['policy']!r} was marked failed"
            + (f" at step {marker['step']}" if marker.get("step") is not None else "")
            + (f" (run {marker['run_id']!r})" if marker.get("run_id") else "")
            + f": {marker.get('reason', 'no reason recorded')}",
            path=state.rel(Path(fentry.path)),
            policy=marker["policy"],
            step=marker.get("step"),
        )


def _check_stray_temps(state: _Inspection) -> None:
    """Every temporary file listed is a writer killed before its commit (readers ignore it): name its host and pid,
    so that it can be deleted once no writer runs."""
    for f in state.report.files:
        if f.kind == "temp":
            t = TEMP_RE.match(Path(f.path).name)
            who = f" by pid {t.group('pid')} on {t.group('host')}" if t else ""
            state.issue(
                "stray_temp",
                f"stray temporary file {f.path} ({f.bytes} bytes) left{who}: a writer was killed before its "
                "commit; readers ignore it, delete it once no writer runs",
                path=f.path,
            )


def _check_across_policies(state: _Inspection) -> None:
    """Step by step, every policy from its first step on must have committed (unless it skipped the round, see
    ``see.catch_up``) and every policy must have seen the same prompt ids (the paper requires it); across the
    exchange, one run id and one schema version."""
    report = state.report
    seen_steps: dict[str, list[int]] = defaultdict(list)
    for step in report.steps:
        for policy in report.cells[step].keys() | state.folders[step]:
            seen_steps[policy].append(step)
    failed = {m.get("policy") for m in report.failures}
    report.policies = sorted(set(seen_steps) | failed)
    # Rounds a policy skipped (see.catch_up) are absent by design, not missing.
    skipped = {policy: [(int(r["step"]), int(r["until"])) for r in read_consumption(state.root, policy, kind="skip")]
               for policy in seen_steps}
    for step in report.steps:
        _check_missing_policies(state, step, seen_steps, skipped)
        _check_prompt_ids(state, step)
    if len(state.run_ids) > 1:
        state.issue("mixed_runs", f"shards of several runs share this folder: {sorted(state.run_ids)}")
    if len(state.schema_versions) > 1:
        state.issue("mixed_schema_versions", f"shards with several schema versions: {sorted(state.schema_versions)}")


def _check_missing_policies(
    state: _Inspection, step: int, seen_steps: dict[str, list[int]], skipped: dict[str, list[tuple[int, int]]]
) -> None:
    """A policy with files at some step but no committed shard at ``step`` (from its first step on, outside the
    rounds it skipped) is ``missing_policy``: still in progress, or the policy stopped."""
    for policy in sorted(seen_steps):
        if any(start <= step < until for start, until in skipped[policy]):
            continue
        if policy not in state.report.cells[step] and step >= min(seen_steps[policy]):
            state.issue(
                "missing_policy",
                f"step {step}: policy {policy!r} has no committed shard (it has files at steps "
                f"{min(seen_steps[policy])}..{max(seen_steps[policy])}); in progress, or the policy stopped",
                step=step,
                policy=policy,
            )


def _check_prompt_ids(state: _Inspection, step: int) -> None:
    """Every policy that has readable shards at ``step`` must have seen the same prompt ids as its peers; each one
    that lacks some is ``prompt_mismatch``."""
    sets = state.prompt_ids.get(step, {})
    if len(sets) < 2:
        return
    union = set().union(*sets.values())
    for policy, ids in sorted(sets.items()):
        if ids != union:
            lacking = sorted(union - ids)
            state.issue(
                "prompt_mismatch",
                f"step {step}: policy {policy!r} lacks {len(lacking)} prompt id(s) that peers have "
                f"(e.g. {lacking[:3]}); every policy must see the same prompts at every step",
                step=step,
                policy=policy,
            )


def _summarise(state: _Inspection) -> None:
    """Reward means per step, per policy and overall (over the scored records that verified), the record and
    byte totals, and the schema versions, run ids and provenance gathered on the walk."""
    report = state.report
    total_sum, total_scored, total_records = 0.0, 0, 0
    per_policy: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for step in report.steps:
        step_sum, step_scored = 0.0, 0
        for policy, cell in report.cells[step].items():
            s, n = state.reward_sum.get((step, policy), 0.0), state.reward_count.get((step, policy), 0)
            step_sum += s
            step_scored += n
            total_records += cell.records
            per_policy[policy][0] += s
            per_policy[policy][1] += n
        report.step_reward_mean[step] = mean_or_none(step_sum, step_scored)
        total_sum += step_sum
        total_scored += step_scored
    report.policy_reward_mean = {p: mean_or_none(s, int(c)) for p, (s, c) in sorted(per_policy.items())}
    report.overall_reward_mean = mean_or_none(total_sum, total_scored)
    report.records = total_records
    report.total_bytes = sum(f.bytes for f in report.files)
    report.schema_versions = sorted(state.schema_versions)
    report.run_ids = sorted(state.run_ids)
    report.provenance = {p: finish_provenance(v) for p, v in sorted(state.provenance.items())}


def _inspect_policy_step(state: _Inspection, step: int, folder: Path) -> None:
    """One policy's folder at one step: list its files, flag data never committed, verify every committed shard like
    a peer would, check its ranks, and record its cell (only when something was committed: a folder without
    manifests counts as missing at this step)."""
    policy = folder.name
    manifests, data_files = _list_policy_files(state, folder)
    _check_uncommitted_data(state, step, policy, manifests, data_files)
    cell = _Cell()
    for _stem, mpath in sorted(manifests.items()):
        _read_shard(state, step, policy, mpath, cell)
    world_size, ranks = _check_ranks(state, step, policy, cell.shards)
    if not manifests:  # nothing committed here: the policy counts as missing at this step
        return
    state.report.cells[step][policy] = PolicyStep(
        policy=policy,
        step=step,
        world_size=world_size,
        ranks=ranks,
        records=cell.records,
        reward_mean=mean_or_none(cell.total_reward, cell.scored),
        bytes=cell.nbytes,
        corrupt_ranks=cell.corrupt,
    )
    state.reward_sum[(step, policy)] = cell.total_reward
    state.reward_count[(step, policy)] = cell.scored
    if cell.any_ok:
        state.prompt_ids[step][policy] = cell.ids


def _list_policy_files(state: _Inspection, folder: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """List every file of a policy folder; returns its manifests and data files by stem (``rank-R-of-W``)."""
    manifests: dict[str, Path] = {}
    data_files: dict[str, Path] = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        p = Path(entry.path)
        if files.MANIFEST_RE.match(entry.name):
            manifests[entry.name[: -len(".manifest.json")]] = p
            state.add_file(p, "manifest")
        elif files.DATA_RE.match(entry.name):
            data_files[entry.name[: -len(".arrow")]] = p
            state.add_file(p, "data")
        else:
            state.add_file(p, _temp_or(entry.name, "other"))
    return manifests, data_files


def _check_uncommitted_data(
    state: _Inspection, step: int, policy: str, manifests: dict[str, Path], data_files: dict[str, Path]
) -> None:
    """A data file without its manifest is ``uncommitted_data``: its writer died between the two commits, and
    readers ignore it."""
    for stem, p in sorted(data_files.items()):
        if stem not in manifests:
            state.issue(
                "uncommitted_data",
                f"data file {state.rel(p)} has no manifest: its writer died between the data and the manifest "
                "commit; readers ignore it",
                path=state.rel(p),
                step=step,
                policy=policy,
            )


def _read_shard(state: _Inspection, step: int, policy: str, mpath: Path, cell: _Cell) -> None:
    """One committed shard: its manifest must parse and agree with its path, and its data must verify (size, and
    checksum unless skipped) as a peer's ``read()`` would; what verifies adds to ``cell``."""
    m = files.MANIFEST_RE.match(mpath.name)
    assert m is not None
    rank, world = int(m.group(1)), int(m.group(2))
    try:
        info = read_manifest(mpath)
    except CorruptShardError as err:
        state.issue("unreadable_manifest", str(err), path=state.rel(mpath), step=step, policy=policy, rank=rank)
        return
    except FileNotFoundError:
        return
    state.schema_versions.add(info.schema_version)
    state.run_ids.add(info.run_id)
    if (info.policy, info.step, info.rank, info.world_size) != (policy, step, rank, world):
        state.issue(
            "manifest_mismatch",
            f"manifest {state.rel(mpath)} describes policy {info.policy!r} step {info.step} rank "
            f"{info.rank}/{info.world_size}, but its path says policy {policy!r} step {step} rank {rank}/{world}",
            path=state.rel(mpath),
            step=step,
            policy=policy,
            rank=rank,
        )
        return
    cell.shards[world][rank] = info
    merge_provenance(state.provenance, policy, info)
    try:
        table = load_shard(info, verify_checksum=state.verify_checksums)
    except CorruptShardError as err:
        state.issue(err.problem, str(err), path=state.rel(info.data_path), step=step, policy=policy, rank=rank)
        cell.corrupt.append(rank)
        return
    cell.any_ok = True
    cell.records += table.num_rows
    cell.nbytes += info.bytes
    rewards = table.column("reward")
    scored = pc.is_finite(rewards)
    cell.scored += int(pc.sum(scored).as_py() or 0)
    cell.total_reward += float(pc.sum(pc.filter(rewards, scored)).as_py() or 0.0)
    cell.ids.update(table.column("prompt_id").to_pylist())
    del table


def _check_ranks(
    state: _Inspection, step: int, policy: str, shards: dict[int, dict[int, ShardInfo]]
) -> tuple[int | None, list[int]]:
    """Every rank of one world size must have committed: shards of several world sizes are ``mixed_world_size``, and
    the world size most shards name (returned with its ranks) must be complete, else ``missing_ranks``."""
    if len(shards) > 1:
        state.issue(
            "mixed_world_size",
            f"step {step}: policy {policy!r} has shards for several world sizes {sorted(shards)}",
            step=step,
            policy=policy,
        )
    world_size = max(shards, key=lambda w: len(shards[w])) if shards else None
    ranks = sorted(shards[world_size]) if world_size is not None else []
    if world_size is not None and len(ranks) != world_size:
        missing = sorted(set(range(world_size)) - set(ranks))
        state.issue(
            "missing_ranks",
            f"step {step}: policy {policy!r} lacks rank(s) {missing} of {world_size}",
            step=step,
            policy=policy,
        )
    return world_size, ranks
