"""The user code a run folder may name: only modules the command running now names, as the run recorded them.

A run's ``config.yaml`` names modules (``plugins``, ``task.reward_funcs``, a ``task.name`` class) that every process
reading the run imports. A run folder is data (docs/run-layout.md, "What is trusted"): whoever can write it writes
its ``config.yaml`` and its ``inputs.json`` alike, so neither vouches for code. A module a run folder names is
imported only when the command running now names it too (:func:`accept_code`: its recipe, its ``--set``, its
``--allow-code``, or :data:`ALLOW_CODE_ENV` in the user's environment, which a launcher sets for its own workers);
any other name is refused by name, with the flag that accepts it, before anything of it runs. A module accepted so must then still be the file and content ``RUN/inputs.json`` recorded as the run started
(the same code, not only the same name). A ``__main__`` module is never imported for a config.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mutualrl.config.plugins import refuse_inside_data_folder, refuse_main_module
from mutualrl.errors import UsageError
from mutualrl.run_folder import RunPaths

ALLOW_CODE_ENV = "MUTUALRL_ALLOW_CODE"
"""Comma-separated modules a run folder's config may name in this process (``--allow-code``'s environment twin;
a launcher hands its workers the modules its own command accepted)."""
ALLOW_CODE_FLAG = "--allow-code"
_NAMED_BY_COMMAND: set[str] = set()
"""Modules the command running now named (its recipe, ``--set``, ``--allow-code``)."""


def accept_code(modules: Iterable[str]) -> None:
    """The command running now names ``modules``: a run folder's config may name them too."""
    _NAMED_BY_COMMAND.update(str(module).strip() for module in modules if str(module).strip())


@contextmanager
def one_command() -> Iterator[None]:
    """A block that is one command: the modules accepted inside it (:func:`accept_code`) are forgotten when it
    ends. A CLI process runs one command; a Python API call is one too, so a module one call accepted is not
    accepted by the next call in the same process (a run folder read later names its own)."""
    before = set(_NAMED_BY_COMMAND)
    try:
        yield
    finally:
        _NAMED_BY_COMMAND.clear()
        _NAMED_BY_COMMAND.update(before)


def accepted_by_command() -> frozenset[str]:
    """The modules the command running now accepted so far (not those of :data:`ALLOW_CODE_ENV`)."""
    return frozenset(_NAMED_BY_COMMAND)


def named_by_command(module: str) -> bool:
    """Whether the command running now names ``module`` (or the user's environment does). mutualrl's own modules
    are no exception: none is named by a recipe, and one called as a reward function is code all the same."""
    from_env = {name.strip() for name in os.environ.get(ALLOW_CODE_ENV, "").split(",")}
    return module in _NAMED_BY_COMMAND or module in from_env


def allowed_code_env(modules: Iterable[str]) -> dict[str, str]:
    """A worker's environment accepting ``modules`` (those its launcher's command accepted)."""
    names = sorted({str(module) for module in modules if module and "," not in str(module)})
    return {ALLOW_CODE_ENV: ",".join(names)} if names else {}


def overrides_modules(overrides: Iterable[tuple[list[str], Any]]) -> set[str]:
    """The modules parsed ``--set`` overrides name (``plugins=[m]``, ``task.reward_funcs=[m.f]``, ``task.name``)."""
    named: set[str] = set()
    for keys, value in overrides:
        values = value if isinstance(value, list) else [value]
        if keys[:1] == ["plugins"]:
            named.update(module for module, _ in named_modules([], values, ""))
        elif keys[:2] == ["task", "reward_funcs"]:
            named.update(module for module, _ in named_modules(values, [], ""))
        elif keys == ["task", "name"]:
            named.update(module for module, _ in named_modules([], [], value))
    return named


def named_modules(reward_funcs: Iterable[Any], plugins: Iterable[Any], task_name: Any) -> list[tuple[str, str]]:
    """(module, recipe key) of each module a config names. A bare reward name (TRL's own) and a function shipped
    by value (``by-value:<label>:<sha256>``, no dot) name no module."""
    named = [(str(name).rpartition(".")[0], f"task.reward_funcs[{i}]") for i, name in enumerate(reward_funcs)]
    named += [(str(entry).strip(), f"plugins[{i}]") for i, entry in enumerate(plugins)]
    if ":" in str(task_name):
        named.append((str(task_name).partition(":")[0], "task.name"))
    first: dict[str, str] = {}
    for module, key in named:
        if module:
            first.setdefault(module, key)
    return list(first.items())


def config_modules(data: dict[str, Any]) -> list[tuple[str, str]]:
    """:func:`named_modules` of a config as read from YAML, before it is typed (or anything of it imported)."""
    task = data.get("task") if isinstance(data.get("task"), dict) else {}
    funcs, plugins = task.get("reward_funcs") or [], data.get("plugins") or []
    return named_modules(funcs if isinstance(funcs, list) else [funcs],
                         plugins if isinstance(plugins, list) else [plugins], task.get("name", ""))


def module_file(module: str) -> Path | None:
    """The file ``module`` is (or would be) imported from in this process, without running it or a package above
    it: the working directory first, as :mod:`mutualrl.config.plugins` imports; a ``.py`` path is itself."""
    if module.endswith(".py"):
        return Path(module).resolve()
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(loaded, "__file__", None):
        return Path(loaded.__file__).resolve()
    search = [os.getcwd(), *[p for p in sys.path if p != os.getcwd()]]
    spec = None
    parts = module.split(".")
    for depth in range(len(parts)):
        places = search if spec is None else list(spec.submodule_search_locations or [])
        try:
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth + 1]), places) if places else None
        except (ImportError, ValueError):  # a name no finder accepts: not found
            return None
        if spec is None:
            return None
    return Path(spec.origin).resolve() if spec and spec.origin and spec.has_location else None


