"""``mutualrl complementarity``: where do the policies of a pool complement each other?"""

from __future__ import annotations

from pathlib import Path

import typer

from mutualrl.cli.common import not_implemented, report_errors


@report_errors
def complementarity(
    results: list[Path] = typer.Argument(None, help="Eval result JSON files (from `mutualrl eval`)."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Per-model success, pairwise Jaccard, peer-rescue rates, any/all/exactly-one success, by difficulty."""
    not_implemented("complementarity", 6)
