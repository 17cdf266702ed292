"""How long a stop that saves may take (training/stop_request.py): the launcher's wait after a stop signal before it
kills the workers, and the warning a Slurm job asks for before its time limit (launch/sweep/slurm.py).

A policy asked to stop finishes its steps up to the common stop step, then writes its checkpoint; every policy of
the pool writes at the same time, to the run folder's filesystem. So the launcher waits up to::

    grace = max(floor, STEP_MARGIN x time to the stop step + checkpoint GiB of the pool / WRITE_GIB_PER_S)

- time to the stop step: the slowest policy's steps to go (1 in lock-step: the step in flight) times its step time,
  the longest the launcher saw one of its steps take in this launch, from the status files (a validation between
  two steps counted with them; before the launcher saw a step end, the time since the policy's status said it
  began training, else since the launcher first looked, model loading counted); a policy not yet seen to step
  counts as the slowest one seen. With no step seen (a Slurm warning asked
  for at submission) a step counts :data:`UNMEASURED_STEP_S`.
- checkpoint GiB: the launch plan's disk table (:class:`~mutualrl.launch.plan.checkpoints.DiskPlan`, one checkpoint
  of each policy, all ranks together: 14 bytes per parameter under ZeRO-3), summed over the pool; a policy whose
  size the plan does not know, a LoRA policy or one that never saves counts 0.
- floor: :data:`~mutualrl.training.stop_request.GRACE_S` (20 s), what a stop waited before.

The workers exit as soon as they saved, so a long grace costs only the wait for a worker that hangs (a second
Ctrl-C kills at once). A policy still writing its checkpoint when the grace ends (its status says so) is waited for,
up to :data:`SAVE_WAIT_CAP_S` more. :data:`mutualrl.fault_injection.STOP_GRACE_ENV` sets the floor and the write rate for tests.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mutualrl.training.stop_request import FINISHED, GRACE_S, SAVING

TRAINING = "training"
"""The status phase a policy's :class:`~mutualrl.training.callbacks.StatusCallback` writes when its training begins
(its model loaded)."""

WRITE_GIB_PER_S = 0.25
"""A conservative rate for one machine's checkpoint writes to the run folder's filesystem, all policies together:
about 2 Gbit/s (NFS over 10 GbE, a Lustre or GPFS client, a local NVMe disk each write 1 GiB/s or more when idle;
a shared filesystem under load, or a 2.5 GbE link, less). A 4B policy's ZeRO-3 checkpoint (52 GiB) takes 208 s."""
STEP_MARGIN = 1.5
"""The step in flight may take longer than any seen: completions grow as a policy trains."""
UNMEASURED_STEP_S = 600.0
"""A step's time where none was measured (a Slurm job's warning, asked for before the run starts): 10 minutes, a
paper step (1024 prompts x 8 completions generated and trained) of a 4B policy on a few GPUs as guessed, not
measured: no GPU has run this repository yet (benchmarks/README.md)."""


SAVE_WAIT_CAP_S = 1800.0
"""After the grace, how much longer the launcher waits for policies that say they are writing their checkpoint (their
status phase :data:`~mutualrl.training.stop_request.SAVING`): a filesystem slower than :data:`WRITE_GIB_PER_S` costs
time, not the step in flight; a save that hangs is killed after this."""


def still_saving(statuses: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The policies whose status says they are writing a checkpoint."""
    return [name for name, status in statuses.items() if status.get("phase") == SAVING]


def stop_grace_s(step_s: float, save_gib: float, floor_s: float = GRACE_S,
                 write_gib_per_s: float = WRITE_GIB_PER_S) -> float:
    """The module's formula: seconds to wait for ``step_s`` of training to the stop step and ``save_gib`` of
    checkpoints written at ``write_gib_per_s``, never less than ``floor_s``."""
    return max(floor_s, STEP_MARGIN * step_s + save_gib / write_gib_per_s)


def planned_save_gib(plan: Any) -> float:
    """GiB of one checkpoint of every policy of ``plan`` (a launch plan), from its disk table; 0 without one."""
    disk = getattr(plan, "disk", None)
    return float(sum(p.checkpoint_gib for p in disk.policies)) if disk is not None else 0.0


def planned_signal_s(save_gib: float) -> int:
    """Seconds before a Slurm job's time limit to ask for its stop signal (``#SBATCH --signal=TERM@N``): the grace of a
    run that has measured no step (:data:`UNMEASURED_STEP_S`) and writes ``save_gib`` of checkpoints, rounded up."""
    return math.ceil(stop_grace_s(UNMEASURED_STEP_S, save_gib))


def warning_s(save_gib: float, time_min: int) -> int:
    """:func:`planned_signal_s`, at most half of the job's ``time_min`` (a shorter job stops at half its time, still
    with a checkpoint)."""
    return min(planned_signal_s(save_gib), max(1, time_min * 60 // 2))


def sbatch_signal_line(plan: Any) -> str:
    """The ``#SBATCH --signal`` line for ``plan``'s run and what it is made of (the dry run prints it)."""
    save_gib = planned_save_gib(plan)
    return (f"Slurm: #SBATCH --signal=TERM@{planned_signal_s(save_gib)}  (the stop's planned grace: "
            f"{STEP_MARGIN:g} x a step of {UNMEASURED_STEP_S:.0f} s not yet measured + {save_gib:.4g} GiB of "
            f"checkpoints at {WRITE_GIB_PER_S:g} GiB/s; to every process of the job step, not B:)")


