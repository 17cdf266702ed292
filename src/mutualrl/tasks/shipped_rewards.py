"""Reward functions shipped to the policy processes by value: a lambda, a closure, a function of ``__main__``.

The Python API (:func:`mutualrl.train`) takes callables as ``GRPOTrainer(reward_funcs=[...])`` does. One that
workers cannot import by a module path is pickled with ``cloudpickle`` in the launcher's process and named in
``task.reward_funcs`` as ``by-value:<label>:<sha256>`` (:func:`ship_by_value`). The launcher writes the bytes
to ``RUN/launch/rewards/<sha256>.pkl`` and hands each worker, in its environment (:data:`SHIPPED_ENV`), the
digests it wrote and where; a worker unpickles a file only when its bytes hash to a digest its launcher gave
it (:func:`load_shipped`). So a run folder never supplies code by itself: ``mutualrl eval RUN`` and
``--resume`` of such a run refuse the name unless the function is passed again in this process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mutualrl.errors import DataError, UsageError

PREFIX = "by-value:"
SHIPPED_ENV = "MUTUALRL_SHIPPED_REWARDS"
"""JSON ``{sha256: file}``: the pickled reward functions this worker's launcher wrote, and the only ones it loads."""
_SHIPPED: dict[str, tuple[Callable[..., Any], bytes]] = {}
"""The functions this process shipped (the launcher's, the API's), by digest: never read back from a file here."""


def is_shipped(name: str) -> bool:
    return name.startswith(PREFIX)


def digest_of(name: str) -> str:
    """The sha256 a ``by-value:<label>:<sha256>`` name ends with."""
    return name.rpartition(":")[2]


def ship_by_value(func: Callable[..., Any]) -> str:
    """Pickle ``func`` by value (cloudpickle), keep it in this process and return its ``task.reward_funcs`` name;
    a function that cannot be pickled (it holds a lock, a file, a generator, a C object) is refused, naming why.
    cloudpickle pickles what an importable module holds by reference; a module the policy processes cannot import
    (a folder only this session put on ``sys.path``) is pickled by value too, found by loading the bytes in a new
    process as a worker would."""
    import cloudpickle

    label = re.sub(r"[^A-Za-z0-9_]+", "", getattr(func, "__name__", "") or "") or "function"
    by_value: list[Any] = []
    try:
        data = pickled(func)
        while (missing := missing_in_workers(func, data)) is not None:
            module = sys.modules.get(missing.partition(".")[0])
            if module is None or module in by_value or len(by_value) >= 16:
                raise UsageError(f"reward function {getattr(func, '__qualname__', func)!r} needs module {missing!r}, "
                                 "which the policy processes cannot import: put its folder on PYTHONPATH or in the "
                                 "working directory")
            cloudpickle.register_pickle_by_value(module)
            by_value.append(module)
            data = pickled(func)
    finally:
        for module in by_value:
            cloudpickle.unregister_pickle_by_value(module)
    sha = hashlib.sha256(data).hexdigest()
    _SHIPPED[sha] = (func, data)
    return f"{PREFIX}{label}:{sha}"


def pickled(func: Callable[..., Any]) -> bytes:
    import cloudpickle

    try:
        return cloudpickle.dumps(func)
    except Exception as err:  # noqa: BLE001 - pickling reports anything it meets as any error type
        raise UsageError(
            f"reward function {getattr(func, '__qualname__', func)!r} cannot be shipped to the policy processes by "
            f"value ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}): it holds something only "
            "this process has; make it a function of a .py module (e.g. my_rewards.py) and pass it or "
            "'my_rewards.function'") from None


def worker_environment() -> dict[str, str]:
    """A policy process's import path: this working directory, this mutualrl, then the inherited PYTHONPATH."""
    package = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package, os.environ.get("PYTHONPATH")) if p)}


