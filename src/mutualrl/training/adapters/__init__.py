"""Regime adapters: TRL batch <-> the pure regime functions of :mod:`mutualrl.regimes`."""

from __future__ import annotations

import importlib
from typing import Any

from mutualrl.config.schema import RunConfig
from mutualrl.errors import UsageError
from mutualrl.regimes.registry import RegimeSpec, all_regimes, get_regime
from mutualrl.training.adapters.base import RegimeAdapter


def adapter_class(spec: RegimeSpec) -> type[RegimeAdapter]:
    """The adapter class a regime names (``"module:Class"`` in its :class:`RegimeSpec`)."""
    module, _, name = spec.adapter.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, RegimeAdapter)):
        raise UsageError(f"regime {spec.name!r}: adapter {spec.adapter!r} is not a RegimeAdapter subclass")
    return cls


def adapter_classes() -> dict[str, type[RegimeAdapter]]:
    """Regime name -> adapter class, for every registered regime."""
    return {spec.name: adapter_class(spec) for spec in all_regimes()}


def make_regime_adapter(config: RunConfig, policy: str, exchange: Any = None) -> RegimeAdapter:
    spec = get_regime(config.regime.name)
    return adapter_class(spec)(config, policy, exchange, spec=spec)


__all__ = ["RegimeAdapter", "adapter_class", "adapter_classes", "make_regime_adapter"]
