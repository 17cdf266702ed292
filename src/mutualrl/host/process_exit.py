"""Leaving a process that has finished its work without the interpreter's teardown.

A process that imported torch, transformers and TRL spends ~1.5 s of CPU tearing them down at exit, for
nothing once its files are written (every file mutualrl writes is written in a ``with`` block or atomically,
and trackers close at the end of training). Worse, after a gloo run (ZeRO-3 on 2 CPU ranks: about 1 run in 5)
a C++ thread still joinable when static objects are destroyed aborts the process ("terminate called without
an active exception", SIGABRT) after all work is done, and torchrun then reports the policy failed.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import NoReturn


def exit_without_teardown(code: int) -> NoReturn:
    """Exit with ``code``: Python's exit handlers run and every stream is flushed; only the teardown of modules
    and native objects is skipped."""
    run_exit_handlers()
    os._exit(code)


def run_exit_handlers() -> None:
    """What the interpreter does at exit short of tearing modules down: exit handlers, logging, stdout and stderr."""
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can reach it
            pass
