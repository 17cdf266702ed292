"""Helpers shared by the subcommands: error reporting and console."""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from mutualrl.atomic_io import NAME_MAX
from mutualrl.config.typed import ConfigError
from mutualrl.errors import MutualRLError, UsageError
from mutualrl.host.terminal import command_console, share_console
from mutualrl.output_guards import refuse_existing

console = command_console()  # piped to a file or CI: lines never wrapped, tables at their own width
share_console(console)  # progress bars drawn below the CLI (a tiny model's build) nest in its live displays
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
        except PermissionError as err:
            if not err.filename:
                raise
            err_console.print(f"[bold red]error:[/] {escape(permission_line(err))}", highlight=False)
            raise typer.Exit(1) from None
        except OSError as err:
            if err.errno != errno.ENAMETOOLONG:
                raise
            # said from the error alone: touching the path again would raise the same error
            err_console.print(f"[bold red]error:[/] {escape(shown_path(str(err.filename or '')))}: the name is too "
                              "long for the filesystem (a file name may have 255 bytes, a path 4096); choose a "
                              "shorter one", highlight=False)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def permission_line(err: PermissionError) -> str:
    """A file this account may not read or write, in one line: whose it is, its mode, and, in the asset cache
    (another account's, built private by an older mutualrl), what to do."""
    from mutualrl.assets.cache import CACHE_VARIABLE, cache_root
    from mutualrl.host.file_lock import account_name

    path = Path(str(err.filename))
    whose = ""
    for place in (path, *path.parents):
        try:
            info = place.stat()
        except OSError:
            continue
        whose = f" ({place} is {account_name(info.st_uid)}'s, mode {info.st_mode & 0o777:o})"
        break
    hint = ""
    try:
        if path.resolve().is_relative_to(cache_root().resolve()):
            hint = (f"; the asset cache is shared: ask its owner to make it readable (chmod -R a+rX), or set "
                    f"{CACHE_VARIABLE} to a cache of your own")
    except OSError:
        pass
    return f"{shown_path(str(path))}: permission denied{whose}{hint}"


def shown_path(text: str) -> str:
    """A path for a one-line message: a long one cut in the middle."""
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"


def one_line(text: str) -> str:
    """An error message on one line (multi-line causes are joined)."""
    return " ".join(text.split())


def check_output_path(path: Path, option: str, kind: str = "file", overwrite: bool | None = None) -> Path:
    """Fail early, before any work, when ``path`` cannot be written as a ``kind`` ('file' or 'folder').

    An existing entry of the other kind, or an existing file among its parents, is a usage error; so is a name too
    long for the filesystem, and, with ``overwrite`` False, an existing file (finished work is replaced only when
    the command is told so: ``--overwrite``).
    """
    if not str(path).strip() or str(path) == ".":
        raise UsageError(f"{option}: empty path; name a {kind}")
    path = Path(path)
    check_path_length(path, option)
    if overwrite is False and (path.is_file() or path.is_symlink()):
        refuse_existing([path], option)
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


PATH_MAX = 4096  # bytes in a path (Linux)


def check_path_length(path: Path, option: str) -> None:
    """A path the filesystem cannot hold (a name over 255 bytes, a path over 4096): one line, before it is used."""
    text = str(path)
    shown = shown_path(text)
    if len(os.fsencode(text)) >= PATH_MAX:
        raise UsageError(f"{option} {shown}: the path is {len(os.fsencode(text))} bytes, over the {PATH_MAX} a "
                         "path may have; choose a shorter one")
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise UsageError(f"{option} {shown}: a name in it is {len(os.fsencode(part))} bytes, over the "
                             f"{NAME_MAX} a file name may have; choose a shorter one")


def split_names(given: list[str] | None) -> list[str]:
    """Names given repeated or comma-separated (``--allow-code a,b --allow-code c``), in order."""
    return [name.strip() for text in given or [] for name in text.split(",") if name.strip()]


ALLOW_CODE_HELP = ("A module a run folder's config names (plugins, task.reward_funcs, a task.name class) that you "
                   "accept to import (repeatable or comma-separated): a run folder chooses no code by itself.")
