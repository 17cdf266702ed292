"""The zygote: one process that imports the training stack once and forks policy workers from itself.

``python -m mutualrl.host.fork_server SOCKET`` is started by :func:`.forked_start.start_zygote` with the
environment of the workers it will serve. It imports what every CPU worker imports (vLLM blocked, as a worker
that does not generate with it blocks it), checks it is still one thread (forking a process with more is unsafe),
then answers on the Unix socket ``SOCKET``: per connection, a "ready" line, then one request (argv, environment,
working directory, umask, and the log file's descriptor), a fork, the child's pid, and at its end "exit CODE"
(Popen's convention: negative for a signal). It leaves when its folder is deleted or after :data:`IDLE_S` without
a request or a child.

The child becomes the worker as ``python -m`` would start it (:func:`become_worker`); a worker that finds it
needs something the zygote does not have (vLLM) replaces itself with a fresh interpreter (:func:`restart_fresh`),
same pid, same log.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

from mutualrl.host.process_start import collector_paused_for_imports, imports_done

PREIMPORTED = ("torch", "transformers", "datasets", "accelerate", "peft", "trl", "trl.trainer.grpo_config",
               "trl.trainer.grpo_trainer")
"""What the worker imports anyway, whatever its policy; none of mutualrl's own modules (the child imports those
with its own environment)."""

IDLE_S = 180.0

CHILD_ARGV: list[str] | None = None
"""In a forked worker: the command line it stands for (None in any other process)."""


def forked() -> bool:
    return CHILD_ARGV is not None


def restart_fresh() -> NoReturn:
    """In a forked worker: become a fresh ``python -m ...`` of the same command line (same pid, log, environment)."""
    assert CHILD_ARGV is not None
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *CHILD_ARGV[1:]])


def preimport() -> None:
    with collector_paused_for_imports():
        sys.modules.setdefault("vllm", None)  # as training.worker.block_unused_vllm: TRL takes its no-vLLM branch
        for module in PREIMPORTED:
            importlib.import_module(module)
        imports_done()


FORK_SAFE_THREADS = {"jemalloc_bg_thd"}
"""Native threads a fork may leave behind: pyarrow's jemalloc purger (started when the library loads; jemalloc takes
its locks around a fork and starts it again in the child when needed, as under every DataLoader forked after
``datasets`` was imported)."""


def other_threads() -> list[str]:
    """The threads but the main one, apart from :data:`FORK_SAFE_THREADS` (a fork must not leave them behind)."""
    python = [thread.name for thread in threading.enumerate() if thread is not threading.main_thread()]
    try:
        names = [Path(f"/proc/self/task/{task}/comm").read_text().strip() for task in os.listdir("/proc/self/task")]
    except OSError:
        return [*python, "(threads unknown: no /proc)"]
    return python or [name for name in names[1:] if name not in FORK_SAFE_THREADS]


def python_path_entries(value: str, cwd: str) -> list[str]:
    """The folders ``PYTHONPATH=value`` puts on ``sys.path`` in a process started in ``cwd`` (CPython 3.11: made
    absolute, an empty entry is the working directory, a trailing empty one is dropped)."""
    parts = value.split(os.pathsep) if value else []
    if parts and parts[-1] == "":
        parts.pop()
    return [os.path.abspath(os.path.join(cwd, part)) if part else cwd for part in parts]


def import_path(pythonpath: str, cwd: str, base: list[str]) -> list[str]:
    """``sys.path`` of ``python -m`` started in ``cwd`` with ``pythonpath``: the working directory, its entries,
    then the interpreter's own folders (``base``: the zygote's path without its own two parts)."""
    return [cwd, *python_path_entries(pythonpath, cwd), *base]


def shadowing(added: list[str]) -> list[str]:
    """Top-level modules already imported that a folder in ``added`` also holds: a fresh process could import
    those from there instead, so the child must not use the zygote's."""
    found = []
    for folder in added:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            module = name.split(".", 1)[0]
            if module in sys.modules and module != "__main__" and (name.endswith((".py", ".so")) or "." not in name):
                found.append(f"{folder}/{name}")
    return found


INTERPRETER_PATH: list[str] = []
"""The zygote's ``sys.path`` without its working directory and its ``PYTHONPATH`` entries."""


def serve(socket_path: Path) -> None:
    starting = socket_path.with_suffix(".starting")
    own = python_path_entries(os.environ.get("PYTHONPATH", ""), os.getcwd())
    INTERPRETER_PATH[:] = [entry for entry in sys.path[1:] if entry not in own]
    preimport()
    if threads := other_threads():
        print(f"fork server: the imports started threads {threads}; not serving (workers start as before)", flush=True)
        starting.replace(socket_path.with_suffix(".failed"))
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(socket_path))  # a path over the socket limit (~107 bytes), a folder without sockets
        listener.listen(16)
    except OSError as err:
        print(f"fork server: cannot listen at {socket_path}: {err}; not serving (workers start as before)", flush=True)
        starting.replace(socket_path.with_suffix(".failed"))
        return
    starting.unlink(missing_ok=True)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake select() through the wakeup pipe
    children: dict[int, socket.socket] = {}
    busy_at = time.monotonic()
    try:
        while socket_path.parent.is_dir() and (children or time.monotonic() - busy_at < IDLE_S):
            readable, _, _ = select.select([listener, wake_read], [], [], 1.0)
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
    connection, _ = listener.accept()
    try:
        connection.settimeout(10.0)
        connection.sendall(b"ready\n")
        request, fds = receive_request(connection)
    except (OSError, ValueError):
        connection.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for own in (listener, connection, *children.values()):
            own.close()
        for fd in wake:
            os.close(fd)
        become_worker(request, fds[0])
    for fd in fds:
        os.close(fd)
    try:
        connection.sendall(f"{pid}\n".encode())
    except OSError:
        pass
    children[pid] = connection


def receive_request(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 1)
    if len(fds) != 1 or len(data) < 8:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request without its log")
    size = int.from_bytes(data[:8], "big")
    body = data[8:]
    while len(body) < size:
        chunk = connection.recv(size - len(body))
        if not chunk:
            raise ValueError("a request cut short")
        body += chunk
    return json.loads(body), fds


def become_worker(request: dict[str, Any], log_fd: int) -> NoReturn:
    """In the forked child: what ``subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=STDOUT,
    stdin=DEVNULL, start_new_session=True)`` would have started, then ``python -m MODULE ARGS`` itself."""
    global CHILD_ARGV
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(devnull)
        os.close(log_fd)
        os.umask(int(request["umask"]))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = list(request["argv"])
        CHILD_ARGV = argv
        sys.argv = [argv[0], *argv[3:]]
        before = list(sys.path)
        sys.path[:] = import_path(os.environ.get("PYTHONPATH", ""), os.getcwd(), INTERPRETER_PATH)
        if shadowing([entry for entry in sys.path if entry not in before]):
            restart_fresh()  # a folder of its PYTHONPATH holds a module the zygote imported from elsewhere
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as leaving:
        code = exit_code(leaving.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
    leave(code)


def exit_code(value: Any) -> int:
    """``SystemExit.code`` as the interpreter turns it into an exit status."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def leave(code: int) -> NoReturn:
    """The interpreter's own end, short of tearing modules down: non-daemon threads joined, exit handlers run,
    streams flushed; an interrupted one dies of SIGINT, as CPython 3.8+ does."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx does first
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        if code == -signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


if __name__ == "__main__":  # serve from the package's module, whose CHILD_ARGV the worker reads
    from mutualrl.host import fork_server

    fork_server.serve(Path(sys.argv[1]))
