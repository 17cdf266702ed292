"""An array task of ``mutualrl sweep --slurm`` that loads only a pickle its submitter wrote.

submitit's task (``python -m submitit.core._submit FOLDER``) unpickles ``<job>_submitted.pkl`` from the sweep
folder before any mutualrl code runs; whoever can write that shared folder could swap in a pickle that runs their
code. So the submitter (:func:`mutualrl.launch.sweep.slurm.digests_in_command`) records the sha256 of every pickle
it writes in the job script's python command, which Slurm copies when the job is submitted::

    python -u -m mutualrl.launch.verified_submit <sha256>,<sha256>,... -u -m submitit.core._submit FOLDER

This module reads the task's pickle once, refuses it in one line unless its sha256 is one of those, and then hands
over to submitit's own ``process_job`` with the bytes it checked (never re-read: a swap after the check is not
loaded). Any pickle of the same array is accepted: each is a call the submitter made.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

#: What submitit appends to the python command it is given (``SlurmExecutor._submitit_command_str``).
SUBMITIT_TAIL = ["-u", "-m", "submitit.core._submit"]
#: submitit's own default cap on a job's pickle (``max_pickle_size_gb``).
MAX_PICKLE_BYTES = 1 << 30
#: As long as submitit's task waits for its pickle: the submitter moves it into place after sbatch returns.
WAIT_S = 60


def python_command(executable: str, digests: list[str]) -> str:
    """The python command of the job script: this module, with the digests it accepts."""
    import shlex

    # -P: the job's working directory is not put on sys.path (a module there cannot shadow one of Python's)
    return f"{shlex.quote(executable)} -P -u -m mutualrl.launch.verified_submit {','.join(digests)}"


def wait_and_read(path: Path) -> bytes:
    """The task's pickle, bounded (a FIFO, a folder, a huge or sparse file is refused unread)."""
    from mutualrl.run_folder import read_bytes

    for _ in range(WAIT_S):
        if path.exists():
            break
        time.sleep(1)
    return read_bytes(path, MAX_PICKLE_BYTES)


def verified_loader(path: Path, data: bytes) -> Any:
    """A stand-in for ``DelayedSubmission.load`` that returns the checked bytes' object for ``path`` only."""
    from submitit.core.utils import DelayedSubmission

    def load(cls: type, filepath: str | Path) -> Any:
        if Path(filepath) != path:  # submitit loads nothing else in a task; refuse rather than read unchecked
            raise RuntimeError(f"{filepath}: not the pickle this task checked ({path})")
        loaded = pickle.loads(data)
        if type(loaded).__name__ != DelayedSubmission.__name__:
            raise RuntimeError(f"{path}: holds a {type(loaded).__name__}, not a submitted call")
        return loaded

    return classmethod(load)


def main(argv: list[str] | None = None) -> int:
    """Check the task's pickle against the digests in ``argv``, then run it as submitit's task does; 2 on a
    refusal, with one line on stderr that says why."""
    from mutualrl.errors import RunFolderError

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 5 or args[1:4] != SUBMITIT_TAIL:
        print(f"mutualrl sweep: usage: python -m mutualrl.launch.verified_submit SHA256[,SHA256...] "
              f"{' '.join(SUBMITIT_TAIL)} FOLDER (got {' '.join(args)[:300]})", file=sys.stderr, flush=True)
        return 2
    accepted, folder = set(args[0].split(",")), args[4]
    os.environ["SUBMITIT_FOLDER"] = folder  # what submitit's process_job sets before it finds the job's paths
    from submitit.core import job_environment, submission, utils

    path = Path(job_environment.JobEnvironment().paths.submitted_pickle)
    try:
        data = wait_and_read(path)
    except FileNotFoundError:
        print(f"mutualrl sweep: {path}: missing after {WAIT_S} s; the task has nothing to run", file=sys.stderr)
        return 2
    except RunFolderError as err:
        print(f"mutualrl sweep: {err}", file=sys.stderr, flush=True)
        return 2
    digest = hashlib.sha256(data).hexdigest()
    if digest not in accepted:
        print(f"mutualrl sweep: {path}: refused, not loaded: its sha256 {digest[:16]}… is none of those the "
              "submitting process recorded in this job's script (the sweep folder's pickle was replaced); "
              "submit the sweep again", file=sys.stderr, flush=True)
        return 2
    utils.DelayedSubmission.load = verified_loader(path, data)  # type: ignore[method-assign]
    submission.process_job(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
