"""The filesystem an exchange folder is on, and the mount options that would stall its barrier.

The barrier sees a peer's new round by opening the folders on its way and the manifests it can name
(:func:`~mutualrl.see.shards.scan_committed`): on NFS, close-to-open consistency makes each such open ask the server,
so attribute caching does not hide a round. A mount with ``nocto`` turns that off: a new round can stay invisible
for the folder attribute cache's lifetime (``acdirmax``, 60 s unless set) at every step. Read from
``/proc/self/mountinfo`` (Linux); elsewhere the filesystem is unknown and nothing is warned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
NFS_TYPES = ("nfs", "nfs4")
DEFAULT_ACDIRMAX_S = 60


@dataclass(frozen=True)
class Mount:
    """One mounted filesystem: where, what, from where, and its options (``name`` or ``name=value``)."""

    point: str
    fstype: str
    source: str
    options: tuple[str, ...]

    def option(self, name: str) -> str | None:
        """``value`` of ``name=value``, ``""`` for a bare ``name``, None when absent."""
        for option in self.options:
            key, _, value = option.partition("=")
            if key == name:
                return value
        return None

    def describe(self) -> str:
        return f"{self.fstype} ({self.source}, mounted at {self.point})"


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/self/mountinfo`` text (per-mount and per-filesystem options together)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 6:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 3:
            continue
        fstype, source = fields[dash + 1], _unescape(fields[dash + 2])
        options = fields[5].split(",") + (fields[dash + 3].split(",") if len(fields) > dash + 3 else [])
        mounts.append(Mount(_unescape(fields[4]), fstype, source, tuple(dict.fromkeys(options))))
    return mounts


def mount_of(path: Path | str, mountinfo: str | None = None) -> Mount | None:
    """The mount holding ``path`` (its nearest existing parent: a new run folder does not exist yet); None where
    the mount table cannot be read."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text()
        except OSError:
            return None
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    probe = probe.resolve()
    best = None
    for mount in parse_mountinfo(mountinfo):  # the last, longest match: a later mount hides an earlier one there
        point = Path(mount.point)
        if (probe == point or point in probe.parents) and (best is None or len(mount.point) >= len(best.point)):
            best = mount
    return best


def barrier_stall(mount: Mount | None) -> str | None:
    """Why this mount would keep a new SEE round from the barrier for a while, or None."""
    if mount is None or mount.fstype not in NFS_TYPES or mount.option("nocto") is None:
        return None
    wait = mount.option("acdirmax") or mount.option("actimeo") or str(DEFAULT_ACDIRMAX_S)
    return (f"{mount.describe()} is mounted with nocto: opening a file no longer asks the server, so each peer's new "
            f"SEE round can stay invisible for up to {wait} s (acdirmax) at every step; remount without nocto, or "
            "with lookupcache=none,acdirmax=1")


def describe_filesystem(path: Path | str) -> str:
    """The filesystem of ``path`` in words (``unknown`` where the mount table cannot be read)."""
    mount = mount_of(path)
    return mount.describe() if mount is not None else "unknown filesystem"
