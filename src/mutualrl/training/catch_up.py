"""The trainer of a policy that may skip whole exchange rounds (``see.catch_up``; beyond the paper, optional).

A policy that persistently keeps faster peers waiting skips rounds instead (docs/see.md, "Catching
up"; the decision is :meth:`mutualrl.see.async_rounds.consumption.BoundedConsumption.skip_round`). TRL's
Trainer has no hook for "this optimizer step does nothing", so :class:`CatchUpTrainer` overrides the
one method a step goes through, ``training_step``; the worker builds it only where rounds may be
skipped (:func:`trainer_class`), so a lock-step run's trainer is :class:`MutualGRPOTrainer` unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from mutualrl.training.trainer import MutualGRPOTrainer


def step_deepspeed_schedule(engine: Any) -> None:
    """Advance the LR schedule by one optimizer step of a skipped round under DeepSpeed.

    There the Trainer's ``optimizer.step()`` and ``lr_scheduler.step()`` are no-ops (accelerate's DeepSpeed
    wrappers): ``accelerator.backward`` runs ``engine.step()``, which steps the engine's scheduler. A skipped
    round has no backward, so without this its rounds would not move the schedule, unlike
    without DeepSpeed. The weights and moments stay as they are, as without DeepSpeed (no gradient)."""
    scheduler = getattr(engine, "lr_scheduler", None)
    if scheduler is not None:
        scheduler.step()


class CatchUpTrainer(MutualGRPOTrainer):
    """MutualGRPOTrainer whose rounds may be skipped: no generation, no forward, no backward."""

    _skipping_round = False

    def skip_round(self, step: int) -> bool:
        """Whether this policy skips the exchange round starting at optimizer step ``step`` (asked at each round's
        first micro-step; logged as ``mutual/skipped``)."""
        consumption = self.regime.consumption
        if consumption is None or not consumption.may_skip:
            return False
        skipped = consumption.skip_round(step, self.state.max_steps)
        self.record_metrics({"mutual/skipped": skipped})
        return skipped

    def training_step(self, model, inputs, num_items_in_batch=None):
        """A skipped round's micro-steps do nothing: no gradient, so the optimizer step leaves every parameter and
        moment as it is; the data and the LR schedule advance as usual."""
        if self._step % (self.args.steps_per_generation * self.num_iterations) == 0:
            self._skipping_round = self.skip_round(self.state.global_step)
        if self._skipping_round:
            self._step += 1
            if self.is_deepspeed_enabled and self.accelerator.sync_gradients:
                step_deepspeed_schedule(self.model_wrapped)
            # NaN: the Trainer's logging_nan_inf_filter (on by default) keeps it out of the logged loss
            return torch.full((), float("nan"), device=self.args.device)
        return super().training_step(model, inputs, num_items_in_batch)


def trainer_class(see: Any) -> type[MutualGRPOTrainer]:
    """:class:`CatchUpTrainer` where rounds may be skipped (``see.catch_up``, or replaying a run that may have
    skipped some), else the lock-step :class:`MutualGRPOTrainer`."""
    return CatchUpTrainer if see.catch_up or see.replay_consumption else MutualGRPOTrainer
