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
    a function that cannot be pickled (it holds a lock, a file, a generator, a C object) is refused, naming why."""
    import cloudpickle

    label = re.sub(r"[^A-Za-z0-9_]+", "", getattr(func, "__name__", "") or "") or "function"
    try:
        data = cloudpickle.dumps(func)
    except Exception as err:  # noqa: BLE001 - pickling reports anything it meets as any error type
        raise UsageError(
            f"reward function {getattr(func, '__qualname__', func)!r} cannot be shipped to the policy processes by "
            f"value ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}): it holds something only "
            "this process has; make it a function of a .py module (e.g. my_rewards.py) and pass it or "
            "'my_rewards.function'") from None
    sha = hashlib.sha256(data).hexdigest()
    _SHIPPED[sha] = (func, data)
    return f"{PREFIX}{label}:{sha}"


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
