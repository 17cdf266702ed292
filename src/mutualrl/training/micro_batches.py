"""TRL's micro-batches of one generation, with the rows that carry an attached sequence dealt evenly over them.

TRL 1.16 (``GRPOTrainer._prepare_inputs``) shuffles the generation batch and splits it into ``steps_per_generation``
equal micro-batches. A rescue (SGT's, opd-sgt's, byte-kd's) rides on a row of the learner's and is scored in a forward
of its own, so a micro-batch's activations grow with the rescued rows it holds: a shuffle can put every one of them in
one micro-batch (SGT on a paper recipe: 10 of its 10 rows, where the memory plan counts 2). Dealt evenly, a micro-batch
holds at most ``ceil(carried / micro-batches)``: what ``launch/plan/bounds.py`` counts.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from trl.trainer.utils import split_tensor_dict

from mutualrl.regimes.core.batch_rows import attached_row_flags
from mutualrl.regimes.core.trainer_interface import GRPOBatch


def dealt_order(carried: torch.Tensor, chunks: int) -> torch.Tensor:
    """int64 ``[N]``: an order of the ``N`` rows (``carried`` bool ``[N]``, in TRL's shuffled order) whose ``chunks``
    consecutive equal parts hold the carried rows round-robin (part ``j``: carried rows ``j``, ``j + chunks``, ...),
    the other rows after them in TRL's order."""
    size = len(carried) // chunks
    marked = torch.nonzero(carried, as_tuple=True)[0].tolist()
    rest = iter(torch.nonzero(~carried, as_tuple=True)[0].tolist())
    parts = [marked[j::chunks] for j in range(chunks)]
    return torch.tensor([i for part in parts for i in (*part, *(next(rest) for _ in range(size - len(part))))],
                        dtype=torch.long)  # [N]


def _joined(chunks: list[GRPOBatch]) -> dict[str, Any]:
    """The chunks' rows in one batch again (the inverse of TRL's ``split_tensor_dict``)."""
    joined: dict[str, Any] = {}
    for key, first in chunks[0].items():
        if isinstance(first, torch.Tensor) and first.ndim > 0:
            joined[key] = torch.cat([chunk[key] for chunk in chunks])
        elif isinstance(first, list):
            joined[key] = [row for chunk in chunks for row in chunk[key]]
        else:  # None, or a scalar TRL copies to every chunk (num_items_in_batch)
            joined[key] = first
    return joined


def deal_attached_rows(chunks: list[GRPOBatch]) -> list[GRPOBatch]:
    """``chunks`` (TRL's micro-batches of one generation) with the rows that carry an attached sequence dealt evenly
    (:func:`dealt_order`); as they are where a micro-batch already holds no more than its even share, where nothing is
    attached, or where there is one micro-batch."""
    if len(chunks) < 2:
        return chunks
    flags = [attached_row_flags(chunk) for chunk in chunks]
    if any(flag is None for flag in flags):
        return chunks
    counts = [int(flag.sum()) for flag in flags]  # type: ignore[union-attr]
    if max(counts) <= math.ceil(sum(counts) / len(chunks)):
        return chunks
    order = dealt_order(torch.cat(flags), len(chunks))  # type: ignore[arg-type]
    joined = _joined(chunks)
    for key, value in joined.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0:
            joined[key] = value[order.to(value.device)]
        elif isinstance(value, list):
            joined[key] = [value[i] for i in order.tolist()]
    return split_tensor_dict(joined, len(chunks))  # type: ignore[return-value]
