"""How the figures of :mod:`mutualrl.evaluation.plots` look: one distinguishable style per run, the figure
frame (grid of panels, legend, layout) and the text of an empty panel.

Runs differ in colour *and* in dash pattern, marker shape and width, so that two runs with equal values (a
regime whose gate never fired, exactly on the standalone line) stay visible: the later run is drawn thinner,
dashed, with hollow markers, on top of the earlier one. No jitter: every point is where it was logged.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_atomic

LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 2)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class LineStyle:
    """What tells one run's line from another's, colour aside."""

    linestyle: Any
    marker: str
    linewidth: float
    hollow: bool  # later runs: hollow markers show a filled one under them


def run_styles(count: int) -> list[LineStyle]:
    """One style per run, each differing from every other in dash pattern and marker shape."""
    return [LineStyle(LINESTYLES[i % len(LINESTYLES)], MARKERS[i % len(MARKERS)], max(1.2, 2.6 - 0.5 * i), i > 0)
            for i in range(count)]


def line_kwargs(color: Any, style: LineStyle, *, marker: bool, markersize: float) -> dict[str, Any]:
    """``ax.plot`` keyword arguments of one run's line (``marker=False``: long curves, no markers)."""
    kwargs: dict[str, Any] = {"color": color, "linestyle": style.linestyle, "lw": style.linewidth}
    if marker:
        kwargs.update(marker=style.marker, ms=markersize + (1.5 if style.hollow else 0),
                      markerfacecolor="none" if style.hollow else color, markeredgewidth=1.3)
    return kwargs


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def colors(n: int) -> list[Any]:
    cmap = pyplot().get_cmap("tab10")
    return [cmap(i % 10) for i in range(n)]


def panel_grid(rows: int, cols: int, title: str, *, width: float = 4.2, height: float = 3.1) -> tuple[Any, Any]:
    fig, axes = pyplot().subplots(rows, cols, figsize=(width * cols + 0.4, height * rows + 0.9), squeeze=False)
    fig.suptitle(title, fontweight="bold")
    return fig, axes


def empty_panel(ax: Any, text: str = "no data") -> None:
    """Say why a panel has no line (the panel stays, so the reader sees what is missing)."""
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(text, 34)), ha="center", va="center", transform=ax.transAxes,
            color="0.4")
    ax.set_xticks([])  # no made-up 0..1 axes under the note
    ax.set_yticks([])


def short_title(text: str, width: int = 34) -> str:
    """A panel title wrapped to the panel's width (long metric names were cut at the figure's edge)."""
    return "\n".join(textwrap.wrap(text, width)) or text


ONE_RUN_PER_LINE = ("each line: one run, one seed (n = 1, no spread shown); over seeds: mutualrl plot --group-by "
                    "regime SWEEP")
"""The legend's title of ``mutualrl plot RUN...``'s figures: a line is one seed, not a result."""


def save_with_legend(fig: Any, entries: Sequence[tuple[str, dict[str, Any]]], out: Path) -> Path:
    """Figure-level legend (``(label, Line2D keyword arguments)``), layout, save, close."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], **kwargs) for _, kwargs in entries]
    ncol = min(len(entries), 6)
    fig.legend(handles, [label for label, _ in entries], loc="lower center", ncol=ncol, frameon=False,
               bbox_to_anchor=(0.5, 0.0), handlelength=3.2, title=ONE_RUN_PER_LINE, title_fontsize=8)
    legend_rows = -(-len(entries) // 6) + 1  # and its title
    height_in = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.3, (0.3 + 0.25 * legend_rows) / height_in), 1, 1 - 0.35 / height_in))
    return write_figure(fig, out, dpi=120)


def run_legend(labels: Sequence[str], palette: Sequence[Any], styles: Sequence[LineStyle],
               shown: Sequence[int], marker: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """Legend entries of the runs drawn in a figure: colour, dash pattern and marker as in the panels."""
    return [(labels[i], line_kwargs(palette[i], styles[i], marker=marker, markersize=5)) for i in shown]


def save_figure(fig: Any, entries: Sequence[tuple[str, dict[str, Any]]], out: Path) -> Path:
    """A paper figure: the legend under the panels in as many columns as fit the figure's width, the page cropped
    to what is drawn (nothing cut at an edge), vector formats as they are, PNG at 300 dpi."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], **kwargs) for _, kwargs in entries]
    width_in = fig.get_size_inches()[0]
    longest = max((len(label) for label, _ in entries), default=1)
    fits = max(1, int(width_in * 72 / (7 * 0.55 * longest + 40)))  # 7 pt text ~ 0.55 em per character, + handle
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.legend(handles, [label for label, _ in entries], loc="upper center", ncol=min(len(entries), fits),
               frameon=False, bbox_to_anchor=(0.5, 0.0), handlelength=2.6)
    return write_figure(fig, out, dpi=300, bbox_inches="tight")


def write_figure(fig: Any, out: Path, **savefig: Any) -> Path:
    """Render ``fig`` in memory (the format from ``out``'s suffix), then write it in one step and close it.

    Rendered first, so that a failed write (a full disk) is one ``StorageError`` naming the figure and leaves no
    0-byte file; written to a new temporary file renamed over ``out`` (:func:`~mutualrl.atomic_io.write_atomic`), so
    that a link planted at ``out`` (a run folder is data) is replaced, never written through."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=out.suffix.lstrip(".").lower() or "png", **savefig)
    finally:
        pyplot().close(fig)
    write_atomic(out, lambda sink: sink.write(buffer.getvalue()))
    return out
