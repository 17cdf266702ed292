"""The Shared Experience Exchange client: publish, barrier, read (paper Sec. "The Mutual RL System Design").

Each policy process (each rank of a policy's process group) owns one
:class:`ExperienceExchange`. At every generation step it

1. :meth:`~ExperienceExchange.publish`-es its rollout records as one shard (Arrow IPC
   file + JSON manifest, both committed atomically),
2. waits at the per-step barrier (:meth:`~ExperienceExchange.wait_for`) until every
   subscribed policy has committed all of its ranks' shards for that step, and
3. :meth:`~ExperienceExchange.read`-s the peer fields its regime subscribes to (PRP: texts
   and behaviour traces; XGRPO: rewards only; SGT: verified successes), verifying each
   shard's size and xxh3_128 checksum against its manifest.

The exchange is plain files, polled (no inotify), so it behaves the same on one local
disk and on a shared filesystem across nodes. See ``docs/see.md``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from mutualrl.errors import UsageError
from mutualrl.see import files
from mutualrl.see.errors import (
    CorruptShardError,
    PeerFailedError,
    PeerTimeoutError,
    SchemaMismatchError,
    ShardMissingError,
)
from mutualrl.see.files import CHECKSUM_ALGORITHM, MANIFEST_RE
from mutualrl.see.provenance import refresh_provenance
from mutualrl.see.schema import COLUMNS, ROLLOUT_SCHEMA, SCHEMA_VERSION, RolloutBatch, ShardMetadata

_COMPRESSIONS = (None, "lz4", "zstd")


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
        data = json.loads(path.read_bytes())
        for key in ("schema_version", "run_id", "policy", "step", "rank", "world_size", "rows", "bytes", "checksum"):
            data[key]  # noqa: B018 - presence check
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as err:
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


def read_failure(root: Path | str, policy: str) -> dict[str, Any] | None:
    """The failure marker of ``policy`` (``None`` if there is none). An unreadable marker still counts as a failure."""
    path = files.failure_path(Path(root), policy)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        marker = json.loads(raw)
        if not isinstance(marker, dict):
            raise ValueError("not an object")
    except ValueError:
        marker = {"policy": policy, "reason": f"unreadable failure marker {path}"}
    return marker


def mark_failed(
    root: Path | str,
    policy: str,
    reason: str,
    *,
    run_id: str | None = None,
    rank: int | None = None,
    step: int | None = None,
) -> Path:
    """Leave a failure marker for ``policy`` so its peers stop waiting at the barrier at once.

    Called by a policy process that hits a fatal error, and by the launcher when it sees a
    policy process die. The first marker of a run wins (it usually holds the root cause, e.g.
    the process's own exception rather than the launcher's "exited with code 1"); a marker
    left by another ``run_id`` is replaced.
    """
    root = Path(root)
    files.check_policy_name(policy)
    final = files.failure_path(root, policy)
    final.parent.mkdir(parents=True, exist_ok=True)
    existing = read_failure(root, policy)
    if existing is not None and (run_id is None or existing.get("run_id") in (None, run_id)):
        return final
    marker = {
        "policy": policy,
        "reason": reason,
        "run_id": run_id,
        "rank": rank,
        "step": step,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
    }
    files.write_bytes_atomic(final, json.dumps(marker, indent=1).encode())
    return final


def clear_failure(root: Path | str, policy: str) -> bool:
    """Remove ``policy``'s failure marker (the launcher does this before a fresh attempt). True if one existed."""
    try:
        files.failure_path(Path(root), policy).unlink()
        return True
    except FileNotFoundError:
        return False


def heartbeat_ages(root: Path, policy: str, now: float | None = None) -> dict[int, tuple[float, dict[str, Any]]]:
    """Per rank of ``policy``: (seconds since its last heartbeat, last heartbeat content)."""
    now = time.time() if now is None else now
    out: dict[int, tuple[float, dict[str, Any]]] = {}
    folder = root / files.HEARTBEAT_DIR
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return out
    for entry in entries:
        m = files.HEARTBEAT_RE.match(entry.name)
        if not m or m.group("policy") != policy:
            continue
        try:
            st = entry.stat()
            content = json.loads(Path(entry.path).read_bytes())
        except (OSError, ValueError):
            continue
        out[int(m.group("rank"))] = (now - st.st_mtime, content if isinstance(content, dict) else {})
    return out


