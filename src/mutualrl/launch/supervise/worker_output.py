"""What the launcher shows of a worker: bounded tails of its log, how it exited, the one-line reason a full disk
stopped it; and where a worker starts. Whatever a worker wrote (a 20 MB line, a FIFO for a log), what is read
and shown is bounded."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from mutualrl.errors import DISK_FULL_EXIT, describe_free, free_bytes, is_storage_message
from mutualrl.run_folder import read_tail


def spawn_dir(root: Path, planned: Path | None = None) -> Path | None:
    """Where a worker starts: its planned folder (None: the launcher's), or the run folder when that one was
    deleted since (a worker started in a deleted folder fails importing TRL; Popen refuses a missing one)."""
    if planned is not None:
        return planned if planned.is_dir() else root
    try:
        os.getcwd()
    except FileNotFoundError:
        return root
    return None


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by signal {name}"
    return f"exited with code {returncode}"


def storage_reason(log_path: Path, returncode: int, root: Path) -> str | None:
    """A worker stopped by a full disk or an I/O error: its one-line error (the last ``error:`` line of its log),
    or, when the log could not hold it, the run folder and its free space. None for any other failure."""
    for line in reversed(tail(log_path, 5).splitlines()):
        message = line.removeprefix("error: ")
        if line.startswith("error: ") and is_storage_message(message):
            return message
    if returncode == DISK_FULL_EXIT:
        return f"no space left on {root} ({describe_free(free_bytes(root))}; the worker's log could not say where)"
    return None


TAIL_BYTES = 64 * 1024
TAIL_LINE_CHARS = 500


def tail(path: Path, lines: int = 25, max_bytes: int = TAIL_BYTES, line_chars: int = TAIL_LINE_CHARS) -> str:
    """The last ``lines`` lines of a worker's log, bounded whatever the worker wrote: only the file's last
    ``max_bytes`` are read, and a line longer than ``line_chars`` is cut (saying how much was left out)."""
    data = read_tail(path, max_bytes)
    text = data.decode("utf-8", errors="replace")
    kept = text.splitlines()[-lines:]
    if len(data) == max_bytes and kept and len(kept) == len(text.splitlines()):  # the first line began earlier
        kept[0] = "[...]" + kept[0]
    return "\n".join(line if len(line) <= line_chars else
                     f"{line[:line_chars]} [... {len(line) - line_chars} more characters cut]" for line in kept)
