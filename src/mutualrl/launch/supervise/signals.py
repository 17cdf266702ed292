"""Ctrl-C and termination signals for the launcher, made so that none is lost.

Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread happens to be. Raised
inside a finalizer (``__del__``; e.g. the ``regex`` module's while a tokenizer loads) it is printed
as "Exception ignored in ..." and dropped, and the launch went on to train the whole run (measured:
a Ctrl-C 3 s into ``mutualrl train --resume`` on the tiny pool). The handler here also records the
request, and the launcher checks it at its safe points (:func:`raise_if_interrupted`: before the
workers start, at every poll of the pool), so a dropped ``KeyboardInterrupt`` comes back there.
SIGTERM, SIGHUP and SIGUSR2 (a cluster's scheduler, a closed terminal, submitit's warning before a Slurm time limit)
stop the pool the same way. The pool runner then has
every policy save a checkpoint at the step in flight (training/stop_request.py); a second stop signal stops at
once. The same stop delivered twice within :data:`REPEAT_S` counts once: Slurm's ``scancel`` signals every process
of a job, a terminal's Ctrl-C reaches a sweep and the runs it started, and the sweep passes its stop on too.

A signal the launcher was started with ignored stays ignored, as Python itself leaves an ignored
SIGINT: ``nohup mutualrl train ... &`` must survive the terminal closing (nohup ignores SIGHUP), and
a script's ``mutualrl train ... &`` runs with SIGINT ignored.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

from mutualrl.host.stop_signals import STOP_SIGNALS

REPEAT_S = 1.0
_state: dict[str, Any] = {"depth": 0, "requested": None, "at": 0.0}


def _interrupt(signum: int, frame: Any) -> None:
    now = time.monotonic()
    if _state["requested"] is not None and now - _state["at"] < REPEAT_S:
        return  # the first stop delivered again (module docstring), not a second one
    _state["requested"], _state["at"] = signal.Signals(signum).name, now
    raise KeyboardInterrupt(_state["requested"])


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Within: SIGINT, SIGTERM, SIGHUP and SIGUSR2 raise ``KeyboardInterrupt`` and are remembered until the outermost
    block ends; one that is ignored on entry stays ignored (``nohup``). Nested blocks share the request (a
    signal between two blocks is not forgotten); outside the main thread (where Python allows no handler)
    this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS
                if signal.getsignal(sig) is not signal.SIG_IGN}
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if _state["depth"] == 0:  # forgotten with the block: a later pool run in this process starts clean
            _state["requested"] = None


def interrupt_requested() -> str | None:
    """The name of the stop signal received within :func:`stop_signals` (``"SIGINT"``...), or None."""
    return _state["requested"]


def raise_if_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` again if a stop signal came and its first one was dropped."""
    if _state["requested"] is not None:
        raise KeyboardInterrupt(_state["requested"])
