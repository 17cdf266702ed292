"""On-disk layout of the SEE and crash-safe file commits.

Layout under the exchange root::

    step-000012/<policy>/rank-0-of-2.arrow          # Arrow IPC file: this rank's records
    step-000012/<policy>/rank-0-of-2.manifest.json  # commit marker: rows, bytes, xxh3_128, provenance
    _failed/<policy>.json                           # failure marker (first reason wins)
    _heartbeat/<policy>.rank-0.json                 # liveness: mtime = last heartbeat

Every file is written under a hidden temporary name in its final folder, fsynced, renamed
over the final name (atomic on POSIX and on NFS within one directory) and the folder
fsynced. Readers only ever open files named by a manifest, and a manifest is committed
after its data file, so a reader never sees a torn file. Temporary names start with a dot
and contain ``.tmp-``; readers skip them and ``mutualrl see inspect`` reports them.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import xxhash

from mutualrl import faults
from mutualrl.errors import UsageError, storage_error
from mutualrl.run_folder import RunPaths

CHECKSUM_ALGORITHM = "xxh3_128"

FAILED_DIR = "_failed"
HEARTBEAT_DIR = "_heartbeat"

STEP_DIR_RE = re.compile(r"^step-(\d+)$")
MANIFEST_RE = re.compile(r"^rank-(\d+)-of-(\d+)\.manifest\.json$")
DATA_RE = re.compile(r"^rank-(\d+)-of-(\d+)\.arrow$")
TEMP_RE = re.compile(r"^\.(?P<final>.+)\.tmp-(?P<host>.*)-(?P<pid>\d+)-(?P<token>[0-9a-f]+)$")
HEARTBEAT_RE = re.compile(r"^(?P<policy>.+)\.rank-(?P<rank>\d+)\.json$")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def check_policy_name(name: str) -> str:
    """Policy names become folder names: letters, digits and ``._+-``, starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > 200:
        raise UsageError(
            f"policy name {name!r} cannot name an SEE folder: use letters, digits and '._+-', "
            "starting with a letter or digit"
        )
    return name


def find_see_root(path: Path | str) -> Path | None:
    """The exchange of ``path``: a run folder's own (:meth:`mutualrl.run_folder.RunPaths.see_root`), or ``path``
    itself when it is an exchange folder (step folders, failure markers or heartbeats in it); None: neither."""
    path = Path(path)
    if RunPaths(path).see_root().is_dir():
        return RunPaths(path).see_root()
    if path.is_dir():
        with os.scandir(path) as entries:
            if any(e.name in (FAILED_DIR, HEARTBEAT_DIR) or STEP_DIR_RE.match(e.name) for e in entries):
                return path
    return None


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:06d}"


def policy_dir(root: Path, step: int, policy: str) -> Path:
    return step_dir(root, step) / policy


def shard_stem(rank: int, world_size: int) -> str:
    return f"rank-{rank}-of-{world_size}"


def data_path(root: Path, step: int, policy: str, rank: int, world_size: int) -> Path:
    return policy_dir(root, step, policy) / f"{shard_stem(rank, world_size)}.arrow"


def manifest_path(root: Path, step: int, policy: str, rank: int, world_size: int) -> Path:
    return policy_dir(root, step, policy) / f"{shard_stem(rank, world_size)}.manifest.json"


def failure_path(root: Path, policy: str) -> Path:
    return root / FAILED_DIR / f"{policy}.json"


def heartbeat_path(root: Path, policy: str, rank: int) -> Path:
    return root / HEARTBEAT_DIR / f"{policy}.rank-{rank}.json"


def temp_path(final: Path) -> Path:
    """A hidden, unique temporary name in ``final``'s folder (same folder, so the rename is atomic)."""
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64]
    return final.with_name(f".{final.name}.tmp-{host}-{os.getpid()}-{secrets.token_hex(4)}")


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (ignored where the filesystem cannot fsync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as err:  # some network filesystems refuse fsync on a directory
        if err.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP, errno.EACCES):
            raise
    finally:
        os.close(fd)


class HashingSink:
    """A write-only file object over a raw fd that hashes every byte on its way to disk (one pass).

    pyarrow writes its buffers straight into :meth:`write` (wrapped in ``pa.PythonFile``), so the
    data is hashed while it is hot in cache and never copied into Python objects.
    """

    def __init__(self, fd: int):
        self.fd = fd
        self.hasher = xxhash.xxh3_128()
        self.nbytes = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.hasher.update(view)
        size = len(view)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        self.nbytes += size
        return size

    def flush(self) -> None:
        pass

    def tell(self) -> int:
        return self.nbytes

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def commit_rename(tmp: Path, final: Path) -> None:
    """The commit point: rename the finished temporary file over its final name (a test hook, too)."""
    os.replace(tmp, final)


def write_atomic(final: Path, write: Callable[[HashingSink], None], *, durable: bool = True) -> tuple[int, str]:
    """Write ``final`` via a temporary file; returns (bytes written, xxh3_128 hex digest of those bytes).

    ``durable``: fsync the file before the rename and the folder after it, so the commit
    survives a node crash and is visible to other NFS clients once this returns.
    """
    tmp = temp_path(final)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            faults.disk_full(final)
            sink = HashingSink(fd)
            write(sink)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        commit_rename(tmp, final)
    except BaseException as err:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        converted = storage_error(err, final) if isinstance(err, OSError) else None  # ENOSPC: say where
        if converted is not None:
            raise converted from err
        if isinstance(err, OSError) and err.filename is None:
            raise OSError(err.errno, err.strerror or str(err), str(final)) from err
        raise
    if durable:
        fsync_dir(final.parent)
    return sink.nbytes, sink.hasher.hexdigest()


def write_bytes_atomic(final: Path, data: bytes, *, durable: bool = True) -> tuple[int, str]:
    return write_atomic(final, lambda sink: sink.write(data), durable=durable)


def file_checksum(buffer: Any) -> str:
    """xxh3_128 hex digest of a bytes-like object (e.g. a memory-mapped file)."""
    return xxhash.xxh3_128(buffer).hexdigest()
