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

import json
import os
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from mutualrl.errors import UsageError
from mutualrl.run_folder import read_json_or
from mutualrl.see import files
from mutualrl.see.consumed import read_consumption
from mutualrl.see.errors import CorruptShardError
from mutualrl.see.shards import ShardInfo, load_shard, read_manifest, shard_info_from_manifest


@dataclass
class Issue:
    """One inconsistency. ``kind`` is a stable identifier (e.g. ``checksum``, ``stray_temp``)."""

    kind: str
    message: str
    path: str | None = None
    step: int | None = None
    policy: str | None = None
    rank: int | None = None


@dataclass
class FileEntry:
    path: str  # relative to the exchange root
    bytes: int
    kind: str  # data | manifest | temp | failure | heartbeat | other


@dataclass
class PolicyStep:
    """What one policy committed at one step."""

    policy: str
    step: int
    world_size: int | None
    ranks: list[int]
    records: int  # rows of the shards that verified
    reward_mean: float | None
    bytes: int
    corrupt_ranks: list[int] = field(default_factory=list)


@dataclass
class InspectReport:
    root: str
    steps: list[int] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    cells: dict[int, dict[str, PolicyStep]] = field(default_factory=dict)
    step_reward_mean: dict[int, float | None] = field(default_factory=dict)
    policy_reward_mean: dict[str, float | None] = field(default_factory=dict)
    overall_reward_mean: float | None = None
    records: int = 0
    files: list[FileEntry] = field(default_factory=list)
    total_bytes: int = 0
    schema_versions: list[int] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    checksums_verified: bool = True

    @property
    def ok(self) -> bool:
        return not self.issues

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["cells"] = {str(s): {p: asdict(c) for p, c in row.items()} for s, row in self.cells.items()}
        out["step_reward_mean"] = {str(s): v for s, v in self.step_reward_mean.items()}
        return out


