"""A stop that saves: on SIGINT, SIGTERM, SIGHUP or SIGUSR2 every policy finishes one common step, saves a checkpoint there
and exits, so ``mutualrl train --resume`` loses at most the step that was in flight.

``--resume`` starts every policy from one checkpoint step common to all (launch/rundir/resume.py
``common_checkpoint``), and policies in lock-step wait for each other's records of a step, so all must stop at the
same step. The launcher writes ``RUN/status/.stop.json`` twice: first the request alone, then with ``step``, the
furthest step any policy has in flight (steps completed + 1; + 0 for a policy that already holds at a step end,
having seen the request). In that order a policy is either counted with its step in flight or sees the request at
its next step end and holds there until ``step`` is written: none passes the step unknowingly.

Each worker's ``StopAtStepCallback`` (training/stop_callback.py) reads the request at every step end (rank 0
reads, every rank gets its answer: :mod:`~mutualrl.training.rank_zero`); at the step it asks TRL's Trainer for a
checkpoint and the end of training, and the worker exits with :data:`STOPPED_EXIT`, without the final validation or
final model.

A worker that is signalled itself (Slurm's ``scancel`` signals every process of the job) goes on to the step when
its launcher writes the request within :data:`LAUNCHER_WAIT_S`; otherwise (a worker started by hand, a launcher that
tears the pool down after a failure: ``step`` 0) the signal does what it did before.

A policy of several ranks (a GPU policy under ``accelerate launch``, CPU ranks under ``torch.distributed.run``) has
torchrun's elastic agent between the launcher and its ranks. Signalled itself (Slurm signals every process of the
job step, the agent too), the agent passes the signal on to its ranks and, by default, SIGKILLs them 30 s later; a
signal it does not handle (SIGUSR2, submitit's warning) ends it at once, and its ranks with it. Either loses the
step in flight, whose save can take minutes. :func:`rank_agent_env` has the agent handle SIGUSR2 too and wait for
its ranks as long as :data:`AGENT_SHUTDOWN_S`: the launcher, which kills what still runs after its own grace, is
what bounds a stop.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mutualrl.atomic_io import write_json_atomic
from mutualrl.host.stop_signals import STOP_SIGNALS
from mutualrl.run_folder import RunPaths, read_json_or

STOP_FILE = ".stop.json"  # a dot name: no policy's status file (status/<policy>.json) can be it
STOPPED_EXIT = 75  # EX_TEMPFAIL: stopped on request with a checkpoint, resumable
HOLDING = "stopping"  # the status phase of a policy that saw the request and goes on to its step or stops
FINISHED = "finished"  # the status phase of a policy whose training ended (StatusCallback)
SAVING = "saving"  # the status phase of a policy writing a checkpoint (MutualGRPOTrainer._save_checkpoint)
LAUNCHER_WAIT_S = 5.0
STEP_WAIT_S = 30.0
AGENT_STOP_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR2"
"""What torchrun's agent catches and passes on to its ranks (torch's own list and SIGUSR2; ``--signals-to-handle``).
The ranks take each as a stop (:func:`install_stop_handlers`) but SIGQUIT, which still ends them at once."""
AGENT_SHUTDOWN_S = 3_600
"""How long torchrun's agent waits for its ranks to end after passing a signal on before it SIGKILLs them (torch's
default: 30 s). An hour: longer than the launcher's own wait on any shipped pool (the planned grace, at most 1,309 s,
and the save wait, at most ``SAVE_WAIT_CAP_S`` = 1,800 s: launch/supervise/stop_grace.py), which ends first and kills
what it finds; a rank whose launcher is gone stops itself (ops/watchdog.py). It also bounds a command of the dry run
started by hand, with no launcher, whose rank hangs."""
GRACE_S = 20.0
"""The least the launcher waits for every policy to save and exit before it kills them (the floor of
:func:`mutualrl.launch.supervise.stop_grace.stop_grace_s`, which adds the steps to go and the plan's checkpoint
writes): under Slurm's default KillWait (30 s between ``scancel``'s SIGTERM and its SIGKILL)."""


def stop_path(paths: RunPaths) -> Path:
    return paths.status_dir / STOP_FILE


def read_request(paths: RunPaths) -> dict[str, Any] | None:
    return read_json_or(stop_path(paths), None)


def requested_step(request: dict[str, Any] | None) -> int | None:
    """The step a request names (None: none yet, or no request)."""
    step = (request or {}).get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def in_flight(status: dict[str, Any]) -> int:
    """The step a policy will reach before it can stop, from its status file: the one after its last completed,
    or its last completed when it holds at a step end; never past its ``max_steps`` (its last step saves anyway)."""
    step = status.get("step")
    done = step if isinstance(step, int) and not isinstance(step, bool) and step > 0 else 0
    reached = done if status.get("phase") == HOLDING else done + 1
    last = status.get("max_steps")
    return min(reached, last) if isinstance(last, int) and not isinstance(last, bool) and last > 0 else reached


def stop_step(statuses: dict[str, dict[str, Any]]) -> int:
    """The step every policy stops at: the furthest in flight; 0 while no policy has completed a step (nothing
    to save: the pool is stopped at once, as before)."""
    training = {name: st for name, st in statuses.items() if st.get("phase") != FINISHED}  # a finished one saved
    if not any(isinstance(st.get("step"), int) and st["step"] > 0 for st in training.values()):
        return 0
    return max(in_flight(st) for st in training.values())


def request_stop(paths: RunPaths, signal_name: str, statuses: Callable[[], dict[str, dict[str, Any]]]) -> int:
    """Ask every policy to stop at one step (module docstring) and return it; ``statuses`` reads the status files
    of the policies still training, after the request is on disk."""
    write_json_atomic(stop_path(paths), {"signal": signal_name})
    step = stop_step(statuses())
    write_json_atomic(stop_path(paths), {"signal": signal_name, "step": step})
    return step


FOLLOW_S = 3.0
"""How long the launcher of a machine K > 0 waits for machine 0's stop step before deciding one itself (machine 0 not
signalled: a Ctrl-C on this machine alone; Slurm signals every machine of the job, machine 0 too): under
:data:`LAUNCHER_WAIT_S`, so this machine's signalled workers still find a step."""


