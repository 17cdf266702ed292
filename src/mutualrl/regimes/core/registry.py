"""The regime registry: finding every regime and looking one up, the only place regimes are listed.

Each built-in regime is one folder ``mutualrl/regimes/<name>/``: a torch-free ``spec.py`` (its
settings dataclass, metric names and the :class:`~mutualrl.regimes.core.regime_spec.RegimeSpec` it registers with
:func:`~mutualrl.regimes.core.regime_spec.register_regime`), its pure maths ``maths.py`` and its TRL adapter
``adapter.py``, named in the spec by import path so that importing a spec never imports torch or TRL. Every
sub-package of :mod:`mutualrl.regimes` with a ``spec`` module is imported on the first lookup, so adding a regime is adding
one such folder. ``RegimeSpec``, ``RegimeFlag`` and ``register_regime`` are defined in
:mod:`mutualrl.regimes.core.regime_spec`; a regime author imports them from :mod:`mutualrl.regimes.api`.

Regimes outside the package (a plugin, a test) are imported from the ``MUTUALRL_REGIMES``
environment variable: module names or ``.py`` file paths, separated by commas. The launcher's
policy processes inherit the variable, so a regime named there trains like a built-in one.

CLI validation and help, config validation and settings, the launcher's sharing check, the
worker's exchange, the adapter lookup, the status line and the plots' words for its metrics all read from here.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import os
import pkgutil
import sys
import typing
from pathlib import Path
from typing import Any

from mutualrl.errors import UnknownNameError, UsageError
from mutualrl.regimes.core.regime_spec import REGISTERED as _REGISTRY
from mutualrl.regimes.core.regime_spec import RegimeFlag, RegimeSpec, register_regime, unregister_regime

REGIMES_PACKAGE = "mutualrl.regimes"
"""The package whose sub-packages with a ``spec`` module are the built-in regimes (this module is in its ``core``)."""

ENV_VAR = "MUTUALRL_REGIMES"
"""Extra regime modules to import (module names or .py paths, comma-separated)."""

_loaded: set[str] = set()


def load_regimes() -> None:
    """Import the built-in ``<name>/spec.py`` modules and those named in ``MUTUALRL_REGIMES`` (once each)."""
    for module in builtin_spec_modules():
        _import_once(module)
    for entry in os.environ.get(ENV_VAR, "").split(","):
        if entry.strip():
            _import_once(entry.strip())


@functools.cache
def builtin_spec_modules() -> tuple[str, ...]:
    """The ``spec`` modules of this package's regime folders, found once a process: every config load asks for the
    regimes, and scanning the folders each time was about a third of loading a config."""
    package = sys.modules[REGIMES_PACKAGE]
    return tuple(f"{REGIMES_PACKAGE}.{info.name}.spec" for info in pkgutil.iter_modules(package.__path__)
                 if info.ispkg and (Path(info.module_finder.path) / info.name / "spec.py").is_file())  # type: ignore[union-attr]


def _import_once(entry: str) -> None:
    if entry in _loaded:
        return
    _loaded.add(entry)
    if entry.endswith(".py"):
        import_file(entry, ENV_VAR)
    else:
        importlib.import_module(entry)


def import_file(entry: str, where: str) -> None:
    """Import a ``.py`` file by path, once (``MUTUALRL_REGIMES`` entries, a recipe's ``plugins``)."""
    path = Path(entry).resolve()
    if not path.is_file():
        raise UnknownNameError(f"{where}: module file {entry!r} not found")
    name = "mutualrl_regime_" + "".join(c if c.isalnum() else "_" for c in path.stem)
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]


def all_regimes() -> list[RegimeSpec]:
    """Every registered regime, in listing order."""
    load_regimes()
    return sorted(_REGISTRY.values(), key=lambda s: (s.order, s.name))


def regime_names() -> tuple[str, ...]:
    return tuple(s.name for s in all_regimes())


def get_regime(name: str, where: str = "regime") -> RegimeSpec:
    """The spec of ``name``; an unknown name raises :class:`UnknownNameError` listing the known ones."""
    load_regimes()
    spec = _REGISTRY.get(name)
    if spec is None:
        known = regime_names()
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownNameError(f"{where}: unknown regime {name!r}; expected one of {', '.join(known)}{hint}")
    return spec


