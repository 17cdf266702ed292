"""What the launcher shows of a worker: bounded tails of its log, how it exited, the one-line reason a full disk
stopped it; and where a worker starts. Whatever a worker wrote (a 20 MB line, a FIFO for a log), what is read
and shown is bounded."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from mutualrl.run_folder import RunPaths, read_json_or, read_status, read_tail
from mutualrl.write_failures import DISK_FULL_EXIT, describe_free, free_bytes, is_storage_message


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


def in_reward_function(paths: RunPaths, policy: str) -> str:
    """`` (in reward function NAME)`` when ``policy``'s worker was inside a reward function (its marker, written
    around each call: the name, then what the call was doing, as validation's scoring says), else ``""``."""
    try:
        name, _, doing = paths.reward_call(policy).read_text(errors="replace").strip().partition("\n")
    except OSError:
        return ""
    doing = f", {' '.join(doing.split())[:200]}" if doing.strip() else ""
    return f" (in reward function {name[:200]!r}{doing})" if name else ""


def progress_files(paths: RunPaths, policy: str) -> tuple[Path, Path]:
    """What a worker writes as it trains and when it has trained: its status, its final model's trainer state."""
    return paths.status(policy), paths.final_model(policy) / "trainer_state.json"


def file_marks(paths: RunPaths, policy: str) -> tuple[tuple[int, int] | None, ...]:
    """Which versions of :func:`progress_files` exist now (inode, mtime): a later look tells the ones written since
    without comparing clocks."""
    marks = []
    for path in progress_files(paths, policy):
        try:
            stat = path.stat()
        except OSError:
            marks.append(None)
        else:
            marks.append((stat.st_ino, stat.st_mtime_ns))
    return tuple(marks)


EMPTY_EPOCH = "not to be a single sample in your epoch_iterator"
"""transformers' warning when an epoch holds no batch (fewer train prompts than one step draws); it then ends the
training at once, exit code 0."""


def unfinished_exit(paths: RunPaths, policy: str, marks_at_start: tuple[tuple[int, int] | None, ...],
                    max_steps: int | None, log_path: Path | None = None) -> str | None:
    """Why a worker that exited with code 0 did not finish (None: it did): it finished when its status or its
    final trainer state, written since it started (``marks_at_start``), says it trained every step it had
    (at least ``max_steps``, the run's own count where known). ``log_path``: the worker's log, read for
    transformers' empty-epoch warning."""
    status_path, state_path = progress_files(paths, policy)
    now = file_marks(paths, policy)
    status = read_status(status_path) if now[0] != marks_at_start[0] else {}
    state = read_json_or(state_path, {}) if now[1] != marks_at_start[1] else {}
    for step, total in ((status.get("step"), status.get("max_steps")),
                        (state.get("global_step"), state.get("max_steps"))):
        if isinstance(step, int) and isinstance(total, int) and 0 < total <= step and step >= (max_steps or 0):
            return None
    step, total = status.get("step", 0), status.get("max_steps") or max_steps or "?"
    if log_path is not None and EMPTY_EPOCH in tail(log_path, 64):
        return (f"exited with code 0 at step {step} of {total}: transformers found no batch in an epoch "
                f"(\"{EMPTY_EPOCH}\"): fewer train prompts than one step draws; lower the batch or train on more "
                "prompts")
    return (f"exited with code 0 at step {step} of {total} without finishing its training (a run is done only "
            "when every policy trained all its steps: something in the process, e.g. a reward function, ended it)")


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


def stop_reason(log_path: Path) -> str | None:
    """A worker that stopped its policy on purpose (nothing scored for ``task.stop_after_no_reward_steps`` steps):
    its one-line error, the last ``error:`` line of its log. None for any other exit."""
    from mutualrl.training.reward_signal_watch import NO_REWARD

    for line in reversed(tail(log_path, 5).splitlines()):
        if line.startswith("error: policy ") and NO_REWARD in line:
            return line.removeprefix("error: ")
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
