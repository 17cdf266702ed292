"""Registry of offline assets that `mutualrl assets fetch/list` knows about.

Modules that provide assets (``assets.tokenizers``, ``assets.data``, ``pools.builtin``)
register them at import time with :func:`register_asset`. ``default=True`` assets are
fetched by ``mutualrl assets fetch`` with no arguments (the README set-up): what the
tiny pool and the test suite need.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mutualrl.errors import UnknownNameError

# Modules that register assets when imported.
PROVIDER_MODULES = ("mutualrl.assets.tokenizers", "mutualrl.assets.data", "mutualrl.pools.builtin",
                    "mutualrl.assets.deepspeed_ops")


@dataclass(frozen=True)
class Asset:
    name: str
    kind: str  # "tokenizer" | "model" | "data" | "op"
    description: str
    fetch: Callable[[], Path]  # fetches if needed (idempotent, locked), returns the local path
    is_cached: Callable[[], bool]
    default: bool = False  # part of the default set (tiny pool + tests)
    approx_download_mb: float = 0.0
    folder: Callable[[], Path] | None = None  # where it is (or will be) cached, without fetching: `assets list`
    problem: Callable[[], str | None] | None = None  # cached but not what was built: one line naming the file


_ASSETS: dict[str, Asset] = {}


def register_asset(asset: Asset) -> None:
    _ASSETS[asset.name] = asset


def _load_providers() -> None:
    for module in PROVIDER_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:  # a provider not written yet must not break the others
            if err.name != module:
                raise


def all_assets() -> list[Asset]:
    _load_providers()
    return sorted(_ASSETS.values(), key=lambda a: (a.kind, a.name))


def get_asset(name: str) -> Asset:
    _load_providers()
    if name not in _ASSETS:
        close = difflib.get_close_matches(name, list(_ASSETS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownNameError(f"unknown asset {name!r}; known assets: {', '.join(sorted(_ASSETS))}.{hint}")
    return _ASSETS[name]
