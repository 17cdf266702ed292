"""Starting a CPU policy worker by forking a process that has already imported the training stack.

A policy worker of a short run spends about half of its CPU importing torch, transformers and TRL (3-4 s on a
2-core box: benchmarks/README.md, "Worker start"). Where many short runs start on one machine -- the test suite
above all -- a *zygote* (:mod:`.fork_server`) imports them once and forks each worker from itself. The child is
what ``python -m mutualrl.training.worker ...`` would have been: its own session, the launcher's log file as
stdout and stderr, the launcher's environment and working directory, the module run as ``__main__``.

Only where :data:`FORK_SERVER_ENV` names a folder (``tests/conftest.py`` sets it for the suite), only for a worker
started as a plain process (``python -m mutualrl.training.worker``: never ``torchrun`` or ``accelerate launch``),
and only from a zygote started with the worker's very environment, apart from :data:`RUNTIME_ONLY` (variables no
library reads while it is imported): a variable read on import (the Hugging Face cache and offline switches,
OpenMP's thread count, glibc's allocator settings) has in the zygote the value the worker is given. Each distinct
environment gets its own zygote, started the first time it is asked for (that worker starts as before). Whatever
goes wrong -- no zygote yet, one gone, a refusal -- :func:`start_forked` answers None and the launcher starts the
process itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

FORK_SERVER_ENV = "MUTUALRL_FORK_SERVER"
"""A folder for zygotes' sockets (one per environment). Unset: every worker is started as its own process."""

WORKER_MODULE = "mutualrl.training.worker"
RUNTIME_ONLY = ("MUTUALRL_", "PYTEST_", "MASTER_ADDR", "MASTER_PORT", "TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS",
                "PYTORCH_NVML_BASED_CUDA_CHECK", "TORCHINDUCTOR_CACHE_DIR", "COLUMNS", "LINES", "PWD", "OLDPWD", "_")
"""Names (and prefixes) of variables read only after the imports: mutualrl's own (its modules are imported in the
child), pytest's, torch.distributed's rendezvous, the tokenizers' thread pool (built at the first batch), two that
vLLM's import sets and torch reads when called (``torch.cuda._nvml_based_avail``, inductor's ``cache_dir``), the
terminal's size (read by ``shutil.get_terminal_size``, tqdm and rich when they draw), the shell's bookkeeping."""

MAX_ZYGOTES = 4
"""Distinct environments served at once (each zygote holds ~0.6 GB); beyond, workers start as before."""

READY_TIMEOUT_S = 5.0
STARTING_STALE_S = 120.0


def runtime_only(name: str) -> bool:
    return name.startswith(RUNTIME_ONLY)


REBUILT_IN_THE_CHILD = ("PYTHONPATH",)
"""Read at the interpreter's start, not by a library: the child builds its ``sys.path`` from its own value
(``fork_server.import_path``) and starts fresh where a folder of it holds a module the zygote imported."""


def environment_key(python: str, env: Mapping[str, str]) -> str:
    """The zygote a worker with ``env`` may come from: the interpreter and every variable a library could read
    while it is imported."""
    fixed = sorted((k, v) for k, v in env.items() if not runtime_only(k) and k not in REBUILT_IN_THE_CHILD)
    return hashlib.sha256(json.dumps([python, fixed]).encode()).hexdigest()[:16]


def forkable(argv: list[str]) -> bool:
    """A plain ``python -m mutualrl.training.worker ...`` (the CPU launch of one rank)."""
    return len(argv) > 3 and argv[1:3] == ["-m", WORKER_MODULE] and argv[0] == sys.executable


