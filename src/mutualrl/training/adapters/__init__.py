"""Regime adapters: TRL batch <-> the pure regime functions of :mod:`mutualrl.regimes`."""

from __future__ import annotations

from typing import Any

from mutualrl.config.schema import RunConfig
from mutualrl.training.adapters.base import RegimeAdapter


def adapter_classes() -> dict[str, type[RegimeAdapter]]:
    from mutualrl.training.adapters.prp import PRPAdapter
    from mutualrl.training.adapters.sgt import SGTAdapter
    from mutualrl.training.adapters.value import RandPertAdapter, XGRPOAdapter

    return {"standalone": RegimeAdapter, "xgrpo": XGRPOAdapter, "grpo-randpert": RandPertAdapter,
            "sgt": SGTAdapter, "prp": PRPAdapter}


def make_regime_adapter(config: RunConfig, policy: str, exchange: Any = None) -> RegimeAdapter:
    return adapter_classes()[config.regime.name](config, policy, exchange)


__all__ = ["RegimeAdapter", "adapter_classes", "make_regime_adapter"]
