"""Where a command's files go: inside the folder the user named, never through a link found there, and over an
existing file only when the command is told so (``--overwrite``).

A run or sweep folder is data (shared, copied, downloaded): a link planted in it would send a write wherever it
points, to any file the user can write. Every command that writes (``plot``, ``report``, ``sweep``, ``eval``,
``complementarity``, ``distill``) checks its outputs here before any work:

- :func:`refuse_existing`: an existing file, or a link, where an output goes is refused without ``--overwrite``;
- :func:`refuse_links_below`: no folder between the folder the user named and the output (``RUN/plots``, a sweep's
  ``logs/`` or run folder, ``RUN/distill/...``) is a link;
- :func:`folder_inside`: such a folder, created when missing;
- :func:`open_append_inside`: a log that is appended to is opened without following a link;
- :func:`write_new_inside`: a file of a name the command chose (a job's pickle) is created, never opened through a
  link or over a file already there.

A folder a command picks itself in the working directory (``eval``'s ``eval-results/``) is checked and made with
:func:`folder_inside` from the working directory, as is a folder a library writes into for it (a sweep's
``slurm/`` and each job's folder in it, :mod:`mutualrl.launch.sweep.slurm`).

Files are then replaced with :func:`mutualrl.atomic_io.write_atomic`: its rename replaces a link at the final name,
never writes through it. ``mutualrl see`` writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from mutualrl.errors import UsageError


def refuse_existing(paths: Iterable[Path], option: str) -> None:
    """One line naming the first of ``paths`` that exists (a link too, dangling or not): a user's file is replaced
    only with ``--overwrite``."""
    for path in paths:
        if path.exists() or path.is_symlink():
            raise UsageError(f"{option} {path}: exists; pass --overwrite to replace it, or name another")


def link_refusal(path: Path, where: Path) -> UsageError:
    try:
        target = os.readlink(path)[:200]
    except OSError:
        target = "?"
    return UsageError(f"{path}: a link (to {target}) where a folder or file of {where} belongs; nothing is written "
                      "through it: remove the link, or name another folder")


def refuse_links_below(root: Path, path: Path) -> None:
    """Refuse ``path`` when it, or a folder between ``root`` (the folder the user named, trusted as named) and it,
    is a link; ``path`` must lie under ``root``."""
    root, path = Path(root), Path(path)
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            raise link_refusal(current, root)


def folder_inside(root: Path, name: str) -> Path:
    """``root/name`` as a real folder inside ``root``, created when missing; a link or a file there is refused,
    naming it."""
    folder = Path(root) / name
    refuse_links_below(root, folder)
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        pass  # checked below: mkdir's exist_ok would take a link made meanwhile for the folder
    refuse_links_below(root, folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: exists and is not a folder; remove it, or name another folder")
    return folder


def write_new_inside(path: Path, data: bytes) -> None:
    """``path`` created with ``data``: a link or a file already at its name is refused (``O_EXCL | O_NOFOLLOW``),
    never written through or over."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        if Path(path).is_symlink():
            raise link_refusal(Path(path), Path(path).parent) from None
        raise UsageError(f"{path}: exists already where a new file was to be made; nothing was written over it: "
                         "remove it, or run the command again") from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def open_append_inside(path: Path) -> int:
    """An fd appending to ``path`` (created when missing), opened without following a link at its name."""
    from mutualrl.host.file_lock import UnsafeFileError, open_safely

    try:  # a FIFO, device or folder at its name is refused too, naming it
        return open_safely(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except UnsafeFileError:
        if Path(path).is_symlink():
            raise link_refusal(Path(path), Path(path).parent) from None
        raise
