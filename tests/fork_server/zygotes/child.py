"""The child a zygote forks (:mod:`.server`), made into the process ``python -m MODULE ARGS`` would have been.

:func:`become_worker` does what ``subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=STDOUT,
stdin=DEVNULL, start_new_session=True)`` and the interpreter's start-up would have done: signal dispositions as an
``exec`` from the launcher leaves them (ignored ones stay ignored, the rest default, then Python's own SIGINT, SIGPIPE
and SIGXFSZ) and its signal mask, the log as stdout and stderr, stdin from ``/dev/null``, the umask, the working
directory, the environment (with what the zygote's imports added to it, as the worker's own imports would have),
``sys.path`` from its ``PYTHONPATH``, the module run as ``__main__``, and at the end the interpreter's exit (threads
joined, exit handlers run, streams flushed; the modules' teardown is skipped). Where its ``PYTHONPATH`` could make a
fresh interpreter import something else -- a folder holding a module the zygote imported, or a ``sitecustomize`` --
it replaces itself with a fresh interpreter (:func:`restart_fresh`: same pid, log, environment and working
directory). A policy worker that runs forked says so in the suite's policy-start log (:data:`START_LOG_ENV`: a line
``PID forked`` before the worker's own ``PID``).

What stays the zygote's: the process's command line (``ps`` shows ``zygotes.server``), the string hash
seed and numpy's global random state (shared by its children; a run seeds its own generators: ``set_seed``).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import traceback
from typing import Any, NoReturn

from mutualrl.host.process_exit import run_exit_handlers

CHILD_ARGV: list[str] | None = None
"""In a forked worker: the command line it stands for (None in any other process)."""

IMPORTS_SET_ENV: dict[str, str] = {}
"""Variables the zygote's imports put into its environment (torch's inductor cache folder): set in a child whose
environment lacks them, as its own imports would have."""

INTERPRETER_PATH: list[str] = []
"""The zygote's ``sys.path`` after its working directory and its ``PYTHONPATH`` entries."""

ZYGOTE_PYTHONPATH: list[str] = []
"""The zygote's ``PYTHONPATH`` entries, from which it may have imported."""


START_LOG_ENV = "MUTUALRL_POLICY_START_LOG"
"""``mutualrl.training.worker.START_LOG_ENV`` (not imported: the zygote imports none of mutualrl's modules but
``host``): the file the suite counts policy processes in."""

WORKER_MODULE = "mutualrl.training.worker"


def forked() -> bool:
    return CHILD_ARGV is not None


def restart_fresh() -> NoReturn:
    """In a forked worker: become a fresh ``python -m ...`` of the same command line (same pid, log, environment)."""
    assert CHILD_ARGV is not None
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *CHILD_ARGV[1:]])


def python_path_entries(value: str, cwd: str) -> list[str]:
    """The folders ``PYTHONPATH=value`` puts on ``sys.path`` in a process started in ``cwd`` (CPython 3.11: made
    absolute, an empty entry is the working directory, a trailing empty one is dropped)."""
    parts = value.split(os.pathsep) if value else []
    if parts and parts[-1] == "":
        parts.pop()
    return [os.path.abspath(os.path.join(cwd, part)) if part else cwd for part in parts]


def import_path(env: dict[str, str], cwd: str) -> list[str]:
    """``sys.path`` of ``python -m`` started in ``cwd`` with ``env``: the working directory (unless
    ``PYTHONSAFEPATH``), the ``PYTHONPATH`` entries, then the interpreter's own folders."""
    first = [] if env.get("PYTHONSAFEPATH") else [cwd]
    return [*first, *python_path_entries(env.get("PYTHONPATH", ""), cwd), *INTERPRETER_PATH]


def imports_differently(path: list[str], before: list[str]) -> list[str]:
    """Why a fresh interpreter with ``path`` could import other code than the zygote did: a zygote ``PYTHONPATH``
    folder gone or moved after another, or an added folder holding a ``sitecustomize``/``usercustomize`` (run at
    start-up) or a top-level module the zygote imported."""
    kept = [entry for entry in path if entry in ZYGOTE_PYTHONPATH]
    if kept != [entry for entry in ZYGOTE_PYTHONPATH if entry in path] or len(set(kept)) < len(set(ZYGOTE_PYTHONPATH)):
        return ["the zygote's PYTHONPATH folders are not all there, in order"]
    found = []
    for folder in (entry for entry in path if entry not in before):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            module = name.split(".", 1)[0]
            if module in ("sitecustomize", "usercustomize") or (
                    module in sys.modules and module != "__main__" and (name.endswith((".py", ".so")) or "." not in name)):
                found.append(os.path.join(folder, name))
    return found


def signals_as_exec_leaves_them(ignored: list[int], mask: list[int]) -> None:
    """Dispositions as after ``Popen(restore_signals=True)`` and the interpreter's start: what the launcher ignores
    stays ignored (SIGINT too), every other signal back to its default, then Python's own handlers."""
    signal.set_wakeup_fd(-1)
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if signum in (signal.SIGPIPE, signal.SIGXFSZ):
            handler: Any = signal.SIG_IGN  # Popen restores them to default; Python then ignores both
        elif signum in ignored:
            handler = signal.SIG_IGN
        else:
            handler = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(signum, handler)
        except (OSError, ValueError, RuntimeError):  # one Python may not touch
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def become_worker(request: dict[str, Any], log_fd: int) -> NoReturn:
    """In the forked child (already in its own session): the process the request's command line would have
    started, then that command itself."""
    global CHILD_ARGV
    code = 1
    try:
        signals_as_exec_leaves_them(request["ignored_signals"], request["signal_mask"])
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
        os.environ.update({k: v for k, v in IMPORTS_SET_ENV.items() if k not in request["env"]})
        argv = list(request["argv"])
        CHILD_ARGV = argv
        sys.argv = [argv[0], *argv[3:]]
        before = list(sys.path)
        sys.path[:] = import_path(request["env"], os.getcwd())
        if imports_differently(sys.path, before):
            restart_fresh()
        note_forked(argv[2])
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


def note_forked(module: str) -> None:
    """A policy worker's line ``PID forked`` in the suite's policy-start log (best effort, as the worker's own)."""
    log_file = os.environ.get(START_LOG_ENV)
    if module != WORKER_MODULE or not log_file:
        return
    try:
        with open(log_file, "a") as fh:
            fh.write(f"{os.getpid()} forked\n")
    except OSError:
        pass


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
    finally:
        run_exit_handlers()
        if code == -signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)