def resolve_see_root(path: Path | str) -> Path:
    """``path/see`` for a run folder, or ``path`` itself when it is an exchange folder."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist")
    root = files.find_see_root(path)
    if root is None:
        raise UsageError(f"no Shared Experience Exchange in {path}: expected {path / 'see'} or step-NNNNNN folders")
    return root


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


def inspect_exchange(path: Path | str, *, verify_checksums: bool = True) -> InspectReport:
    """Inspect the exchange under ``path`` (a run folder or its ``see/`` folder)."""
    root = resolve_see_root(path)
    report = InspectReport(root=str(root), checksums_verified=verify_checksums)

    def add_file(p: Path, kind: str) -> int:
        try:
            size = p.stat().st_size
        except OSError:
            size = 0
        report.files.append(FileEntry(str(p.relative_to(root)), size, kind))
        return size

    def issue(kind: str, message: str, **where: Any) -> None:
        report.issues.append(Issue(kind, message, **where))

    # per step -> policy -> (committed shards, reward sum, prompt ids)
    reward_sum: dict[tuple[int, str], float] = defaultdict(float)
    prompt_ids: dict[int, dict[str, set[str]]] = defaultdict(dict)
    schema_versions: set[int] = set()
    run_ids: set[str] = set()
    provenance: dict[str, dict[str, Any]] = {}
    folders: dict[int, set[str]] = defaultdict(set)  # policy folders per step, committed or not

    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        m = files.STEP_DIR_RE.match(entry.name)
        if m and entry.is_dir():
            step = int(m.group(1))
            report.steps.append(step)
            report.cells[step] = {}
            for pentry in sorted(os.scandir(entry.path), key=lambda e: e.name):
                if not pentry.is_dir():
                    add_file(Path(pentry.path), "temp" if files.TEMP_RE.match(pentry.name) else "other")
                    continue
                folders[step].add(pentry.name)
                _inspect_policy_step(
                    root, step, Path(pentry.path), report, add_file, issue, reward_sum, prompt_ids,
                    schema_versions, run_ids, provenance, verify_checksums,
                )
        elif entry.name == files.FAILED_DIR and entry.is_dir():
            for fentry in sorted(os.scandir(entry.path), key=lambda e: e.name):
                add_file(Path(fentry.path), "temp" if files.TEMP_RE.match(fentry.name) else "failure")
                if files.TEMP_RE.match(fentry.name) or not fentry.name.endswith(".json"):
                    continue
                marker = read_json_or(Path(fentry.path), None)  # damaged, another type, a FIFO: said so
                if marker is None:
                    marker = {"policy": fentry.name[: -len(".json")], "reason": "unreadable failure marker"}
                marker.setdefault("policy", fentry.name[: -len(".json")])
                report.failures.append(marker)
                issue(
                    "failure_marker",
                    f"policy {marker['policy']!r} was marked failed"
                    + (f" at step {marker['step']}" if marker.get("step") is not None else "")
                    + (f" (run {marker['run_id']!r})" if marker.get("run_id") else "")
                    + f": {marker.get('reason', 'no reason recorded')}",
                    path=str(Path(fentry.path).relative_to(root)),
                    policy=marker["policy"],
                    step=marker.get("step"),
                )
        elif entry.name == files.HEARTBEAT_DIR and entry.is_dir():
            for hentry in sorted(os.scandir(entry.path), key=lambda e: e.name):
                add_file(Path(hentry.path), "temp" if files.TEMP_RE.match(hentry.name) else "heartbeat")
        elif entry.is_file():
            add_file(Path(entry.path), "temp" if files.TEMP_RE.match(entry.name) else "other")

    for f in report.files:
        if f.kind == "temp":
            t = files.TEMP_RE.match(Path(f.path).name)
            who = f" by pid {t.group('pid')} on {t.group('host')}" if t else ""
            issue(
                "stray_temp",
                f"stray temporary file {f.path} ({f.bytes} bytes) left{who}: a writer was killed before its "
                "commit; readers ignore it, delete it once no writer runs",
                path=f.path,
            )

    # Cross-policy consistency.
    seen_steps: dict[str, list[int]] = defaultdict(list)
    for step in report.steps:
        for policy in report.cells[step].keys() | folders[step]:
            seen_steps[policy].append(step)
    failed = {m.get("policy") for m in report.failures}
    report.policies = sorted(set(seen_steps) | failed)
    # Rounds a policy skipped (see.catch_up) are absent by design, not missing.
    skipped = {policy: [(int(r["step"]), int(r["until"])) for r in read_consumption(root, policy, kind="skip")]
               for policy in seen_steps}
    for step in report.steps:
        for policy in sorted(seen_steps):
            if any(start <= step < until for start, until in skipped[policy]):
                continue
            if policy not in report.cells[step] and step >= min(seen_steps[policy]):
                issue(
                    "missing_policy",
                    f"step {step}: policy {policy!r} has no committed shard (it has files at steps "
                    f"{min(seen_steps[policy])}..{max(seen_steps[policy])}); in progress, or the policy stopped",
                    step=step,
                    policy=policy,
                )
        sets = prompt_ids.get(step, {})
        if len(sets) >= 2:
            union = set().union(*sets.values())
            for policy, ids in sorted(sets.items()):
                if ids != union:
                    lacking = sorted(union - ids)
                    issue(
                        "prompt_mismatch",
                        f"step {step}: policy {policy!r} lacks {len(lacking)} prompt id(s) that peers have "
                        f"(e.g. {lacking[:3]}); every policy must see the same prompts at every step",
                        step=step,
                        policy=policy,
                    )
    if len(run_ids) > 1:
        issue("mixed_runs", f"shards of several runs share this folder: {sorted(run_ids)}")
    if len(schema_versions) > 1:
        issue("mixed_schema_versions", f"shards with several schema versions: {sorted(schema_versions)}")

    # Summaries.
    total_sum, total_count = 0.0, 0
    per_policy: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for step in report.steps:
        step_sum, step_count = 0.0, 0
        for policy, cell in report.cells[step].items():
            s = reward_sum.get((step, policy), 0.0)
            step_sum += s
            step_count += cell.records
            per_policy[policy][0] += s
            per_policy[policy][1] += cell.records
        report.step_reward_mean[step] = _mean(step_sum, step_count)
        total_sum += step_sum
        total_count += step_count
    report.policy_reward_mean = {p: _mean(s, int(c)) for p, (s, c) in sorted(per_policy.items())}
    report.overall_reward_mean = _mean(total_sum, total_count)
    report.records = total_count
    report.total_bytes = sum(f.bytes for f in report.files)
    report.schema_versions = sorted(schema_versions)
    report.run_ids = sorted(run_ids)
    report.provenance = {p: _finish_provenance(v) for p, v in sorted(provenance.items())}
    return report


def _inspect_policy_step(
    root: Path,
    step: int,
    folder: Path,
    report: InspectReport,
    add_file: Any,
    issue: Any,
    reward_sum: dict[tuple[int, str], float],
    prompt_ids: dict[int, dict[str, set[str]]],
    schema_versions: set[int],
    run_ids: set[str],
    provenance: dict[str, dict[str, Any]],
    verify_checksums: bool,
) -> None:
    policy = folder.name
    rel = lambda p: str(p.relative_to(root))  # noqa: E731
    manifests: dict[str, Path] = {}
    data_files: dict[str, Path] = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        p = Path(entry.path)
        if files.MANIFEST_RE.match(entry.name):
            manifests[entry.name[: -len(".manifest.json")]] = p
            add_file(p, "manifest")
        elif files.DATA_RE.match(entry.name):
            data_files[entry.name[: -len(".arrow")]] = p
            add_file(p, "data")
        else:
            add_file(p, "temp" if files.TEMP_RE.match(entry.name) else "other")

    for stem, p in sorted(data_files.items()):
        if stem not in manifests:
            issue(
                "uncommitted_data",
                f"data file {rel(p)} has no manifest: its writer died between the data and the manifest "
                "commit; readers ignore it",
                path=rel(p),
                step=step,
                policy=policy,
            )

    shards: dict[int, dict[int, ShardInfo]] = defaultdict(dict)
    records, total_reward, nbytes = 0, 0.0, 0
    ids: set[str] = set()
    any_ok = False
    corrupt: list[int] = []
    for stem, mpath in sorted(manifests.items()):
        m = files.MANIFEST_RE.match(mpath.name)
        assert m is not None
        rank, world = int(m.group(1)), int(m.group(2))
        try:
            info = shard_info_from_manifest(mpath, read_manifest(mpath))
        except CorruptShardError as err:
            issue("unreadable_manifest", str(err), path=rel(mpath), step=step, policy=policy, rank=rank)
            continue
        except FileNotFoundError:
            continue
        schema_versions.add(info.schema_version)
        run_ids.add(info.run_id)
        if (info.policy, info.step, info.rank, info.world_size) != (policy, step, rank, world):
            issue(
                "manifest_mismatch",
                f"manifest {rel(mpath)} describes policy {info.policy!r} step {info.step} rank "
                f"{info.rank}/{info.world_size}, but its path says policy {policy!r} step {step} rank {rank}/{world}",
                path=rel(mpath),
                step=step,
                policy=policy,
                rank=rank,
            )
            continue
        shards[world][rank] = info
        _merge_provenance(provenance, policy, info)
        try:
            table = load_shard(info, verify_checksum=verify_checksums)
        except CorruptShardError as err:
            issue(err.problem, str(err), path=rel(info.data_path), step=step, policy=policy, rank=rank)
            corrupt.append(rank)
            continue
        any_ok = True
        records += table.num_rows
        nbytes += info.bytes
        total_reward += float(pc.sum(table.column("reward")).as_py() or 0.0)
        ids.update(table.column("prompt_id").to_pylist())
        del table

    if len(shards) > 1:
        issue(
            "mixed_world_size",
            f"step {step}: policy {policy!r} has shards for several world sizes {sorted(shards)}",
            step=step,
            policy=policy,
        )
    world_size = max(shards, key=lambda w: len(shards[w])) if shards else None
    ranks = sorted(shards[world_size]) if world_size is not None else []
    if world_size is not None and len(ranks) != world_size:
        missing = sorted(set(range(world_size)) - set(ranks))
        issue(
            "missing_ranks",
            f"step {step}: policy {policy!r} lacks rank(s) {missing} of {world_size}",
            step=step,
            policy=policy,
        )
    if not manifests:  # nothing committed here: the policy counts as missing at this step
        return
    report.cells[step][policy] = PolicyStep(
        policy=policy,
        step=step,
        world_size=world_size,
        ranks=ranks,
        records=records,
        reward_mean=_mean(total_reward, records),
        bytes=nbytes,
        corrupt_ranks=corrupt,
    )
    reward_sum[(step, policy)] = total_reward
    if any_ok:
        prompt_ids[step][policy] = ids


def _merge_provenance(provenance: dict[str, dict[str, Any]], policy: str, info: ShardInfo) -> None:
    entry = provenance.setdefault(
        policy, {"models": set(), "tokenizers": set(), "hostnames": set(), "versions": set(), "first": None, "last": None}
    )
    prov = info.provenance or {}
    entry["models"].add(prov.get("model"))
    entry["tokenizers"].add(prov.get("tokenizer"))
    entry["hostnames"].add(prov.get("hostname"))
    entry["versions"].add(json.dumps(prov.get("versions") or {}, sort_keys=True))
    t = info.published_at
    entry["first"] = t if entry["first"] is None else min(entry["first"], t)
    entry["last"] = t if entry["last"] is None else max(entry["last"], t)


def _finish_provenance(entry: dict[str, Any]) -> dict[str, Any]:
    def clean(values: set[Any]) -> list[Any]:
        return sorted(v for v in values if v is not None)

    return {
        "models": clean(entry["models"]),
        "tokenizers": clean(entry["tokenizers"]),
        "hostnames": clean(entry["hostnames"]),
        "versions": [json.loads(v) for v in sorted(entry["versions"])],
        "first_published_at": entry["first"],
        "last_published_at": entry["last"],
    }
