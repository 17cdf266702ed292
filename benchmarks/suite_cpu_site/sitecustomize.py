"""Loaded by every Python process of a test suite run under ``benchmarks/suite_cpu.py`` (on its PYTHONPATH):
appends one JSON line per process to ``$SUITE_CPU_LOG`` as the process ends (a normal exit, or ``os._exit``
after a worker's work), with its argv, its own CPU seconds and the test that was running (pytest's
``PYTEST_CURRENT_TEST``, inherited by the processes a test starts). A process killed by a signal writes nothing."""

import atexit
import json
import os
import resource
import sys

_LOG = os.environ.get("SUITE_CPU_LOG")


def _write_line() -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = {"pid": os.getpid(), "argv": [str(a) for a in sys.argv[:8]], "user": usage.ru_utime,
            "sys": usage.ru_stime, "torch": "torch" in sys.modules,
            "test": os.environ.get("PYTEST_CURRENT_TEST", ""), "xdist": os.environ.get("PYTEST_XDIST_WORKER", "")}
    try:
        with open(_LOG, "a") as fh:  # one short write per line: lines of concurrent processes do not interleave
            fh.write(json.dumps(line) + "\n")
    except OSError:
        pass


if _LOG:
    atexit.register(_write_line)
    _os_exit = os._exit

    def _exit_writing_the_line(code: int) -> None:
        _write_line()
        _os_exit(code)

    os._exit = _exit_writing_the_line
