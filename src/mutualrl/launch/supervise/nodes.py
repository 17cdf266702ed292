"""Several machines, one run folder: how the launchers of a multi-machine run find each other.

Every machine runs ``mutualrl train ... --nodes N --machine-rank K`` on the same run folder (a
shared filesystem, mounted at the same path everywhere). They coordinate through small JSON
files in ``RUN/.machines/``, written atomically (temporary name + rename in the same folder) and
polled -- no sockets, no clocks compared, no lock shared between machines:

1. Machine K > 0 takes its own lock (``RUN/.lock-machine-K``: two launchers claiming the same
   machine rank on one host are refused) and writes ``join-K.json`` (a fresh token, its host, pid
   and address), re-writing it every second until it is accepted.
2. Machine 0 takes the run lock (``RUN/.lock``), prepares the run (config, prompts, plan) exactly
   as on one machine, deletes the previous session's files, waits for every machine to join
   (``launch.join_timeout_s``) and writes ``session.json``: a new session id, each machine's
   token and address, and the checkpoint step a resume starts from.
3. Machine K starts when ``session.json`` holds its own token (a stale session of an earlier
   launch never does; a new session holding another launcher's token means that one took this
   machine rank: refused). It plans the stored config for itself, checks its placement agrees
   with machine 0's ``launch/plan.json``, and starts only its own workers.
4. Each machine writes ``done-K.json`` (session id, ok or the failure) when its workers have
   exited. Machine 0 waits for every machine's report before it writes ``run.json``'s final
   status and ``summary.json``; only machine 0 writes run-level files (``run.json``, the
   merged metrics, ``summary.json``).

While training, each launcher also watches the policies of the other machines through the
shared folder (:class:`RemoteWatch`): a failure marker, a heartbeat not seen to change for
``see.peer_timeout_s`` (timed on this launcher's clock, never compared with the other machine's)
or a failed report stops its own workers.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.errors import UsageError
from mutualrl.run_folder import RunPaths, read_json_or
from mutualrl.see.liveness import HeartbeatWatch, read_failure

REJOIN_S = 1.0


def session_path(root: Path) -> Path:
    return RunPaths(Path(root)).machines_dir / "session.json"


def join_path(root: Path, machine: int) -> Path:
    return RunPaths(Path(root)).machines_dir / f"join-{machine}.json"


def done_path(root: Path, machine: int) -> Path:
    return RunPaths(Path(root)).machines_dir / f"done-{machine}.json"


def local_address(toward: str) -> str:
    """This machine's address on the route to ``toward`` (machine 0); no packet is sent."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(toward, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind, proto) as sock:
            sock.connect(address)
            return str(sock.getsockname()[0])
    except OSError:
        return socket.gethostname()


def read_entry(path: Path) -> dict[str, Any] | None:
    """A machines' coordination file (session, join, done), or None while it is missing or damaged."""
    return read_json_or(path, None)


def addresses(session: dict[str, Any]) -> dict[int, str]:
    """{machine: address} of a session."""
    return {int(k): str(v.get("address")) for k, v in (session.get("machines") or {}).items() if v.get("address")}