MAX_SIBLINGS = 200
"""Most modules of the working directory followed from the named ones (a project imports a handful)."""


def sibling_modules(modules: Iterable[str]) -> list[str]:
    """The modules of the working directory that ``modules`` import, directly or through each other (every import
    statement of their source, inside functions too, relative ones resolved), in the order found: a named reward
    module's helper is the run's code as much as the reward module is, so ``RUN/inputs.json`` records it and
    ``--resume`` checks it. Read, never imported; a module of an installed package or the standard library is none
    of them, even where a virtual environment lies inside the working directory."""
    cwd = Path(os.getcwd()).resolve()
    seen, found = set(modules), []
    pending = list(modules)
    while pending and len(found) < MAX_SIBLINGS:
        module = pending.pop(0)
        path = module_file(module)
        for name in imported_names(path, module) if path is not None and path.suffix == ".py" else ():
            if name in seen:
                continue
            seen.add(name)
            place = module_file(name)
            if place is not None and place.is_file() and place.is_relative_to(cwd) and not installed_code(name, place):
                found.append(name)
                pending.append(name)
    return found[:MAX_SIBLINGS]


def imported_names(path: Path, module: str) -> list[str]:
    """Every module name an import statement of ``path`` (the source of ``module``) may load: ``import a.b`` gives
    ``a`` and ``a.b``, ``from a import b`` gives ``a`` and ``a.b`` (``b`` may be a submodule), ``from . import b``
    is resolved against ``module``'s package. Unreadable or unparsable source names none (its import fails)."""
    import ast

    try:
        if path.stat().st_size > MODULE_MAX_BYTES:
            return []
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError):
        return []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bases = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts) or not parts:
                    continue
                base = ".".join(parts[:len(parts) - (node.level - 1)] + ([base] if base else []))
            bases = [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
        else:
            continue
        for name in bases:
            parts = name.split(".")
            names += [".".join(parts[:depth]) for depth in range(1, len(parts) + 1) if parts[0]]
    return list(dict.fromkeys(names))


def installed_code(name: str, place: Path) -> bool:
    """``name`` found at ``place`` is no user code: the standard library, mutualrl, or an installed package (a
    virtual environment's ``site-packages``, wherever it lies)."""
    top = name.split(".")[0]
    return (top in sys.stdlib_module_names or top == "mutualrl"
            or any(part in ("site-packages", "dist-packages") for part in place.parts))


MODULE_MAX_BYTES = 64 << 20
"""Largest file hashed as a module (real ones are kilobytes): a run folder's record may name any file, a sparse
terabyte one too, whose hash would keep ``--resume`` or a sweep reading for days."""


def module_hash(path: Path) -> str:
    """:func:`file_hash` of a module's file; one over :data:`MODULE_MAX_BYTES` is refused, naming it, unread."""
    size = path.stat().st_size
    if size > MODULE_MAX_BYTES:
        raise UsageError(f"{str(path)[:300]}: {size:,} bytes, too large to be a Python module (at most "
                         f"{MODULE_MAX_BYTES:,}); a run folder's inputs.json or config.yaml names it: not read")
    return file_hash(path)


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_recorded_modules(root: Path, data: dict[str, Any], named_now: Iterable[str] = ()) -> None:
    """Refuse, naming it, a module the run folder ``root``'s config ``data`` names that the command running now does
    not (``named_now``: what its ``--set`` names, besides :func:`accept_code`), that its ``inputs.json`` did not
    record, or that is now another file or other content (nothing of it is imported)."""
    paths = RunPaths(root)
    named = config_modules(data)
    if not named:
        return
    recorded, now = _recorded_code(paths), set(named_now)
    for module, key in sorted(named, key=lambda item: not item[1].startswith("plugins")):  # imported first
        refuse_main_module(module, key)
        found = module_file(module)
        if found is not None:  # never imported, whoever names it
            refuse_inside_data_folder(module, found, key)
        if module not in now and not named_by_command(module):
            raise UsageError(f"{paths.config}: {key} names module {module[:200]!r}, which this command does not "
                             "name: a run folder is data and chooses no code by itself; if you mean to run it, "
                             f"say so: {ALLOW_CODE_FLAG} {module[:200]}")
        was = recorded.get(module)
        if not isinstance(was, dict):
            raise UsageError(f"{paths.config}: {key} names module {module[:200]!r}, which {paths.inputs.name} did not "
                             "record as the run started: a run folder is data and chooses no code by itself; start "
                             "a new run whose recipe names it")
        changed = _difference(found, was)
        if changed:
            raise UsageError(f"{paths.config}: {key}: module {module!r} {changed}, not the file and content "
                             f"{paths.inputs.name} recorded ({str(was.get('file'))[:300]}); run from the folder "
                             "the run started in, or restore the module")


def _difference(found: Path | None, was: dict[str, Any]) -> str:
    """How the module found now differs from its record (empty: the same file and content)."""
    if found is None or not found.is_file():
        return "is not found here"
    if str(found) != was.get("file"):
        return f"is now {found}"
    return f"({found}) changed since the run started" if module_hash(found) != was.get("sha256") else ""


def _recorded_code(paths: RunPaths) -> dict[str, Any]:
    """``inputs.json``'s ``code`` object; empty when there is no record (nothing is recorded, so nothing named)."""
    from mutualrl.inputs_record_reader import recorded_inputs

    record = recorded_inputs(paths)  # each entry's type checked: a damaged one is one line naming it
    return record["code"] if record is not None else {}
