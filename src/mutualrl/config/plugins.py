"""The one way user code reaches every process of a run: import by name, from the working directory and PYTHONPATH.

A recipe names user code in three places: ``plugins: [module, ...]`` (modules imported for their side
effects: ``register_task``, ``register_regime``), ``task.reward_funcs: [module.function, ...]`` and
``task.name: package.module:Class``. Workers are other processes (a ``register_task`` in the launcher is
invisible to them), so every process that loads the config imports the same names again: the launcher
(validation, the dry run), each policy's worker (it reads ``RUN/config.yaml``) and ``mutualrl eval``.
Names resolve as ``trl grpo --reward_funcs`` resolves them: the working directory first, then
``PYTHONPATH``; the launcher starts its workers in its own working directory, so they find the same
modules. An import error names the module and the recipe key, before any worker starts.

A run folder is data (docs/run-layout.md, "What is trusted"): a process that opens one
(:func:`open_run_folder`: ``mutualrl eval RUN``, ``distill``, ``train --resume``, a worker, the Python API)
imports nothing from inside it, whatever its ``config.yaml`` names, and never searches a folder only the run
folder names (its plan's working directory): such a folder is named in the import error, for the user to
put on ``PYTHONPATH``. Each module a run folder's config names is said on stderr with the file it comes from.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mutualrl.errors import UsageError

PLUGINS_KEY = "plugins"
_DATA_FOLDERS: list[Path] = []
"""Run folders this process opened: no code is imported from inside them (:func:`open_run_folder`)."""
_HINT_FOLDERS: list[str] = []
"""Where an opened run's workers imported user code (its plan): named in an import error, never searched."""
_SAID: set[str] = set()


def open_run_folder(root: Path | str, hints: Iterable[Path] = ()) -> None:
    """Treat the run folder ``root`` as data from now on in this process: no module is imported from inside it
    (``sys.path`` entries inside it are dropped, the working directory too when it is inside), and ``hints``
    (the working directories its plan recorded) are only named when an import fails."""
    folder = Path(root).resolve()
    if folder not in _DATA_FOLDERS:
        _DATA_FOLDERS.append(folder)
    sys.path[:] = [entry for entry in sys.path if not inside_data_folder(Path(entry or os.curdir))]
    for hint in hints:
        text = str(hint)[:300]  # a hostile plan may hold anything: bounded, and only printed
        if text not in _HINT_FOLDERS and len(_HINT_FOLDERS) < 4:
            _HINT_FOLDERS.append(text)


