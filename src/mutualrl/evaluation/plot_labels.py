"""What the figures of ``mutualrl plot`` call each logged metric, and the y range they draw it on.

Every panel of one quantity in a figure shares one y range, so that a 0.05 move is not drawn as a deep V
and an all-zero reward does not get ticks of ±0.04: shares, accuracies and rewards on 0-1 (widened to the
values when a user's reward goes beyond it), counts and other non-negative quantities from 0, the rest on the
range of all their panels' values. The words themselves (:class:`MetricWords`, the per-source figures) are
:mod:`mutualrl.metric_labels`'s, at layer 0 where the regimes' specs declare theirs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from mutualrl.metric_labels import (
    FREE,
    NONNEGATIVE,
    NONPOSITIVE,
    SOURCE_FIGURES,
    UNIT,
    MetricWords,
    source_figure_key,
)
from mutualrl.regimes.core.registry import all_regimes

#: The metrics every run logs that the built-in figures draw, by the key they are logged under; a regime's own
#: metrics have their words in its spec (``RegimeSpec.metrics``), the per-source figures in
#: :data:`~mutualrl.metric_labels.SOURCE_FIGURES`.
RUN_METRIC_LABELS: dict[str, MetricWords] = {
    "eval/reward@1": MetricWords("validation reward@1", "reward@1 (greedy)", UNIT),
    "reward_mean": MetricWords("training reward", "mean reward", UNIT),
    "entropy": MetricWords("token entropy", "entropy (nats per token)", NONNEGATIVE),
    "kl": MetricWords("KL to the reference model", "KL (per token)", NONNEGATIVE),
}


def metric_label(key: str) -> MetricWords:
    """What a figure calls ``key`` and the range it draws it on: a run's metric (:data:`RUN_METRIC_LABELS`), a
    regime's (its spec's ``metrics``), a per-source figure (``<regime>/from/<peer>/<figure>``); any other key (a
    user's regime metric without words) in words (``myreg/peer_hit_rate`` -> ``myreg: peer hit rate``) on its values'
    own range."""
    if key in RUN_METRIC_LABELS:
        return RUN_METRIC_LABELS[key]
    regime_words = next((spec.metric_keys[key] for spec in all_regimes() if key in spec.metric_keys), None)
    if regime_words is not None:
        return regime_words
    source = source_figure_key(key)
    if source is not None:
        regime, peer, figure = source
        words = next(f.words for f in SOURCE_FIGURES if f.name == figure)
        return MetricWords(f"{regime.upper()} from {peer}: {words.title}", words.ylabel, words.scale)
    named = [part.replace("_", " ") for part in key.split("/")]
    title = f"{' '.join(named[:-1])}: {named[-1]}" if len(named) > 1 else named[0]
    return MetricWords(title, "value", FREE)


def axis_range(values: Iterable[float], scale: str) -> tuple[float, float]:
    """The y limits of every panel showing ``values`` (all the panels' values together), padded by 4 %."""
    finite = [v for v in values if math.isfinite(v)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if scale == UNIT:
        low, high = min(low, 0.0), max(high, 1.0)
    elif scale == NONNEGATIVE:
        low = min(low, 0.0)
        high = high if high > low else low + 1.0  # all zero: 0..1, not ±0.04 round a flat line
    elif scale == NONPOSITIVE:
        high = max(high, 0.0)
        low = low if low < high else high - 1.0
    elif high == low:
        low, high = low - max(abs(low) * 0.1, 0.5), high + max(abs(high) * 0.1, 0.5)
    pad = 0.04 * (high - low)
    return low - pad, high + pad
