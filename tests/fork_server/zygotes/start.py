"""The launcher's side of the test suite's fork server: a CPU policy worker forked from a process that has already
imported the training stack.

A policy worker of a short run spends about half of its CPU importing torch, transformers and TRL (3-4 s on a
2-core box: benchmarks/results/worker-start.md). The suite starts many short runs, so a *zygote* (:mod:`.server`)
imports them once and forks each worker from itself. None of this is the product's: the product starts every worker
with ``subprocess.Popen`` in ``mutualrl.launch.supervise.worker_process.start_worker_process``, and in a launcher the
suite starts, ``tests/fork_server/sitecustomize.py`` has :func:`plug_into` put its own function in that place. The
child is what ``python -m mutualrl.training.worker ...`` would have been: its own session, the launcher's log file
as stdout and stderr, the launcher's environment and working directory, the module run as ``__main__``.

Only where :data:`FORK_SERVER_ENV` names a folder of this user's that no one else may read or write
(``tests/conftest.py`` makes one for the session), only for a worker started as a plain process
(``python -m mutualrl.training.worker``: never ``torchrun`` or ``accelerate launch``), and only from a zygote
started with the worker's very environment, apart from :data:`RUNTIME_ONLY` (variables no library reads while it
is imported): a variable read on import (the Hugging Face cache and offline switches, OpenMP's thread count, glibc's
allocator settings) has in the zygote the value the worker is given. Each distinct environment gets its own zygote,
started the first time it is asked for (that worker waits for its imports). Whatever goes wrong -- a zygote that
refuses or does not listen in time, one gone -- :func:`start_forked` answers None and the product's own function
starts the process.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import select
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import psutil

from zygotes.child import WORKER_MODULE, python_path_entries

FORK_SERVER_ENV = "MUTUALRL_FORK_SERVER"
"""A folder for zygotes' sockets (one per environment), read by the suite's ``sitecustomize`` and here (the product
reads no such variable). Unset or empty: every worker is started as a user's run starts it."""

SITE = Path(__file__).resolve().parents[1]
"""``tests/fork_server``: the folder the suite puts on every process's ``PYTHONPATH`` (its ``sitecustomize`` and this
package)."""

RUNTIME_ONLY = ("MUTUALRL_", "PYTEST_", "MASTER_ADDR", "MASTER_PORT", "TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS",
                "PYTORCH_NVML_BASED_CUDA_CHECK", "TORCH_EXTENSIONS_DIR", "COLUMNS", "LINES", "PWD",
                "OLDPWD", "_")
"""Names (and prefixes) of variables read only after the imports: mutualrl's own (its modules are imported in the
child), pytest's, torch.distributed's rendezvous, the tokenizers' thread pool (built at the first batch), one that
vLLM's import sets and torch reads when called (``torch.cuda._nvml_based_avail``; not the inductor cache folder,
which torch._dynamo reads on import), where torch builds extensions (``cpp_extension._get_build_directory``), the
terminal's size (read by ``shutil.get_terminal_size``, tqdm and rich when they draw), the shell's bookkeeping."""

MAX_ZYGOTES = 6
"""Distinct environments served at once (each zygote holds 0.6-0.9 GB); beyond, workers start as before."""

READY_TIMEOUT_S = 5.0
ZYGOTE_START_S = 60.0
"""How long the worker that starts a zygote (and any started meanwhile) waits for it to listen."""
STARTING_STALE_S = 120.0


def runtime_only(name: str) -> bool:
    return name.startswith(RUNTIME_ONLY)


REBUILT_IN_THE_CHILD = ("PYTHONPATH",)
"""Read at the interpreter's start, not by a library: the child builds its ``sys.path`` from its own value
(``child.import_path``) and starts fresh where a folder of it could make it import other code."""


def environment_key(python: str, env: Mapping[str, str], attributes: Mapping[str, Any] | None = None) -> str:
    """The zygote a worker with ``env`` may come from: the interpreter, every variable a library could read while it
    is imported, and what a child inherits of its parent process (:func:`inherited_attributes`: a zygote started
    by this launcher has them)."""
    fixed = sorted((k, v) for k, v in env.items() if not runtime_only(k) and k not in REBUILT_IN_THE_CHILD)
    attributes = inherited_attributes() if attributes is None else attributes
    return hashlib.sha256(json.dumps([python, fixed, attributes], sort_keys=True).encode()).hexdigest()[:16]


