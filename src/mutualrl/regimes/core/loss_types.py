"""TRL 1.16's loss types, classified once: how each normalises its per-token loss, whether its surrogate clips the
ratio, and whether a row or a token is its unit. The trainer's reduction of a regime's per-token loss, HACPO's row
scale and PRP's clip check read this table (``grpo_trainer.GRPOTrainer._compute_loss``; a test reads TRL's source
against it). Torch-free.

=========  =====================  =======  ========  ====================================================
loss type  normaliser             clipped  unit      TRL's reduction of ``L`` ``[B, T]`` under ``mask``
=========  =====================  =======  ========  ====================================================
grpo       ``row_tokens``         yes      sequence  ``mean_i (Σ_t L m / Σ_t m)`` / G
sapo       ``row_tokens``         no       sequence  the same (a soft gate instead of the clip)
bnpo       ``batch_tokens``       yes      token     ``Σ L m / Σ m`` over the micro-batch / G
dr_grpo    ``max_length``         yes      token     ``Σ L m / (B · max_completion_length)`` / G
dapo       ``generation_tokens``  yes      token     ``Σ L m / (num_items_in_batch / N · G / S)``
cispo      ``generation_tokens``  no       token     the same (a detached, capped ratio)
vespo      ``generation_tokens``  no       token     the same (gamma weights per sequence)
luspo      ``rows``               yes      token     ``mean_i Σ_t L m`` / G
=========  =====================  =======  ========  ====================================================

``G``: the current gradient accumulation steps (1 in eval), ``S``: ``steps_per_generation``, ``N``: the ranks.
The unit is what weighs the same in the loss: each row (its tokens ``1/|y|`` each), or each token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Normaliser = Literal["row_tokens", "batch_tokens", "max_length", "generation_tokens", "rows"]


@dataclass(frozen=True)
class LossType:
    """One of TRL's ``loss_type`` values, classified."""

    name: str
    normaliser: Normaliser
    """What divides the masked per-token loss: each row's tokens (then the mean over rows), the micro-batch's tokens,
    ``B · max_completion_length``, the generation batch's tokens over the ranks (``num_items_in_batch``), or the rows
    (a row's sum, then the mean over rows)."""
    clipped: bool
    """The surrogate is PPO's ``-min(r·A, clip(r, 1-ε_low, 1+ε_high)·A)``, so a clipped ratio passes no gradient."""
    unit: Literal["sequence", "token"]
    """What weighs the same in the loss: a row, or a token."""


LOSS_TYPES: dict[str, LossType] = {t.name: t for t in (
    LossType("grpo", "row_tokens", clipped=True, unit="sequence"),
    LossType("sapo", "row_tokens", clipped=False, unit="sequence"),
    LossType("bnpo", "batch_tokens", clipped=True, unit="token"),
    LossType("dr_grpo", "max_length", clipped=True, unit="token"),
    LossType("dapo", "generation_tokens", clipped=True, unit="token"),
    LossType("cispo", "generation_tokens", clipped=False, unit="token"),
    LossType("vespo", "generation_tokens", clipped=False, unit="token"),
    LossType("luspo", "rows", clipped=True, unit="token"),
)}
"""Every TRL 1.16 ``loss_type``, by name."""


def loss_type(name: str) -> LossType:
    """The classification of TRL's ``loss_type`` ``name``; an unknown name raises ``ValueError``."""
    found = LOSS_TYPES.get(name)
    if found is None:
        raise ValueError(f"unknown loss_type {name!r}; TRL 1.16 has {', '.join(LOSS_TYPES)}")
    return found


def loss_types_where(**classification: object) -> tuple[str, ...]:
    """The names whose classification matches every ``field=value`` given (``clipped=True``, ``normaliser=...``)."""
    return tuple(name for name, kind in LOSS_TYPES.items()
                 if all(getattr(kind, key) == value for key, value in classification.items()))
