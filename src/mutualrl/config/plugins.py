"""The one way user code reaches every process of a run: import by name, from the working directory and PYTHONPATH.

A recipe names user code in three places: ``plugins: [module, ...]`` (modules imported for their side
effects: ``register_task``, ``register_regime``), ``task.reward_funcs: [module.function, ...]`` and
``task.name: package.module:Class``. Workers are other processes (a ``register_task`` in the launcher is
invisible to them), so every process that loads the config imports the same names again: the launcher
(validation, the dry run), each policy's worker (it reads ``RUN/config.yaml``) and ``mutualrl eval``.
Names resolve as ``trl grpo --reward_funcs`` resolves them: the working directory first, then
``PYTHONPATH``; the launcher starts its workers in its own working directory, so they find the same
modules. A process that reads a finished run (``mutualrl eval RUN``, ``distill``, the Python API) from another
folder also searches where the run's workers looked (:func:`search_run_folders`), after its own path. An import
error names the module and the recipe key, before any worker starts.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import Any

from mutualrl.errors import UsageError

PLUGINS_KEY = "plugins"
_RUN_FOLDERS: list[str] = []
"""Folders added by :func:`search_run_folders` (named in an import error)."""


def search_run_folders(paths: Any) -> None:
    """Let user code named by the run at ``paths`` (a ``RunPaths``) import from where its workers imported it:
    their working directory and ``PYTHONPATH`` (``launch/plan.json``), after this process's own search path."""
    from mutualrl.run_folder import launch_folders

    for folder in map(str, launch_folders(paths)):
        if folder not in sys.path and os.path.isdir(folder):
            sys.path.append(folder)
            _RUN_FOLDERS.append(folder)


def _with_cwd_on_path() -> None:
    """``sys.path`` starts with the working directory, as under ``python -m`` and in TRL's script."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def import_module_for(module: str, key: str) -> Any:
    """Import ``module`` for the recipe key ``key``; a failure is one line naming both and the search path."""
    _with_cwd_on_path()
    try:
        return importlib.import_module(module)
    except ImportError as err:
        missing = getattr(err, "name", None)
        inner = f" ({type(err).__name__}: {err})" if missing and missing != module else ""
        raise UsageError(
            f"{key}: cannot import module {module!r}{inner}; it is looked up from the working directory "
            f"({os.getcwd()}) and PYTHONPATH{_run_folders_text()}: run from the folder that holds it or add that "
            f"folder to PYTHONPATH"
        ) from None
    except Exception as err:  # noqa: BLE001 - user code failing at import: name it, one line
        raise UsageError(f"{key}: importing module {module!r} failed: {type(err).__name__}: {err}") from None


def _run_folders_text() -> str:
    return f", then the run's launch folders ({', '.join(_RUN_FOLDERS)})" if _RUN_FOLDERS else ""


def import_object(dotted: str, key: str, sep: str = ".") -> Any:
    """``package.module.attr`` (or ``package.module:attr`` with ``sep=':'``) -> the object, errors naming ``key``."""
    module, found, attr = dotted.rpartition(sep)
    if not found or not module or not attr:
        form = "package.module:Name" if sep == ":" else "module.function"
        raise UsageError(f"{key}: {dotted!r} is not an import path ({form})")
    loaded = import_module_for(module, key)
    try:
        return getattr(loaded, attr)
    except AttributeError:
        raise UsageError(f"{key}: module {module!r} has no {attr!r}") from None


def import_plugins(entries: Iterable[Any] | None, key: str = PLUGINS_KEY) -> None:
    """Import each module of a recipe's ``plugins`` list (a ``.py`` path works too, as in ``MUTUALRL_REGIMES``)."""
    if entries is None:
        return
    if isinstance(entries, str) or not isinstance(entries, (list, tuple)):
        raise UsageError(f"{key}: expected a list of module names, got {entries!r}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, str) or not entry.strip():
            raise UsageError(f"{key}[{i}]: expected a module name, got {entry!r}")
        if entry.endswith(".py"):
            from mutualrl.regimes.registry import import_file

            import_file(entry.strip(), f"{key}[{i}]")
        else:
            import_module_for(entry.strip(), f"{key}[{i}]")
