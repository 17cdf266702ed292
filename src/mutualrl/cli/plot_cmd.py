"""``mutualrl plot``: PNG figures from training runs."""

from __future__ import annotations

from pathlib import Path

import typer

from mutualrl.cli.common import not_implemented, report_errors


@report_errors
def plot(
    run_dirs: list[Path] = typer.Argument(..., help="One or more run folders (overlaid for comparison)."),
    out: Path | None = typer.Option(None, "--out", help="Folder for the PNG files (default: first run's plots/)."),
) -> None:
    """Plot validation reward@1, training reward, entropy, KL and regime metrics per policy."""
    not_implemented("plot", 6)
