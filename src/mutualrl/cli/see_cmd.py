"""``mutualrl see``: inspect a run's Shared Experience Exchange."""

from __future__ import annotations

from pathlib import Path

import typer

from mutualrl.cli.common import not_implemented, report_errors

app = typer.Typer(help="Inspect the Shared Experience Exchange (SEE) of a run.", no_args_is_help=True)


@app.command("inspect")
@report_errors
def inspect(
    run_dir: Path = typer.Argument(..., help="A run folder (or its see/ folder)."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Steps, records per policy, reward means, files, sizes, schema, and any inconsistency found."""
    not_implemented("see inspect", 3)
