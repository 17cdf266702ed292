"""How a metric of one rank's share of the batch becomes the whole batch's, over a policy's ranks.

With several ranks (DDP, ZeRO) each rank holds 1/W of a step's rows, and TRL's ``log()`` averages each metric
list without gathering: TRL therefore reduces its own metrics when it records them (``accelerator.reduce`` of a
sum and a count for its masked means, ``gather(...).nanmean()`` for its losses, ``nanmin``/``nanmax`` of the
gathered values). A regime's metric says how it is reduced by its type, all of them ``float``, so the maths and
one rank read them as plain numbers:

- :class:`Share` ``numerator / denominator``: the sums over the ranks divided (TRL's global masked mean);
- :class:`Total`: summed over the ranks (a count of this rank's rows);
- :class:`Quantile`: the quantile of every rank's values together;
- a plain ``float``: the mean over the ranks that have a number (NaN left out), which leaves a value computed
  from the whole batch (the same on every rank) as it is.

:func:`combine` is the reduction (pure); the trainer gathers each rank's parts (:func:`parts`) with one
collective per :meth:`~mutualrl.regimes.seam.TrainerView.record_metrics` call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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


class Quantile(float):
    """The ``q`` quantile (linear interpolation, numpy's default) of ``values``; NaN when empty; over ranks: the
    quantile of all ranks' values. The values are kept as one float64 CPU tensor: PRP's token ratios of a paper
    step are millions (8 bytes each to gather, not a Python float object each)."""

    q: float
    values: Any  # torch.Tensor [N] float64, CPU

    def __new__(cls, values: Sequence[float] | Any, q: float) -> Quantile:
        import torch

        values = torch.as_tensor(values, dtype=torch.float64).detach().flatten().cpu()  # [N] (a list or a tensor)
        quantile = super().__new__(cls, _quantile(values, q))
        quantile.q, quantile.values = float(q), values
        return quantile

    def __reduce__(self) -> tuple[Any, ...]:
        return Quantile, (self.values, self.q)


def _quantile(values: Any, q: float) -> float:
    """numpy's linear quantile of the 1-D tensor ``values``, by sorting: ``torch.quantile`` refuses more than 2**24
    values ("quantile() input tensor is too large"), which one PRP step's token ratios over all ranks can reach."""
    n = values.numel()
    if n == 0 or bool(values.isnan().any()):  # NaN as torch.quantile gives it
        return math.nan
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
            out[key] = ("quantile", (value.values, value.q))
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
            import torch

            out[key] = Quantile(torch.cat([rank_values for rank_values, _ in values]), values[0][1])  # [sum N]
        else:
            numbers = [v for v in values if not math.isnan(v)]
            if numbers and all(v == numbers[0] for v in numbers):  # computed from the whole batch: kept exactly
                out[key] = numbers[0]
            else:
                out[key] = sum(numbers) / len(numbers) if numbers else math.nan
    return out
