"""The lines the test suite counts its budgets from (``tests/conftest.py``): a policy process's start
(``training/worker.py``, :data:`~mutualrl.training.worker.START_LOG_ENV`) and a launch of workers
(``launch/supervise/machine_workers.py``, :data:`~mutualrl.launch.supervise.machine_workers.LAUNCH_LOG_ENV`), each
appended to the file an environment variable names; unset, nothing is written."""

from __future__ import annotations

import os


def note_line(env_var: str, line: str) -> None:
    """Append ``line`` (one line) to the file ``env_var`` names; nothing when it is unset or the write fails."""
    log_file = os.environ.get(env_var)
    if not log_file:
        return
    try:
        with open(log_file, "a") as fh:  # one short write: the lines of concurrent processes do not interleave
            fh.write(line + "\n")
    except OSError:  # a count is never worth a run
        pass
