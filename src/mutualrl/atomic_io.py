"""Atomic file writes: a reader sees the old content or the new one, never half a file.

The launcher, the workers and the CLI read each other's files while they are being
rewritten (status, metrics, configs, eval results, SEE shards and manifests), so every file
goes through :func:`write_atomic`: a temporary file in the same folder (the rename is then
atomic, on POSIX and on NFS within one folder), fsynced, renamed over the final name, and the
folder fsynced. Its temporary names (:data:`TEMP_RE`: hidden, with the writer's host and pid)
let ``mutualrl see inspect`` report those a killed writer left and a writer's ``prune`` remove
its own. The SEE hashes a shard while writing it (:class:`HashingSink`). Rows appended to a
log (metrics) go through :func:`append_text`, which never leaves half a line.

A failed write (full disk, quota, I/O error) raises :class:`~mutualrl.errors.StorageError`:
one line naming the file and the free space. :func:`mutualrl.fault_injection.disk_full` injects such a failure,
for tests and ``benchmarks/chaos.py``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import xxhash

from mutualrl import fault_injection
from mutualrl.write_failures import storage_error

#: A writer's temporary name: ``.<final name>.tmp-<host>-<pid>-<token>`` in the final file's folder (the final
#: name cut where the whole would pass a file name's 255 bytes).
TEMP_RE = re.compile(r"^\.(?P<final>.+)\.tmp-(?P<host>.*)-(?P<pid>\d+)-(?P<token>[0-9a-f]+)$")

NAME_MAX = 255  # bytes in one file name (Linux, macOS, NFS)


def temp_path(final: Path) -> Path:
    """A hidden, unique temporary name in ``final``'s folder (same folder, so the rename is atomic)."""
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64]
    suffix = f".tmp-{host}-{os.getpid()}-{secrets.token_hex(4)}"
    name = final.name.encode()[: NAME_MAX - 1 - len(suffix)].decode(errors="ignore")  # a long final name still fits
    return final.with_name(f".{name}{suffix}")


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
    """A write-only file object over a raw fd; with ``hashed``, it hashes (xxh3_128) every byte on its way to disk.

    pyarrow writes its buffers straight into :meth:`write` (wrapped in ``pa.PythonFile``), so a
    shard is hashed while it is hot in cache and never copied into Python objects.
    """

    def __init__(self, fd: int, hashed: bool = False):
        self.fd = fd
        self.hasher = xxhash.xxh3_128() if hashed else None
        self.nbytes = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self.hasher is not None:
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

    def hexdigest(self) -> str | None:
        return None if self.hasher is None else self.hasher.hexdigest()


def commit_rename(tmp: Path, final: Path) -> None:
    """The commit point: rename the finished temporary file over its final name (a test hook, too)."""
    os.replace(tmp, final)


def write_atomic(final: Path, write: Callable[[HashingSink], Any], *, durable: bool = True,
                 hashed: bool = False) -> HashingSink:
    """Write ``final`` via a temporary file; returns the sink (``nbytes`` written, and with ``hashed`` their
    :meth:`~HashingSink.hexdigest`).

    ``durable``: fsync the file before the rename and the folder after it, so the commit
    survives a node crash and is visible to other NFS clients once this returns.
    """
    tmp = temp_path(final)
    try:
        # O_EXCL: never write through someone else's file; mode 0o666 lets the umask decide, as open() does.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            fault_injection.disk_full(final)
            sink = HashingSink(fd, hashed)
            write(sink)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        commit_rename(tmp, final)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        converted = storage_error(err, final) if isinstance(err, OSError) else None  # ENOSPC: say where
        if converted is not None:
            raise converted from err
        if isinstance(err, OSError) and err.filename is None:
            raise OSError(err.errno, err.strerror or str(err), str(final)) from err
        raise
    if durable:
        fsync_dir(final.parent)
    return sink


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) in one step; the folder is created if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda sink: sink.write(text.encode("utf-8")))
    return path


def append_text(path: str | Path, text: str) -> None:
    """Append ``text`` (whole lines) to ``path``, all or nothing: a failed write (full disk) cuts the file
    back to its previous end, so no reader ever finds half a line, and raises a ``StorageError``."""
    path = Path(path)
    data = memoryview(text.encode("utf-8"))
    from mutualrl.host.file_lock import open_safely

    # unbuffered: nothing left to flush later; a link, FIFO or folder at its name is refused, naming it
    fd = open_safely(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            fault_injection.disk_full(path)
            while data:
                data = data[os.write(fd, data):]
        except OSError as err:
            os.ftruncate(fd, start)
            converted = storage_error(err, path)
            if converted is None:
                raise
            raise converted from err
    finally:
        os.close(fd)


def write_json_atomic(path: str | Path, data: Any, **dumps: Any) -> Path:
    """``data`` as JSON, atomically; by default one-space indent and ``str()`` for what JSON lacks (paths)."""
    return write_text_atomic(path, json.dumps(data, **{"indent": 1, "default": str, **dumps}))

