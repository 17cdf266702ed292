"""The test suite's zygote: one process that imports the training stack once and forks policy workers from itself.

``python -m zygotes.server SOCKET [--with-vllm]`` is started by :func:`.start.start_zygote` with
the environment and the process attributes of the workers it will serve. It imports what every CPU worker imports
(vLLM blocked, as a worker that does not generate with it blocks it, unless ``--with-vllm``), checks that no thread a fork would leave
behind runs (forking such a process is unsafe), then answers on the Unix socket ``SOCKET``, per connection:

1. it writes ``ready``; the launcher sends one request (argv, environment, working directory, umask, ignored
   signals and signal mask) with the log file's descriptor;
2. it forks; the child takes its own session, then the zygote writes the child's pid (so a ``killpg`` from the
   launcher reaches it from the first moment);
3. the child goes on only when the launcher answers ``g`` (a launcher that gave up meanwhile starts the worker
   itself: the child then leaves without running anything) and becomes the worker (:mod:`.child`);
4. at the child's end the zygote writes ``exit CODE`` (Popen's convention: negative for a signal).

It stops taking requests when its folder is deleted or after :data:`IDLE_S` without one, and leaves once its
children have.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mutualrl.host.process_start import collector_paused_for_imports, imports_done
from zygotes import child as forked_child

PREIMPORTED = ("torch", "transformers", "datasets", "accelerate", "peft", "trl", "trl.trainer.grpo_config",
               "trl.trainer.grpo_trainer")
"""What the worker imports anyway, whatever its policy; none of mutualrl's own modules (the child imports those
with its own environment)."""

IDLE_S = 180.0
GO_TIMEOUT_S = 30.0

FORK_SAFE_THREADS = {"jemalloc_bg_thd"}
"""Native threads a fork may leave behind: pyarrow's jemalloc purger (started when the library loads; jemalloc takes
its locks around a fork and starts it again in the child when needed, as under every DataLoader forked after
``datasets`` was imported)."""


def preimport(with_vllm: bool = False) -> None:
    """The training stack's imports, the collector paused and the result frozen (as a worker does), vLLM blocked
    unless ``with_vllm``; what they put into the environment is kept for the children
    (:data:`.child.IMPORTS_SET_ENV`)."""
    before = dict(os.environ)
    with collector_paused_for_imports():
        if not with_vllm:  # as training.worker.block_unused_vllm: TRL takes its no-vLLM branch
            sys.modules.setdefault("vllm", None)
        for module in PREIMPORTED:  # TRL's trainer module imports vLLM where it is not blocked
            importlib.import_module(module)
        imports_done()
    forked_child.IMPORTS_SET_ENV.update({k: v for k, v in os.environ.items() if before.get(k) != v})


def other_threads() -> list[str]:
    """The threads but the main one, apart from :data:`FORK_SAFE_THREADS` (a fork must not leave them behind)."""
    python = [thread.name for thread in threading.enumerate() if thread is not threading.main_thread()]
    try:
        names = [Path(f"/proc/self/task/{task}/comm").read_text().strip() for task in os.listdir("/proc/self/task")]
    except OSError:
        return [*python, "(threads unknown: no /proc)"]
    unsafe = [name for name in names if name not in FORK_SAFE_THREADS]
    return python or unsafe[1:]  # one is the main thread


def refuse(socket_path: Path, why: str) -> None:
    print(f"fork server: {why}; not serving (workers start as before)", flush=True)
    socket_path.with_suffix(".starting").replace(socket_path.with_suffix(".failed"))


def serve(socket_path: Path, with_vllm: bool = False) -> None:
    own = forked_child.python_path_entries(os.environ.get("PYTHONPATH", ""), os.getcwd())
    forked_child.ZYGOTE_PYTHONPATH[:] = own
    forked_child.INTERPRETER_PATH[:] = [entry for entry in sys.path[0 if sys.flags.safe_path else 1:]
                                        if entry not in own]
    preimport(with_vllm)
    if threads := other_threads():
        return refuse(socket_path, f"the imports started threads {threads}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(socket_path))  # a path over the socket limit (~107 bytes), a folder without sockets
        listener.listen(16)
    except OSError as err:
        return refuse(socket_path, f"cannot listen at {socket_path}: {err}")
    socket_path.with_suffix(".starting").unlink(missing_ok=True)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake select() through the wakeup pipe
    children: dict[int, socket.socket] = {}
    busy_at = time.monotonic()
    try:
        while (taking := socket_path.parent.is_dir() and time.monotonic() - busy_at < IDLE_S) or children:
            readable, _, _ = select.select([listener, wake_read] if taking else [wake_read], [], [], 1.0)
            if wake_read in readable:
                os.read(wake_read, 512)
            reap(children)
            if listener in readable:
                busy_at = time.monotonic()
                serve_one(listener, children, (wake_read, wake_write))
    finally:
        listener.close()
        socket_path.unlink(missing_ok=True)


def reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            try:
                connection.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:  # the launcher is gone
                pass
            connection.close()


def serve_one(listener: socket.socket, children: dict[int, socket.socket], wake: tuple[int, int]) -> None:
    """One request: the child forked, in its own session, its pid sent; it runs once the launcher says go."""
    fds: list[int] = []
    try:
        connection, _ = listener.accept()
    except OSError:
        return
    try:
        connection.settimeout(10.0)
        connection.sendall(b"ready\n")
        request, fds = receive_request(connection)
        sys.stdout.flush()
        sys.stderr.flush()
        in_session_read, in_session_write = os.pipe()
        fds += [in_session_read, in_session_write]  # closed with the log's if the fork fails
        pid = os.fork()
        del fds[1:]
    except (OSError, ValueError):  # a launcher that left, a bad request, no memory or pids left for a fork
        for fd in fds:
            os.close(fd)
        connection.close()
        return
    if pid == 0:
        os.setsid()
        os.close(in_session_write)  # the zygote reads end-of-file: the child has its session
        for own in (listener, *children.values()):
            own.close()
        for fd in (*wake, in_session_read):
            os.close(fd)
        wait_for_go(connection)
        forked_child.become_worker(request, fds[0])
    os.close(in_session_write)
    os.read(in_session_read, 1)  # returns when the child's setsid() is done (or it died)
    os.close(in_session_read)
    for fd in fds:
        os.close(fd)
    children[pid] = connection
    try:
        connection.sendall(f"{pid}\n".encode())
    except OSError:  # the launcher left: the child, told nothing, leaves too
        pass


def wait_for_go(connection: socket.socket) -> None:
    """In the child: run only if the launcher, having read the pid, still wants it (it may have given up)."""
    try:
        connection.settimeout(GO_TIMEOUT_S)
        go = connection.recv(1)
    except OSError:
        go = b""
    connection.close()
    if go != b"g":
        os._exit(0)


def receive_request(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 1)
    try:
        if len(fds) != 1 or len(data) < 8:
            raise ValueError("a request without its log")
        size = int.from_bytes(data[:8], "big")
        body = data[8:]
        while len(body) < size:
            chunk = connection.recv(size - len(body))
            if not chunk:
                raise ValueError("a request cut short")
            body += chunk
        return json.loads(body), fds
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        raise


if __name__ == "__main__":  # serve from the package's modules, whose state the child reads
    from zygotes import server

    server.serve(Path(sys.argv[1]), with_vllm="--with-vllm" in sys.argv[2:])
