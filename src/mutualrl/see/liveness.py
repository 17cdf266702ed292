"""Liveness and failure of policy processes: heartbeats, failure markers, the barrier's timeout report.

The SEE heartbeat (``see/_heartbeat/<policy>.rank-<rank>.json``) is touched at step
boundaries and while waiting at a barrier; a paper-scale step (generation of 1024 x 5 long
rollouts) can take many minutes without either. :func:`start_heartbeat_thread` touches it
every few seconds from a daemon thread for as long as the process runs, so a silent
heartbeat means the process is stopped, frozen or gone -- not busy. The same thread counts
the main thread's *work*: a look at which its stack moved since the last one or it used the CPU, or
torch's autograd device threads used the CPU (a CUDA backward runs there while the main thread waits
in one call; a thread stuck in one call, waiting at the barrier or inside a reward function,
:func:`not_work`, does not count), so a slow step shows as progress and a hung one does not.

Readers never compare clocks: a heartbeat is written by another process, maybe on another
machine whose clock differs or jumps. :class:`HeartbeatWatch` notes, on the reader's own
monotonic clock, when it saw a heartbeat change (a beat) and when its work or validation
progress changed (progress); the launcher stops the pool after ``see.peer_timeout_s`` without a
beat, and a peer's barrier waits while a pending peer progresses.

A heartbeat is written best effort (:func:`write_heartbeat`): it holds no training data, and
on a full disk its mtime can still be set (that needs no space), so a failed write is one
warning and training goes on; the next write that holds data (a shard, a metric row, a
checkpoint) stops the policy with the one-line "no space left" error.

Failure markers (``see/_failed/<policy>.json``) let a dying process, or the launcher that
saw it die, stop its peers' barriers at once with the reason.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_atomic
from mutualrl.errors import MutualRLError, RunFolderError
from mutualrl.run_folder import read_bytes
from mutualrl.see import files
from mutualrl.see.errors import PeerTimeoutError

HEARTBEAT_INTERVAL_S = 5.0
HEARTBEAT_WARNING = "could not write the SEE heartbeat"
log = logging.getLogger(__name__)
_warned_heartbeats: set[str] = set()  # heartbeat files this process already warned about (one warning each)


def read_failure(root: Path | str, policy: str) -> dict[str, Any] | None:
    """The failure marker of ``policy`` (``None`` if there is none). An unreadable marker still counts as a failure."""
    path = files.failure_path(Path(root), policy)
    try:
        raw = read_bytes(path)  # a FIFO or a folder in its place: unreadable, never waited on
    except FileNotFoundError:
        return None
    except RunFolderError:
        raw = b""
    try:
        marker = json.loads(raw)
        if not isinstance(marker, dict):
            raise ValueError("not an object")
    except (ValueError, RecursionError):  # nested past the recursion limit: unreadable too
        marker = {"policy": policy, "reason": f"unreadable failure marker {path}"}
    return marker


def mark_policy_failed(
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
    data = json.dumps(marker, indent=1).encode()
    write_atomic(final, lambda sink: sink.write(data))
    return final


def clear_failure(root: Path | str, policy: str) -> bool:
    """Remove ``policy``'s failure marker (the launcher does this before a fresh attempt). True if one existed."""
    try:
        files.failure_path(Path(root), policy).unlink()
        return True
    except FileNotFoundError:
        return False


def read_heartbeat(root: Path, policy: str, rank: int) -> dict[str, Any]:
    """The content of ``policy``'s rank ``rank`` heartbeat, opened by its name; {} when there is none or it is
    unreadable."""
    try:
        content = json.loads(read_bytes(files.heartbeat_path(Path(root), policy, rank)))
    except (OSError, ValueError, RecursionError, RunFolderError):
        return {}
    return content if isinstance(content, dict) else {}


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
            content = json.loads(read_bytes(Path(entry.path)))  # a FIFO there never blocks the reader
        except (OSError, ValueError, RecursionError, RunFolderError):
            continue
        out[int(m.group("rank"))] = (now - st.st_mtime, content if isinstance(content, dict) else {})
    return out


def barrier_timeout_error(root: Path, waiter: str, step: int, pending: list[str],
                          found: dict[str, dict[int, dict[int, Any]]], other_runs: dict[str, set[str]],
                          waited: float, barrier_timeout_s: float, run_id: str, rank: int) -> PeerTimeoutError:
    """The barrier's timeout error: each missing policy and rank, with its heartbeat age."""
    missing: dict[str, list[int] | None] = {}
    ages: dict[str, float | None] = {}
    parts = []
    for policy in pending:
        beats = heartbeat_ages(root, policy)
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
        f"SEE barrier timed out after {waited:.1f} s (barrier_timeout_s={barrier_timeout_s:g}) at step {step} "
        f"of run {run_id!r} in {root}, waiting as policy {waiter!r} rank {rank}: "
        + "; ".join(parts)
        + f". None of them was seen getting on (a step, validation progress, work) for {barrier_timeout_s:g} s: a "
        "recent heartbeat means alive but stuck in one call (or waiting for another peer), an old or no heartbeat "
        "means stopped or gone."
    )
    return PeerTimeoutError(message, step=step, path=root, missing=missing, waited_s=waited, heartbeat_age_s=ages)