def inside_data_folder(path: Path) -> Path | None:
    """The opened run folder that holds ``path`` (after resolving links), or None."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a link loop: nothing importable there
        return None
    return next((folder for folder in _DATA_FOLDERS if resolved.is_relative_to(folder)), None)


@contextlib.contextmanager
def _cwd_first_on_path() -> Iterator[None]:
    """While a module the user named is imported: ``sys.path`` starts with the working directory, as under
    ``python -m`` and in TRL's script (not when the working directory is inside an opened run folder). Once it is
    imported the working directory moves behind every other entry: what the user's code imports later from beside
    it (a sibling module imported inside a reward function, a ``register_task`` target) is still found, and no
    module there shadows a library (workers run in safe-path mode: ``PYTHONSAFEPATH``, launch/plan/commands.py)."""
    cwd = os.getcwd()
    if inside_data_folder(Path(cwd)) is not None:
        yield
        return
    sys.path.insert(0, cwd)
    imported = False
    try:
        yield
        imported = True
    finally:
        if cwd in sys.path:
            sys.path.remove(cwd)  # the entry put first above (an entry from before stays where it was)
        if imported and cwd not in sys.path:
            sys.path.append(cwd)


def module_origins(module: str) -> Iterator[Path]:
    """Where ``module`` and each package above it would be imported from, outermost first. Finding a child imports
    its parent package, so a caller checks each origin before asking for the next; a module not found ends it."""
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:depth]))
        except (ImportError, ValueError):
            return
        if spec is None:
            return
        places = [spec.origin] if spec.origin and spec.has_location else []
        yield from (Path(place) for place in [*places, *(spec.submodule_search_locations or [])])


def refuse_data_folder_code(module: str, key: str) -> None:
    """A module (or a package above it) that would come from inside an opened run folder: one error naming both,
    before that package runs. Otherwise, when a run folder is open, stderr says which file is imported."""
    if not _DATA_FOLDERS:
        return
    origin = None
    for origin in module_origins(module):
        refuse_inside_data_folder(module, origin, key)
    if origin is not None and module not in _SAID:
        _SAID.add(module)
        print(f"mutualrl: {key} named by a run folder: importing {module!r} from {origin}", file=sys.stderr)


def refuse_main_module(module: str, key: str) -> None:
    """A ``__main__`` module (``unittest.__main__``, ``pkg/__main__.py``) is a program that runs when imported:
    never user code for a config, whoever names it."""
    if (Path(module).stem == "__main__") if module.endswith(".py") else "__main__" in module.split("."):
        raise UsageError(f"{key}: {module!r} is a __main__ module, a program that runs when imported; name the "
                         "module that defines your functions or registrations instead")


def refuse_inside_data_folder(module: str, origin: Path, key: str) -> None:
    """``module`` found at ``origin`` inside an opened run folder: one error naming both."""
    folder = inside_data_folder(origin)
    if folder is not None:
        raise UsageError(f"{key}: module {module!r} would be imported from {origin}, inside the run folder "
                         f"{folder}: a run folder is data and no code is imported from it; put the module in "
                         "the working directory or on PYTHONPATH")


def hidden_by_working_directory(module: str) -> str | None:
    """What ``module``'s top-level name, found in the working directory, hides: Python's built-in module, the standard
    library's or an installed package's of the same name (its place), or None. A launcher imports the working
    directory's (its cwd comes first), but a worker has imported the other already (TRL imports ``datasets``) and
    finds no reward function in it: after its weights load."""
    top = module.split(".")[0]
    cwd = Path(os.getcwd())
    if not top.isidentifier() or inside_data_folder(cwd) is not None:
        return None
    try:
        here = importlib.machinery.PathFinder.find_spec(top, [str(cwd)])
    except (ImportError, ValueError):
        return None
    if here is None:
        return None
    if top in sys.builtin_module_names:
        return f"Python's built-in module {top!r}"
    mine = {cwd.resolve()}
    others = [entry for entry in sys.path if entry and _resolved(entry) not in mine]
    try:
        there = importlib.machinery.PathFinder.find_spec(top, others)
    except (ImportError, ValueError):
        return None
    if there is None:
        return None
    where = there.origin if there.has_location and there.origin else next(iter(there.submodule_search_locations or
                                                                                []), "?")
    kind = "the standard library's module" if top in sys.stdlib_module_names else "the installed package"
    return f"{kind} {top!r} ({str(where)[:200]})"


def _resolved(entry: str) -> Path | None:
    try:
        return Path(entry).resolve()
    except (OSError, RuntimeError):
        return None


def refuse_hidden_library(module: str, key: str) -> None:
    """A user module named like an installed package or a standard module: one line, before anything imports it."""
    hidden = hidden_by_working_directory(module)
    if hidden is not None:
        top = module.split(".")[0]
        raise UsageError(f"{key}: module {top!r} in the working directory ({os.getcwd()}) has the name of {hidden}, "
                         "which the workers import under that name before any reward module; rename your module "
                         f"(e.g. my_{top}.py) and name it so")


def import_module_for(module: str, key: str) -> Any:
    """Import ``module`` for the recipe key ``key``; a failure is one line naming both and the search path. A module
    of the working directory named like a library (:func:`hidden_by_working_directory`) is refused first."""
    refuse_main_module(module, key)
    refuse_hidden_library(module, key)
    try:
        with _cwd_first_on_path():
            refuse_data_folder_code(module, key)
            return importlib.import_module(module)
    except ImportError as err:
        missing = getattr(err, "name", None)
        inner = f" ({type(err).__name__}: {err})" if missing and missing != module else ""
        raise UsageError(
            f"{key}: cannot import module {module!r}{inner}; it is looked up from the working directory "
            f"({os.getcwd()}) and PYTHONPATH: run from the folder that holds it or add that folder to "
            f"PYTHONPATH{_hint_folders_text()}{_inside_text(module)}"
        ) from None
    except Exception as err:  # noqa: BLE001 - user code failing at import: name it, one line
        raise UsageError(f"{key}: importing module {module!r} failed: {type(err).__name__}: {err}") from None
    except SystemExit as err:  # sys.exit() at import would end the command with its code, and say nothing
        raise UsageError(f"{key}: importing module {module!r} called sys.exit({err.code!r}) at import; a module "
                         "named for its functions or registrations must not exit when imported") from None


def _hint_folders_text() -> str:
    if not _HINT_FOLDERS:
        return ""
    return f" (the run's workers ran from {', '.join(_HINT_FOLDERS)}; a run folder's own record is not searched)"


def _inside_text(module: str) -> str:
    """Where a module not found sits inside an opened run folder (not searched: a run folder is data)."""
    top = module.split(".")[0]
    found = [place for folder in _DATA_FOLDERS for place in (folder / f"{top}.py", folder / top) if place.exists()]
    return f"; {found[0]} is inside a run folder, which is data: no code is imported from it" if found else ""


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
            import_plugin_file(entry.strip(), f"{key}[{i}]")
        else:
            import_module_for(entry.strip(), f"{key}[{i}]")


def import_plugin_file(entry: str, key: str) -> None:
    """A plugin named by its ``.py`` path; never one inside an opened run folder."""
    from mutualrl.regimes.core.registry import import_file

    refuse_main_module(entry, key)
    folder = inside_data_folder(Path(entry))
    if folder is not None:
        raise UsageError(f"{key}: {entry!r} is inside the run folder {folder}: a run folder is data and no code "
                         "is imported from it; name a module in the working directory or on PYTHONPATH")
    if _DATA_FOLDERS and entry not in _SAID:
        _SAID.add(entry)
        print(f"mutualrl: {key} named by a run folder: importing {Path(entry).resolve()}", file=sys.stderr)
    try:
        import_file(entry, key)
    except SystemExit as err:
        raise UsageError(f"{key}: importing {entry!r} called sys.exit({err.code!r}) at import; a plugin must not "
                         "exit when imported") from None
