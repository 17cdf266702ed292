"""The one writer of TRL's per-step metric lists (its private ``_metrics``).

TRL's trainers average each list into the logged row; mutualrl adds its own figures there (the regime's
``<name>/<metric>``, ``mutual/*``, the SFT distillation's entropy) through :meth:`TRLMetrics.record_metrics`,
the method regimes reach through :class:`~mutualrl.regimes.core.trainer_interface.TrainerView`.

TRL's ``log()`` averages those lists on each rank without gathering, so, as TRL does for its own metrics, a value
is reduced over the policy's ranks when it is recorded, by its type (:mod:`mutualrl.regimes.core.rank_metrics`): the
logged row is the whole batch's, not rank 0's share of it. :func:`parts` is one rank's share of each metric,
picklable, gathered with one collective per call; :func:`combine` reduces them (pure): a ``Share``'s sums divided, a
``Total`` summed, a ``Quantile``'s sketches merged, a plain ``float`` averaged over the ranks that have a number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mutualrl.regimes.core.quantile_sketch import QuantileSketch
from mutualrl.regimes.core.rank_metrics import Quantile, Share, Total


class TRLMetrics:
    """Mixin for a TRL trainer (``GRPOTrainer``, ``SFTTrainer``): ``record_metrics``, the one writer of ``_metrics``."""

    def record_metrics(self, values: Mapping[str, float], mode: str = "train") -> None:
        """Append ``values``, reduced over this policy's ranks, to TRL's per-step metric lists of ``mode`` ("train"
        or "eval"). With several ranks it is a collective: every rank calls it at the same point, with the keys it
        has (a key some rank lacks is reduced over the ranks that recorded it)."""
        metrics = self._metrics[mode]  # type: ignore[attr-defined]  # TRL's, set in its __init__
        for key, value in self.reduced_over_ranks(values).items():
            metrics[key].append(float(value))

    def reduced_over_ranks(self, values: Mapping[str, float]) -> dict[str, float]:
        """``values`` of this rank as the whole batch's (one ``gather_object`` where there are several ranks)."""
        accelerator = self.accelerator  # type: ignore[attr-defined]  # Transformers' Trainer sets it
        if accelerator.num_processes == 1:
            return dict(values)
        from accelerate.utils import gather_object

        return combine(gather_object([parts(values)]))


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
