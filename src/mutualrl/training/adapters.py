"""The regime adapter of a policy process: looked up in the registry, imported only here (torch, TRL).

Each regime's adapter lives in its folder (``regimes/<name>/adapter.py``, a subclass of
:class:`~mutualrl.regimes.core.adapter.RegimeAdapter`) and is named by import path in its
:class:`~mutualrl.regimes.core.registry.RegimeSpec`, so importing a spec never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from mutualrl.config.schema import RunConfig
from mutualrl.errors import UsageError
from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.regimes.core.registry import RegimeSpec, get_regime


def adapter_class(spec: RegimeSpec) -> type[RegimeAdapter]:
    """The adapter class a regime names (``"module:Class"`` in its :class:`RegimeSpec`)."""
    module, _, name = spec.adapter.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, RegimeAdapter)):
        raise UsageError(f"regime {spec.name!r}: adapter {spec.adapter!r} is not a RegimeAdapter subclass")
    return cls


def make_regime_adapter(config: RunConfig, policy: str, exchange: Any = None) -> RegimeAdapter:
    """The adapter of the run's regime (``config.regime.name``) for ``policy``."""
    spec = get_regime(config.regime.name)
    return adapter_class(spec)(config, policy, exchange, spec=spec)


__all__ = ["RegimeAdapter", "adapter_class", "make_regime_adapter"]
