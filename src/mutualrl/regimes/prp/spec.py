"""PRP, Peer Rollout Pooling (paper Sec. "Regime 1"): settings, metrics, registration.

The maths is :mod:`mutualrl.regimes.prp.maths`, the adapter
:class:`~mutualrl.regimes.prp.adapter.PRPAdapter` (subscribes to peers' text and traces).
"""

from __future__ import annotations

from dataclasses import dataclass

from mutualrl.regimes.api import (CoverSettings, PooledRowsSettings, RegimeFlag, RegimeSpec, ratio_metrics,
                                  register_regime)


@dataclass
class PRPSettings(PooledRowsSettings, CoverSettings):
    """Peer Rollout Pooling (paper Sec. "Regime 1"): the pooled rows' settings as they are, and the enumeration's
    limits of F-TIS over texts."""


def check_prp_settings(settings: PRPSettings) -> tuple[str, str] | None:
    """A correction weighs a peer sample by T(pi_snapshot / pi_peer) with the snapshot in the PPO ratio, so the
    peer's trace must be read: 'learner' would make every weight 1."""
    if settings.correction != "none" and settings.denominator != "peer":
        return "denominator", (f"must be 'peer' with correction {settings.correction!r}: the correction's weight "
                               "divides by the peer's trace (the PPO ratio then divides by the learner's snapshot)")
    return None


PRP = register_regime(RegimeSpec(
    name="prp",
    help="peer rollout pooling; see --prp-denominator",
    needs_peers=True,
    settings_key="prp",
    settings=PRPSettings,
    adapter="mutualrl.regimes.prp.adapter:PRPAdapter",
    status=(("token_clip_rate", "clip"),),
    metrics=ratio_metrics("PRP"),
    check=check_prp_settings,
    order=3,
    flags=(RegimeFlag("--prp-denominator", "denominator"),),  # its help: the settings field's
))