def inherited_attributes() -> dict[str, Any]:
    """What a process passes to a child it starts, beyond its environment: its scheduling priority and CPUs, its
    resource limits, its control group and its out-of-memory score."""
    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:
            return ""

    return {"nice": os.getpriority(os.PRIO_PROCESS, 0),
            "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [],
            "limits": {name: resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource))
                       if name.startswith("RLIMIT_")},
            "cgroup": read("/proc/self/cgroup"), "oom_score_adj": read("/proc/self/oom_score_adj")}


def signal_state() -> dict[str, list[int]]:
    """This thread's signal mask and the signals this process ignores: what an ``exec``'d child starts with."""
    ignored = [int(s) for s in signal.valid_signals() if signal.getsignal(s) is signal.SIG_IGN]
    return {"ignored_signals": ignored, "signal_mask": [int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])]}


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
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def plug_into(seam: Any) -> None:
    """Put :func:`start_worker_process` in the place of the product's function in ``seam`` (the module
    ``mutualrl.launch.supervise.worker_process``, as it is imported); the product's is kept for every worker that is
    not forked."""
    product = seam.start_worker_process

    def start_worker_process(argv: list[str], env: Mapping[str, str], cwd: Path | None, log: IO[bytes]) -> Any:
        forked = start_forked(argv, env, str(cwd or os.getcwd()), log.fileno(), uses_vllm(argv))
        return forked if forked is not None else product(argv, env, cwd, log)

    start_worker_process.__wrapped__ = product  # type: ignore[attr-defined]
    seam.start_worker_process = start_worker_process


