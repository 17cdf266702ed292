"""A failed write (full disk, quota, I/O error, read-only or forbidden folder) as one line naming the path and the
free space there: :func:`storage_error` turns a writer's exception into a :class:`~mutualrl.errors.StorageError`
(:func:`storage_errors` around a block of writes), a worker stopped by one exits with :data:`DISK_FULL_EXIT`, and the
launcher knows the line again from a worker's log (:func:`is_storage_message`). Anything else keeps its traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from mutualrl.errors import StorageError

DISK_FULL_EXIT = 28
"""Exit code of a policy worker stopped by a :class:`StorageError` (28 is ENOSPC's errno)."""

# errno -> how the message begins; anything else that carries one of the hints below is a write failure too
# (torch.save reports a full disk as a RuntimeError such as "unexpected pos 704 vs 598" or "file write failed").
_DISK_ERRNOS = {errno.ENOSPC: "no space left on", errno.EDQUOT: "disk quota exceeded on",
                errno.EIO: "I/O error writing", errno.EROFS: "read-only file system at",
                errno.EACCES: "permission denied at", errno.EPERM: "operation not permitted at"}
# A folder that cannot be written at all: space is not the cure.
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
STORAGE_MESSAGE_STARTS = (*_DISK_ERRNOS.values(), "could not write")


def is_storage_message(text: str) -> bool:
    """``text`` is a :class:`StorageError`'s message (a worker's last log line, a run's recorded reason)."""
    return text.startswith(STORAGE_MESSAGE_STARTS)


_WRITE_FAILURE_HINTS = ("no space left", "os error 28", "file write failed", "unexpected pos", "quota exceeded")


TRAIN_ADVICE = "a run continues with `mutualrl train --resume`, losing nothing"
"""What a failed write's message adds by default: training (a worker, the launcher, the Python API) resumes."""
_advice = [TRAIN_ADVICE]  # the command's own (:func:`command_advice`), innermost last


@contextlib.contextmanager
def command_advice(advice: str | None) -> Iterator[None]:
    """Inside, a failed write's message ends with ``advice`` (how this command continues; None: nothing but "run the
    command again"), not training's ``--resume``: ``report``, ``plot`` and ``sweep`` give their own."""
    _advice.append(advice or "")
    try:
        yield
    finally:
        _advice.pop()


LOW_SPACE_BYTES = 256 * 1000 * 1000
"""Below this much free space, a write that failed without an errno (torch.save) is taken for a full disk."""


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Free bytes of the filesystem holding ``path`` (its nearest existing parent); None when unknown."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def describe_free(free: int | None) -> str:
    """``12.3 MB free`` (decimal units, as ``df -H``)."""
    if free is None:
        return "free space unknown"
    amount, unit = float(free), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if amount < 1000 or unit == "TB":
            break
        amount /= 1000
    return f"{amount:.0f} B free" if unit == "B" else f"{amount:.1f} {unit} free"


def is_writer_error(err: BaseException) -> bool:
    """An error type that file writers raise (torch.save: RuntimeError; safetensors: SafetensorError)."""
    return isinstance(err, (OSError, RuntimeError)) or type(err).__name__ == "SafetensorError"


def storage_error(err: BaseException, path: str | os.PathLike[str]) -> StorageError | None:
    """``err`` as a one-line :class:`StorageError` naming the path written (``err``'s own, else ``path``) and
    the free space there; None when ``err`` is not a failed write (a bug keeps its traceback)."""
    where = getattr(err, "filename", None) or path
    free = free_bytes(where)
    code = getattr(err, "errno", None)
    if code in _DISK_ERRNOS:
        what = _DISK_ERRNOS[code]
    elif is_writer_error(err) and any(hint in str(err).lower() for hint in _WRITE_FAILURE_HINTS):
        what = "no space left on" if free is not None and free < LOW_SPACE_BYTES else "could not write"
    else:
        return None
    cure = ("make it writable (or choose another --output-dir)" if code in _NOT_WRITABLE else "free some space")
    advice = f" ({_advice[-1]})" if _advice[-1] else ""
    return StorageError(f"{what} {where} ({describe_free(free)}); {cure} and run the command again{advice}")


@contextlib.contextmanager
def storage_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Writes under ``path`` inside: one that fails for space or I/O raises a :class:`StorageError` naming it."""
    try:
        yield
    except Exception as err:
        converted = storage_error(err, path)
        if converted is None:
            raise
        raise converted from err


def report_thread_write_failures() -> None:
    """A background thread that dies of a failed write (TensorBoard's event writer on a full disk) prints one
    warning line instead of a traceback; the error itself is reported, as one line naming the path, where it
    surfaces in the main thread (the writer raises it again at its next call). Other errors keep theirs."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        err = args.exc_value
        if err is None or storage_error(err, getattr(err, "filename", None) or os.devnull) is None:
            previous(args)
            return
        name = args.thread.name if args.thread is not None else "a thread"
        print(f"warning: {name}: {type(err).__name__}: {err} (a write failed; reported where it surfaces)",
              file=sys.stderr)

    threading.excepthook = hook
