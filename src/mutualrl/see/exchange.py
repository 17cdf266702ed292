"""The Shared Experience Exchange client: publish, barrier, read (paper Sec. "The Mutual RL System Design").

Each policy process (each rank of a policy's process group) owns one
:class:`ExperienceExchange`. At every generation step it

1. :meth:`~ExperienceExchange.publish`-es its rollout records as one shard (Arrow IPC
   file + JSON manifest, both committed atomically),
2. waits at the per-step barrier (:meth:`~ExperienceExchange.wait_for`) until every
   subscribed policy has committed all of its ranks' shards for that step, and
3. reads the shards the barrier found (:meth:`~ExperienceExchange.read_shards`), only the peer columns its
   regime names (XGRPO: rewards; SGT: six columns of every row: prompt id, sample index, reward, text, finished
   flag, length; PRP: texts and, for its trace corrections, token spans and behaviour log-probs), verifying each
   shard's size and xxh3_128 checksum against its manifest, then its rows, once per file.

The exchange is plain files, polled (no inotify), so it behaves the same on one local
disk and on a shared filesystem across nodes. See ``docs/see.md``.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from mutualrl.atomic_io import TEMP_RE, HashingSink, write_atomic
from mutualrl.errors import UsageError
from mutualrl.run_folder import RunPaths
from mutualrl.see import files
from mutualrl.trust.exchange_binding import check_exchange_owner
from mutualrl.see.errors import PeerFailedError, ShardMissingError
from mutualrl.see.files import CHECKSUM_ALGORITHM
from mutualrl.see.liveness import (
    HeartbeatWatch,
    barrier_timeout_error,
    mark_policy_failed,
    read_failure,
    read_heartbeat,
    write_heartbeat,
)
from mutualrl.see.provenance import refresh_provenance
from mutualrl.see.records import COLUMNS, FILE_METADATA, SCHEMA_VERSION, RolloutBatch
from mutualrl.see.shards import ShardInfo, complete_shards, load_shard, scan_committed


MAX_WORLD_SIZE = 65536
"""A heartbeat naming more ranks than this is not believed (it would make each poll open that many names)."""


class ExperienceExchange:
    """One rank's client of the file-backed Shared Experience Exchange.

    Args:
        root: exchange folder (required; a run passes ``see.dir`` or ``RUN/see``,
            :meth:`mutualrl.run_folder.RunPaths.see_root`); may be on a shared filesystem.
        run_id: identifies this launch; shards and failure markers of other run ids are ignored,
            so a reused folder never feeds stale records into a new run. Use a fresh id per launch.
        policy: this process's policy name.
        rank, world_size: this process's rank in its policy's process group, and the group size.
        policies: every policy name of the run (self is added if missing); the default
            barrier waits for all of them.
        barrier_timeout_s: how long :meth:`wait_for` waits for a pending policy it sees make no progress before
            :class:`PeerTimeoutError` (a peer whose heartbeat reports work or validation progress is waited for).
        poll_interval_s: cap of the barrier's polling backoff (starts at 1 ms, doubles).
        retention_steps: :meth:`prune` keeps this rank's shards of the last N steps (None: all).
        provenance: fields recorded with every shard (e.g. ``{"model": ..., "tokenizer": ...}``);
            versions, host, pid and time are added at each publish.
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
    ):
        self.root = Path(root)
        self.run_id = str(run_id)
        if not self.run_id:
            raise UsageError("SEE run_id must not be empty")
        check_exchange_owner(self.root, self.run_id)  # a folder bound to another run is never read or written
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
        self.provenance = dict(provenance or {})
        self._verified: set[tuple[Any, ...]] = set()
        self._last_heartbeat = -math.inf  # on the monotonic clock
        self._published_step: int | None = None  # the last step :meth:`publish` announced in the heartbeat
        self.work = 0  # looks at which the training thread had moved (liveness.start_heartbeat_thread)
        self.waiting = False  # in :meth:`wait_for`: waiting is not work
        # A policy restarted into its running pool (see.max_restarts) redoes steps it already published: keep
        # those shards (a peer may be reading them right now) instead of replacing them.
        self.keep_committed = False
        self._worlds: dict[str, set[int]] = {self.policy: {self.world_size}}  # world sizes a policy's shards name
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
        root = RunPaths(Path(output_dir)).see_root(settings.dir)
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

        A ``RolloutBatch`` is written as built (the trainer's own); a ``pyarrow.Table`` comes from user code and is
        checked first (:meth:`RolloutBatch.from_table`). The data file is written under a temporary name,
        fsynced, renamed into place and its folder fsynced; then the manifest (run, policy, step, rank, world
        size, rows, bytes, xxh3_128 of the file computed while writing, provenance) is committed the same way.
        The manifest is the commit marker. Publishing a step twice replaces the shard (readers of that step may
        then see a checksum mismatch: publish each step once per run), unless ``keep_committed`` is set: then a
        step this rank already committed in this run is left as it is.
        """
        step = int(step)
        if step < 0:
            raise UsageError(f"SEE step must be >= 0, got {step}")
        data_final = files.data_path(self.root, step, self.policy, self.rank, self.world_size)
        if self.keep_committed and self._round_committed(step):
            return data_final
        if isinstance(records, pa.Table):
            records = RolloutBatch.from_table(records)
        elif not isinstance(records, RolloutBatch):
            raise UsageError(f"publish() takes a RolloutBatch or a pyarrow.Table, got {type(records).__name__}")
        table = records.to_table().replace_schema_metadata(FILE_METADATA)
        provenance = refresh_provenance(self.provenance)
        data_final.parent.mkdir(parents=True, exist_ok=True)

        def write_ipc(sink: HashingSink) -> None:
            with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), table.schema) as writer:
                writer.write_table(table)

        shard = write_atomic(data_final, write_ipc, hashed=True)
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "policy": self.policy,
            "step": step,
            "rank": self.rank,
            "world_size": self.world_size,
            "rows": table.num_rows,
            "bytes": shard.nbytes,
            "checksum": shard.hexdigest(),
            "checksum_algorithm": CHECKSUM_ALGORITHM,
            "data_file": data_final.name,
            "published_at": time.time(),
            "provenance": provenance,
        }
        data = json.dumps(manifest, indent=1).encode()
        write_atomic(files.manifest_path(self.root, step, self.policy, self.rank, self.world_size),
                     lambda sink: sink.write(data))
        self.heartbeat(step=step)
        return data_final

    def _round_committed(self, step: int) -> bool:
        """Every rank's shard of ``step`` is committed (a round cut by a crash is published again, whole: no reader
        reads an incomplete round, so replacing its shards is safe)."""
        found: dict[int, dict[int, ShardInfo]] = {}
        scan_committed(self.root, self.run_id, step, self.policy, found, set(), worlds=(self.world_size,))
        return len(found.get(self.world_size, {})) == self.world_size

    # ------------------------------------------------------------------------------------
    # barrier
    # ------------------------------------------------------------------------------------

    def raise_if_failed(self, policy: str, step: int) -> None:
        """:class:`PeerFailedError` (peer, step, reason) if ``policy`` left a failure marker in this run."""
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

    def wait_for(self, step: int, policies: Iterable[str] | None = None,
                 arrived: Callable[[str], bool] | None = None) -> dict[str, list[ShardInfo]]:
        """Per-step barrier: block until every listed policy (default: all, self included) has
        committed all ``world_size`` shards of ``step``; return their shards in rank order.
        ``arrived(policy)`` true also ends the wait for a policy, with no shards (it skipped ``step``).

        Raises :class:`PeerFailedError` at once when a pending policy has a failure marker, and
        :class:`PeerTimeoutError` once no pending policy was seen progressing (its heartbeat's work or
        validation progress, :class:`~mutualrl.see.liveness.HeartbeatWatch`) for ``barrier_timeout_s``,
        naming each missing policy and rank, the step, the time waited and each peer's heartbeat age. Returns after one scan
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
        peers, look_every, looked = HeartbeatWatch(self.root), min(1.0, self.barrier_timeout_s / 10), -math.inf
        delay = 0.001
        self.waiting = True
        try:
            while True:
                for policy in targets:
                    if policy in done:
                        continue
                    scan_committed(self.root, self.run_id, step, policy, found[policy], other_runs[policy],
                                   worlds=self.known_worlds(policy))
                    complete = complete_shards(found[policy])
                    if complete is not None:
                        done[policy] = complete
                        self._worlds.setdefault(policy, set()).add(len(complete))
                    elif arrived is not None and arrived(policy):
                        done[policy] = []
                pending = [p for p in targets if p not in done]
                if not pending:
                    return {p: done[p] for p in targets}
                for policy in pending:
                    self.raise_if_failed(policy, step)
                now = time.monotonic()
                if now - looked >= look_every or now >= deadline:  # a pending peer that gets on is waited for
                    peers.look()
                    looked = now
                    idle = peers.idle_for(pending)
                    if idle is not None:
                        deadline = max(deadline, now - idle + self.barrier_timeout_s)
                if now >= deadline:
                    raise barrier_timeout_error(self.root, self.policy, step, pending, found, other_runs, now - start,
                                                self.barrier_timeout_s, self.run_id, self.rank)
                if now - self._last_heartbeat > 1.0:  # waiting at the barrier is being alive
                    self.heartbeat()
                time.sleep(min(delay, deadline - now))
                delay = min(delay * 2, self.poll_interval_s)
        finally:
            self.waiting = False

    def known_worlds(self, policy: str) -> tuple[int, ...]:
        """The world sizes ``policy``'s shard names carry, as far as this rank knows: from its rounds seen so far,
        else from its rank 0's heartbeat of this run, read by its name (a shared filesystem's cached listing can
        hide a new round for up to a minute; files opened by name are current)."""
        if not self._worlds.get(policy):
            beat = read_heartbeat(self.root, policy, 0)
            world = beat.get("world_size") if beat.get("run_id") == self.run_id else None
            if isinstance(world, int) and not isinstance(world, bool) and 0 < world <= MAX_WORLD_SIZE:
                self._worlds[policy] = {world}
        return tuple(sorted(self._worlds.get(policy, ())))

    # ------------------------------------------------------------------------------------
    # read
    # ------------------------------------------------------------------------------------

    def shards(self, step: int, policy: str) -> list[ShardInfo]:
        """The committed shards of (step, policy) in this run, in rank order; :class:`ShardMissingError` if incomplete."""
        found: dict[int, dict[int, ShardInfo]] = {}
        other: set[str] = set()
        scan_committed(self.root, self.run_id, int(step), files.check_policy_name(policy), found, other,
                       worlds=self.known_worlds(policy))
        complete = complete_shards(found)
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
        verified against its manifest (even when only some ``columns`` are requested), and its
        rows checked, once per file; any failure raises :class:`CorruptShardError` naming the
        file and the problem. The table's schema metadata is ``schema_version`` alone: who
        published it is in the shards' manifests (:meth:`shards`).
        """
        return self.read_shards(self.shards(step, policy), columns)

    def gather(
        self, step: int, columns: Sequence[str] | None = None, policies: Iterable[str] | None = None
    ) -> dict[str, pa.Table]:
        """Barrier (:meth:`wait_for`) then :meth:`read` of every listed policy (default: all, self included)."""
        infos = self.wait_for(step, policies)
        return {policy: self.read_shards(shards, columns) for policy, shards in infos.items()}

    def read_shards(self, shards: list[ShardInfo], columns: Sequence[str] | None = None) -> pa.Table:
        """The committed ``shards`` of one (step, policy), e.g. as :meth:`wait_for` returned them, verified and
        concatenated in rank order (see :meth:`read`); no second scan of the folder."""
        if columns is not None:
            columns = list(columns)
            unknown = [c for c in columns if c not in COLUMNS]
            if unknown:
                raise UsageError(f"unknown SEE column(s) {unknown}; columns are {list(COLUMNS)}")
        tables = [self._load_shard(info) for info in shards]
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        return table if columns is None else table.select(columns)

    def _load_shard(self, info: ShardInfo) -> pa.Table:
        return load_shard(info, self._verified)

    # ------------------------------------------------------------------------------------
    # liveness, failure, retention
    # ------------------------------------------------------------------------------------

    def heartbeat(self, step: int | None = None, progress: str | None = None, worked: bool = False) -> None:
        """Record that this rank is alive (the launcher stops a pool whose heartbeat goes silent).

        Cheap: touches a file; with ``step`` (by :meth:`publish`) it records the last published step; with
        ``progress`` (a long validation) or ``worked`` (the training thread moved) that this rank gets on:
        peers' barriers wait on (:meth:`wait_for`).
        """
        path = files.heartbeat_path(self.root, self.policy, self.rank)
        self._last_heartbeat = time.monotonic()
        self.work += worked
        if step is not None:
            self._published_step = step
        if step is None and progress is None and not worked:
            try:
                os.utime(path)
                return
            except FileNotFoundError:
                pass
        content = {
            "policy": self.policy, "rank": self.rank, "world_size": self.world_size, "run_id": self.run_id,
            "step": self._published_step,
            "hostname": socket.gethostname(), "pid": os.getpid(), "time": time.time(), "work": self.work,
            **({"progress": progress} if progress is not None else {}),
        }
        write_heartbeat(path, content)  # best effort: a full disk is a warning here (see write_heartbeat)

    def mark_policy_failed(self, reason: str, step: int | None = None) -> Path:
        """Leave this policy's failure marker (peers waiting at the barrier raise :class:`PeerFailedError`)."""
        return mark_policy_failed(self.root, self.policy, reason, run_id=self.run_id, rank=self.rank, step=step)

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
                    if (t := TEMP_RE.match(e.name)) and t.group("final").startswith(stem + ".")
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