class ForkedProcess:
    """A worker forked by a zygote, as much of ``subprocess.Popen`` as the pool runner uses: ``pid``, ``poll``,
    ``wait``, ``returncode`` (negative for a signal, as Popen's). The zygote reaps it and sends its exit status
    over the connection; a zygote that died first leaves the status unknown: reported as 1 once the pid is gone."""

    def __init__(self, pid: int, connection: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._connection: socket.socket | None = connection
        self._received = b""

    def poll(self) -> int | None:
        return self._read(0.0)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            code = self._read(max(0.0, min(left, 1.0)))
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)

    def _read(self, timeout: float) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._connection is None:  # the zygote died before telling: the pid is all there is
            if pid_exists(self.pid):
                time.sleep(min(timeout, 0.2))
            else:
                self.returncode = 1
            return self.returncode
        readable, _, _ = select.select([self._connection], [], [], timeout)
        if readable:
            chunk = self._connection.recv(256)
            self._received += chunk
            if b"\n" in self._received:  # "exit CODE"
                self._finish(int(self._received.split(b"\n", 1)[0].decode().split()[1]))
            elif not chunk:
                self._finish(None)
                return self._read(0.0)
        return self.returncode

    def _finish(self, code: int | None) -> None:
        self.returncode = code
        self._connection.close()
        self._connection = None


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_forked(argv: list[str], env: Mapping[str, str], cwd: str, log_fd: int) -> ForkedProcess | None:
    """``argv`` forked from the zygote for ``env``, its output into ``log_fd``; None where that cannot be done
    (then the caller starts it itself), after starting that zygote when there is none and room for one."""
    folder = os.environ.get(FORK_SERVER_ENV)
    if not folder or not Path(folder).is_dir():
        return None
    if not forkable(argv):
        note(Path(folder), "started", f"not a plain worker: {' '.join(argv[1:3]) or argv[0]}")
        return None
    key = environment_key(argv[0], env)
    path = Path(folder) / f"{key}.sock"
    if not path.exists():
        note(Path(folder), "started", f"no zygote {key}: {start_zygote(Path(folder), key, argv[0], env)}")
        return None
    process = request_fork(path, argv, env, cwd, log_fd)
    note(Path(folder), "forked" if process else "started", f"zygote {key}" + ("" if process else " did not answer"))
    return process


DECISIONS = "starts.log"


def note(folder: Path, how: str, why: str) -> None:
    """One line of ``FOLDER/starts.log`` a start: how the worker was started and why (best effort)."""
    try:
        with open(folder / DECISIONS, "a") as fh:
            fh.write(f"{how}: {why}\n")
    except OSError:
        pass


def request_fork(path: Path, argv: list[str], env: Mapping[str, str], cwd: str, log_fd: int) -> ForkedProcess | None:
    """Ask the zygote listening at ``path`` to run ``argv`` (``python -m MODULE ARGS``); None if it does not answer."""
    connection = connect(path)
    if connection is None:
        return None
    try:
        request = json.dumps({"argv": argv, "env": dict(env), "cwd": cwd, "umask": current_umask()}).encode()
        socket.send_fds(connection, [len(request).to_bytes(8, "big") + request], [log_fd])
        pid = int(read_line(connection, READY_TIMEOUT_S))
    except (OSError, ValueError):
        connection.close()
        return None
    return ForkedProcess(pid, connection)


def connect(path: Path) -> socket.socket | None:
    """A connection to the zygote at ``path`` that said it is ready; None when there is none that answers."""
    if not path.exists():
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
        if read_line(connection, READY_TIMEOUT_S) != "ready":
            raise OSError("no ready line")
    except (OSError, ValueError):
        connection.close()
        return None
    return connection


def read_line(connection: socket.socket, timeout: float) -> str:
    connection.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(64)
        if not chunk:
            raise OSError("the zygote closed the connection")
        data += chunk
    connection.settimeout(None)
    return data.decode().strip()


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_STARTED: list[subprocess.Popen] = []  # kept so that Python does not warn about a child still running


def start_zygote(folder: Path, key: str, python: str, env: Mapping[str, str]) -> str:
    """Start the zygote for ``env`` in the background, unless one is starting, one refused, or there are enough;
    what happened, in words."""
    starting = folder / f"{key}.starting"
    if (folder / f"{key}.failed").exists():  # it refused to serve once (its log says why): it would again
        return "it refused to serve"
    if len(list(folder.glob("*.sock"))) + len(list(folder.glob("*.starting"))) >= MAX_ZYGOTES:
        return f"{MAX_ZYGOTES} zygotes already"
    try:
        fd = os.open(starting, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        if time.time() - starting.stat().st_mtime >= STARTING_STALE_S:
            starting.unlink(missing_ok=True)  # its starter died: the next start tries again
        return "starting"
    os.close(fd)
    zygote_env = {k: v for k, v in env.items() if not runtime_only(k)}
    with open(folder / f"{key}.log", "ab") as log:
        _STARTED.append(subprocess.Popen([python, "-m", "mutualrl.host.fork_server", str(folder / f"{key}.sock")],
                                         env=zygote_env, cwd=folder, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True))
    return "started it"
