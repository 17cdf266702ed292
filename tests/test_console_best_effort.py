"""Console output is best effort: standard output or error on a full disk (``/dev/full``) or piped into a reader that
has gone (``| head -3``) never stops a command, and a full disk's advice fits the command that hit it. In process."""

from __future__ import annotations

import errno
import os
import sys

import pytest

from mutualrl.cli.main import ADVICE, command_name, run
from mutualrl.host.terminal import BestEffortStream, CommandConsole, best_effort_console
from mutualrl.write_failures import TRAIN_ADVICE, command_advice, storage_error


def closed_pipe():
    """A text stream whose reader has gone: each flush is EPIPE (Python ignores SIGPIPE)."""
    read, write = os.pipe()
    os.close(read)
    return os.fdopen(write, "w")


@pytest.fixture(params=["dev_full", "closed_pipe", "closed_file"])
def broken(request):
    if request.param == "dev_full":
        stream = open("/dev/full", "w")  # noqa: SIM115 - closed below
    elif request.param == "closed_pipe":
        stream = closed_pipe()
    else:
        stream = open(os.devnull, "w")  # noqa: SIM115
        stream.close()
    yield stream
    try:
        stream.close()
    except OSError:
        pass


def test_a_broken_stream_swallows_its_failures_and_remembers_the_first(broken):
    wrapped = BestEffortStream(broken)
    for _ in range(3):
        assert wrapped.write("x" * 10_000 + "\n") == 10_001
        wrapped.flush()
    assert isinstance(wrapped.failed, (OSError, ValueError))
    if isinstance(wrapped.failed, OSError):
        assert wrapped.failed.errno in (errno.ENOSPC, errno.EPIPE)


def test_a_console_on_a_broken_stream_goes_quiet_and_never_exits(broken, monkeypatch):
    monkeypatch.setattr(sys, "stdout", broken)
    with best_effort_console():
        console = CommandConsole()
        for step in range(50):
            console.print(f"step {step}/50 " + "." * 200)
        print("a plain print too", flush=True)
    assert sys.stdout is broken  # given back as it was


def test_rich_on_broken_pipe_does_not_stop_the_command():
    console = CommandConsole(file=closed_pipe())
    console.print("x" * 100)  # rich's own on_broken_pipe would raise SystemExit(1)
    assert console.quiet


@pytest.mark.parametrize("kind", ["dev_full", "closed_pipe"])
def test_a_training_command_finishes_with_its_console_full_or_closed(tmp_path, monkeypatch, kind):
    """``mutualrl train --dry-run`` (the launcher's path up to the workers) with stdout on /dev/full or a closed pipe:
    exit 0, nothing blamed on the run folder (it was "no space left on /" and rich's ``SystemExit(1)``)."""
    stream = open("/dev/full", "w") if kind == "dev_full" else closed_pipe()  # noqa: SIM115
    monkeypatch.setattr(sys, "stdout", stream)
    assert run(["train", "--dry-run", "-o", str(tmp_path / "run")]) == 0


def test_each_commands_full_disk_advice_fits_that_command():
    err = OSError(errno.ENOSPC, "No space left on device", "/somewhere/out.csv")
    assert TRAIN_ADVICE in str(storage_error(err, "/x"))  # training (the launcher, a worker, the API)
    for command in ("report", "plot"):
        with command_advice(ADVICE[command_name([command, "RUN"])]):
            said = str(storage_error(err, "/x"))
        assert "--resume" not in said and said.endswith("run the command again") and "/somewhere/out.csv" in said
    with command_advice(ADVICE[command_name(["sweep", "--regimes", "sgt"])]):
        said = str(storage_error(err, "/x"))
    assert "--resume" not in said and "the same `mutualrl sweep` command continues it" in said
    assert command_name(["--version"]) is None and ADVICE.get(command_name(["train"]), TRAIN_ADVICE) == TRAIN_ADVICE
