"""A resumed policy goes on where it stopped: its learning-rate schedule and its tracker runs.

- **Learning rate.** On resume the trainer builds its schedule for the run length it has now (``--resume
  --max-steps N`` may lengthen it) and then loads the scheduler's state from the checkpoint, whose last rate is the
  *old* schedule's: a linear schedule that had decayed to 0 at its planned end trained the next step at 0.0, and
  the one after jumped to the new schedule's rate. :class:`ResumedSchedule` sets the rate of the first resumed step
  from the schedule the run has now, so every step from the checkpoint on follows one schedule: the run's schedule
  stretched to its new length (the launcher says so as it resumes). An unchanged length changes nothing.
- **Trackers.** Each start wrote TensorBoard events into a new ``runs/<time>_<host>`` folder, so a resumed run was
  a second TensorBoard run holding the steps after the checkpoint twice. A policy's events go to one folder,
  ``policies/<policy>/runs/tensorboard`` (unless ``TENSORBOARD_LOGGING_DIR`` names one), and a resumed writer
  purges the steps after its checkpoint (TensorBoard's ``purge_step``); Weights & Biases continues one run per
  policy (``WANDB_RUN_ID`` from the run's id, ``WANDB_RESUME=allow``), as ``resume_from_checkpoint`` users expect.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, MutableMapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

TENSORBOARD_FOLDER = "tensorboard"
"""A policy's TensorBoard folder under its ``runs/``: one run however often the policy is resumed."""


class ResumedSchedule(TrainerCallback):
    """The first resumed step's learning rate from the schedule the run has now (see the module docstring)."""

    def on_train_begin(self, args: Any, state: Any, control: Any, lr_scheduler: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:
        if state.global_step > 0 and lr_scheduler is not None and optimizer is not None:
            continue_schedule(lr_scheduler, optimizer)


def continue_schedule(scheduler: Any, optimizer: Any) -> list[float] | None:
    """Set each parameter group's rate to ``scheduler``'s own at its step (a ``LambdaLR``: every schedule
    transformers builds but ``reduce_lr_on_plateau``); the rates set, or None where there is no such schedule."""
    lambdas, bases = getattr(scheduler, "lr_lambdas", None), getattr(scheduler, "base_lrs", None)
    if not lambdas or not bases or len(lambdas) != len(optimizer.param_groups):
        return None
    rates = [base * rate(scheduler.last_epoch) for base, rate in zip(bases, lambdas, strict=True)]
    for group, rate in zip(optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    scheduler._last_lr = list(rates)  # what get_last_lr() (and so the logged learning_rate) reports
    return rates


def continue_trackers(callbacks: Iterable[Any], policy_dir: Path, resume_from: str | None,
                      environ: MutableMapping[str, str] = os.environ) -> None:
    """Point the TensorBoard callbacks among ``callbacks`` at the policy's one folder, purging the steps after the
    checkpoint ``resume_from`` (``.../checkpoint-N``; None: a start, nothing purged)."""
    from transformers.integrations import TensorBoardCallback

    from mutualrl.ops.checkpoint_files import CHECKPOINT_NAME_RE

    named = CHECKPOINT_NAME_RE.match(Path(resume_from).name) if resume_from else None
    resume_step = int(named.group(1)) if named else None
    for callback in callbacks:
        if not isinstance(callback, TensorBoardCallback):
            continue
        if not environ.get("TENSORBOARD_LOGGING_DIR"):
            callback.logging_dir = str(policy_dir / "runs" / TENSORBOARD_FOLDER)
        writer = getattr(callback, "_SummaryWriter", None)
        if writer is not None and resume_step is not None:
            callback._SummaryWriter = PurgeOnce(writer, resume_step + 1)


class PurgeOnce:
    """A ``SummaryWriter`` factory whose first writer purges the steps from ``step`` on (TensorBoard drops the
    earlier files' events there): the callback makes a second writer after training (the last validation's
    logs), which must purge nothing, or it would drop the resumed steps themselves."""

    def __init__(self, writer: Any, step: int) -> None:
        self.writer, self.step = writer, step

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        step, self.step = self.step, None
        return self.writer(*args, **kwargs) if step is None else self.writer(*args, purge_step=step, **kwargs)


def wandb_run_env(report_to: Any, run_id: str, policy: str, environ: MutableMapping[str, str]) -> dict[str, str]:
    """``WANDB_RUN_ID`` (stable for the run and policy) and ``WANDB_RESUME=allow`` when ``report_to`` names W&B
    and the user's environment sets neither: a resumed policy logs into its own run again."""
    from mutualrl.training.trackers import tracker_names

    names = tracker_names(report_to)
    if ("wandb" not in names and "all" not in names) or environ.get("WANDB_RUN_ID") or environ.get("WANDB_RESUME"):
        return {}
    return {"WANDB_RUN_ID": hashlib.sha256(f"{run_id}/{policy}".encode()).hexdigest()[:32], "WANDB_RESUME": "allow"}