def missing_in_workers(func: Callable[..., Any], data: bytes) -> str | None:
    """The module a new process (a worker's working directory and environment) lacks to load ``data``, or None when
    it loads; any other failure to load is refused, naming it. In safe-path mode, as workers run
    (``PYTHONSAFEPATH``, launch/plan/commands.py): unpickling imports by name, and a worker finds nothing in its
    working directory that way (only the modules a recipe names, through config/plugins.py)."""
    code = ("import sys, cloudpickle\ntry:\n    cloudpickle.loads(sys.stdin.buffer.read())\n"
            "except ModuleNotFoundError as err:\n    print(err.name)\n    sys.exit(3)\n")
    done = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=300,
                          env={**worker_environment(), "PYTHONSAFEPATH": "1"})
    if done.returncode == 3:
        return done.stdout.decode(errors="replace").strip()
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["exit code " + str(done.returncode)])[-1]
        raise UsageError(f"reward function {getattr(func, '__qualname__', func)!r} cannot be loaded in a policy "
                         f"process ({last[:300]}); make it a function of a .py module (e.g. my_rewards.py)")
    return None


def workers_import(module: str) -> bool:
    """Whether a new process in a worker's working directory and environment finds ``module``'s top-level package
    where this process imported it from (not a folder only this session put on ``sys.path``)."""
    top = module.partition(".")[0]
    here = getattr(sys.modules.get(top), "__file__", None)
    code = "import importlib.util, sys; spec = importlib.util.find_spec(sys.argv[1]); print(spec and spec.origin)"
    done = subprocess.run([sys.executable, "-c", code, top], capture_output=True, text=True, timeout=120,
                          env=worker_environment())
    found = done.stdout.strip()
    return done.returncode == 0 and here is not None and found not in ("", "None") and \
        Path(found).resolve() == Path(here).resolve()


def shipped_names(names: Iterable[str]) -> list[str]:
    return [name for name in names if is_shipped(name)]


def load_shipped(name: str, key: str) -> Callable[..., Any]:
    """The function ``name`` stands for: this process's own, else the file the worker's launcher named in its
    environment, once its bytes hash to the digest; anything else is refused."""
    sha = digest_of(name)
    if sha in _SHIPPED:
        return _SHIPPED[sha][0]
    written = os.environ.get(SHIPPED_ENV)
    files = json.loads(written) if written else {}
    if not isinstance(files, dict) or sha not in files:
        raise UsageError(
            f"{key}: {name} was shipped by value from the Python session that started the run, and mutualrl "
            "never loads code from a run folder: pass the function again (mutualrl.train(..., resume=True, "
            "reward_funcs=[fn]) or mutualrl.evaluate(..., reward_funcs=[fn])), or name an importable module.function")
    path = Path(files[sha])
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"{key}: {path}: the pickled reward function cannot be read ({err.strerror})") from None
    if hashlib.sha256(data).hexdigest() != sha:
        raise DataError(f"{key}: {path} is not the reward function the launcher wrote (its sha256 differs): "
                        "refused, nothing unpickled")
    import cloudpickle

    return cloudpickle.loads(data)


def shipped_files(names: Iterable[str], folder: Path) -> dict[str, str]:
    """Where the launcher writes each pickled function among ``names`` that this process shipped (``{sha256:
    file}``), without writing. A name only a config holds (a machine joining a run, whose config and files are in
    the shared run folder) is left out: the digest would come from the folder whose file it checks, so its workers
    ask for the function instead."""
    return {digest_of(name): str((folder / f"{digest_of(name)}.pkl").resolve()) for name in shipped_names(names)
            if digest_of(name) in _SHIPPED}


def write_shipped(names: Iterable[str], folder: Path) -> None:
    """Write this process's pickled functions among ``names`` where :func:`shipped_files` says."""
    for name in shipped_names(names):
        if digest_of(name) not in _SHIPPED:  # the launcher resolved every name before; one edited since is refused
            load_shipped(name, "task.reward_funcs")
    for sha, file in shipped_files(names, folder).items():
        folder.mkdir(parents=True, exist_ok=True)
        Path(file).write_bytes(_SHIPPED[sha][1])  # a file cut short fails the worker's digest check


def shipped_env(files: dict[str, str]) -> dict[str, str]:
    """The worker environment naming ``files`` (nothing when none was shipped)."""
    return {SHIPPED_ENV: json.dumps(files, sort_keys=True)} if files else {}
