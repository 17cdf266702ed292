"""The one writer of TRL's per-step metric lists (its private ``_metrics``).

TRL's trainers average each list into the logged row; mutualrl adds its own figures there (the regime's
``<name>/<metric>``, ``mutual/*``, the SFT distillation's entropy) through :meth:`TRLMetrics.record_metrics`,
the method regimes reach through :class:`~mutualrl.regimes.seam.TrainerView`.

TRL's ``log()`` averages those lists on each rank without gathering, so, as TRL does for its own metrics, a value
is reduced over the policy's ranks when it is recorded (:mod:`mutualrl.regimes.rank_metrics`): the logged row is
the whole batch's, not rank 0's share of it.
"""

from __future__ import annotations

from collections.abc import Mapping

from mutualrl.regimes.rank_metrics import combine, parts


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