def settings_regimes() -> list[RegimeSpec]:
    """Regimes with settings (``regime.<settings_key>`` in a recipe)."""
    return [s for s in all_regimes() if s.settings_key is not None]


def regime_flags() -> list[tuple[RegimeSpec, RegimeFlag]]:
    """Every regime's own ``mutualrl train`` options, in listing order."""
    return [(spec, flag) for spec in all_regimes() for flag in spec.flags]


def flag_setting(flag: str, value: str) -> tuple[str, Any]:
    """The (dotted key, value) a regime's option sets (``regime.prp.denominator``, ``peer``). A value outside the
    field's ``Literal`` choices is refused here, naming the option; for a field that is not text (``int``,
    ``bool``, ``float``...) the option's text is read as YAML, as ``--set`` reads it, and the loader checks it."""
    spec, option = next((s, f) for s, f in regime_flags() if f.flag == flag)
    key = f"regime.{spec.settings_key}.{option.setting}"
    hint = typing.get_type_hints(spec.settings)[option.setting]
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise UsageError(f"{flag}: expected {' or '.join(repr(c) for c in choices)}, got {value!r}")
        return key, value
    if str in (typing.get_args(hint) or (hint,)):
        return key, value
    import yaml

    try:
        return key, yaml.safe_load(value)
    except yaml.YAMLError:
        raise UsageError(f"{flag}: {value!r} is not a value (write a number, true/false or a list)") from None


def inherited_setting_key(regime: str | None, key: str) -> str:
    """The dotted key a regime option's setting lands on when ``regime`` runs: ``regime.<its key>.<field>`` where the
    running regime's settings subclass the option's regime's (a variant: ``--prp-denominator`` sets the variant's
    ``denominator``), else ``key`` as given."""
    parts = key.split(".")
    if not isinstance(regime, str) or len(parts) != 3 or parts[0] != "regime":
        return key
    load_regimes()
    spec = _REGISTRY.get(regime)
    owner = next((s for s in _REGISTRY.values() if s.settings_key == parts[1]), None)
    if spec is None or owner is None or spec.settings is None or spec.settings_key == owner.settings_key:
        return key
    if issubclass(spec.settings, owner.settings):
        return f"regime.{spec.settings_key}.{parts[2]}"
    return key


def parent_regime(name: str) -> RegimeSpec:
    """The spec of the regime a variant builds on; its ``spec.py`` replaces what differs
    (``dataclasses.replace(parent, name=..., parent=parent.name, settings=...)``)."""
    return get_regime(name, "parent regime")


def parent_adapter(name: str) -> type:
    """The adapter class of regime ``name``, for a variant's ``adapter.py`` to subclass (imports it, so torch and
    TRL: call it from an adapter, never from a spec)."""
    module, _, class_name = parent_regime(name).adapter.partition(":")
    return getattr(importlib.import_module(module), class_name)


def parent_chain(spec: RegimeSpec) -> list[RegimeSpec]:
    """``spec``'s parents with settings, nearest last (a variant of a variant: grandparent first). A parent that
    is not registered, or whose settings the variant's do not subclass, is refused."""
    chain: list[RegimeSpec] = []
    seen = {spec.name}
    while spec.parent is not None:
        parent = get_regime(spec.parent, f"regime {spec.name!r}: parent")
        if parent.name in seen:
            raise UsageError(f"regime {spec.name!r}: its parents form a loop through {parent.name!r}")
        seen.add(parent.name)
        if parent.settings is not None:
            if spec.settings is None or not issubclass(spec.settings, parent.settings):
                raise UsageError(f"regime {spec.name!r}: its settings must subclass its parent {parent.name!r}'s "
                                 f"({parent.settings.__name__})")
            chain.insert(0, parent)
        spec = parent
    return chain


def regimes_help() -> str:
    """``name (help), ...`` for the CLI."""
    return ", ".join(f"{s.name} ({s.help})" for s in all_regimes())


__all__ = ["ENV_VAR", "RegimeFlag", "RegimeSpec", "all_regimes", "flag_setting", "get_regime", "import_file",
           "inherited_setting_key", "load_regimes", "parent_adapter", "parent_chain", "parent_regime",
           "regime_flags", "regime_names", "regimes_help", "register_regime", "settings_regimes",
           "unregister_regime"]