def write_heartbeat(path: Path, content: dict[str, Any]) -> bool:
    """Write a heartbeat file; on a failed write (full disk, I/O error) touch its mtime instead and warn once.

    Best effort, not an error: the heartbeat carries no training data, and stopping a policy
    for it would lose a step that may still complete. Its age stays right as long as the file
    exists (setting an mtime needs no space); only the step it names falls behind.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(content).encode()
        write_atomic(path, lambda sink: sink.write(data), durable=False)
        return True
    except (OSError, MutualRLError) as err:
        try:
            os.utime(path)
        except OSError:
            pass
        if str(path) not in _warned_heartbeats:
            _warned_heartbeats.add(str(path))
            log.warning("%s %s (%s); training goes on: peers see its age from the file's time, and a write that "
                        "holds data stops the run with the error", HEARTBEAT_WARNING, path, str(err).split(";")[0])
        return False


_outside_work = 0  # calls now running in this process whose time is not work (:func:`not_work`)


@contextlib.contextmanager
def not_work() -> Iterator[None]:
    """Time inside is not this process's work, however much it moves or computes: a reward function that never
    returns while it spins (an endless loop, a regex that backtracks forever) is a hang, so its peers' barrier
    times out and the launcher's stall clock runs, as for a call stuck waiting. A call shorter than
    ``see.barrier_timeout_s`` changes nothing: the work before it was seen."""
    global _outside_work
    _outside_work += 1
    try:
        yield
    finally:
        _outside_work -= 1


BUSY_SHARE = 0.05
"""A thread that used at least this share of a heartbeat interval's CPU time did work in it, though its stack may
look the same (a tight loop is seen at the same line)."""


def current_frame(ident: int) -> Any:
    """The innermost frame of thread ``ident``, read with the garbage collector paused: on CPython 3.11 a collection
    that starts inside ``sys._current_frames()`` can take the runtime's thread-list lock a second time and freeze the
    process (python/cpython#106883, not fixed in 3.11; a test suite's worker froze on it, 2026-11-28)."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return sys._current_frames().get(ident)
    finally:
        if paused:
            gc.enable()


def thread_position(thread: threading.Thread) -> tuple[tuple[tuple[int, int], ...], float | None]:
    """Where ``thread`` is now: (code, line) of each of its frames, innermost first, and its CPU seconds (None where
    the platform has no per-thread clock)."""
    frame = current_frame(thread.ident) if thread.ident is not None else None
    where = []
    while frame is not None and len(where) < 64:
        where.append((id(frame.f_code), frame.f_lineno))
        frame = frame.f_back
    try:
        cpu_s = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))  # type: ignore[arg-type]
    except (AttributeError, OSError, TypeError):
        cpu_s = None
    return tuple(where), cpu_s


def worked(before: tuple[Any, float | None], now: tuple[Any, float | None], interval_s: float) -> bool:
    """Whether a thread did work between two :func:`thread_position` looks: its stack moved or it used the CPU."""
    (stack_before, cpu_before), (stack_now, cpu_now) = before, now
    return stack_now != stack_before or busy(cpu_before, cpu_now, interval_s)


def busy(cpu_before: float | None, cpu_now: float | None, interval_s: float) -> bool:
    """Whether CPU seconds grew by :data:`BUSY_SHARE` of ``interval_s`` between two readings (None: unknown)."""
    return cpu_before is not None and cpu_now is not None and cpu_now - cpu_before >= BUSY_SHARE * interval_s


DEVICE_THREAD_PREFIX = "pt_autograd_"
"""How torch names its autograd device threads (``torch/csrc/autograd/engine.cpp``, ``Engine::thread_init``:
``c10::setThreadName("pt_autograd_" + device)``). On CUDA a backward runs there, one thread per device, while the
thread that called ``backward()`` waits in ``Engine::execute``: its stack stays put and it uses no CPU."""


def device_threads_cpu(tasks: Path = Path("/proc/self/task")) -> float | None:
    """CPU seconds this process's autograd device threads have used (Linux's ``/proc``); None where unreadable."""
    try:
        ids = os.listdir(tasks)
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    total = 0.0
    for tid in ids:
        try:
            if not (tasks / tid / "comm").read_text().startswith(DEVICE_THREAD_PREFIX):
                continue
            fields = (tasks / tid / "stat").read_text().rsplit(")", 1)[1].split()  # after the name, which may hold ')'
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (proc(5) fields 14, 15)
        except (OSError, ValueError, IndexError):  # a thread gone since the listing
            continue
    return total


