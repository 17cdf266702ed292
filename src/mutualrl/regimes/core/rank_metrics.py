"""The metrics a regime returns, typed by how each is reduced over a policy's ranks.

With several ranks (DDP, ZeRO) each rank holds 1/W of a step's rows, and TRL's ``log()`` averages each metric
list without gathering: TRL therefore reduces its own metrics when it records them (``accelerator.reduce`` of a
sum and a count for its masked means, ``gather(...).nanmean()`` for its losses, ``nanmin``/``nanmax`` of the
gathered values). A regime's metric says how it is reduced by its type, all of them ``float``, so the maths and
one rank read them as plain numbers:

- :class:`Share` ``numerator / denominator``: the sums over the ranks divided (TRL's global masked mean);
- :class:`Total`: summed over the ranks (a count of this rank's rows);
- :class:`Quantile`: the quantile of every rank's values together, from each rank's bounded sketch
  (:class:`~mutualrl.regimes.core.quantile_sketch.QuantileSketch`: exact for a few values, within 0.5 % beyond);
- a plain ``float``: the mean over the ranks that have a number (NaN left out), which leaves a value computed
  from the whole batch (the same on every rank) as it is.

The reduction itself is the trainer's (:mod:`mutualrl.training.trl_metrics`: one collective per
:meth:`~mutualrl.regimes.core.trainer_interface.TrainerView.record_metrics` call).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mutualrl.regimes.core.quantile_sketch import QuantileSketch


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
    quantile of all ranks' values. Exact while all ranks' values together are at most ``EXACT_VALUES``, else within
    ``RELATIVE_ACCURACY`` (:class:`~mutualrl.regimes.core.quantile_sketch.QuantileSketch`): PRP's token ratios of a paper
    step are millions, and what a rank sends over is its sketch, bounded, not them."""

    q: float
    sketch: QuantileSketch

    def __new__(cls, values: Sequence[float] | Any, q: float) -> Quantile:
        import torch

        values = torch.as_tensor(values, dtype=torch.float64).detach().flatten().cpu()  # [N] (a list or a tensor)
        return cls.of_sketch(QuantileSketch.of(values), q)

    @classmethod
    def largest(cls, value: float) -> Quantile:
        """One value of this rank, reduced over the ranks as their largest (the 1.0 quantile)."""
        return cls([value], 1.0)

    @classmethod
    def of_sketch(cls, sketch: QuantileSketch, q: float) -> Quantile:
        quantile = super().__new__(cls, sketch.quantile(float(q)))
        quantile.q, quantile.sketch = float(q), sketch
        return quantile

    def __reduce__(self) -> tuple[Any, ...]:
        return Quantile.of_sketch, (self.sketch, self.q)
