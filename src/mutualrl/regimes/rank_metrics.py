"""How a metric of one rank's share of the batch becomes the whole batch's, over a policy's ranks.

With several ranks (DDP, ZeRO) each rank holds 1/W of a step's rows, and TRL's ``log()`` averages each metric
list without gathering: TRL therefore reduces its own metrics when it records them (``accelerator.reduce`` of a
sum and a count for its masked means, ``gather(...).nanmean()`` for its losses, ``nanmin``/``nanmax`` of the
gathered values). A regime's metric says how it is reduced by its type, all of them ``float``, so the maths and
one rank read them as plain numbers:

- :class:`Share` ``numerator / denominator``: the sums over the ranks divided (TRL's global masked mean);
- :class:`Total`: summed over the ranks (a count of this rank's rows);
- :class:`Quantile`: the quantile of every rank's values together, from each rank's bounded sketch
  (:class:`QuantileSketch`: exact for a few values, within 0.5 % beyond);
- a plain ``float``: the mean over the ranks that have a number (NaN left out), which leaves a value computed
  from the whole batch (the same on every rank) as it is.

:func:`combine` is the reduction (pure); the trainer gathers each rank's parts (:func:`parts`) with one
collective per :meth:`~mutualrl.regimes.seam.TrainerView.record_metrics` call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class Share(float):
    """``numerator / denominator`` (NaN where the denominator is 0); over ranks: summed parts, then divided."""

    numerator: float
    denominator: float

    def __new__(cls, numerator: float, denominator: float) -> Share:
        numerator, denominator = float(numerator), float(denominator)
        share = super().__new__(cls, numerator / denominator if denominator > 0 else math.nan)
        share.numerator, share.denominator = numerator, denominator
        return share

    def __reduce__(self) -> tuple[Any, ...]:
        return Share, (self.numerator, self.denominator)


class Total(float):
    """A count of this rank's rows; over ranks: the sum."""

    def __reduce__(self) -> tuple[Any, ...]:
        return Total, (float(self),)


EXACT_VALUES = 2**14
"""Up to this many values (all ranks' together) a :class:`Quantile` is exact; beyond, it is its sketch's."""
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


class Quantile(float):
    """The ``q`` quantile (linear interpolation, numpy's default) of ``values``; NaN when empty; over ranks: the
    quantile of all ranks' values. Exact while all ranks' values together are at most :data:`EXACT_VALUES`, else
    within :data:`RELATIVE_ACCURACY` (:class:`QuantileSketch`): PRP's token ratios of a paper step are millions,
    and what a rank sends over is its sketch, bounded, not them."""

    q: float
    sketch: QuantileSketch

    def __new__(cls, values: Sequence[float] | Any, q: float) -> Quantile:
        import torch

        values = torch.as_tensor(values, dtype=torch.float64).detach().flatten().cpu()  # [N] (a list or a tensor)
        return cls.of_sketch(QuantileSketch.of(values), q)

    @classmethod
    def of_sketch(cls, sketch: QuantileSketch, q: float) -> Quantile:
        quantile = super().__new__(cls, sketch.quantile(float(q)))
        quantile.q, quantile.sketch = float(q), sketch
        return quantile

    def __reduce__(self) -> tuple[Any, ...]:
        return Quantile.of_sketch, (self.sketch, self.q)


def _linear_quantile(values: Any, q: float) -> float:
    """numpy's linear quantile of the 1-D tensor ``values`` (no NaN, not empty), by sorting: ``torch.quantile``
    refuses more than 2**24 values."""
    n = values.numel()
    ordered = values.sort().values  # [N]
    position = q * (n - 1)
    low = math.floor(position)
    high = min(low + 1, n - 1)
    return (ordered[low] + (ordered[high] - ordered[low]) * (position - low)).item()


def parts(values: Mapping[str, float]) -> dict[str, tuple[str, Any]]:
    """``values`` as (kind, what the reduction needs) per key: picklable, for one rank's gather."""
    out: dict[str, tuple[str, Any]] = {}
    for key, value in values.items():
        if isinstance(value, Share):
            out[key] = ("share", (value.numerator, value.denominator))
        elif isinstance(value, Total):
            out[key] = ("total", float(value))
        elif isinstance(value, Quantile):
            out[key] = ("quantile", (value.sketch, value.q))
        else:
            out[key] = ("mean", float(value))
    return out


def combine(per_rank: Sequence[Mapping[str, tuple[str, Any]]]) -> dict[str, float]:
    """The whole batch's value of every key any rank recorded (keys in first-seen order; a key a rank did not
    record is reduced over the ranks that did)."""
    keys = list(dict.fromkeys(key for rank in per_rank for key in rank))
    out: dict[str, float] = {}
    for key in keys:
        entries = [rank[key] for rank in per_rank if key in rank]
        kinds = {kind for kind, _ in entries}
        if len(kinds) != 1:
            raise ValueError(f"metric {key!r} was recorded as {sorted(kinds)} on different ranks")
        kind, values = kinds.pop(), [value for _, value in entries]
        if kind == "share":
            out[key] = Share(sum(n for n, _ in values), sum(d for _, d in values))
        elif kind == "total":
            out[key] = Total(sum(values))
        elif kind == "quantile":
            out[key] = Quantile.of_sketch(QuantileSketch.merged([sketch for sketch, _ in values]), values[0][1])
        else:
            numbers = [v for v in values if not math.isnan(v)]
            if numbers and all(v == numbers[0] for v in numbers):  # computed from the whole batch: kept exactly
                out[key] = numbers[0]
            else:
                out[key] = sum(numbers) / len(numbers) if numbers else math.nan
    return out
