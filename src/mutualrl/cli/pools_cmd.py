"""``mutualrl pools``: list and show the pool recipes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml

from mutualrl.cli.common import console, report_errors
from mutualrl.config.loader import (
    list_experiment_recipes,
    list_pool_recipes,
    load_recipe_data,
    load_run_config,
    read_yaml,
)
from mutualrl.config.lookup import MISSING, value_at
from mutualrl.config.typed import to_plain
from mutualrl.regimes.standalone.spec import STANDALONE

app = typer.Typer(
    help="List the pool and experiment recipes (one line each) or show one resolved recipe.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback(invoke_without_command=True)
@report_errors
def pools(ctx: typer.Context) -> None:
    """List the recipes that can be named: the pools, then the paper's experiments (recipes/experiments/,
    named like pools: --pool commonsense-3qwen, mutualrl pools show commonsense-3qwen)."""
    if ctx.invoked_subcommand is not None:
        return
    pool_rows = [recipe_row(path, experiment=False) for path in list_pool_recipes()]
    experiment_rows = [recipe_row(path, experiment=True) for path in list_experiment_recipes()]
    name_w = max(len(row[0]) for row in [*pool_rows, *experiment_rows])
    console.print("[bold]Pools[/] (recipes/pools/)", highlight=False)
    print_rows(pool_rows, name_w)
    if experiment_rows:
        console.print("\n[bold]Experiments[/] (recipes/experiments/, named like pools: --pool NAME)", highlight=False)
        print_rows(experiment_rows, name_w)


def recipe_row(path: Path, experiment: bool) -> tuple[str, str, str, str]:
    """(name, policies, regime, description) of one recipe (an experiment's name says its pool)."""
    data = load_recipe_data(path)
    pool = data.get("pool", {}) or {}
    policies = pool.get("policies", []) or []
    regime = (data.get("regime") or {}).get("name", STANDALONE.name)
    if experiment:  # its own description or opening comment, not the one of the pool or base it extends
        description = str(read_yaml(path).get("description") or "") or opening_comment(path)
    else:
        description = str(pool.get("description", ""))
    return path.stem, f"{len(policies)} policies", regime, description


def opening_comment(path: Path) -> str:
    """The recipe file's first comment line, without ``#`` (the experiment recipes say there what they are)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
        if line.strip():
            break
    return ""


def print_rows(rows: list[tuple[str, str, str, str]], name_w: int) -> None:
    """One row per recipe, its whole description: wrapped under its column in a terminal, on one line when piped."""
    import textwrap

    from rich.markup import escape

    width = max(console.width, 60)
    for name, count, regime, description in rows:
        head = f"{name:<{name_w}}  {count:<10}  {regime:<13}  "
        room = max(width - len(head), 20)
        lines = textwrap.wrap(description, room) if console.is_terminal else [description]
        lines = lines or [""]
        console.print(f"[bold cyan]{name:<{name_w}}[/]  {count:<10}  {regime:<13}  {escape(lines[0])}",
                      highlight=False, soft_wrap=True)
        for line in lines[1:]:
            console.print(" " * len(head) + escape(line), highlight=False, soft_wrap=True)


@app.command("show")
@report_errors
def show(name: str = typer.Argument(..., help="Pool or experiment name (see `mutualrl pools`) or a recipe path."),
         explain: bool = typer.Option(False, "--explain", help="Each setting with its value and its help text "
                                      "(what it does, its unit), instead of the YAML.")) -> None:
    """Print the fully resolved recipe of a pool (extends merged, defaults filled in) as YAML."""
    loaded = load_run_config(name, check_grpo=False)
    if explain:
        typer.echo("\n".join(explain_lines(loaded.config)))
        return
    # Plain stdout, not rich: rich wraps long lines to the terminal width even when piped, which breaks the
    # YAML of `mutualrl pools show NAME > recipe.yaml` ("save the resolved recipe and edit it").
    typer.echo(yaml.safe_dump(to_plain(loaded.config), sort_keys=False, width=10**6), nl=False)


def explain_lines(config: Any) -> list[str]:
    """``key = value`` then its help, for every setting of a resolved recipe (the schema's help strings; a policy's
    fields under ``pool.policies.<name>``; ``grpo`` keys with TRL's own help of its GRPOConfig field, from the
    schema cache: :mod:`mutualrl.config.grpo_schema`)."""
    from mutualrl.config.schema import PolicyConfig, RunConfig
    from mutualrl.config.typed import iter_field_help

    plain = to_plain(config)
    rows = [row for row in iter_field_help(RunConfig) if row[0] != "pool.policies"]
    for policy in config.pool.policies:
        rows += [(f"pool.policies.{policy.name}.{key[len('x.'):]}", *rest)
                 for key, *rest in iter_field_help(PolicyConfig, "x")]
    from mutualrl.config.grpo_schema import grpo_help

    unexplained = "see TRL's documentation."
    rows += [(f"grpo.{key}", "", f"TRL GRPOConfig: {grpo_help(key) or unexplained}", None) for key in config.grpo]
    from mutualrl.config.field_table import flag_fields

    options = {field.key: flag for flag, field in flag_fields().items()}
    lines = []
    for key, _type, help_text, _default in rows:
        value = value_at(plain, key)
        if isinstance(value, dict) and value and key != "launch.device_map":
            continue  # a section: its fields follow
        if key in options:
            help_text += f" Option: {options[key]}."
        lines += [f"{key} = {value!r}" if value is not MISSING else key, f"    {help_text}"] if help_text else []
    return lines


