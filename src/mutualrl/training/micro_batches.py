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

from mutualrl.regimes.core.batch_rows import UNSUPPORTED_KEYS, attached_row_flags
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


def _dealt(values: list[Any], order: torch.Tensor, chunks: int) -> list[Any]:
    """One key's values in ``chunks`` micro-batches, their rows taken in ``order`` (TRL's ``split_tensor_dict`` of
    the reordered batch); a scalar or None (``num_items_in_batch``) is every micro-batch's, as TRL copies it."""
    first = values[0]
    if isinstance(first, torch.Tensor) and first.ndim > 0:
        rows = torch.cat(values)[order.to(first.device)]  # [N, ...]
    elif isinstance(first, list):
        joined = [row for value in values for row in value]
        rows = [joined[i] for i in order.tolist()]
    else:
        return [first] * chunks
    size = len(order) // chunks
    return [rows[j * size:(j + 1) * size] for j in range(chunks)]


def deal_attached_rows(chunks: list[GRPOBatch]) -> list[GRPOBatch]:
    """``chunks`` (TRL's micro-batches of one generation) with the rows that carry an attached sequence dealt evenly
    (:func:`dealt_order`); as they are where a micro-batch already holds no more than its even share, where nothing is
    attached, where there is one micro-batch, or where the batch has images (their tensors are not one row per
    completion; no regime attaches to such a batch). One key at a time: the batch is never held twice."""
    if len(chunks) < 2 or any(chunks[0].get(key) is not None for key in UNSUPPORTED_KEYS):
        return chunks
    flags = [attached_row_flags(chunk) for chunk in chunks]
    if any(flag is None for flag in flags):
        return chunks
    counts = [int(flag.sum()) for flag in flags]  # type: ignore[union-attr]
    if max(counts) <= math.ceil(sum(counts) / len(chunks)):
        return chunks
    order = dealt_order(torch.cat(flags), len(chunks))  # type: ignore[arg-type]
    dealt: list[dict[str, Any]] = [{} for _ in chunks]
    for key in list(chunks[0]):
        values = [chunk.pop(key) for chunk in chunks]  # TRL's chunks let go of each key as it is dealt
        for part, value in zip(dealt, _dealt(values, order, len(chunks)), strict=True):
            part[key] = value
    return dealt  # type: ignore[return-value]
