"""The one writer of TRL's per-step metric lists (its private ``_metrics``).

TRL's trainers average each list into the logged row; mutualrl adds its own figures there (the regime's
``<name>/<metric>``, ``mutual/*``, the SFT distillation's entropy) through :meth:`TRLMetrics.record_metrics`,
the method regimes reach through :class:`~mutualrl.regimes.seam.TrainerView`.
"""

from __future__ import annotations

from collections.abc import Mapping


class TRLMetrics:
    """Mixin for a TRL trainer (``GRPOTrainer``, ``SFTTrainer``): ``record_metrics``, the one writer of ``_metrics``."""

    def record_metrics(self, values: Mapping[str, float], mode: str = "train") -> None:
        """Append ``values`` to TRL's per-step metric lists of ``mode`` ("train" or "eval")."""
        metrics = self._metrics[mode]  # type: ignore[attr-defined]  # TRL's, set in its __init__
        for key, value in values.items():
            metrics[key].append(float(value))
