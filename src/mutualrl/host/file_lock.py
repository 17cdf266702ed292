"""Lock files shared by processes and accounts: opened so that other accounts cannot take them, asked whether a holder
lives through the operating system's lock itself, and waited for with a bound that names the lock and its holder.

- :func:`open_safely`: the one way mutualrl opens a file in a folder a colleague could write (a run folder, a shared
  sweep or cache folder): a link at its name is refused, never followed; a FIFO never blocks the open; anything but
  a regular file (a FIFO, a device, a folder) is refused in one line naming it (:class:`UnsafeFileError`).

- :func:`open_lock_file`: ``flock`` works on any descriptor, a read-only one too, so a lock file others can read is a
  lock others can hold; a lock file is made owner- and group-only (:data:`LOCK_MODE`, under the umask), and one an
  older mutualrl made world-readable loses the others' bits when its owner opens it.
- :func:`lock_held`: whether a process (on any machine sharing the filesystem) holds a lock file's ``flock`` now,
  with a non-blocking probe: a record written into a lock file outlives its writer (a launcher killed on another
  node), the lock does not.
- :func:`wait_for_lock`: take a lock, saying once what it waits for and who holds it (the holder's record:
  :func:`write_holder`), and giving up after a bound with one line naming both.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mutualrl.errors import MutualRLError, UsageError

LOCK_MODE = 0o660
"""A lock file's mode before the umask: its owner and the owner's group (a shared project), never other accounts."""
NO_LOCKS = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
"""flock errors of a filesystem without locks."""
POLL_S = 0.2


class UnsafeFileError(UsageError):
    """A link, FIFO, device or folder where a file of mutualrl's belongs; the message is one line naming it."""


SAFE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""Added to every :func:`open_safely`: no link followed, no wait on a FIFO, no descriptor left to a child."""
SMALL_READ_BYTES = 64 * 1024
"""What :func:`read_small` reads at most: a lock's holder record is a few hundred bytes."""


def open_safely(path: str | os.PathLike[str], flags: int, mode: int = 0o666, what: str = "a file") -> int:
    """A descriptor of the regular file ``path`` opened with ``flags`` (and ``mode`` when created) plus
    :data:`SAFE_FLAGS`. A link at its name, a FIFO, a device or a folder there is refused in one line naming it and
    ``what`` belongs there (:class:`UnsafeFileError`); a link is never followed, so its target is neither written
    nor truncated nor changed in mode. Other errors (missing, permission) stay ``OSError``."""
    try:
        fd = os.open(path, flags | SAFE_FLAGS, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeFileError(f"{path}: a link where {what} belongs; not followed: remove it") from None
        if err.errno in (errno.EISDIR, errno.ENXIO):  # a folder; a FIFO opened write-only without a reader
            raise UnsafeFileError(f"{path}: not a regular file (a folder or FIFO) where {what} belongs; "
                                  "remove it") from None
        raise
    try:
        kind = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise UnsafeFileError(f"{path}: not a regular file ({file_kind(kind)}) where {what} belongs; remove it")
    return fd


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def read_small(path: str | os.PathLike[str], what: str = "a file") -> bytes:
    """At most :data:`SMALL_READ_BYTES` of the regular file ``path`` (opened with :func:`open_safely`: a FIFO
    there never hangs the reader). Raises ``OSError`` or :class:`UnsafeFileError`."""
    fd = open_safely(path, os.O_RDONLY, what=what)
    try:
        return os.pread(fd, SMALL_READ_BYTES, 0)
    finally:
        os.close(fd)


class LockTimeout(MutualRLError):
    """A lock still held when the wait's bound ran out; the message is one line naming the lock and its holder."""


def open_lock_file(path: Path) -> int:
    """A close-on-exec descriptor of lock file ``path``, created with :data:`LOCK_MODE` (a link there is refused, and
    a FIFO, a device or a folder: :class:`UnsafeFileError`); an existing file of this account readable by others is
    made owner- and group-only. A group member's file (readable, not writable here) is opened read-only: its lock is
    taken all the same, and no holder is recorded in it."""
    try:
        fd = open_safely(path, os.O_RDWR | os.O_CREAT, LOCK_MODE, what="a lock file")
    except PermissionError:
        fd = open_safely(path, os.O_RDONLY, what="a lock file")
    keep_to_owner_and_group(fd)
    return fd


def keep_to_owner_and_group(fd: int) -> None:
    """An open lock file of this account that others may read (an older mutualrl made it 0644) loses their bits."""
    try:
        info = os.fstat(fd)
        if info.st_uid == os.getuid() and info.st_mode & 0o007:
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~0o007)
    except OSError:
        pass


def lock_held(path: Path) -> bool | None:
    """Whether some process holds ``path``'s ``flock`` now: True, False (none does, or there is no such file), or
    None where this process cannot tell (the file is not readable here, or the filesystem has no locks). The probe
    takes a shared lock for an instant and gives it back."""
    try:
        fd = open_safely(path, os.O_RDONLY, what="a lock file")  # a FIFO there: no wait
    except FileNotFoundError:
        return False
    except (OSError, UnsafeFileError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # the probe's lock goes with its descriptor
    return False


def write_holder(fd: int) -> None:
    """Record this process as the holder in the lock file ``fd`` (written in place, then cut: a reader never sees
    it empty while the lock is held)."""
    data = json.dumps(holder_record()).encode()
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    except OSError:  # opened read-only (another account's file) or a full disk: the lock holds all the same
        pass


def holder_record() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "user": account_name(os.getuid()),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S")}


def account_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def describe_holder(path: Path) -> str:
    """Who holds lock file ``path``, as its record says (pid, account, machine, since), else its file's owner."""
    try:
        text = read_small(path, "a lock file").decode(errors="replace")[:2000]
        record = json.loads(text) if text.strip() else {}
    except (OSError, ValueError, RecursionError, UnsafeFileError):
        record = {}
    if isinstance(record, dict) and record.get("pid") is not None:
        return (f"pid {str(record.get('pid'))[:20]} of {str(record.get('user', '?'))[:40]} on "
                f"{str(record.get('host', '?'))[:80]} since {str(record.get('since', '?'))[:40]}")
    try:
        return f"a process of {account_name(path.stat().st_uid)} (the file's owner; it recorded no holder)"
    except OSError:
        return "a process that recorded no holder"


def wait_for_lock(fd: int, path: Path, what: str, timeout_s: float, say: Callable[[str], None]) -> bool:
    """Take ``fd``'s exclusive ``flock`` (``path``: its file; ``what``: what the lock guards, for the messages). At
    once if free; else ``say`` one line naming the lock and its holder, poll, and raise :class:`LockTimeout` after
    ``timeout_s`` naming both again. False: the filesystem has no locks (nothing is guarded; the caller may go on)."""
    deadline = time.monotonic() + timeout_s
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError as err:
            if err.errno in NO_LOCKS:
                return False
            raise
        if not said:
            say(f"waiting for {path} ({what}), held by {describe_holder(path)}; at most {timeout_s:.0f} s")
            said = True
        if time.monotonic() >= deadline:
            raise LockTimeout(f"{path}: still held by {describe_holder(path)} after {timeout_s:.0f} s ({what}); "
                              "wait for it to end, or stop that process")
        time.sleep(POLL_S)
