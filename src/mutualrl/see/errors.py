"""Errors raised by the Shared Experience Exchange.

Every error carries structured fields (``peer``, ``step``, ``path``) besides its message,
so the trainer and the launcher can act on them (e.g. tear the run down when a peer is
marked failed) and the CLI can print one clear paragraph.
"""

from __future__ import annotations

from pathlib import Path

from mutualrl.errors import DataError, PeerError


class InvalidRecordError(DataError):
    """A rollout record violates the SEE schema; the message names the row and column."""

    def __init__(self, message: str, *, row: int | None = None, column: str | None = None):
        super().__init__(message)
        self.row = row
        self.column = column


class SEEPeerError(PeerError):
    """A peer-related SEE error with structured fields."""

    def __init__(
        self,
        message: str,
        *,
        peer: str | None = None,
        step: int | None = None,
        path: Path | str | None = None,
    ):
        super().__init__(message)
        self.peer = peer
        self.step = step
        self.path = Path(path) if path is not None else None


class PeerTimeoutError(SEEPeerError):
    """The per-step barrier timed out: some peer (or some rank of a peer) never committed its shard.

    ``missing`` maps each missing policy to its missing ranks (``None``: no shard of that
    policy at all, so its world size is unknown); ``heartbeat_age_s`` maps it to the age of
    its freshest heartbeat in seconds (``None``: never seen).
    """

    def __init__(
        self,
        message: str,
        *,
        step: int,
        path: Path | str,
        missing: dict[str, list[int] | None],
        waited_s: float,
        heartbeat_age_s: dict[str, float | None],
    ):
        super().__init__(message, peer=next(iter(missing), None), step=step, path=path)
        self.peers = list(missing)
        self.missing = missing
        self.waited_s = waited_s
        self.heartbeat_age_s = heartbeat_age_s


class PeerFailedError(SEEPeerError):
    """A peer left a failure marker (it crashed, or the launcher saw it die)."""

    def __init__(self, message: str, *, peer: str, step: int | None, path: Path | str, reason: str):
        super().__init__(message, peer=peer, step=step, path=path)
        self.reason = reason


class CorruptShardError(SEEPeerError):
    """A committed shard cannot be trusted: truncated, checksum mismatch, unreadable, or wrong schema.

    ``problem`` is one of ``"truncated"``, ``"size"``, ``"checksum"``, ``"unreadable"``,
    ``"schema_version"``, ``"schema"``, ``"rows"``, ``"invalid_record"`` (a row breaks the SEE record's rules),
    ``"manifest_mismatch"`` (a manifest describes another policy, step or rank than its path), ``"missing"``,
    ``"compressed"`` (its batches declare lz4/zstd compression, which mutualrl never writes).
    """

    def __init__(self, message: str, *, path: Path | str, problem: str, peer: str | None = None, step: int | None = None):
        super().__init__(message, peer=peer, step=step, path=path)
        self.problem = problem


class SchemaMismatchError(CorruptShardError):
    """A table's columns or a file's schema version differ from what this mutualrl version reads and writes."""


class ShardMissingError(SEEPeerError):
    """A read asked for a (step, policy) whose shards are not all committed (call ``wait_for`` first)."""
