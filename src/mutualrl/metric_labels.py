"""How a logged metric is shown in words, and the one table of per-source figures.

:class:`MetricWords` is what a figure of ``mutualrl plot`` calls a metric and the y range it draws it on; a regime
declares its own metrics' words in its spec (``RegimeSpec.metrics``). :data:`SOURCE_FIGURES` lists the per-source
figures a regime may log per (learner, peer) as ``<regime>/from/<peer>/<figure>`` (docs/regimes.md), with every way
they are shown: the plots' words, the live display's label and format (``mutualrl train``'s detail view) and the
order of ``mutualrl see inspect``. Layer 0: the regimes' specs, ``see inspect``'s report, the plots and the launcher's
display read it. The plots' words and y range for any logged key, a regime's own included, are
:mod:`mutualrl.evaluation.plot_labels`'s (it reads the regime registry, a layer above).
"""

from __future__ import annotations

from dataclasses import dataclass

UNIT = "unit"  # 0-1 at least: shares, accuracies, rewards
NONNEGATIVE = "nonnegative"  # from 0 up: counts, entropy, KL, NLL, ratios
NONPOSITIVE = "nonpositive"  # up to 0: log-probabilities
FREE = "free"  # the values' own range: correlations, a user's regime metric


@dataclass(frozen=True)
class MetricWords:
    """How one metric is shown: the panel title, the y label and the scale its y range follows."""

    title: str
    ylabel: str = "value"
    scale: str = FREE


@dataclass(frozen=True)
class SourceFigure:
    """One per-source figure: its name (the key's last part), its words in a plot, and its label and format on the
    live display."""

    name: str
    words: MetricWords
    label: str
    form: str


#: The per-source figures, in the order every view shows them; a regime logs those that mean something for it.
SOURCE_FIGURES: tuple[SourceFigure, ...] = (
    SourceFigure("ess", MetricWords("effective sample size", "ESS / samples", UNIT), "ess", "{:.2f}"),
    SourceFigure("ess_raw", MetricWords("effective sample size, raw weights", "ESS / samples", UNIT), "raw",
                 "{:.2f}"),
    SourceFigure("log_ratio_mean", MetricWords("mean log importance ratio", "log ratio (per token)", FREE), "log w",
                 "{:+.2f}"),
    SourceFigure("log_ratio_max", MetricWords("largest log importance ratio", "log ratio", FREE), "max", "{:+.2f}"),
    SourceFigure("truncated_share", MetricWords("share truncated", "share of weights", UNIT), "trunc", "{:.0%}"),
    SourceFigure("filtered_share", MetricWords("share filtered out", "share of weights", UNIT), "filt", "{:.0%}"),
    SourceFigure("used_share", MetricWords("peer samples used", "share of the peer's samples", UNIT), "used",
                 "{:.0%}"),
    SourceFigure("rescue_logp", MetricWords("learner log-prob of rescued answers", "sequence log-prob (nats)",
                                            NONPOSITIVE), "logp", "{:.3g}"),
)

SOURCE_FIGURE_NAMES: tuple[str, ...] = tuple(figure.name for figure in SOURCE_FIGURES)


def source_figure_key(key: str) -> tuple[str, str, str] | None:
    """``(regime, peer, figure)`` of a per-source key ``<regime>/from/<peer>/<figure>``; None for any other key."""
    parts = key.split("/")
    if len(parts) == 4 and parts[1] == "from" and parts[3] in SOURCE_FIGURE_NAMES:
        return parts[0], parts[2], parts[3]
    return None