def uses_vllm(argv: list[str]) -> bool:
    """Whether the worker ``argv`` starts generates with vLLM: its ``use_vllm`` in the settings the plan wrote for it
    (``RUN/launch/<policy>.grpo.json``, the file the worker's GRPOConfig comes from); False where unreadable."""
    def value(flag: str) -> str | None:
        return argv[argv.index(flag) + 1] if flag in argv[:-1] else None

    run_dir, policy = value("--run-dir"), value("--policy")
    if run_dir is None or policy is None:
        return False
    try:
        settings = json.loads((Path(run_dir) / "launch" / f"{policy}.grpo.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(settings, dict) and bool(settings.get("use_vllm"))


def private_folder(folder: str) -> Path | None:
    """``folder`` as a path where it is an absolute, real directory of this user's that no one else may write or
    read (as ``tempfile.mkdtemp`` makes one); else None: its sockets could be another user's."""
    path = Path(folder)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not path.is_absolute() or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return path


def start_forked(argv: list[str], env: Mapping[str, str], cwd: str, log_fd: int,
                 with_vllm: bool = False) -> ForkedProcess | None:
    """``argv`` forked from the zygote for ``env`` (one that imported vLLM too where ``with_vllm``: the policy
    generates with it), its output into ``log_fd``; None where that cannot be done (then the caller starts it
    itself), after starting that zygote when there is none and room for one."""
    folder = private_folder(os.environ.get(FORK_SERVER_ENV) or "")
    if folder is None:
        return None
    if not forkable(argv):
        if WORKER_MODULE in argv:  # a policy's ranks under a launcher, or another interpreter
            note(folder, "started", f"not a plain worker: {' '.join(argv[:3])}")
        return None
    key = environment_key(argv[0], env) + ("-vllm" if with_vllm else "")
    path = folder / f"{key}.sock"
    if not path.exists():
        what = start_zygote(folder, key, argv[0], env)
        if what not in ("started it", "starting") or not ready(path, ZYGOTE_START_S):
            note(folder, "started", f"no zygote {key}: {what}")
            return None
    process = request_fork(path, argv, env, cwd, log_fd)
    note(folder, "forked" if process else "started", f"zygote {key}" + ("" if process else " did not answer"))
    return process


DECISIONS = "starts.log"


def ready(path: Path, timeout_s: float) -> bool:
    """Whether the zygote that is to listen at ``path`` does within ``timeout_s`` (its imports take about as long
    as a fresh worker's, so the worker that started it waits rather than importing beside it); False once it
    refused."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if path.with_suffix(".failed").exists() or time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


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
        request = json.dumps({"argv": argv, "env": dict(env), "cwd": cwd, "umask": current_umask(),
                              **signal_state()}).encode()
        socket.send_fds(connection, [len(request).to_bytes(8, "big") + request], [log_fd])
        pid = int(read_line(connection, READY_TIMEOUT_S))
        connection.sendall(b"g")  # the child runs only now: had this launcher given up, it would leave unrun
    except (OSError, ValueError):
        connection.close()
        return None
    return ForkedProcess(pid, connection)


def connect(path: Path) -> socket.socket | None:
    """A connection to the zygote at ``path`` that said it is ready; None when there is none that answers."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
        if read_line(connection, READY_TIMEOUT_S) != "ready":
            raise OSError("no ready line")
    except ConnectionRefusedError:  # a zygote killed without cleaning up: the next start starts another
        connection.close()
        path.unlink(missing_ok=True)
        return None
    except (OSError, ValueError):
        connection.close()
        return None
    return connection


def read_line(connection: socket.socket, timeout: float) -> str:
    connection.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(1)  # a byte at a time: what follows the line ("exit CODE") stays unread
        if not chunk:
            raise OSError("the zygote closed the connection")
        data += chunk
    connection.settimeout(None)
    return data.decode().strip()


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def start_up_hooks(pythonpath: str, cwd: str) -> list[str]:
    """The ``sitecustomize``/``usercustomize`` modules on ``pythonpath`` (run by every interpreter as it starts: a
    benchmark's profiler, a measurement of each process), but the suite's own (:data:`SITE`: it only adds the
    import hook every child of a zygote inherits)."""
    return [str(Path(folder) / name) for folder in python_path_entries(pythonpath, cwd)
            for name in ("sitecustomize.py", "sitecustomize", "usercustomize.py", "usercustomize")
            if (Path(folder) / name).exists() and Path(folder).resolve() != SITE]


_STARTED: list[subprocess.Popen] = []  # kept so that Python does not warn about a child still running


def start_zygote(folder: Path, key: str, python: str, env: Mapping[str, str]) -> str:
    """Start the zygote for ``env`` in the background, unless one is starting, one refused, or there are enough;
    what happened, in words."""
    _STARTED[:] = [zygote for zygote in _STARTED if zygote.poll() is None]  # reaped once they have left
    starting = folder / f"{key}.starting"
    if (folder / f"{key}.failed").exists():  # it refused to serve once (its log says why): it would again
        return "it refused to serve"
    if customizing := start_up_hooks(env.get("PYTHONPATH", ""), str(folder)):
        return f"its PYTHONPATH runs {customizing[0]} at start-up (a zygote would pass it on to every child)"
    if str(SITE) not in python_path_entries(env.get("PYTHONPATH", ""), str(folder)):
        return f"its PYTHONPATH does not hold {SITE} (the zygote's own modules)"
    if len(list(folder.glob("*.sock"))) + len(list(folder.glob("*.starting"))) >= MAX_ZYGOTES:
        return f"{MAX_ZYGOTES} zygotes already"
    try:
        fd = os.open(starting, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            if time.time() - starting.stat().st_mtime >= STARTING_STALE_S:
                starting.unlink(missing_ok=True)  # its starter died: the next start tries again
        except FileNotFoundError:  # the zygote listens now and removed it
            pass
        return "starting"
    os.close(fd)
    zygote_env = {k: v for k, v in env.items() if not runtime_only(k)}
    with open(folder / f"{key}.log", "ab") as log:
        flavour = ["--with-vllm"] if key.endswith("-vllm") else []
        _STARTED.append(subprocess.Popen([python, "-m", "zygotes.server", str(folder / f"{key}.sock"),
                                          *flavour],
                                         env=zygote_env, cwd=folder, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True))
    return "started it"
