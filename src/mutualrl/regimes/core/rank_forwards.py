"""Forwards whose number depends on a rank's rows, kept in step across a policy's ranks where each is collective.

Under ZeRO-3 each forward of the sharded model is collective: as each submodule's forward starts, DeepSpeed
all-gathers its parameters over the policy's ranks (``PartitionedParameterCoordinator.fetch_sub_module``, the
parameters above ``stage3_param_persistence_threshold``), and a forward with a gradient gathers them again in its
backward. So every rank must run the model the same number of times, in the same order; the shapes of the batches
may differ. DDP's wrapper, too, broadcasts the module's buffers before a forward (a rotary embedding's, say) that
follows a forward with a gradient. The
cover enumeration (:mod:`~mutualrl.regimes.core.byte_covers`) runs one forward per tokenization it
keeps, a number that depends on each rank's texts: run as it is, one rank's extra forward is paired with another
rank's next collective, and the policy hangs or fails.

The scheme is Transformers' ``generate(synced_gpus=True)``'s: before each of its forwards a rank says it has one to
run (a sum over the policy's ranks); a rank with none left says so and runs a dummy forward (one token, no gradient,
result dropped) for as long as another rank still has one; then every rank leaves together. Cost: one scalar
all-reduce per forward, and each rank runs as many forwards as the rank with the most. Calls with a gradient whose
count depends on the rows (byte-kd's learner's) are evened out by :func:`missing_calls` and
:func:`zero_with_gradient`. With one rank, or forwards that are not collective, none of this runs: no collective, no dummy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from mutualrl.regimes.core.trainer_interface import RanksView, TrainerView


def zero3_enabled() -> bool:
    """Whether this process's model is partitioned by DeepSpeed ZeRO-3 (Transformers' global flag, set when the
    trainer's DeepSpeed config is stage 3)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    return bool(is_deepspeed_zero3_enabled())


def broadcasts_buffers(model: torch.nn.Module) -> bool:
    """Whether ``model`` is DDP's wrapper set to broadcast the module's buffers (``forward_sync_buffers``, formerly
    ``broadcast_buffers``: the default) and has some. From its settings, not ``will_sync_module_buffers()``, which
    also reads whether the previous forward had a gradient (``require_forward_param_sync``): after the enumeration's
    forwards without one it says no, yet every gradient forward after the first broadcasts."""
    if not callable(getattr(model, "will_sync_module_buffers", None)):
        return False
    enabled = getattr(model, "forward_sync_buffers", getattr(model, "broadcast_buffers", False))
    return bool(enabled) and len(getattr(model, "modules_buffers", ())) > 0


def forwards_are_collective(ranks: RanksView, model: torch.nn.Module) -> bool:
    """Whether forwards of ``model`` pair up across the policy's ranks: with more than one rank, under ZeRO-3, or
    where ``model`` is DDP's wrapper broadcasting its buffers (:func:`broadcasts_buffers`)."""
    if ranks.num_processes <= 1:
        return False
    return zero3_enabled() or broadcasts_buffers(model)


class LockstepForwards:
    """One span of data-dependent forwards run in step with the policy's other ranks: :meth:`wrap` each forward
    callable of the span, then :meth:`finish` (every rank, once, at the span's end). ``rounds``: the real forwards
    run, ``dummies``: the dummy ones."""

    def __init__(self, ranks: RanksView, dummy: Callable[[], None]):
        self.ranks = ranks
        self.dummy = dummy
        self.rounds = 0
        self.dummies = 0

    def _any_rank_forwards(self, mine: bool) -> bool:
        """One round's agreement: whether some rank runs a real forward now (``mine``: this one does)."""
        flag = torch.tensor([int(mine)], dtype=torch.long, device=self.ranks.device)  # [1]
        return int(self.ranks.reduce(flag, reduction="sum").item()) > 0

    def wrap(self, call: Callable) -> Callable:
        """``call`` (one forward of the model, or an enumeration's ``forward``) announced to the other ranks before
        each call; its results unchanged."""

        def in_step(*args, **kwargs):
            self._any_rank_forwards(True)
            self.rounds += 1
            return call(*args, **kwargs)

        return in_step

    def finish(self) -> None:
        """This rank's forwards are done: a dummy forward per round in which another rank still runs one."""
        while self._any_rank_forwards(False):
            self.dummy()
            self.dummies += 1


def dummy_forward(trainer: TrainerView, model: torch.nn.Module) -> torch.Tensor:
    """float32 ``[1, 1, V]``: ``model``'s logits after a one-token prompt for a one-token completion (the pad token),
    through the trainer's forward (the same modules, in the same order, as every forward of the enumeration); the
    gradient as the caller's mode has it."""
    pad = trainer.processing_class.pad_token_id or 0
    ids = torch.full((1, 1), pad, dtype=torch.long, device=trainer.accelerator.device)  # [1, 1]
    mask = torch.ones((1, 1), dtype=torch.long, device=trainer.accelerator.device)  # [1, 1]
    return trainer.completion_logits(model, ids, mask, ids, mask)  # [1, 1, V]


@contextmanager
def forwards_in_step(trainer: TrainerView, model: torch.nn.Module) -> Iterator[Callable[[Callable], Callable]]:
    """A span of forwards of ``model`` whose number depends on this rank's rows: yields the wrapper to put around
    each forward callable of the span; at its end the ranks leave together (:class:`LockstepForwards`). Where the
    forwards are not collective (:func:`forwards_are_collective`), the wrapper is the identity and nothing runs. An
    error inside the span leaves at once (the other ranks cannot be joined then)."""
    if not forwards_are_collective(trainer.accelerator, model):
        yield lambda forward: forward
        return

    def dummy() -> None:
        with torch.no_grad():
            dummy_forward(trainer, model)

    lockstep = LockstepForwards(trainer.accelerator, dummy)
    yield lockstep.wrap
    lockstep.finish()


def missing_calls(ranks: RanksView, model: torch.nn.Module, calls: int) -> int:
    """How many calls of ``model`` this rank lacks of the policy's rank with the most (``calls``: this rank's): 0
    where its forwards are not collective, with no collective run then."""
    if not forwards_are_collective(ranks, model):
        return 0
    count = torch.tensor([calls], dtype=torch.long, device=ranks.device)  # [1]
    most = ranks.gather(count)  # [ranks]
    return int(most.max().item()) - calls


def zero_with_gradient(trainer: TrainerView, model: torch.nn.Module) -> torch.Tensor:
    """A scalar exact 0 with the graph of one forward of ``model`` (a one-token dummy, its logits clamped finite
    first), run for a call another rank makes (:func:`missing_calls`): added to the loss, its backward gathers the
    parameters as a real call's does."""
    logits = dummy_forward(trainer, model).float().clamp(-1e4, 1e4)  # [1, 1, V]
    return logits.sum() * 0.0
