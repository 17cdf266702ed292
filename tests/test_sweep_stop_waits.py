"""A sweep's Ctrl-C waits for each run's own stop, however long its save takes; a second Ctrl-C stops at once.

The run bounds its own stop (its grace and the wait for a save in progress, launch/supervise/stop_grace.py): a 4B
ZeRO-3 save at the planned rate takes minutes, and a sweep that killed its runs after a fixed wait (it was 60 s) left
the stop's checkpoint without its manifest. The processes here are stand-ins that take longer than any wait given.
"""

from __future__ import annotations

import signal
import subprocess

import pytest
from rich.console import Console

from mutualrl.launch.sweep.grid import Started, stop_all


class SlowToStop:
    """A run's process whose stop (a save) outlasts any timeout: ``wait`` with one raises, ``wait()`` ends it."""

    def __init__(self, interrupt_on_wait: bool = False):
        self.returncode: int | None = None
        self.signals: list[int] = []
        self.waits: list[float | None] = []
        self.killed = False
        self.interrupt_on_wait = interrupt_on_wait

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def kill(self) -> None:
        self.killed, self.returncode = True, -signal.SIGKILL

    def wait(self, timeout: float | None = None) -> int:
        self.waits.append(timeout)
        if self.returncode is not None:
            return self.returncode
        if self.interrupt_on_wait:  # the user's second Ctrl-C while the sweep waits
            self.interrupt_on_wait = False
            raise KeyboardInterrupt("SIGINT")
        if timeout is not None:
            raise subprocess.TimeoutExpired("mutualrl train", timeout)
        self.returncode = 130  # saved and stopped
        return self.returncode


def started(name: str, process: SlowToStop):
    return Started(point=type("Point", (), {"name": name})(), process=process, started=0.0)


def test_a_stop_waits_for_every_run_to_save_without_a_deadline_of_its_own():
    runs = [SlowToStop(), SlowToStop()]
    finished = SlowToStop()
    finished.returncode = 0
    console = Console(record=True, width=200)
    stop_all([started("a", runs[0]), started("b", runs[1]), started("done", finished)], console)
    assert [r.signals for r in runs] == [[signal.SIGTERM], [signal.SIGTERM]]  # a run's own stop, resumable
    assert finished.signals == []
    assert all(r.waits == [None] and not r.killed and r.returncode == 130 for r in runs)
    assert "sweep: stopping a, b: each saves its step in flight; another Ctrl-C stops at once" in console.export_text()


def test_a_second_ctrl_c_while_the_sweep_waits_kills_the_runs_going():
    runs = [SlowToStop(interrupt_on_wait=True), SlowToStop()]
    stop_all([started("a", runs[0]), started("b", runs[1])])
    assert all(r.killed for r in runs)


@pytest.mark.slow  # over 2 s: outside the fast tier
def test_a_real_run_process_gets_sigterm_and_is_waited_for(tmp_path):
    """A stand-in for `mutualrl train` that saves for 2 s after its SIGTERM: waited for, not killed."""
    import sys

    script = ("import signal, sys, time\n"
              "def stop(*_):\n"
              "    time.sleep(2); open(sys.argv[1], 'w').write('saved'); sys.exit(130)\n"
              "signal.signal(signal.SIGTERM, stop)\n"
              "print('ready', flush=True)\n"
              "time.sleep(60)\n")
    marker = tmp_path / "saved"
    process = subprocess.Popen([sys.executable, "-c", script, str(marker)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    stop_all([started("run", process)])
    process.stdout.close()
    assert process.returncode == 130 and marker.read_text() == "saved"
