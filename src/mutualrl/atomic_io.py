"""Atomic file writes: a reader sees the old content or the new one, never half a file.

The launcher, the workers and the CLI read each other's files while they are being
rewritten (status, metrics, configs, eval results), so every small text or JSON file goes
through here: a temporary file in the same folder (the rename is then atomic), fsynced,
renamed over the final name. SEE shards keep their own writer (``see/files.py``): they
hash while writing and name their temporaries so that ``see inspect`` can report them.
Rows appended to a log (metrics) go through :func:`append_text`, which never leaves half a line.

A failed write (full disk, quota, I/O error) raises :class:`~mutualrl.errors.StorageError`:
one line naming the file and the free space. :func:`mutualrl.faults.disk_full` injects such a failure,
for tests and ``benchmarks/chaos.py``.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
from pathlib import Path
from typing import Any

from mutualrl import faults
from mutualrl.errors import storage_error

def write_text_atomic(path: str | Path, text: str) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) in one step; the folder is created if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        faults.disk_full(path)
        # O_EXCL: never write through someone else's file; mode 0o666 lets the umask decide, as open() does.
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        converted = storage_error(err, path) if isinstance(err, OSError) else None
        if converted is not None:
            raise converted from err
        raise
    return path


def append_text(path: str | Path, text: str) -> None:
    """Append ``text`` (whole lines) to ``path``, all or nothing: a failed write (full disk) cuts the file
    back to its previous end, so no reader ever finds half a line, and raises a ``StorageError``."""
    path = Path(path)
    data = memoryview(text.encode("utf-8"))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # unbuffered: nothing left to flush later
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            faults.disk_full(path)
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
