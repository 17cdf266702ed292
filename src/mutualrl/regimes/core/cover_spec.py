"""The limits of an enumeration of a text's tokenizations, declared once for every regime that sums a probability over
them (byte-kd's ``distribution: exact``, OPD's ``signal: sequence``, PRP's F-TIS with ``kl_over: texts``). Torch-free,
like a ``spec.py``; the enumeration is :mod:`mutualrl.regimes.core.byte_covers`, its limits as the adapters pass them
:class:`~mutualrl.regimes.core.cover_scoring.CoverLimits`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CoverSettings:
    """How far the enumeration of tokenizations goes where the regime sums a text's probability over them."""

    cover_floor: float = field(default=1e-4, metadata={
        "ge": 0, "lt": 1, "help": "where the regime sums over a text's tokenizations (byte-kd 'exact', OPD "
                                  "'sequence', F-TIS over 'texts'): drop a tokenization of a prefix whose "
                                  "probability is below this times the most likely one's at its offset, on every "
                                  "side that scores (0: none dropped; with max_covers 0 too, exact at any cost); the "
                                  "largest share dropped is logged (a metric named ...cover_dropped)"})
    max_covers: int = field(default=8, metadata={
        "ge": 0, "help": "there: keep at most this many tokenizations of each prefix, the most likely (0: all). Each "
                         "kept one other than the sampled costs a forward; a model that spreads its mass over many "
                         "tokenizations, as an untrained one does, needs the bound, and the mass it drops biases "
                         "what is compared"})
