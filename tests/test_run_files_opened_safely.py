"""Every file mutualrl opens in a folder a colleague could write goes through one helper (``open_safely``): a link
planted at its name is refused and never followed (its target keeps its bytes and mode), a FIFO never hangs the
opener, a folder is refused by name; each in one line naming the file. ``RUN/.lock`` first among them."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mutualrl.atomic_io import append_text
from mutualrl.host.file_lock import UnsafeFileError, lock_held, open_lock_file, open_safely
from mutualrl.launch.rundir.lock import RunLock, read_holder
from mutualrl.launch.sweep.live import lock_live
from mutualrl.output_guards import open_append_inside

KINDS = ("symlink", "fifo", "directory")


def plant(path: Path, kind: str, target: Path) -> None:
    """A link to ``target``, a FIFO or a folder at ``path``."""
    if kind == "symlink":
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def bounded(call, seconds: float = 10.0):
    """``call()`` in a thread; its result or error, failing the test (not hanging it) when it blocks."""
    box: dict = {}

    def target():
        try:
            box["value"] = call()
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked: a FIFO was opened without O_NONBLOCK"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.mark.parametrize("kind", KINDS)
def test_run_lock_refuses_what_is_not_a_regular_file(tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    victim = tmp_path / "colleague.txt"
    victim.write_text("precious")
    victim.chmod(0o644)
    plant(run / ".lock", kind, victim)
    with pytest.raises(UnsafeFileError) as caught:
        bounded(lambda: RunLock(run).acquire("train into"))
    message = str(caught.value)
    assert str(run / ".lock") in message and "\n" not in message
    assert ("a link" in message) if kind == "symlink" else ("not a regular file" in message)
    assert victim.read_text() == "precious" and (victim.stat().st_mode & 0o777) == 0o644


@pytest.mark.parametrize("kind", KINDS)
def test_readers_of_a_lock_never_block_or_follow(tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "holder.json"
    target.write_text('{"pid": 1, "host": "elsewhere", "since": "x"}')
    plant(run / ".lock", kind, target)
    assert bounded(lambda: read_holder(run / ".lock")) == {}
    assert bounded(lambda: lock_held(run / ".lock")) is None  # cannot tell: nothing to probe
    assert bounded(lambda: lock_live(run, job_over=False)) is None  # a sweep goes on; the launch then refuses


@pytest.mark.parametrize("kind", KINDS)
def test_every_safe_opener_refuses_each_kind(tmp_path, kind):
    target = tmp_path / "target"
    target.write_text("kept")
    openers = {
        "lock": lambda p: os.close(open_lock_file(p)),
        "append": lambda p: append_text(p, "row\n"),
        "append_inside": lambda p: os.close(open_append_inside(p)),
        "write": lambda p: os.close(open_safely(p, os.O_WRONLY)),
    }
    for name, opener in openers.items():
        path = tmp_path / f"{name}.file"
        plant(path, kind, target)
        with pytest.raises(UsageError_or_unsafe()):
            bounded(lambda: opener(path))
    assert target.read_text() == "kept"


def UsageError_or_unsafe():  # noqa: N802 - a link in a sweep's log folder keeps its older message (UsageError)
    from mutualrl.errors import UsageError

    return UsageError


def test_a_regular_lock_file_still_locks_and_records(tmp_path):
    run = tmp_path / "run"
    with RunLock(run).acquire("train into") as lock:
        assert lock_held(run / ".lock") is True
        assert read_holder(run / ".lock")["pid"] == os.getpid()
        assert lock.fd is not None
    assert lock_held(run / ".lock") is False
