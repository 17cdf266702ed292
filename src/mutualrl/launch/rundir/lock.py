"""One holder per run folder, and the checks that keep a run folder safe to delete and write.

- :class:`RunLock` is an OS file lock (``flock``) on ``RUN/.lock``. The launcher takes it
  before touching the folder and passes the locked descriptor to its policy workers, so the
  lock is held while any process of the run is alive (an orphaned worker included). The
  file also records who holds it (pid, host, time) for the message a second launch gets.
  The OS drops the lock when its last holder dies: a lock left by a killed run is stale and
  is simply taken over.
- :data:`RUN_MARKER` marks a folder as a mutualrl run: ``--overwrite`` deletes nothing else.
- :func:`check_no_escaping_symlinks`: nothing under a run folder may point out of it, since
  a resumed run writes through whatever it finds there.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from mutualrl.errors import UsageError
from mutualrl.run_folder import LOCK_NAME, MACHINES_DIR, RUN_MARKER, RunPaths


def is_coordination_entry(name: str) -> bool:
    """A run folder entry of the launchers themselves (locks, the machines' join files), not of the run."""
    return name.startswith(LOCK_NAME) or name == MACHINES_DIR
# Workers of a killed launcher notice within ~1 s (training.watchdog) and then exit; a second
# launch waits this long for them before it reports the folder as busy.
ORPHAN_GRACE_S = 20.0


NO_LOCKS = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
"""flock errors of a filesystem without locks: the launch goes on, with a warning."""


class RunBusyError(UsageError):
    """The run folder is held by a live launch."""


class RunLock:
    """Exclusive lock on ``root/.lock`` (``name``: another lock file, e.g. machine k's); ``fd`` stays open (and
    inheritable) while held."""

    def __init__(self, root: Path, name: str = LOCK_NAME):
        self.root = Path(root)
        self.path = self.root / name
        self.fd: int | None = None
        self.warning: str | None = None
        """Set when the filesystem has no file locks (e.g. Lustre without -o flock): the run is not protected."""

    def acquire(self, action: str, wait_for_orphans_s: float = ORPHAN_GRACE_S) -> RunLock:
        """Take the lock or raise :class:`RunBusyError` naming the holder.

        When the recorded holder is dead but the lock is still held, its workers are on their
        way out (their watchdog stops them): wait up to ``wait_for_orphans_s`` for them.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_for_orphans_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = read_holder(self.path)
                if holder_alive(holder) or time.monotonic() >= deadline:
                    os.close(fd)
                    raise RunBusyError(f"cannot {action} {self.root}: the run is live ({describe_holder(holder)}); "
                                       "stop it first (Ctrl-C in its terminal, or kill that pid)") from None
                time.sleep(0.5)
            except OSError as err:
                if err.errno not in NO_LOCKS:
                    os.close(fd)
                    raise
                self.warning = (f"{self.path}: this filesystem has no file locks ({os.strerror(err.errno)}); "
                                "nothing stops a second launcher from using this run folder (on Lustre mount with "
                                "-o flock or -o localflock)")
                break
        os.set_inheritable(fd, True)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "since": time.strftime("%Y-%m-%dT%H:%M:%S")}).encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closes our descriptor; workers that inherited it keep the lock until they exit
            self.fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def read_holder(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def describe_holder(holder: dict[str, Any]) -> str:
    if not holder:
        return "held by an unknown process"
    alive = "alive" if holder_alive(holder) else "launcher gone, its workers still exiting"
    return f"held by pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}, {alive}"


def holder_alive(holder: dict[str, Any]) -> bool:
    """The recorded holder is alive (a holder on another machine, seen through a shared filesystem, is taken to be)."""
    if holder.get("host") not in (None, socket.gethostname()):
        return True
    return pid_alive(holder.get("pid"))


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_run_folder(root: Path) -> bool:
    """A folder mutualrl created (its marker; runs from before the marker: config.yaml + run.json)."""
    paths = RunPaths(root)
    return paths.marker.is_file() or (paths.config.is_file() and paths.run_json.is_file())


def require_run_folder(root: Path) -> None:
    """Refuse ``--overwrite`` of a folder mutualrl did not create (nothing is deleted)."""
    if not is_run_folder(root):
        raise UsageError(f"--overwrite: {root} is not a mutualrl run folder (no {RUN_MARKER} marker): nothing was "
                         "deleted; remove it yourself or choose another --output-dir")


def mark_run_folder(root: Path) -> None:
    from mutualrl import __version__

    root.mkdir(parents=True, exist_ok=True)
    unique = f"{root.name[:80]}-{uuid.uuid4().hex[:12]}"  # two runs of one name never share an exchange's records
    RunPaths(root).marker.write_text(json.dumps({"mutualrl": __version__, "run_id": unique}) + "\n")


def clear_run_folder(root: Path) -> None:
    """Delete a run folder's content for ``--overwrite``; refuses a folder that is not a mutualrl run.

    The lock files stay (we hold ours; other machines' launchers may hold theirs); symlinks are removed,
    never followed.
    """
    import shutil

    require_run_folder(root)
    for child in root.iterdir():
        if child.name.startswith(LOCK_NAME):
            continue
        if child.is_symlink() or not child.is_dir():
            child.unlink()
        else:
            shutil.rmtree(child)


def check_no_escaping_symlinks(root: Path) -> None:
    """Refuse a run folder holding a symlink that resolves outside it (writes would follow it out)."""
    root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                try:
                    target = path.resolve()
                except (RuntimeError, OSError):  # Python < 3.13 raises RuntimeError("Symlink loop ...")
                    raise UsageError(f"run folder {root} holds a symlink loop: {path}; remove it") from None
                if target != root and root not in target.parents:
                    raise UsageError(f"run folder {root} holds a symlink pointing outside it: {path} -> {target}; "
                                     "remove it (a run writes only inside its folder)")
