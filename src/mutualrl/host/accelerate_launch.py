"""``accelerate launch`` as a GPU policy's launcher runs it: the same command, with the stop signals left to the ranks.

Slurm's ``scancel`` and its warning before a time limit signal every process of the job step: the launcher, which asks
every policy to save at one step, and each policy's ranks, which wait for that request (training/stop_request.py).
``accelerate launch`` sits between them. With several ranks or DeepSpeed it runs torchrun's agent, which handles the
stop signals itself as :func:`~mutualrl.training.stop_request.rank_agent_env` sets it up. With one rank and no
DeepSpeed it starts the rank as its child and waits (``simple_launcher``), and a signal's default action would end it
at once: the launcher would take the policy for failed and kill it in the middle of its save. Here the stop signals do
nothing to this process; the rank, signalled itself or asked by the launcher, saves and exits, and this process then
ends with it. A signal this process was started with ignored stays ignored (as in the rank). And the ranks' import
path keeps the launcher's safe start (:func:`keep_the_working_directory_off_the_ranks_path`).
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

from mutualrl.host.stop_signals import STOP_SIGNALS  # torchrun's agent replaces these handlers with its own



def leave_stop_to_the_ranks(signum: int, frame: FrameType | None) -> None:
    """A stop signal reached the launch process: its ranks were signalled or asked too and stop themselves."""


def keep_the_working_directory_off_the_ranks_path() -> None:
    """accelerate's DeepSpeed launch appends its working directory to the ranks' ``PYTHONPATH``
    (``accelerate/utils/launch.py:prepare_deepspeed_cmd_env``, its one use of ``env_var_path_add``), ahead of
    site-packages: a module of the user's folder named like a library (``datasets.py``) would shadow it in every rank.
    The workers start with ``PYTHONSAFEPATH`` for that reason and import the modules the command names from that folder
    by name (launch/plan/commands.py ``worker_env``); the rest of the ``PYTHONPATH`` is kept."""
    from accelerate.utils import launch

    append = launch.env_var_path_add

    def without_the_working_directory(name: str, path: str) -> str:
        if name == "PYTHONPATH" and os.path.abspath(path) == os.path.abspath("."):
            return os.environ.get("PYTHONPATH", "")
        return append(name, path)

    launch.env_var_path_add = without_the_working_directory


def main() -> None:
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, leave_stop_to_the_ranks)
    keep_the_working_directory_off_the_ranks_path()
    from accelerate.commands.launch import main as accelerate_launch

    sys.argv = ["accelerate launch", *sys.argv[1:]]
    accelerate_launch()


if __name__ == "__main__":
    main()
