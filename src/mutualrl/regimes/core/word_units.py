"""Comparison units: where two tokenizations of one text differ, a cross-policy quantity is compared per word.

THL moves a peer's per-token log-probs onto the learner's tokens unit by unit (docs/thl.md): a unit whose tokens are
the same on both sides (same spans, one for one) is copied token by token, so there each learner token carries the
peer's log-prob of that very token; a unit split differently (``" 12"``: one token for one side, ``" 1"`` ``"2"`` for
the other) gets the peer's log-prob of the whole unit spread evenly over the learner's tokens of it, which is no
per-token probability of either policy. Only the unit's total is exact: ``Σ_{t∈u} ℓ_t = log π_peer(u | prefix)``.

So a quantity compared per token (a log-ratio, a KL term) is exact per token where the tokens match, and per *word*
(THL unit) where they do not. A **comparison unit** is therefore a single learner token where its THL unit was
copied (and a special token: the EOS, matched on the EOS), and the whole THL unit where it was spread; units that one
peer token straddles (``"你好"`` over two CJK characters, a token across a space) are one comparison unit, since THL
apportions that token's log-prob between them by character overlap (``target_comparison_units``). Each learner
token names its comparison unit by the position of the unit's first token (:func:`comparison_groups`); the pure maths
reduce over that (:func:`unit_totals`, :func:`unit_heads`).
"""

from __future__ import annotations

import numpy as np
import torch


def comparison_groups(target_units: np.ndarray, target_copied: np.ndarray) -> np.ndarray:
    """int64 ``[m]``: for each learner token, the position of the first token of its comparison unit.

    ``target_units`` int64 ``[m]``: each learner token's THL unit, with the units a source token straddles joined
    (``AlignedTraces.target_comparison_units``; -1: a special token); ``target_copied`` bool ``[m]``:
    its unit was copied token by token (:class:`~mutualrl.thl.align.AlignedTraces`). A copied or special token is its
    own unit (its own position); the tokens of a spread unit share the position of the unit's first token."""
    units = np.asarray(target_units, dtype=np.int64)  # [m]
    copied = np.asarray(target_copied, dtype=bool)  # [m]
    positions = np.arange(len(units), dtype=np.int64)  # [m]
    spread = (units >= 0) & ~copied  # [m]
    if not spread.any():
        return positions
    first = np.full(int(units.max()) + 1, len(units), dtype=np.int64)  # [U]
    np.minimum.at(first, units[spread], positions[spread])
    groups = positions.copy()  # [m]
    groups[spread] = first[units[spread]]
    return groups


def singleton_groups(shape: tuple[int, ...]) -> torch.Tensor:
    """int64 ``shape``: every token its own comparison unit (the same tokenizer on both sides), last axis T."""
    return torch.arange(shape[-1], dtype=torch.long).expand(shape).clone()  # [..., T]


def unit_totals(values: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Each token's comparison unit's total of ``values`` ``[..., T]``, on every token of the unit (same shape).

    ``groups`` int64 ``[..., T]``: the position of each token's unit's first token (:func:`comparison_groups`; a
    token outside every unit is its own). Zero ``values`` where a token must not count (padding) beforehand."""
    if groups.shape != values.shape:
        raise ValueError(f"groups must have the shape of values {tuple(values.shape)}; got {tuple(groups.shape)}")
    t = values.shape[-1]
    flat_values = values.reshape(-1, t)  # [R, T]
    flat_groups = groups.reshape(-1, t).to(values.device)  # [R, T]
    if bool((flat_groups < 0).any()) or bool((flat_groups >= t).any()):
        raise ValueError(f"groups must be positions in [0, {t})")
    totals = torch.zeros_like(flat_values).scatter_add(1, flat_groups, flat_values)  # [R, T] total at each head
    return totals.gather(1, flat_groups).reshape(values.shape)  # [..., T]


def unit_heads(groups: torch.Tensor) -> torch.Tensor:
    """bool ``[..., T]``: the first token of each comparison unit (one token per unit: sums over units read there)."""
    positions = torch.arange(groups.shape[-1], device=groups.device)  # [T]
    return groups == positions  # [..., T]
