"""A bounded sketch of many values from which every quantile is read: what a rank sends over for a
:class:`~mutualrl.regimes.core.rank_metrics.Quantile` metric (PRP's token ratios of a paper step are millions).

Exact while the values are few (:data:`EXACT_VALUES`), within :data:`RELATIVE_ACCURACY` beyond (DDSketch); sketches of
parts merge into the sketch of the whole, which is how the ranks' quantiles combine
(``combine`` in ``training/trl_metrics.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


EXACT_VALUES = 2**14
"""Up to this many values (all ranks' together) a ``Quantile`` metric is exact; beyond, it is its sketch's."""
RELATIVE_ACCURACY = 0.005
"""Beyond :data:`EXACT_VALUES` a quantile is within this share of a value of its rank (DDSketch's guarantee)."""
MAX_BUCKETS = 2048
"""Buckets per sign kept by a sketch (a span of ``gamma ** 2048``, about 1e9, above its smallest kept magnitude)."""
_GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(_GAMMA)


@dataclass
class QuantileSketch:
    """Every quantile of some values within a bounded size: their count, minimum and maximum, the values themselves
    while few (:data:`EXACT_VALUES`), and logarithmic buckets of relative width :data:`RELATIVE_ACCURACY` per sign
    (DDSketch, Masson, Rim & Lee, VLDB 2019; at most :data:`MAX_BUCKETS` a sign, the smallest magnitudes folded
    together). Sketches of parts merge into the sketch of the whole. Built with torch in one pass (``bincount``):
    the ``ddsketch`` package adds one value at a time in Python, seconds for one PRP step's token ratios."""

    count: int = 0
    has_nan: bool = False
    minimum: float = math.inf
    maximum: float = -math.inf
    zeros: int = 0
    positive: dict[int, int] = field(default_factory=dict)
    """Bucket ``k`` -> how many values in ``(gamma ** (k - 1), gamma ** k]``."""
    negative: dict[int, int] = field(default_factory=dict)
    """The same for the magnitudes of the negative values."""
    exact: Any = None
    """The values (float64 CPU tensor ``[count]``) while there are at most :data:`EXACT_VALUES`; None beyond."""

    @classmethod
    def of(cls, values: Any) -> QuantileSketch:
        """The sketch of a 1-D float64 CPU tensor (one pass when every value is positive, as importance ratios)."""
        count = values.numel()
        if count == 0:
            return cls(exact=values)
        low, high = (float(v) for v in values.aminmax())  # NaN when a value is NaN
        if math.isnan(low) or math.isnan(high):
            return cls(count=count, has_nan=True)
        sketch = cls(count=count, minimum=low, maximum=high, exact=values if count <= EXACT_VALUES else None)
        if low > 0:
            sketch.positive = _buckets(values)
        else:
            sketch.zeros = int((values == 0).sum())
            sketch.positive, sketch.negative = _buckets(values[values > 0]), _buckets(-values[values < 0])
        return sketch

    @classmethod
    def merged(cls, sketches: Sequence[QuantileSketch]) -> QuantileSketch:
        """The sketch of all the values of ``sketches`` together."""
        import torch

        out = cls(count=sum(s.count for s in sketches), has_nan=any(s.has_nan for s in sketches),
                  minimum=min((s.minimum for s in sketches), default=math.inf),
                  maximum=max((s.maximum for s in sketches), default=-math.inf), zeros=sum(s.zeros for s in sketches))
        for s in sketches:
            for own, theirs in ((out.positive, s.positive), (out.negative, s.negative)):
                for key, n in theirs.items():
                    own[key] = own.get(key, 0) + n
        out.positive, out.negative = _bounded(out.positive), _bounded(out.negative)
        if out.count <= EXACT_VALUES and all(s.exact is not None for s in sketches):
            out.exact = torch.cat([s.exact for s in sketches]) if sketches else torch.zeros(0, dtype=torch.float64)
        return out

    def quantile(self, q: float) -> float:
        """The ``q`` quantile: numpy's linear interpolation of the exact values, else the sketch's estimate (exact
        at ``q`` 0 and 1); NaN when there is no value or a NaN among them, as ``torch.quantile``."""
        if self.count == 0 or self.has_nan:
            return math.nan
        if self.exact is not None:
            return _linear_quantile(self.exact, q)
        if q <= 0 or q >= 1:
            return self.minimum if q <= 0 else self.maximum
        rank, seen = q * (self.count - 1), 0
        ordered = [(-_estimate(k), n) for k, n in sorted(self.negative.items(), reverse=True)]
        ordered += [(0.0, self.zeros)] + [(_estimate(k), n) for k, n in sorted(self.positive.items())]
        for value, n in ordered:
            seen += n
            if seen > rank:
                return min(max(value, self.minimum), self.maximum)
        return self.maximum


def _buckets(magnitudes: Any) -> dict[int, int]:
    """Bucket -> count of positive float64 ``magnitudes`` ``[n]`` (at most :data:`MAX_BUCKETS`)."""
    import torch

    if magnitudes.numel() == 0:
        return {}
    keys = torch.log(magnitudes).div_(_LOG_GAMMA).ceil_().long()  # [n]
    low = int(keys.min())
    counts = torch.bincount(keys - low)  # [span]
    present = torch.nonzero(counts).flatten()  # [buckets]
    return _bounded(dict(zip((present + low).tolist(), counts[present].tolist(), strict=True)))


def _bounded(buckets: dict[int, int]) -> dict[int, int]:
    """``buckets`` with its smallest keys folded into the smallest kept one, :data:`MAX_BUCKETS` at most."""
    if len(buckets) <= MAX_BUCKETS:
        return buckets
    keys = sorted(buckets)
    kept = {key: buckets[key] for key in keys[-MAX_BUCKETS:]}
    kept[keys[-MAX_BUCKETS]] += sum(buckets[key] for key in keys[:-MAX_BUCKETS])
    return kept


def _estimate(key: int) -> float:
    """The value bucket ``key`` stands for: within :data:`RELATIVE_ACCURACY` of every value in it."""
    return 2 * _GAMMA**key / (_GAMMA + 1)


def _linear_quantile(values: Any, q: float) -> float:
    """numpy's linear quantile of the 1-D tensor ``values`` (no NaN, not empty), by sorting: ``torch.quantile``
    refuses more than 2**24 values."""
    n = values.numel()
    ordered = values.sort().values  # [N]
    position = q * (n - 1)
    low = math.floor(position)
    high = min(low + 1, n - 1)
    return (ordered[low] + (ordered[high] - ordered[low]) * (position - low)).item()