def open_session(root: Path, nodes: int, main_address: str, resume_step: int | None, timeout_s: float,
                 say: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Machine 0: wait until machines 1..nodes-1 joined, then write the session they start from."""
    root = Path(root)
    session_path(root).parent.mkdir(parents=True, exist_ok=True)
    others = list(range(1, nodes))
    for stale in [session_path(root), *(join_path(root, k) for k in others), *(done_path(root, k) for k in range(nodes))]:
        stale.unlink(missing_ok=True)  # a live joiner re-writes its file within a second
    say(f"waiting for machine(s) {', '.join(map(str, others))} to join: run the same `mutualrl train` there with "
        f"--nodes {nodes} --machine-rank K --main-address {main_address}")
    deadline = time.monotonic() + timeout_s
    joined: dict[int, dict[str, Any]] = {}
    while True:
        for machine in others:
            entry = read_entry(join_path(root, machine))
            if entry and entry.get("token"):
                joined[machine] = entry
        if len(joined) == len(others):
            break
        if time.monotonic() > deadline:
            missing = ", ".join(str(k) for k in others if k not in joined)
            raise UsageError(f"machine(s) {missing} did not join {root} within launch.join_timeout_s={timeout_s:g}s: "
                             f"start `mutualrl train` with the same options and --nodes {nodes} --machine-rank K on "
                             "each, with the run folder on a shared filesystem at the same path")
        sleep(0.5)
    session = {
        "session": uuid.uuid4().hex, "nodes": nodes, "run_dir": str(root), "resume_step": resume_step,
        "machines": {"0": {"host": socket.gethostname(), "pid": os.getpid(), "address": main_address},
                     **{str(k): entry for k, entry in sorted(joined.items())}},
    }
    write_json_atomic(session_path(root), session)
    listing = ", ".join(f"{k} ({entry.get('host')})" for k, entry in sorted(joined.items()))
    say(f"machine(s) {listing} joined")
    return session


def join_session(root: Path, machine: int, nodes: int, address: str, timeout_s: float, say: Callable[[str], None],
                 sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Machine ``machine`` > 0: announce itself until machine 0's session accepts it; returns the session."""
    root = Path(root)
    token = uuid.uuid4().hex
    before = (read_entry(session_path(root)) or {}).get("session")
    entry = {"token": token, "host": socket.gethostname(), "pid": os.getpid(), "address": address}
    say(f"machine {machine} of {nodes}: waiting for machine 0 to plan the run in {root}")
    deadline, written = time.monotonic() + timeout_s, -REJOIN_S
    while True:
        now = time.monotonic()
        if now - written >= REJOIN_S:  # machine 0 clears the joins of earlier launches when it starts
            write_json_atomic(join_path(root, machine), entry)
            written = now
        session = read_entry(session_path(root))
        if session and session.get("session") != before:
            if int(session.get("nodes", 0)) != nodes:
                raise UsageError(f"machine 0 runs {root} on {session.get('nodes')} machines, not --nodes {nodes}: "
                                 "start every machine with the same --nodes")
            mine = (session.get("machines") or {}).get(str(machine)) or {}
            if mine.get("token") == token:
                return session
            raise UsageError(f"machine 0 started {root} with another launcher as machine {machine} "
                             f"(pid {mine.get('pid')} on {mine.get('host')}): two launchers claimed --machine-rank "
                             f"{machine}")
        if now > deadline:
            raise UsageError(f"machine 0 did not start {root} within launch.join_timeout_s={timeout_s:g}s: start "
                             f"`mutualrl train` with the same options and --machine-rank 0 there (or resume it)")
        sleep(0.25)


def write_done(root: Path, machine: int, session: dict[str, Any], ok: bool, reason: str = "",
               failed_policy: str | None = None, returncodes: dict[str, int | None] | None = None) -> None:
    write_json_atomic(done_path(root, machine), {
        "session": session.get("session"), "machine": machine, "ok": ok, "reason": reason,
        "failed_policy": failed_policy, "returncodes": returncodes or {}, "host": socket.gethostname(),
    })


def read_done(root: Path, machine: int, session: dict[str, Any]) -> dict[str, Any] | None:
    """Machine ``machine``'s end-of-workers report in this session (None: not yet)."""
    done = read_entry(done_path(root, machine))
    return done if done and done.get("session") == session.get("session") else None


class RemoteWatch:
    """The policies on other machines, seen through the shared run folder; and this machine's own report.

    ``policies``: {policy: its machines} (:func:`machines_of`); those with no rank here are watched.
    ``wait_for``: the machines whose report ends the run here (machine 0: all the others; others: none).
    """

    def __init__(self, root: Path, see_root: Path, session: dict[str, Any], machine: int,
                 policies: dict[str, Sequence[int]], wait_for: Sequence[int], peer_timeout_s: float | None):
        self.root, self.see_root, self.session, self.machine = Path(root), Path(see_root), session, machine
        self.machines_of = {policy: tuple(machines) for policy, machines in policies.items()}
        self.remote = {policy: machines for policy, machines in self.machines_of.items() if machine not in machines}
        self.wait_for = list(wait_for)
        # Reports that stop this machine: every machine it waits for or shares a policy with.
        self.watched = sorted(set(self.wait_for) | {m for ms in self.remote.values() for m in ms} - {machine})
        self.peer_timeout_s = peer_timeout_s
        self.heartbeats = HeartbeatWatch(see_root)
        self.done_ok: set[int] = set()
        self.reported = False

    @property
    def policies(self) -> list[str]:
        return list(self.remote)

    def report(self, ok: bool, reason: str = "", failed_policy: str | None = None,
               returncodes: dict[str, int | None] | None = None) -> None:
        """This machine's workers have exited, or its launcher stopped (written once)."""
        if not self.reported and read_done(self.root, self.machine, self.session) is None:
            write_done(self.root, self.machine, self.session, ok, reason, failed_policy, returncodes)
        self.reported = True

    def _finished_elsewhere(self, machines: Sequence[int]) -> bool:
        for machine in machines:
            if machine not in self.done_ok:
                done = read_done(self.root, machine, self.session)
                if done is None or not done.get("ok"):
                    return False
                self.done_ok.add(machine)
        return True

    def failure(self) -> tuple[str, str] | None:
        """(policy, reason) when a policy elsewhere failed or went silent, or a machine reported a failure."""
        self.heartbeats.look()
        for policy, machines in self.remote.items():
            if self._finished_elsewhere(machines):
                continue
            marker = read_failure(self.see_root, policy)
            if marker is not None:
                return policy, f"failed on machine {machines[0]}: {marker.get('reason')}"
            age = self.heartbeats.silent_for(policy)
            if self.peer_timeout_s is not None and age is not None and age > self.peer_timeout_s:
                return policy, (f"(machine {machines[0]}) sent no heartbeat for {age:.0f}s (see.peer_timeout_s="
                                f"{self.peer_timeout_s:g}): its machine or launcher is gone, or it hung")
        for machine in self.watched:
            done = read_done(self.root, machine, self.session)
            if done is not None and not done.get("ok"):
                if done.get("failed_policy"):
                    return done["failed_policy"], f"on machine {machine}: {done.get('reason')}"
                # the launcher itself stopped: name a policy of that machine (its marker stops our barriers)
                there = [p for p, machines in self.machines_of.items() if machine in machines]
                return (there[0] if there else f"machine-{machine}"), str(done.get("reason"))
        return None

    def finished(self) -> bool:
        return self._finished_elsewhere(self.wait_for)


def machines_of(plan: Any) -> dict[str, tuple[int, ...]]:
    """{policy: its machines} of a launch plan."""
    return {p.name: tuple(p.placement.machines) for p in plan.policies}


@contextlib.contextmanager
def reporting(watch: RemoteWatch | None) -> Iterator[None]:
    """A launcher that stops on an error reports it, so the other machines stop their workers at once."""
    try:
        yield
    except BaseException as err:
        if watch is not None:
            watch.report(False, f"machine {watch.machine}'s launcher stopped: {type(err).__name__}: {err}")
        raise
