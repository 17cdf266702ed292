"""On-disk layout of the SEE: its folders, file names and checksum.

Layout under the exchange root::

    step-000012/<policy>/rank-0-of-2.arrow          # Arrow IPC file: this rank's records
    step-000012/<policy>/rank-0-of-2.manifest.json  # commit marker: rows, bytes, xxh3_128, provenance
    _failed/<policy>.json                           # failure marker (first reason wins)
    _heartbeat/<policy>.rank-0.json                 # liveness: mtime = last heartbeat
    _judgements/<policy>/                           # peers' judgements of <policy>'s rollouts: an exchange of
                                                    # the same layout, one per judged policy (judgements_root)

Every file is committed by :func:`mutualrl.atomic_io.write_atomic` (a hidden temporary name in
its final folder, fsynced, renamed, the folder fsynced). Readers only ever open files named
by a manifest, and a manifest is committed after its data file, so a reader never sees a
torn file. Temporary names (:data:`mutualrl.atomic_io.TEMP_RE`) are skipped by readers and
reported by ``mutualrl see inspect``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mutualrl.errors import UsageError
from mutualrl.run_folder import RunPaths

CHECKSUM_ALGORITHM = "xxh3_128"

FAILED_DIR = "_failed"
HEARTBEAT_DIR = "_heartbeat"
JUDGEMENTS_DIR = "_judgements"
"""Peers' judgements of a policy's rollouts (each peer's forward pass over them): one nested exchange per judged
policy, ``_judgements/<policy>/``, laid out as the exchange itself (step folders, one folder per judging policy);
rolled back and cleared with the exchange (:func:`judgements_roots`)."""

STEP_DIR_RE = re.compile(r"^step-(\d+)$")
MANIFEST_RE = re.compile(r"^rank-(\d+)-of-(\d+)\.manifest\.json$")
DATA_RE = re.compile(r"^rank-(\d+)-of-(\d+)\.arrow$")
HEARTBEAT_RE = re.compile(r"^(?P<policy>.+)\.rank-(?P<rank>\d+)\.json$")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def check_policy_name(name: str) -> str:
    """Policy names become folder names: letters, digits and ``._+-``, starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > 200:
        raise UsageError(
            f"policy name {name!r} cannot name an SEE folder: use letters, digits and '._+-', "
            "starting with a letter or digit"
        )
    return name


def find_see_root(path: Path | str) -> Path | None:
    """The exchange of ``path``: a run folder's own (:meth:`mutualrl.run_folder.RunPaths.see_root`), or ``path``
    itself when it is an exchange folder (step folders, failure markers or heartbeats in it); None: neither."""
    path = Path(path)
    if RunPaths(path).see_root().is_dir():
        return RunPaths(path).see_root()
    if path.is_dir():
        with os.scandir(path) as entries:
            if any(e.name in (FAILED_DIR, HEARTBEAT_DIR) or STEP_DIR_RE.match(e.name) for e in entries):
                return path
    return None


def judgements_root(root: Path, judged: str) -> Path:
    """The nested exchange in which ``judged``'s peers publish their judgements of its rollouts."""
    return Path(root) / JUDGEMENTS_DIR / check_policy_name(judged)


def judgements_roots(root: Path) -> list[Path]:
    """Every nested judgements exchange under the exchange ``root`` (folders only, never followed through a link)."""
    folder = Path(root) / JUDGEMENTS_DIR
    if folder.is_symlink() or not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and _NAME_RE.match(p.name))


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:06d}"


def policy_dir(root: Path, step: int, policy: str) -> Path:
    return step_dir(root, step) / policy


def shard_stem(rank: int, world_size: int) -> str:
    return f"rank-{rank}-of-{world_size}"


def data_path(root: Path, step: int, policy: str, rank: int, world_size: int) -> Path:
    return policy_dir(root, step, policy) / f"{shard_stem(rank, world_size)}.arrow"


def manifest_path(root: Path, step: int, policy: str, rank: int, world_size: int) -> Path:
    return policy_dir(root, step, policy) / f"{shard_stem(rank, world_size)}.manifest.json"


def failure_path(root: Path, policy: str) -> Path:
    return root / FAILED_DIR / f"{policy}.json"


def heartbeat_path(root: Path, policy: str, rank: int) -> Path:
    return root / HEARTBEAT_DIR / f"{policy}.rank-{rank}.json"


def revalidate_folders(root: Path, folder: Path) -> None:
    """Open ``root`` and every folder below it down to ``folder`` (those that exist), in order.

    On NFS (close-to-open consistency) opening a folder makes the client ask the server for its attributes, so a
    file or folder added there since, by another machine, is seen at once, where a path walk through the cached
    folder can keep reporting it missing until the attribute cache expires (``acdirmax``, 60 s by default).
    Elsewhere it costs a few opens.
    """
    path = Path(root)
    for part in (Path(folder).relative_to(root).parts if folder != root else ()):
        if not _open_folder(path):
            return
        path = path / part
    _open_folder(path)


def _open_folder(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECTORY))
    except OSError:  # missing (not committed yet), or not a folder: the scan that follows says what it finds
        return False
    return True
