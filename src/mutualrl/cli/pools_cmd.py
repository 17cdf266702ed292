"""``mutualrl pools``: list and show the pool recipes."""

from __future__ import annotations

import typer
import yaml

from mutualrl.cli.common import console, report_errors
from mutualrl.config.loader import list_pool_recipes, load_recipe_data, load_run_config
from mutualrl.config.typed import to_plain
from mutualrl.regimes.standalone_spec import STANDALONE

app = typer.Typer(
    help="List the pool recipes (one line each) or show one resolved recipe.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback(invoke_without_command=True)
@report_errors
def pools(ctx: typer.Context) -> None:
    """List the pools shipped as recipes: name, policies, regime and description."""
    if ctx.invoked_subcommand is not None:
        return
    rows = []
    for path in list_pool_recipes():
        data = load_recipe_data(path)
        pool = data.get("pool", {}) or {}
        policies = pool.get("policies", []) or []
        regime = (data.get("regime") or {}).get("name", STANDALONE.name)
        rows.append((path.stem, f"{len(policies)} policies", regime, str(pool.get("description", ""))))
    width = max(console.width, 60)
    name_w = max(len(r[0]) for r in rows)
    for name, count, regime, description in rows:
        head = f"{name:<{name_w}}  {count:<10}  {regime:<13}  "
        room = width - len(head)
        text = description if len(description) <= room else description[: max(room - 1, 0)] + "…"
        console.print(f"[bold cyan]{name:<{name_w}}[/]  {count:<10}  {regime:<13}  {text}", highlight=False)


@app.command("show")
@report_errors
def show(name: str = typer.Argument(..., help="Pool name (see `mutualrl pools`) or a recipe path.")) -> None:
    """Print the fully resolved recipe of a pool (extends merged, defaults filled in) as YAML."""
    loaded = load_run_config(name, check_grpo=False)
    # Plain stdout, not rich: rich wraps long lines to the terminal width even when piped, which breaks the
    # YAML of `mutualrl pools show NAME > recipe.yaml` ("save the resolved recipe and edit it").
    typer.echo(yaml.safe_dump(to_plain(loaded.config), sort_keys=False, width=10**6), nl=False)
