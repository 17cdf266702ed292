"""``mutualrl thl-check``: THL conservation and alignment diagnostics."""

from __future__ import annotations

import typer

from mutualrl.cli.common import not_implemented, report_errors


@report_errors
def thl_check(
    source: list[str] = typer.Option(["qwen3"], "--source", help="Source tokenizer(s) (named, path or hub id)."),
    target: list[str] = typer.Option(["phi3"], "--target", help="Target tokenizer(s)."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Check THL's per-word mass conservation between tokenizers, as in the paper's THL diagnostics."""
    not_implemented("thl-check", 4)
