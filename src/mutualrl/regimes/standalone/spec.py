"""Standalone GRPO (paper Sec. "Preliminaries"): no sharing; TRL's own update, bit for bit.

Its maths is TRL's (:mod:`mutualrl.regimes.core.grpo` reproduces it); the adapter is the base
:class:`~mutualrl.regimes.core.adapter.RegimeAdapter`, which adds nothing to TRL's batch.
"""

from __future__ import annotations

from mutualrl.regimes.api import RegimeSpec, register_regime

STANDALONE = register_regime(RegimeSpec(
    name="standalone",
    help="independent GRPO",
    order=0,
))
