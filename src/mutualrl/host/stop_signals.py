"""The signals that stop a run with a checkpoint, in one place: the launcher's (launch/supervise/signals.py), a policy
rank's (training/stop_request.py) and a GPU policy's launch process (:mod:`.accelerate_launch`) handle the same ones."""

from __future__ import annotations

import signal

#: SIGINT (Ctrl-C), SIGTERM (a scheduler), SIGHUP (a closed terminal) and SIGUSR2: submitit's sbatch script asks Slurm
#: for it 90 s before the time limit (``--signal=USR2@90``), to every process of the task; its default action ends the
#: process, so it stops the run as SIGTERM does (with a checkpoint).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2)
