"""Helpers shared by the subcommands: error reporting and console."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console

from mutualrl.config.typed import ConfigError
from mutualrl.errors import MutualRLError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def report_errors(func: F) -> F:
    """Turn user-facing errors into a red message and a non-zero exit (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as err:
            err_console.print(f"[bold red]error:[/] {err}", highlight=False, markup=True)
            raise typer.Exit(2) from None
        except MutualRLError as err:
            err_console.print(f"[bold red]error:[/] {err}", highlight=False)
            raise typer.Exit(err.exit_code) from None

    return wrapper  # type: ignore[return-value]


def not_implemented(command: str, issue: int) -> None:
    """Exit non-zero for a subcommand whose behaviour is not built yet (never a fake result)."""
    err_console.print(
        f"[bold red]error:[/] `mutualrl {command}` is not implemented yet (tracked in issue #{issue}).",
        highlight=False,
    )
    sys.exit(3)