class ExperienceExchange:
    """One rank's client of the file-backed Shared Experience Exchange.

    Args:
        root: exchange folder (``<run_dir>/see`` by default); may be on a shared filesystem.
        run_id: identifies this launch; shards and failure markers of other run ids are ignored,
            so a reused folder never feeds stale records into a new run. Use a fresh id per launch.
        policy: this process's policy name.
        rank, world_size: this process's rank in its policy's process group, and the group size.
        policies: every policy name of the run (self is added if missing); the default
            barrier waits for all of them.
        barrier_timeout_s: how long :meth:`wait_for` waits before :class:`PeerTimeoutError`.
        poll_interval_s: cap of the barrier's polling backoff (starts at 1 ms, doubles).
        retention_steps: :meth:`prune` keeps this rank's shards of the last N steps (None: all).
        provenance: fields recorded with every shard (e.g. ``{"model": ..., "tokenizer": ...}``);
            versions, host, pid and time are added at each publish.
        compression: Arrow IPC buffer compression (None, "lz4", "zstd"); None is fastest on local disks.
        durable: fsync files and folders on commit (keep True on shared filesystems).
    """

    def __init__(
        self,
        root: Path | str,
        run_id: str,
        policy: str,
        rank: int = 0,
        world_size: int = 1,
        policies: Sequence[str] = (),
        barrier_timeout_s: float = 1800.0,
        poll_interval_s: float = 0.02,
        retention_steps: int | None = 16,
        provenance: dict[str, Any] | None = None,
        compression: str | None = None,
        durable: bool = True,
    ):
        self.root = Path(root)
        self.run_id = str(run_id)
        if not self.run_id:
            raise UsageError("SEE run_id must not be empty")
        self.policy = files.check_policy_name(policy)
        if world_size < 1 or not 0 <= rank < world_size:
            raise UsageError(f"SEE rank {rank} is not in [0, world_size={world_size})")
        self.rank, self.world_size = int(rank), int(world_size)
        names = list(dict.fromkeys([*policies, policy]))
        for name in names:
            files.check_policy_name(name)
        self.policies: tuple[str, ...] = tuple(names)
        if barrier_timeout_s <= 0 or poll_interval_s <= 0:
            raise UsageError("SEE barrier_timeout_s and poll_interval_s must be positive")
        self.barrier_timeout_s = float(barrier_timeout_s)
        self.poll_interval_s = float(poll_interval_s)
        if retention_steps is not None and retention_steps < 1:
            # Peers may still be reading the previous step while we prune; keep at least it.
            raise UsageError(f"SEE retention_steps must be >= 1 or None (keep all), got {retention_steps}")
        self.retention_steps = retention_steps
        if compression not in _COMPRESSIONS:
            raise UsageError(f"SEE compression must be one of {_COMPRESSIONS}, got {compression!r}")
        self.compression = compression
        self.durable = durable
        self.provenance = dict(provenance or {})
        self._verified: set[tuple[Any, ...]] = set()
        self._last_heartbeat = 0.0
        for sub in (files.FAILED_DIR, files.HEARTBEAT_DIR):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_settings(
        cls,
        settings: Any,
        output_dir: Path | str,
        *,
        run_id: str,
        policy: str,
        rank: int = 0,
        world_size: int = 1,
        policies: Sequence[str] = (),
        provenance: dict[str, Any] | None = None,
    ) -> ExperienceExchange:
        """Build from a recipe's :class:`mutualrl.config.SEESettings` (``dir`` defaults to ``<output_dir>/see``)."""
        root = Path(settings.dir) if settings.dir else Path(output_dir) / "see"
        return cls(
            root,
            run_id,
            policy,
            rank=rank,
            world_size=world_size,
            policies=policies,
            barrier_timeout_s=settings.barrier_timeout_s,
            poll_interval_s=settings.poll_interval_s,
            retention_steps=settings.retention_steps,
            provenance=provenance,
        )

    @property
    def peers(self) -> tuple[str, ...]:
        """The other policies of the run."""
        return tuple(p for p in self.policies if p != self.policy)

    def __repr__(self) -> str:
        return (
            f"ExperienceExchange(root={str(self.root)!r}, run_id={self.run_id!r}, policy={self.policy!r}, "
            f"rank={self.rank}/{self.world_size}, policies={self.policies})"
        )

    # ------------------------------------------------------------------------------------
    # publish
    # ------------------------------------------------------------------------------------

    def publish(self, step: int, records: RolloutBatch | pa.Table) -> Path:
        """Commit this rank's records for ``step``; returns the data file's path.

        The data file is written under a temporary name, fsynced, renamed into place and its
        folder fsynced; then the manifest (rows, bytes, xxh3_128 of the file computed while
        writing, provenance) is committed the same way. The manifest is the commit marker.
        Publishing a step twice replaces the shard (readers of that step may then see a
        checksum mismatch: publish each step once per run).
        """
        step = int(step)
        if step < 0:
            raise UsageError(f"SEE step must be >= 0, got {step}")
        if isinstance(records, pa.Table):
            batch = RolloutBatch.from_table(records)
        elif isinstance(records, RolloutBatch):
            batch = records
        else:
            raise UsageError(f"publish() takes a RolloutBatch or a pyarrow.Table, got {type(records).__name__}")
        batch = batch.stamped(step, self.policy, self.rank)
        provenance = refresh_provenance(self.provenance)
        metadata = ShardMetadata(
            SCHEMA_VERSION, self.run_id, self.policy, step, self.rank, self.world_size, provenance
        )
        table = batch.to_table(metadata)

        folder = files.policy_dir(self.root, step, self.policy)
        folder.mkdir(parents=True, exist_ok=True)
        data_final = files.data_path(self.root, step, self.policy, self.rank, self.world_size)
        options = pa.ipc.IpcWriteOptions(compression=self.compression)

        def write_ipc(sink: files.HashingSink) -> None:
            with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), table.schema, options=options) as writer:
                writer.write_table(table)

        nbytes, checksum = files.write_atomic(data_final, write_ipc, durable=self.durable)
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "policy": self.policy,
            "step": step,
            "rank": self.rank,
            "world_size": self.world_size,
            "rows": table.num_rows,
            "bytes": nbytes,
            "checksum": checksum,
            "checksum_algorithm": CHECKSUM_ALGORITHM,
            "data_file": data_final.name,
            "compression": self.compression,
            "published_at": time.time(),
            "provenance": provenance,
        }
        manifest_final = files.manifest_path(self.root, step, self.policy, self.rank, self.world_size)
        files.write_bytes_atomic(manifest_final, json.dumps(manifest, indent=1).encode(), durable=self.durable)
        self.heartbeat(step=step)
        return data_final

    # ------------------------------------------------------------------------------------
    # barrier
    # ------------------------------------------------------------------------------------

    def _scan(self, step: int, policy: str, found: dict[int, dict[int, ShardInfo]], other_runs: set[str]) -> None:
        """Add the committed shards of (step, policy) in this run to ``found[world_size][rank]``."""
        folder = files.policy_dir(self.root, step, policy)
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
            if manifest["run_id"] != self.run_id:
                other_runs.add(str(manifest["run_id"]))
                continue
            info = shard_info_from_manifest(Path(entry.path), manifest)
            found.setdefault(world, {})[rank] = info

    @staticmethod
    def _complete(found: dict[int, dict[int, ShardInfo]]) -> list[ShardInfo] | None:
        for world in sorted(found):
            if len(found[world]) == world and set(found[world]) == set(range(world)):
                return [found[world][r] for r in range(world)]
        return None

    def _check_failed(self, policy: str, step: int) -> None:
        marker = read_failure(self.root, policy)
        if marker is None:
            return
        marker_run = marker.get("run_id")
        if marker_run is not None and marker_run != self.run_id:
            return  # left by an earlier launch in a reused folder
        reason = str(marker.get("reason", "no reason recorded"))
        where = ""
        if marker.get("rank") is not None:
            where += f" rank {marker['rank']}"
        if marker.get("hostname"):
            where += f" on {marker['hostname']}"
        raise PeerFailedError(
            f"SEE: policy {policy!r}{where} failed (marker {files.failure_path(self.root, policy)}); "
            f"policy {self.policy!r} rank {self.rank} stops waiting for step {step}. Reason: {reason}",
            peer=policy,
            step=step,
            path=files.failure_path(self.root, policy),
            reason=reason,
        )

    def wait_for(self, step: int, policies: Iterable[str] | None = None) -> dict[str, list[ShardInfo]]:
        """Per-step barrier: block until every listed policy (default: all, self included) has
        committed all ``world_size`` shards of ``step``; return their shards in rank order.

        Raises :class:`PeerFailedError` at once when a pending policy has a failure marker, and
        :class:`PeerTimeoutError` after ``barrier_timeout_s`` naming each missing policy and
        rank, the step, the time waited and each peer's heartbeat age. Returns after one scan
        (no sleep) when everything is already there; otherwise polls with a backoff from 1 ms
        up to ``poll_interval_s``.
        """
        step = int(step)
        targets = list(dict.fromkeys(self.policies if policies is None else policies))
        for name in targets:
            files.check_policy_name(name)
        start = time.monotonic()
        deadline = start + self.barrier_timeout_s
        found: dict[str, dict[int, dict[int, ShardInfo]]] = {p: {} for p in targets}
        other_runs: dict[str, set[str]] = {p: set() for p in targets}
        done: dict[str, list[ShardInfo]] = {}
        delay = 0.001
        while True:
            for policy in targets:
                if policy in done:
                    continue
                self._scan(step, policy, found[policy], other_runs[policy])
                complete = self._complete(found[policy])
                if complete is not None:
                    done[policy] = complete
            pending = [p for p in targets if p not in done]
            if not pending:
                return {p: done[p] for p in targets}
            for policy in pending:
                self._check_failed(policy, step)
            now = time.monotonic()
            if now >= deadline:
                raise self._timeout_error(step, pending, found, other_runs, now - start)
            if time.time() - self._last_heartbeat > 1.0:  # waiting at the barrier is being alive
                self.heartbeat()
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, self.poll_interval_s)

    def _timeout_error(
        self,
        step: int,
        pending: list[str],
        found: dict[str, dict[int, dict[int, ShardInfo]]],
        other_runs: dict[str, set[str]],
        waited: float,
    ) -> PeerTimeoutError:
        missing: dict[str, list[int] | None] = {}
        ages: dict[str, float | None] = {}
        parts = []
        for policy in pending:
            beats = heartbeat_ages(self.root, policy)
            by_world = found[policy]
            if by_world:
                world = max(by_world, key=lambda w: len(by_world[w]))
                lost = sorted(set(range(world)) - set(by_world[world]))
                missing[policy] = lost
                what = f"ranks {lost} of {world} not committed"
                relevant = [beats[r] for r in lost if r in beats]
            else:
                missing[policy] = None
                what = "no shard committed"
                relevant = list(beats.values())
            if relevant:
                age, content = min(relevant, key=lambda b: b[0])
                ages[policy] = age
                last = content.get("step")
                beat = f"last heartbeat {age:.1f} s ago" + (f", last published step {last}" if last is not None else "")
            else:
                ages[policy] = None
                beat = "no heartbeat ever"
            stale = f"; ignored shards of other run(s) {sorted(other_runs[policy])}" if other_runs[policy] else ""
            parts.append(f"policy {policy!r}: {what} ({beat}){stale}")
        message = (
            f"SEE barrier timed out after {waited:.1f} s (barrier_timeout_s={self.barrier_timeout_s:g}) at step {step} "
            f"of run {self.run_id!r} in {self.root}, waiting as policy {self.policy!r} rank {self.rank}: "
            + "; ".join(parts)
            + ". A slow but live peer shows a recent heartbeat (raise see.barrier_timeout_s); "
            "a dead or stuck one shows an old or no heartbeat."
        )
        return PeerTimeoutError(
            message, step=step, path=self.root, missing=missing, waited_s=waited, heartbeat_age_s=ages
        )

    # ------------------------------------------------------------------------------------
    # read
    # ------------------------------------------------------------------------------------

    def shards(self, step: int, policy: str) -> list[ShardInfo]:
        """The committed shards of (step, policy) in this run, in rank order; :class:`ShardMissingError` if incomplete."""
        found: dict[int, dict[int, ShardInfo]] = {}
        other: set[str] = set()
        self._scan(int(step), files.check_policy_name(policy), found, other)
        complete = self._complete(found)
        if complete is None:
            have = {w: sorted(r) for w, r in found.items()}
            raise ShardMissingError(
                f"SEE: policy {policy!r} has not committed all shards of step {step} in run {self.run_id!r} "
                f"(committed ranks by world size: {have or 'none'}"
                + (f"; shards of other runs {sorted(other)} ignored" if other else "")
                + "); call wait_for() first",
                peer=policy,
                step=int(step),
                path=files.policy_dir(self.root, int(step), policy),
            )
        return complete

    def read(self, step: int, policy: str, columns: Sequence[str] | None = None) -> pa.Table:
        """All shards of ``policy`` at ``step``, concatenated in rank order (memory-mapped, zero-copy).

        Every shard's size, xxh3_128 checksum, schema version, schema and row count are
        verified against its manifest (even when only some ``columns`` are requested);
        any mismatch raises :class:`CorruptShardError` naming the file and the problem.
        """
        return self._read_shards(self.shards(step, policy), columns)

    def gather(
        self, step: int, columns: Sequence[str] | None = None, policies: Iterable[str] | None = None
    ) -> dict[str, pa.Table]:
        """Barrier (:meth:`wait_for`) then :meth:`read` of every listed policy (default: all, self included)."""
        infos = self.wait_for(step, policies)
        return {policy: self._read_shards(shards, columns) for policy, shards in infos.items()}

    def _read_shards(self, shards: list[ShardInfo], columns: Sequence[str] | None) -> pa.Table:
        if columns is not None:
            columns = list(columns)
            unknown = [c for c in columns if c not in COLUMNS]
            if unknown:
                raise UsageError(f"unknown SEE column(s) {unknown}; columns are {list(COLUMNS)}")
        tables = [self._load_shard(info) for info in shards]
        first = shards[0]
        common = ShardMetadata(
            SCHEMA_VERSION, first.run_id, first.policy, first.step, 0, first.world_size, first.provenance
        ).to_arrow()
        common.pop(b"rank")
        tables = [t.replace_schema_metadata(common) for t in tables]
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        return table if columns is None else table.select(columns)

    def _load_shard(self, info: ShardInfo) -> pa.Table:
        return load_shard(info, self._verified)

    # ------------------------------------------------------------------------------------
    # liveness, failure, retention
    # ------------------------------------------------------------------------------------

    def heartbeat(self, step: int | None = None) -> None:
        """Record that this rank is alive (the barrier reports peers' heartbeat ages).

        Cheap: touches a file; with ``step`` (done by :meth:`publish`) it also records the
        last published step.
        """
        path = files.heartbeat_path(self.root, self.policy, self.rank)
        now = time.time()
        self._last_heartbeat = now
        if step is None:
            try:
                os.utime(path)
                return
            except FileNotFoundError:
                pass
        content = {
            "policy": self.policy,
            "rank": self.rank,
            "run_id": self.run_id,
            "step": step,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "time": now,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_bytes_atomic(path, json.dumps(content).encode(), durable=False)

    def mark_failed(self, reason: str, step: int | None = None) -> Path:
        """Leave this policy's failure marker (peers waiting at the barrier raise :class:`PeerFailedError`)."""
        return mark_failed(self.root, self.policy, reason, run_id=self.run_id, rank=self.rank, step=step)

    def prune(self, current_step: int) -> list[Path]:
        """Delete this rank's own shards of steps older than ``current_step - retention_steps``.

        Only this rank's files are touched (manifest first, so a shard is uncommitted before
        its data goes), never another policy's or rank's: no races between writers. Empty
        folders are removed. Safe while peers run: a peer at step ``s`` has finished reading
        step ``s - 1`` before it could publish step ``s``, and ``retention_steps >= 1``.
        Returns the removed files. ``retention_steps=None`` keeps everything.
        """
        if self.retention_steps is None:
            return []
        cutoff = int(current_step) - self.retention_steps
        removed: list[Path] = []
        stem = files.shard_stem(self.rank, self.world_size)
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return removed
        for entry in entries:
            m = files.STEP_DIR_RE.match(entry.name)
            if not m or int(m.group(1)) >= cutoff:
                continue
            folder = Path(entry.path) / self.policy
            own = [folder / f"{stem}.manifest.json", folder / f"{stem}.arrow"]
            try:
                own += [
                    Path(e.path)
                    for e in os.scandir(folder)
                    if (t := files.TEMP_RE.match(e.name)) and t.group("final").startswith(stem + ".")
                    and int(t.group("pid")) == os.getpid()
                ]
            except FileNotFoundError:
                continue
            for path in own:
                try:
                    path.unlink()
                    removed.append(path)
                except FileNotFoundError:
                    pass
            for empty in (folder, Path(entry.path)):
                try:
                    empty.rmdir()
                except OSError:  # not empty: other ranks or policies still keep files there
                    break
        return removed


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
