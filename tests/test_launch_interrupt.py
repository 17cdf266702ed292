"""Ctrl-C stops a pool of any size within seconds, even workers that ignore SIGTERM, even while it starts."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from mutualrl.launch.supervise.runner import PolicyProcess, PoolRunner, PoolSettings
from mutualrl.launch.supervise.signals import interrupt_requested, raise_if_interrupted, stop_signals
from mutualrl.run_folder import RunPaths

# A worker busy where SIGTERM does not reach it (as one importing torch can be): only SIGKILL stops it.
STUBBORN = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(300)\n"


class InterruptedRunner(PoolRunner):
    """Raises KeyboardInterrupt (what Ctrl-C does) once: after ``after_spawns`` starts, or in the first loop."""

    def __init__(self, *args, after_spawns: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.after_spawns, self.spawned, self.interrupted = after_spawns, 0, False

    def _spawn(self, proc):
        super()._spawn(proc)
        self.spawned += 1
        if self.after_spawns is not None and self.spawned == self.after_spawns:
            self.interrupted = True
            raise KeyboardInterrupt

    def _merge(self):
        if self.after_spawns is None and not self.interrupted:
            self.interrupted = True
            time.sleep(1.0)  # every worker is up and ignoring SIGTERM
            raise KeyboardInterrupt
        return super()._merge()


def stubborn_pool(tmp_path: Path, size: int) -> list[PolicyProcess]:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    return [PolicyProcess(name=f"p{i}", argv=[sys.executable, str(script)], env={},
                          log_path=tmp_path / "logs" / f"p{i}.log") for i in range(size)]


def runner(tmp_path: Path, procs, **kwargs) -> InterruptedRunner:
    settings = PoolSettings(tmp_path / "see", stall_timeout_s=60.0, grace_s=20.0, poll_s=0.05)
    return InterruptedRunner(procs, RunPaths(tmp_path), settings, console=Console(file=open("/dev/null", "w")),
                             **kwargs)


@pytest.mark.slow  # over 5 s on the 2-core box: the full suite, not the fast tier
def test_ctrl_c_kills_a_large_pool_that_ignores_sigterm(tmp_path):
    procs = stubborn_pool(tmp_path, 12)
    started = time.time()
    outcome = runner(tmp_path, procs).run()
    assert outcome.reason == "interrupted" and not outcome.ok
    assert time.time() - started < 25  # 1 s up + 10 s grace + the kill: seconds, not the workers' 300 s
    assert all(p.popen.poll() is not None for p in procs)


def test_ctrl_c_while_the_pool_is_still_starting_stops_those_started(tmp_path):
    procs = stubborn_pool(tmp_path, 8)
    outcome = runner(tmp_path, procs, after_spawns=5).run()
    assert outcome.reason == "interrupted"
    started = [p for p in procs if p.popen is not None]
    assert len(started) == 5 and all(p.popen.poll() is not None for p in started)


class DropsAKeyboardInterrupt:
    """Receives SIGINT inside its finalizer, where Python prints "Exception ignored" and drops the
    KeyboardInterrupt (as it did inside the regex module's ``__del__`` while a tokenizer loaded)."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at the next bytecode boundary, still inside __del__
            pass


@pytest.fixture
def sigint_restored():
    """Put back the SIGINT handler pytest was started with, whatever a test set."""
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_python_drops_in_a_finalizer_still_stops_the_pool(tmp_path, monkeypatch, sigint_restored):
    procs = [PolicyProcess(name=f"p{i}", argv=[sys.executable, "-c", "pass"], env={},
                           log_path=tmp_path / "logs" / f"p{i}.log") for i in range(2)]  # would finish "ok"
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: dropped.append(info.exc_type))
    # A Ctrl-C reaches this process whatever started pytest (a script's `cmd &` starts it with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with stop_signals():
        DropsAKeyboardInterrupt()  # collected at once: the interrupt is raised and dropped in __del__
        assert dropped == [KeyboardInterrupt]  # Python dropped it: nothing was raised here
        assert interrupt_requested() == "SIGINT"
        settings = PoolSettings(tmp_path / "see", stall_timeout_s=60.0, grace_s=5.0, poll_s=0.05)
        outcome = PoolRunner(procs, RunPaths(tmp_path), settings, console=Console(file=open("/dev/null", "w"))).run()
    assert outcome.reason == "interrupted" and not outcome.ok
    assert all(p.popen is None for p in procs)  # stopped before a worker started
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored after


def test_without_a_stop_signal_the_check_does_nothing_and_nested_blocks_keep_a_request():
    with stop_signals():
        raise_if_interrupted()  # nothing requested: no exception
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        with stop_signals():  # an inner block (a run of a pair) does not forget the outer request
            with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
                raise_if_interrupted()
    assert interrupt_requested() is None  # forgotten when the outermost block ended
    raise_if_interrupted()  # so a pool run afterwards, outside any block, is not stopped by it


def test_a_signal_ignored_on_entry_stays_ignored_as_under_nohup():
    """`nohup mutualrl train &` ignores SIGHUP so that closing the terminal does not stop the run."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stop_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # the others are still caught
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(1000):  # a handler would run at the next bytecode boundary
                pass
            raise_if_interrupted()  # nothing was requested
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
