"""Ragged token rows as one padded batch with its attention mask, and widening a padded batch.

Model inputs are built from token lists of different lengths in several layers (prompts
left-padded for greedy generation, prompt + completion right-padded for scoring and the
tiny warm start, peer completions right-padded onto TRL's batch); mutualrl's own padding is done
here, so the padding side and the mask always agree (TRL and the tokenizers pad their own batches). torch is imported lazily: layer 0 stays light.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

Side = Literal["left", "right"]


def pad_token_rows(
    rows: Sequence[Sequence[int]], pad_id: int, *, side: Side = "right", min_width: int = 0, device: Any = None
) -> tuple[Any, Any]:
    """``(ids, mask)``, int64 ``[len(rows), width]``: each row padded with ``pad_id`` on ``side``, mask 1 on tokens.

    ``width`` is the longest row, or ``min_width`` when that is wider (to match a batch's columns).
    """
    import torch
    from torch.nn.utils.rnn import pad_sequence

    seqs = [torch.tensor(list(row), dtype=torch.long) for row in rows]
    if not seqs:
        empty = torch.zeros((0, min_width), dtype=torch.long, device=device)
        return empty, empty.clone()
    ids = pad_sequence(seqs, batch_first=True, padding_value=pad_id, padding_side=side)
    mask = pad_sequence([torch.ones_like(s) for s in seqs], batch_first=True, padding_value=0, padding_side=side)
    ids, mask = pad_to_width(ids, min_width, pad_id, side=side), pad_to_width(mask, min_width, 0, side=side)
    return ids.to(device), mask.to(device)


def pad_to_width(tensor: Any, width: int, value: float, *, side: Side = "right") -> Any:
    """``tensor`` (``[rows, T]``) widened to ``width`` columns with ``value``; unchanged when already that wide."""
    import torch.nn.functional as F

    missing = width - tensor.size(1)
    if missing <= 0:
        return tensor
    return F.pad(tensor, (0, missing) if side == "right" else (missing, 0), value=value)