def start_heartbeat_thread(exchange: Any, interval_s: float = HEARTBEAT_INTERVAL_S,
                           worker: threading.Thread | None = None,
                           stop: threading.Event | None = None) -> threading.Thread:
    """Touch ``exchange``'s heartbeat every ``interval_s`` seconds in a daemon thread (until ``stop`` is set, if
    given), counting a look at which ``worker`` (default: the main thread, which trains) had worked, or autograd's
    device threads had (a CUDA backward, :data:`DEVICE_THREAD_PREFIX`), and ``worker`` was neither waiting at the
    barrier nor in a call marked :func:`not_work` (a reward function), as work.
    A thread stuck in one call (a lock, a dead filesystem) shows no work; one spinning in a CUDA wait does (a hung
    collective is ended by the process group's own timeout)."""
    worker = worker or threading.main_thread()
    stop = stop or threading.Event()

    def beat() -> None:
        last, last_device = thread_position(worker), device_threads_cpu()
        while not stop.wait(interval_s):
            now, device = thread_position(worker), device_threads_cpu()
            moved = ((worked(last, now, interval_s) or busy(last_device, device, interval_s))
                     and not exchange.waiting and not _outside_work)
            last, last_device = now, device
            try:
                exchange.heartbeat(worked=moved)
            except (OSError, MutualRLError):  # a vanished folder must not kill training; the barrier reports it
                pass

    thread = threading.Thread(target=beat, name="mutualrl-see-heartbeat", daemon=True)
    thread.start()
    return thread


def progress_mark(content: dict[str, Any]) -> tuple[Any, ...]:
    """What changes in a heartbeat when its process gets on: the step it published, its validation progress, its
    work count (:func:`start_heartbeat_thread`)."""
    return content.get("step"), content.get("progress"), content.get("work")


class HeartbeatWatch:
    """The SEE heartbeats of other processes as this one sees them change, timed on this process's monotonic clock.

    What a first :meth:`look` finds is where each heartbeat stood before (a previous launch, a restarted policy's
    predecessor); a file that changes after, or appears, is a beat, and a changed :func:`progress_mark` is progress.
    """

    def __init__(self, root: Path | str, clock: Callable[[], float] = time.monotonic):
        self.root, self.clock = Path(root), clock
        self._seen: dict[tuple[str, int], tuple[tuple[int, int, int], tuple[Any, ...]]] = {}
        self._looked = False
        self.beat_at: dict[tuple[str, int], float] = {}  # (policy, rank): when a change of its file was last seen
        self.progress_at: dict[tuple[str, int], float] = {}  # (policy, rank): when its progress mark last changed

    def look(self) -> None:
        """Read every heartbeat once; note the ones that changed since the last look."""
        now = self.clock()
        try:
            entries = list(os.scandir(self.root / files.HEARTBEAT_DIR))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            m = files.HEARTBEAT_RE.match(entry.name)
            if not m:
                continue
            try:
                content = json.loads(read_bytes(Path(entry.path)))  # a FIFO there never blocks the barrier
                st = os.stat(entry.path)  # after the read: an open refreshes a shared filesystem's cached times
            except (OSError, ValueError, RecursionError, RunFolderError):
                continue
            key = (m.group("policy"), int(m.group("rank")))
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            mark = progress_mark(content if isinstance(content, dict) else {})
            before = self._seen.get(key)
            self._seen[key] = (stamp, mark)
            if before is None and not self._looked or before == (stamp, mark):
                continue
            self.beat_at[key] = now
            if before is None or before[1] != mark:
                self.progress_at[key] = now
        self._looked = True

    def forget(self, policy: str) -> None:
        """``policy`` starts again: its heartbeats count from their next change."""
        for times in (self.beat_at, self.progress_at):
            for key in [k for k in times if k[0] == policy]:
                del times[key]

    def silent_for(self, policy: str, ranks: Iterable[int] | None = None) -> float | None:
        """Seconds since a beat of ``policy`` (any of ``ranks``, default all) was last seen; None: none seen."""
        return self._since(self.beat_at, [policy], ranks)

    def idle_for(self, policies: Iterable[str]) -> float | None:
        """Seconds since any of ``policies`` was last seen progressing; None: not seen."""
        return self._since(self.progress_at, list(policies), None)

    def _since(self, times: dict[tuple[str, int], float], policies: list[str], ranks: Iterable[int] | None) -> float | None:
        wanted = None if ranks is None else set(ranks)
        seen = [t for (policy, rank), t in times.items() if policy in policies and (wanted is None or rank in wanted)]
        return self.clock() - max(seen) if seen else None
