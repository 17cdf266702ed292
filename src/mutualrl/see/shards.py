"""Committed SEE shards: their manifests, finding them, and loading them verified (docs/see.md).

A shard is an Arrow IPC data file plus a JSON manifest, both committed atomically; the
manifest's presence is the commit, and the manifest (:class:`ShardInfo`) is where the shard's
run, policy, step, rank and world size live. Readers find the committed shards of a (step,
policy) with :func:`scan_committed` (a manifest must agree with its path) and load each with
:func:`load_shard`, which verifies size, xxh3_128 checksum, schema and row count against the
manifest (refusing a compressed file before it is read), then the rows themselves, once per file (a v2 shard reads
as v3, its next-byte columns null). Every check of
a peer's file runs here, in this order: size, then the checksum over the bytes (:func:`file_checksum`), then
the IPC footer before anything is inflated (:func:`mutualrl.trust.arrow_ipc.check_uncompressed`: pyarrow would
inflate a compressed body to any size it declares), then the schema, the row count and the rows.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import xxhash

from mutualrl.errors import RunFolderError
from mutualrl.run_folder import read_bytes
from mutualrl.see import files
from mutualrl.see.errors import CorruptShardError, InvalidRecordError, SchemaMismatchError
from mutualrl.see.files import CHECKSUM_ALGORITHM, MANIFEST_RE
from mutualrl.see.records import (
    FILE_METADATA,
    READABLE_SCHEMA_VERSIONS,
    SCHEMA_VERSION,
    SCHEMAS,
    conform_schema,
    validate_table,
)
from mutualrl.trust.arrow_ipc import UnsafeIpcFile, check_uncompressed


@dataclass(frozen=True)
class ShardInfo:
    """A committed shard: its parsed manifest, the one place its run, policy, step, rank and world size live."""

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


def read_manifest(path: Path) -> ShardInfo:
    """Parse a committed manifest; :class:`CorruptShardError` if it is unreadable or incomplete."""
    try:
        data = json.loads(read_bytes(path))
        for key in ("schema_version", "run_id", "policy", "step", "rank", "world_size", "rows", "bytes", "checksum"):
            data[key]  # noqa: B018 - presence check
        for key in ("schema_version", "step", "rank", "world_size", "rows", "bytes"):  # a hand edit or a bug
            if not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] < 0:
                raise TypeError(f"{key} is {data[key]!r}, not a whole number")
        for key in ("run_id", "policy", "checksum"):
            if not isinstance(data[key], str):
                raise TypeError(f"{key} is {data[key]!r}, not text")
        own = path.name.replace(".manifest.json", ".arrow")
        if data.get("data_file", own) != own:  # another rank's, step's or folder's file would be read as this one
            raise ValueError(f"data_file is {data['data_file']!r}, not its own {own!r}")
        return ShardInfo(
            policy=data["policy"], step=data["step"], rank=data["rank"], world_size=data["world_size"],
            data_path=path.with_name(own),
            manifest_path=path, rows=data["rows"], bytes=data["bytes"], checksum=data["checksum"],
            schema_version=data["schema_version"], run_id=data["run_id"],
            published_at=float(data.get("published_at", 0.0)), provenance=dict(data.get("provenance") or {}),
        )
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RecursionError, RunFolderError) as err:
        raise CorruptShardError(
            f"SEE manifest {path} is unreadable ({type(err).__name__}: {err}); the shard cannot be trusted",
            path=path,
            problem="unreadable",
        ) from None


def older_layout_error(path: Path, version: int) -> SchemaMismatchError:
    """The one line for an exchange written by another mutualrl version (a record layout it cannot read)."""
    names = [f"v{v}" for v in READABLE_SCHEMA_VERSIONS]
    reads = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    return SchemaMismatchError(
        f"{path} was written by {'an older' if version < SCHEMA_VERSION else 'a newer'} mutualrl (SEE schema "
        f"v{version}; this one reads {reads}): start a new run (another --output-dir), or resume this one "
        f"with the mutualrl version that wrote it{' (0.3.0 or earlier)' if version == 1 else ''}",
        path=path,
        problem="schema_version",
    )


def scan_committed(root: Path, run_id: str, step: int, policy: str, found: dict[int, dict[int, ShardInfo]],
                   other_runs: set[str], worlds: Iterable[int] = ()) -> None:
    """Add the committed shards of (step, policy) in run ``run_id`` to ``found[world_size][rank]``.

    The folder is listed after each folder on its way was opened (:func:`~mutualrl.see.files.revalidate_folders`),
    and every manifest of a world size in ``worlds`` is also opened by its name: on a shared filesystem a cached
    listing can miss a new shard for up to a minute, an open of a name does not (NFS's close-to-open consistency).

    Shards of other runs (a reused folder) are skipped and their run ids added to ``other_runs``. A manifest of
    this run that describes another policy, step or rank than its path (copied there) is a
    :class:`CorruptShardError`; one of a schema version this one cannot read, a :class:`SchemaMismatchError`.
    """
    folder = files.policy_dir(root, step, policy)
    files.revalidate_folders(root, folder)
    named: dict[tuple[int, int], Path] = {}
    try:
        for entry in os.scandir(folder):
            m = MANIFEST_RE.match(entry.name)
            if m:
                named[int(m.group(1)), int(m.group(2))] = Path(entry.path)
    except FileNotFoundError:
        pass
    for world in worlds:
        for rank in range(world):
            named.setdefault((rank, world), files.manifest_path(root, step, policy, rank, world))
    for (rank, world), path in named.items():
        if rank not in found.get(world, {}):
            add_committed(path, run_id, (policy, step, rank, world), found, other_runs, root)


def add_committed(path: Path, run_id: str, where: tuple[str, int, int, int], found: dict[int, dict[int, ShardInfo]],
                  other_runs: set[str], root: Path) -> None:
    """Add the shard of manifest ``path`` (at ``where``: its path's policy, step, rank, world size) to ``found`` when
    it is committed in run ``run_id`` (see :func:`scan_committed`)."""
    policy, step, rank, world = where
    try:
        info = read_manifest(path)
    except FileNotFoundError:  # not committed yet, or pruned or replaced between listing and reading
        return
    if info.run_id != run_id:
        other_runs.add(info.run_id)
        return
    if info.schema_version not in READABLE_SCHEMA_VERSIONS:
        raise older_layout_error(root, info.schema_version)
    if (info.policy, info.step, info.rank, info.world_size) != where:
        raise CorruptShardError(
            f"SEE manifest {info.manifest_path} describes policy {info.policy!r} step {info.step} rank "
            f"{info.rank}/{info.world_size}, but its path says policy {policy!r} step {step} rank {rank}/{world} "
            "(copied from elsewhere?); the shard cannot be trusted",
            path=info.manifest_path, problem="manifest_mismatch", peer=policy, step=step)
    found.setdefault(world, {})[rank] = info


def complete_shards(found: dict[int, dict[int, ShardInfo]]) -> list[ShardInfo] | None:
    """All ranks of one world size, in rank order, or None while some rank is missing."""
    for world in sorted(found):
        if len(found[world]) == world and set(found[world]) == set(range(world)):
            return [found[world][r] for r in range(world)]
    return None


def load_shard(
    info: ShardInfo, verified: set[tuple[Any, ...]] | None = None, *, verify_checksum: bool = True
) -> pa.Table:
    """Memory-map one shard and verify it against its manifest (size, checksum, schema, rows), then its rows.

    A file whose batches are compressed is refused from its metadata before pyarrow reads it (mutualrl never
    compresses; pyarrow would inflate the body, to any size it declares, first: :func:`check_uncompressed`).

    The rows come from another process (a peer, or a run being inspected), so they are checked once
    (:func:`~mutualrl.see.records.validate_table`; an invalid row is a :class:`CorruptShardError` naming the file,
    the policy, the row and the column). ``verified`` caches the file identities (path, inode, size, mtime,
    checksum) already hashed and checked, so re-reading a shard (e.g. other columns) does neither again.
    ``verify_checksum=False`` skips the hash (only ``mutualrl see inspect --no-checksum`` does that).
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

    if info.schema_version not in READABLE_SCHEMA_VERSIONS:
        raise older_layout_error(path, info.schema_version)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise corrupt("missing", f"the data file named by manifest {info.manifest_path.name} does not exist") from None
    if not stat.S_ISREG(st.st_mode):  # mapping a FIFO would wait for a writer forever; a device has no size
        raise corrupt("unreadable", "not a regular file (a FIFO, a device or a folder)")
    if st.st_size != info.bytes:
        kind = "truncated" if st.st_size < info.bytes else "size"
        raise corrupt(kind, f"{st.st_size} bytes on disk, manifest says {info.bytes}")
    try:
        buffer = pa.memory_map(str(path)).read_buffer()
    except OSError as err:
        raise corrupt("unreadable", f"cannot memory-map it ({err})") from None
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, info.checksum)
    trusted = verified is not None and key in verified
    if verify_checksum and not trusted:
        digest = file_checksum(buffer)
        if digest != info.checksum:
            raise corrupt("checksum", f"{CHECKSUM_ALGORITHM} is {digest}, manifest says {info.checksum}")
    if not trusted:
        try:
            check_uncompressed(buffer)  # before read_all(), which would inflate a compressed body unbounded
        except UnsafeIpcFile as err:
            raise corrupt(err.problem, str(err)) from None
    try:
        table = pa.ipc.open_file(pa.BufferReader(buffer)).read_all()
        if not trusted:
            # the IPC reader checks buffer sizes, not the offsets inside them: one past its data would be read out
            # of bounds (a crash, or another process's memory as text) by the first column access
            table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
        raise corrupt("unreadable", f"not a readable Arrow IPC file ({err})") from None
    version = (table.schema.metadata or {}).get(b"schema_version", b"?").decode(errors="replace")
    if version != str(info.schema_version):
        raise corrupt("schema_version", f"file has schema version {version}, its manifest says {info.schema_version}",
                      SchemaMismatchError)
    if not table.schema.remove_metadata().equals(SCHEMAS[info.schema_version]):
        raise corrupt("schema", f"columns differ from SEE schema v{info.schema_version}: {table.schema.names}",
                      SchemaMismatchError)
    if info.schema_version != SCHEMA_VERSION:  # an older layout this one reads: its new columns added as nulls
        table = conform_schema(table).replace_schema_metadata(FILE_METADATA)
    if table.num_rows != info.rows:
        raise corrupt("rows", f"{table.num_rows} rows in the file, manifest says {info.rows}")
    if not trusted:
        try:
            validate_table(table)
        except InvalidRecordError as err:
            raise corrupt("invalid_record", str(err)) from None
        if verified is not None and verify_checksum:
            verified.add(key)
    return table


def file_checksum(buffer: Any) -> str:
    """xxh3_128 hex digest of a bytes-like object (e.g. a memory-mapped file)."""
    return xxhash.xxh3_128(buffer).hexdigest()