def follow_stop(paths: RunPaths, decide: Callable[[], int], read: Callable[[RunPaths], dict[str, Any] | None] =
                read_request, wait_s: float = FOLLOW_S, poll_s: float = 0.05) -> int:
    """The launcher of a machine K > 0: the step machine 0 decided (its ``RUN/status/.stop.json``), so that two
    machines whose views of the shared status files differ (NFS's attribute cache) cannot name two steps; ``decide()``
    (:func:`request_stop`) where none comes within ``wait_s``. ``read``: how this machine reads the request."""
    deadline = time.monotonic() + wait_s
    while True:
        step = requested_step(read(paths))
        if step is not None:
            return step
        if time.monotonic() >= deadline:
            return decide()
        time.sleep(poll_s)


def request_teardown(paths: RunPaths) -> None:
    """Before the launcher signals workers to end now (a failure, nothing trained yet): ``step`` 0 tells a
    signalled worker not to wait for a step, unless a stop at a step is under way."""
    if requested_step(read_request(paths)) is None:
        write_json_atomic(stop_path(paths), {"signal": "teardown", "step": 0})


def clear_request(paths: RunPaths) -> None:
    """A pool that starts forgets the request of a run stopped before."""
    stop_path(paths).unlink(missing_ok=True)


_signalled: dict[str, Any] = {"at": None, "give_up": False}


def rank_agent_env() -> dict[str, str]:
    """The environment of a policy's ``accelerate launch`` or ``torch.distributed.run``: torchrun's agent passes every
    stop signal on to its ranks and waits for their saves (module docstring). Both read torchrun's arguments through
    its ``PET_*`` variables (``torch/distributed/argparse_util.py``)."""
    return {"PET_SIGNALS_TO_HANDLE": AGENT_STOP_SIGNALS, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(AGENT_SHUTDOWN_S)}


def install_stop_handlers(paths: RunPaths) -> None:
    """SIGTERM, SIGINT, SIGHUP and SIGUSR2 of this worker wait for the launcher's request (module docstring; torchrun's
    agent passes each of them on); a signal ignored at start stays ignored."""
    for sig in STOP_SIGNALS:
        previous = signal.getsignal(sig)
        if previous is signal.SIG_IGN:
            continue

        def on_signal(signum: int, frame: Any, previous: Any = previous) -> None:
            if _signalled["give_up"]:  # no request came: what the signal did before (only here, the main thread)
                if callable(previous):
                    previous(signum, frame)
                    return
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            elif _signalled["at"] is None:  # Slurm's signal and the launcher's may both come: one wait
                _signalled["at"] = time.monotonic()
                threading.Thread(target=default_unless_requested, args=(paths, signum), daemon=True,
                                 name="mutualrl-stop-signal").start()

        signal.signal(sig, on_signal)


def default_unless_requested(paths: RunPaths, signum: int) -> None:
    """Go on to the step of the launcher's request; without one within :data:`LAUNCHER_WAIT_S` (or step 0, or a
    launcher that is gone) signal this process again, so the signal does what it did before: SIGTERM ends the
    process, SIGINT raises ``KeyboardInterrupt``."""
    from mutualrl.ops.watchdog import LAUNCHER_PID_ENV, launcher_alive

    launcher = os.environ.get(LAUNCHER_PID_ENV, "")
    deadline = time.monotonic() + (LAUNCHER_WAIT_S if launcher.isdigit() and launcher_alive(int(launcher)) else 0)
    while True:
        step = requested_step(read_request(paths))
        if step is not None and step > 0:
            return
        if step == 0 or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    _signalled["give_up"] = True
    os.kill(os.getpid(), signum)