@dataclass(frozen=True)
class StopBudget:
    """What the grace of a run is made of besides its measured steps (``PoolSettings.stop``)."""

    save_gib: float = 0.0
    floor_s: float = GRACE_S
    write_gib_per_s: float = WRITE_GIB_PER_S

    def grace_s(self, step_s: float) -> float:
        return stop_grace_s(step_s, self.save_gib, self.floor_s, self.write_gib_per_s)

    def describe(self, step_s: float) -> str:
        """The grace in words, as the stop message says it."""
        save_s = self.save_gib / self.write_gib_per_s
        return (f"waiting up to {self.grace_s(step_s):.0f} s: {STEP_MARGIN:g} x {step_s:.0f} s to the step, "
                f"{self.save_gib:.4g} GiB of checkpoints at {self.write_gib_per_s:g} GiB/s ({save_s:.0f} s), at "
                f"least {self.floor_s:g} s")


def budget_for(plan: Any, override: tuple[float, float] | None = None) -> StopBudget:
    """``plan``'s budget; ``override`` (floor, write rate: :func:`mutualrl.fault_injection.stop_grace`) for tests."""
    floor, rate = override if override is not None else (GRACE_S, WRITE_GIB_PER_S)
    return StopBudget(planned_save_gib(plan), floor, rate)


def _completed(status: Mapping[str, Any]) -> int:
    step = status.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) and step > 0 else 0


class StepTimes:
    """Per policy, the longest time the launcher saw one of its steps take, on its own monotonic clock from the
    status changes it saw (no file time written by another process or machine is compared with it)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._seen: dict[str, tuple[int, float, bool]] = {}  # step, when first seen, whether a step end began it
        self._longest: dict[str, float] = {}  # between two step ends seen
        self._first: dict[str, float] = {}  # to the first step end: from the start of training, else the first look
        self._phase: dict[str, Any] = {}  # the status phase last seen

    def look(self, statuses: Mapping[str, Mapping[str, Any]]) -> None:
        """Note every policy of ``statuses`` whose step moved (a step back: a restart, measured afresh)."""
        now = self.clock()
        for policy, status in statuses.items():
            step, seen = _completed(status), self._seen.get(policy)
            began = status.get("phase") == TRAINING and self._phase.get(policy) != TRAINING
            self._phase[policy] = status.get("phase")
            if seen is None or step < seen[0] or (began and step == seen[0] and not seen[2]):
                self._seen[policy] = (step, now, False)  # model loading over: the first step's clock starts here
            elif step > seen[0]:
                per_step, into = (now - seen[1]) / (step - seen[0]), self._longest if seen[2] else self._first
                into[policy] = max(into.get(policy, 0.0), per_step)
                self._seen[policy] = (step, now, True)

    def step_s(self, policy: str) -> float | None:
        """``policy``'s longest step seen (before one between two step ends: the first, start-up counted)."""
        return self._longest.get(policy, self._first.get(policy))

    def to_step(self, step: int, statuses: Mapping[str, Mapping[str, Any]]) -> float:
        """Seconds until every policy of ``statuses`` reached ``step`` (module docstring; 0 with no step seen)."""
        known = [s for s in map(self.step_s, statuses) if s is not None]
        slowest = max(known, default=0.0)
        worst = 0.0
        for policy, status in statuses.items():
            if status.get("phase") == FINISHED:
                continue
            to_go = max(0, step - _completed(status))  # 0: holding at the step's end
            per_step = self.step_s(policy)
            worst = max(worst, to_go * (slowest if per_step is None else per_step))
        return worst
