"""The worker's side of a stop that saves (training/stop_request.py): a checkpoint at the step the launcher names."""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback

from mutualrl.run_folder import RunPaths
from mutualrl.training.stop_request import HOLDING, STEP_WAIT_S, read_request, requested_step


class StopAtStepCallback(TrainerCallback):
    """At the end of the step the launcher names: a checkpoint (unless ``save_strategy`` is ``no``) and the end of
    training; that step's validation waits for the resume (``ValidationCallback.on_train_begin``). Placed after
    the status callback (its file holds the step) and before the validation callback."""

    def __init__(self, paths: RunPaths, status: Any, validation: Any):
        self.paths, self.status, self.validation = paths, status, validation
        self.stopped_at: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        from accelerate import PartialState

        from mutualrl.training.rank_zero import decided_on_rank_zero

        if not decided_on_rank_zero(PartialState(), lambda: self.due(state)):  # every rank stops at one step
            return
        self.stopped_at = int(state.global_step)
        self.validation.done_steps.add(self.stopped_at)  # the launcher's grace is for the save; validated on resume
        control.should_save = args.save_strategy != "no"
        control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        if self.stopped_at is not None and state.is_world_process_zero:
            self.status.write(state, "stopped")  # after the status callback's "finished"

    def due(self, state: Any) -> bool:
        """Rank 0: whether to stop at this step end; holds here until the launcher names the step."""
        request = read_request(self.paths)
        if request is None:
            return False
        target = requested_step(request)
        if target is None:
            self.status.write(state, HOLDING)
            deadline = time.monotonic() + STEP_WAIT_S
            while target is None and time.monotonic() < deadline:
                time.sleep(0.05)
                target = requested_step(read_request(self.paths))
        return target is None or state.global_step >= target
