"""A test-only regime variant, file 1 of 3: PRP with truncated per-token importance weights, settings and registration.

Its settings subclass PRP's and add one field; it registers only when named in ``MUTUALRL_REGIMES`` (the e2e test's
launcher and policy processes) or by a test's fixture, so no other test sees it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from mutualrl.regimes.api import ENV_VAR, UNIT, MetricWords, RegimeSpec, register_regime
from mutualrl.regimes.prp.spec import PRPSettings


@dataclass
class PRPTISSettings(PRPSettings):
    """PRP's settings plus the cap of the per-token importance weight."""

    weight_cap: float = field(default=2.0, metadata={"gt": 0, "help": "Cap of each peer token's importance weight."})


SPEC = RegimeSpec(
    name="prp-tis-test", help="PRP with capped per-token importance weights (a test-only variant)", needs_peers=True,
    parent="prp",  # regime.prp.<field> in a recipe reaches the variant
    settings_key="prp_tis_test", settings=PRPTISSettings, adapter="prp_tis_variant.adapter:PRPTISAdapter",
    status=(("capped_share", "capped"),),
    metrics=(("capped_share", MetricWords("peer tokens whose weight was capped", "share of peer tokens", UNIT)),),
)
if __name__ in os.environ.get(ENV_VAR, "").split(","):
    register_regime(SPEC)
