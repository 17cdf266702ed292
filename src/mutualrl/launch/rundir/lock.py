"""One holder per run folder, and the checks that keep a run folder safe to delete and write.

- :class:`RunLock` is an OS file lock (``flock``) on ``RUN/.lock``, held by the launcher alone: its descriptor
  is close-on-exec and no worker gets it, so nothing a reward function spawns or execs can keep it. The file
  records the holder (pid, host, time, and the process's start time, so a reused pid is not taken for it) and
  the process group of each worker it starts: a second launch refuses the folder while the launcher or one of
  those workers is alive (a killed launcher's workers stop within seconds, ``ops.watchdog``; it waits for
  them), and a lock whose recorded holder and workers are all gone is taken over, even when a stray process
  still holds the old file's lock (a new file is made). A message names only a process it has checked. The file is
  its owner's and group's only (``flock`` works on a read-only descriptor: a lock file others can read, others can
  hold).
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
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from mutualrl.errors import UsageError
from mutualrl.host.file_lock import (
    LOCK_MODE,
    UnsafeFileError,
    keep_to_owner_and_group,
    open_safely,
    read_small,
)
from mutualrl.run_folder import LOCK_NAME, MACHINES_DIR, RUN_MARKER, RunPaths


def is_coordination_entry(name: str) -> bool:
    """A run folder entry of the launchers themselves (locks, the machines' join files), not of the run."""
    return name.startswith(LOCK_NAME) or name == MACHINES_DIR
# Workers of a killed launcher notice within ~1 s (ops.watchdog) and then exit; a second
# launch waits this long for them before it reports the folder as busy.
ORPHAN_GRACE_S = 20.0

START_TOLERANCE_S = 0.01
"""Two start times of one process (psutil's, from the kernel's clock ticks since boot) differ by less than this."""


NO_LOCKS = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
"""flock errors of a filesystem without locks: the launch goes on, with a warning."""


class RunBusyError(UsageError):
    """The run folder is held by a live launch."""


class RunLock:
    """Exclusive lock on ``root/.lock`` (``name``: another lock file, e.g. machine k's); ``fd`` stays open (and
    close-on-exec) while held; :meth:`add_worker` records each worker started under it."""

    def __init__(self, root: Path, name: str = LOCK_NAME):
        self.root = Path(root)
        self.path = self.root / name
        self.fd: int | None = None
        self.workers: dict[str, dict[str, Any]] = {}
        self.recorded = False  # this holder's record is in the file (not a stopped launch's, still needed)
        self.warning: str | None = None
        """Set when the filesystem has no file locks (e.g. Lustre without -o flock): the run is not protected."""
        self._waiting_said = False

    def acquire(self, action: str, wait_for_orphans_s: float = ORPHAN_GRACE_S) -> RunLock:
        """Take the lock, or raise :class:`RunBusyError`: its recorded holder is alive here, runs on another machine
        (not checked from here) or did not say who it is, or the workers of a stopped launch outlive
        ``wait_for_orphans_s`` (their watchdog stops them: it waits that long). A holder and workers all gone: the lock
        is taken over. A filesystem without file locks: taken, with :attr:`warning` set."""
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + wait_for_orphans_s
        while True:
            # no other account takes it; a link, FIFO or folder planted at its name is refused, naming it
            fd = open_safely(self.path, os.O_RDWR | os.O_CREAT, LOCK_MODE, what="the run folder's lock file")
            keep_to_owner_and_group(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held = os.fstat(fd).st_ino
                os.close(fd)
                self._held_elsewhere(action, held, deadline)
                continue
            except OSError as err:
                if err.errno not in NO_LOCKS:
                    os.close(fd)
                    raise
                self.warning = (f"{self.path}: this filesystem has no file locks ({os.strerror(err.errno)}); "
                                "nothing stops a second launcher from using this run folder (on Lustre mount with "
                                "-o flock or -o localflock)")
            if self.warning is None and not same_file(fd, self.path):  # another launcher replaced a stray's file
                os.close(fd)
                continue
            self.fd = fd
            self._wait_for_workers(action, deadline)
            break
        self._write_record()
        return self

    def _held_elsewhere(self, action: str, held_inode: int, deadline: float) -> None:
        """The file's lock is held by another process: busy if its recorded holder or one of its workers is alive
        (checked), else a stray process (one a reward function started) holds it: the file is made anew."""
        holder = read_holder(self.path)
        if not holder or holder_alive(holder):
            raise RunBusyError(f"cannot {action} {self.root}: the run is live ({describe_holder(holder, self.path)})")
        if live_workers(holder):
            if time.monotonic() < deadline:
                self._say_waiting(holder, deadline)
                time.sleep(0.5)
                return
            raise RunBusyError(f"cannot {action} {self.root}: {describe_workers(holder)}")
        try:  # only the file found locked (a tiny window: a launcher replacing it at the same moment)
            if os.stat(self.path).st_ino == held_inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _wait_for_workers(self, action: str, deadline: float) -> None:
        """Holding the lock, wait for the recorded workers of a stopped launch to end; refuse if they outlive
        the grace period."""
        while True:
            holder = read_holder(self.path)
            if not live_workers(holder):
                return
            if time.monotonic() >= deadline:
                self.release()
                raise RunBusyError(f"cannot {action} {self.root}: {describe_workers(holder)}")
            self._say_waiting(holder, deadline)
            time.sleep(0.5)

    def _say_waiting(self, holder: dict[str, Any], deadline: float) -> None:
        """Once per acquire: on stderr, what the wait is for (a stopped launch's workers) and how long at most."""
        if not self._waiting_said:
            self._waiting_said = True
            workers = "; ".join(f"policy {policy}'s worker (pid {', '.join(map(str, pids))})"
                                for policy, pids in live_workers(holder))
            print(f"mutualrl: {self.path}: waiting up to {max(0.0, deadline - time.monotonic()):.0f} s for the workers "
                  f"of the stopped launch (pid {holder.get('pid')}) to end: {workers}", file=sys.stderr, flush=True)

    def add_worker(self, policy: str, pid: int) -> None:
        """Record a worker started with its own process group (``pid`` leads it) while this lock is held."""
        self.workers[policy] = {"pgid": pid, "start": process_start(pid)}
        self._write_record()

    def forget_workers(self) -> None:
        """The workers ended: what they started is no worker of this run and keeps no folder busy."""
        self.workers = {}
        self._write_record()

    def _write_record(self) -> None:
        if self.fd is None:
            return
        data = json.dumps({"pid": os.getpid(), "start": process_start(os.getpid()), "host": socket.gethostname(),
                           "since": time.strftime("%Y-%m-%dT%H:%M:%S"), "workers": self.workers}).encode()
        os.pwrite(self.fd, data, 0)  # then cut: a reader never sees an empty file while the lock is held
        os.ftruncate(self.fd, len(data))
        self.recorded = True

    def release(self) -> None:
        if self.fd is not None:
            if self.recorded:  # emptied: a launch that changed nothing (a --resume of a finished run) leaves
                try:  # the folder byte for byte as it found it
                    os.ftruncate(self.fd, 0)
                except OSError:
                    pass
            self.recorded = False
            os.close(self.fd)  # the lock goes with the launcher's one descriptor
            self.fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def same_file(fd: int, path: Path) -> bool:
    """``fd`` is still the file at ``path`` (not one unlinked since it was opened)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def read_holder(path: Path) -> dict[str, Any]:
    """The holder record of lock file ``path`` (``{}``: none, unreadable, or no regular file there: a FIFO is never
    waited on)."""
    try:
        data = json.loads(read_small(path, "the run folder's lock file").decode() or "{}")
    except (OSError, UnsafeFileError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def describe_holder(holder: dict[str, Any], path: Path | None = None) -> str:
    """The holder as checked: a live pid here, a pid on another machine (not checked from here), or unknown."""
    if not holder:
        where = f" ({path} says nothing readable)" if path is not None else ""
        return (f"held by a process that did not say who it is{where}; if no launch uses this folder, delete "
                f"{path or 'its lock file'}")
    pid, host = holder.get("pid"), holder.get("host")
    if host not in (None, socket.gethostname()):
        return f"held by pid {pid} on {host} since {holder.get('since')} (another machine: stop that launch there)"
    return (f"held by pid {pid} since {holder.get('since')}, alive; stop it first (Ctrl-C in its terminal, or "
            f"kill {pid})")


def describe_workers(holder: dict[str, Any]) -> str:
    """The live workers of a stopped launch, each with the pids found alive in its process group."""
    parts = [f"policy {policy}'s worker (pid {', '.join(map(str, pids))})" for policy, pids in live_workers(holder)]
    return (f"the launch that held it (pid {holder.get('pid')}) is gone but {'; '.join(parts)} still runs; its "
            "watchdog stops it within seconds of its launcher's end: wait, or kill those pids")


def holder_alive(holder: dict[str, Any]) -> bool:
    """The recorded holder is alive (a holder on another machine, seen through a shared filesystem, is taken to be)."""
    if holder.get("host") not in (None, socket.gethostname()):
        return True
    return same_process(holder.get("pid"), holder.get("start"))


def live_workers(holder: dict[str, Any]) -> list[tuple[str, list[int]]]:
    """The recorded workers of this machine's holder still alive, with the live pids of each one's group."""
    workers = holder.get("workers")
    if holder.get("host") not in (None, socket.gethostname()) or not isinstance(workers, dict):
        return []
    live = []
    for policy, worker in workers.items():
        pgid = worker.get("pgid") if isinstance(worker, dict) else None
        if not isinstance(pgid, int) or pgid <= 0:
            continue
        leader = [pgid] if same_process(pgid, worker.get("start")) else []
        members = leader or group_members(pgid, since=worker.get("start"))
        if members:
            live.append((str(policy), members))
    return live


def pid_alive(pid: Any) -> bool:
    """``pid`` is a live process here (a zombie is not)."""
    return same_process(pid, None)


def same_process(pid: Any, start: Any) -> bool:
    """``pid`` is alive (not a zombie) and, where its start time was recorded (:func:`process_start`), the same process
    (not a reuse). A start an earlier mutualrl recorded (clock ticks, a string) is not comparable: the pid decides."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        created = process.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # another user's process, alive
        return True
    return not _is_time(start) or abs(created - start) < START_TOLERANCE_S


def process_start(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch, psutil's create time); None where it cannot be read."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def group_members(pgid: int, since: Any = None) -> list[int]:
    """Live pids of process group ``pgid`` that started no earlier than its leader did (``since``, when recorded)."""
    members = []
    for process in psutil.process_iter(["status", "create_time"]):
        try:
            in_group = os.getpgid(process.pid) == pgid
        except OSError:  # gone since the listing, or not ours to ask
            continue
        info = process.info
        if in_group and info["status"] != psutil.STATUS_ZOMBIE and \
                (not _is_time(since) or (info["create_time"] or 0.0) >= since - START_TOLERANCE_S):
            members.append(process.pid)
    return members


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
    from mutualrl.release import VERSION

    root.mkdir(parents=True, exist_ok=True)
    unique = f"{root.name[:80]}-{uuid.uuid4().hex[:12]}"  # two runs of one name never share an exchange's records
    RunPaths(root).marker.write_text(json.dumps({"mutualrl": VERSION, "run_id": unique}) + "\n")


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
