"""Committed SEE shards: their manifests, finding them, and loading them verified (docs/see.md).

A shard is an Arrow IPC data file plus a JSON manifest, both committed atomically; the
manifest's presence is the commit. Readers find the committed shards of a (step, policy)
with :func:`scan_committed` and load each with :func:`load_shard`, which verifies size,
xxh3_128 checksum, schema and metadata against the manifest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from mutualrl.errors import RunFolderError
from mutualrl.run_folder import read_bytes
from mutualrl.see import files
from mutualrl.see.errors import CorruptShardError, SchemaMismatchError
from mutualrl.see.files import CHECKSUM_ALGORITHM, MANIFEST_RE
from mutualrl.see.columns import ROLLOUT_SCHEMA, SCHEMA_VERSION
from mutualrl.see.schema import ShardMetadata


@dataclass(frozen=True)
class ShardInfo:
    """A committed shard, as described by its manifest."""

    policy: str
    step: int
    rank: int
    world_size: int
    data_path: Path
    manifest_path: Path
    rows: int
    bytes: int
    checksum: str
    schema_version: int
    run_id: str
    published_at: float
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)


def read_manifest(path: Path) -> dict[str, Any]:
    """Parse a committed manifest; :class:`CorruptShardError` if it is unreadable or incomplete."""
    try:
        data = json.loads(read_bytes(path))
        for key in ("schema_version", "run_id", "policy", "step", "rank", "world_size", "rows", "bytes", "checksum"):
            data[key]  # noqa: B018 - presence check
        for key in ("step", "rank", "world_size", "rows", "bytes"):  # a hand edit or a bug: never a traceback later
            if not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] < 0:
                raise TypeError(f"{key} is {data[key]!r}, not a whole number")
        for key in ("run_id", "policy", "checksum"):
            if not isinstance(data[key], str):
                raise TypeError(f"{key} is {data[key]!r}, not text")
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RecursionError, RunFolderError) as err:
        raise CorruptShardError(
            f"SEE manifest {path} is unreadable ({type(err).__name__}: {err}); the shard cannot be trusted",
            path=path,
            problem="unreadable",
        ) from None
    return data


def shard_info_from_manifest(path: Path, manifest: dict[str, Any]) -> ShardInfo:
    return ShardInfo(
        policy=manifest["policy"],
        step=int(manifest["step"]),
        rank=int(manifest["rank"]),
        world_size=int(manifest["world_size"]),
        data_path=path.with_name(manifest.get("data_file") or path.name.replace(".manifest.json", ".arrow")),
        manifest_path=path,
        rows=int(manifest["rows"]),
        bytes=int(manifest["bytes"]),
        checksum=str(manifest["checksum"]),
        schema_version=int(manifest["schema_version"]),
        run_id=str(manifest["run_id"]),
        published_at=float(manifest.get("published_at", 0.0)),
        provenance=manifest.get("provenance") or {},
    )


def scan_committed(root: Path, run_id: str, step: int, policy: str, found: dict[int, dict[int, ShardInfo]],
                   other_runs: set[str]) -> None:
    """Add the committed shards of (step, policy) in run ``run_id`` to ``found[world_size][rank]``.

    Shards of other runs (a reused folder) are skipped and their run ids added to ``other_runs``.
    """
    folder = files.policy_dir(root, step, policy)
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return
    for entry in entries:
        m = MANIFEST_RE.match(entry.name)
        if not m:
            continue
        rank, world = int(m.group(1)), int(m.group(2))
        if rank in found.get(world, {}):
            continue
        try:
            manifest = read_manifest(Path(entry.path))
        except FileNotFoundError:  # pruned or replaced between listing and reading
            continue
        if manifest["run_id"] != run_id:
            other_runs.add(str(manifest["run_id"]))
            continue
        found.setdefault(world, {})[rank] = shard_info_from_manifest(Path(entry.path), manifest)


def complete_shards(found: dict[int, dict[int, ShardInfo]]) -> list[ShardInfo] | None:
    """All ranks of one world size, in rank order, or None while some rank is missing."""
    for world in sorted(found):
        if len(found[world]) == world and set(found[world]) == set(range(world)):
            return [found[world][r] for r in range(world)]
    return None


def load_shard(
    info: ShardInfo, verified: set[tuple[Any, ...]] | None = None, *, verify_checksum: bool = True
) -> pa.Table:
    """Memory-map one shard and verify it against its manifest (size, checksum, schema, metadata, rows).

    ``verified`` caches (file identity, checksum) of shards already hashed, so re-reading a
    shard (e.g. other columns) does not hash it again. ``verify_checksum=False`` skips the
    hash (only ``mutualrl see inspect --no-checksum`` does that).
    """
    path = info.data_path

    def corrupt(problem: str, detail: str, cls: type[CorruptShardError] = CorruptShardError) -> CorruptShardError:
        return cls(
            f"SEE shard {path} (policy {info.policy!r}, step {info.step}, rank {info.rank}) is corrupt: {detail}",
            path=path,
            problem=problem,
            peer=info.policy,
            step=info.step,
        )

    if info.schema_version != SCHEMA_VERSION:
        raise corrupt(
            "schema_version",
            f"manifest says schema version {info.schema_version}, this mutualrl reads version {SCHEMA_VERSION}",
            SchemaMismatchError,
        )
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise corrupt("missing", f"the data file named by manifest {info.manifest_path.name} does not exist") from None
    if st.st_size != info.bytes:
        kind = "truncated" if st.st_size < info.bytes else "size"
        raise corrupt(kind, f"{st.st_size} bytes on disk, manifest says {info.bytes}")
    try:
        mapped = pa.memory_map(str(path))
        buffer = mapped.read_buffer()
    except OSError as err:
        raise corrupt("unreadable", f"cannot memory-map it ({err})") from None
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, info.checksum)
    if verify_checksum and (verified is None or key not in verified):
        digest = files.file_checksum(buffer)
        if digest != info.checksum:
            raise corrupt("checksum", f"{CHECKSUM_ALGORITHM} is {digest}, manifest says {info.checksum}")
        if verified is not None:
            verified.add(key)
    try:
        reader = pa.ipc.open_file(pa.BufferReader(buffer))
        table = reader.read_all()
        # the IPC reader checks buffer sizes, not the offsets inside them: one past its data would be read out of
        # bounds (a crash, or another process's memory as text) by the first column access
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
        raise corrupt("unreadable", f"not a readable Arrow IPC file ({err})") from None
    try:
        meta = ShardMetadata.from_arrow(table.schema.metadata)
    except (KeyError, ValueError) as err:
        raise corrupt("metadata", f"missing or malformed file metadata ({type(err).__name__}: {err})") from None
    if meta.schema_version != SCHEMA_VERSION:
        raise corrupt(
            "schema_version",
            f"file has schema version {meta.schema_version}, this mutualrl reads version {SCHEMA_VERSION}",
            SchemaMismatchError,
        )
    if not table.schema.remove_metadata().equals(ROLLOUT_SCHEMA.remove_metadata()):
        raise corrupt("schema", f"columns differ from SEE schema v{SCHEMA_VERSION}: {table.schema.names}", SchemaMismatchError)
    expected = (info.run_id, info.policy, info.step, info.rank, info.world_size)
    actual = (meta.run_id, meta.policy, meta.step, meta.rank, meta.world_size)
    if actual != expected:
        raise corrupt("metadata", f"file metadata (run, policy, step, rank, world) = {actual}, manifest says {expected}")
    if table.num_rows != info.rows:
        raise corrupt("rows", f"{table.num_rows} rows in the file, manifest says {info.rows}")
    return table
