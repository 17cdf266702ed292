"""Helpers shared by the subcommands: error reporting and console."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from mutualrl.config.typed import ConfigError
from mutualrl.errors import MutualRLError, UsageError

console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # one error, one line: never wrapped

F = TypeVar("F", bound=Callable[..., Any])


def report_errors(func: F) -> F:
    """Turn user-facing errors into a red message and a non-zero exit (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as err:
            err_console.print(f"[bold red]error:[/] {escape(one_line(str(err)))}", highlight=False)
            raise typer.Exit(2) from None
        except MutualRLError as err:
            err_console.print(f"[bold red]error:[/] {escape(one_line(str(err)))}", highlight=False)
            raise typer.Exit(err.exit_code) from None

    return wrapper  # type: ignore[return-value]


def one_line(text: str) -> str:
    """An error message on one line (multi-line causes are joined)."""
    return " ".join(text.split())


def check_output_path(path: Path, option: str, kind: str = "file") -> Path:
    """Fail early, before any work, when ``path`` cannot be written as a ``kind`` ('file' or 'folder').

    An existing entry of the other kind, or an existing file among its parents, is a usage error.
    """
    if not str(path).strip() or str(path) == ".":
        raise UsageError(f"{option}: empty path; name a {kind}")
    path = Path(path)
    if path.exists() and kind == "folder" and not path.is_dir():
        raise UsageError(f"{option} {path}: exists and is not a folder")
    if path.exists() and kind == "file" and path.is_dir():
        raise UsageError(f"{option} {path}: is a folder; expected a file path")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{option} {path}: {parent} is a file, not a folder")
            break
    return path
