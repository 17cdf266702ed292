"""Variable-length columns (token ids, spans, log-prob traces) as flat values plus offsets.

Arrow lists with 32-bit offsets over flat primitive buffers: a reader maps them from disk
and sees numpy arrays without copying (:func:`ragged`); writers build them from Python
rows, padded tensors or numpy arrays (:class:`Ragged`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mutualrl.see.errors import InvalidRecordError




def to_numpy(data: Any, dtype: np.dtype | type) -> np.ndarray:
    """numpy view/copy of a list, numpy array or torch tensor (any device; bf16 widened) as ``dtype``."""
    if hasattr(data, "detach") and hasattr(data, "cpu"):  # a torch tensor, without importing torch
        data = data.detach().cpu()
        if str(data.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            data = data.float()
        data = data.numpy()
    return np.asarray(data, dtype=dtype)


@dataclass(frozen=True)
class Ragged:
    """A column of variable-length rows as flat ``values`` plus ``offsets`` (row i is ``values[offsets[i]:offsets[i+1]]``).

    ``valid`` marks non-null rows (``None``: all rows present). This is Arrow's list layout,
    so conversion to and from Arrow copies nothing.
    """

    values: np.ndarray
    offsets: np.ndarray
    valid: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray | None:
        if self.valid is not None and not self.valid[i]:
            return None
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def from_rows(cls, rows: Iterable[Any], dtype: np.dtype | type) -> Ragged:
        """From per-row sequences (lists, numpy arrays or tensors); ``None`` rows become nulls."""
        arrays: list[np.ndarray] = []
        valid: list[bool] = []
        for row in rows:
            if row is None:
                arrays.append(np.empty(0, dtype=dtype))
                valid.append(False)
            else:
                arrays.append(to_numpy(row, dtype).reshape(-1))
                valid.append(True)
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(arrays) if arrays else np.empty(0, dtype=dtype)
        return cls(values.astype(dtype, copy=False), offsets32(offsets), None if all(valid) else np.array(valid))

    @classmethod
    def from_padded(cls, padded: Any, lengths_or_mask: Any, dtype: np.dtype | type) -> Ragged:
        """From a padded ``(rows, T)`` array/tensor and either per-row lengths ``(rows,)`` or a ``(rows, T)`` mask.

        Masked positions are taken in row-major order (TRL's ``completion_mask`` keeps the
        tokens up to and including EOS).
        """
        padded = to_numpy(padded, dtype)
        if padded.ndim != 2:
            raise InvalidRecordError(f"padded array must be 2-D (rows, T), got shape {padded.shape}")
        sel = np.asarray(to_numpy(lengths_or_mask, np.int64))
        if sel.ndim == 1:
            if len(sel) != padded.shape[0]:
                raise InvalidRecordError(f"{len(sel)} lengths for {padded.shape[0]} padded rows")
            if (sel < 0).any() or (sel > padded.shape[1]).any():
                bad = int(np.flatnonzero((sel < 0) | (sel > padded.shape[1]))[0])
                raise InvalidRecordError(f"row {bad}: length {int(sel[bad])} outside [0, {padded.shape[1]}]", row=bad)
            mask = np.arange(padded.shape[1])[None, :] < sel[:, None]
        else:
            if sel.shape != padded.shape:
                raise InvalidRecordError(f"mask shape {sel.shape} differs from padded shape {padded.shape}")
            mask = sel.astype(bool)
        lengths = mask.sum(axis=1)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(padded[mask], offsets32(offsets))

    def to_arrow(self, value_type: pa.DataType) -> pa.ListArray:
        mask = None if self.valid is None else pa.array(~np.asarray(self.valid, dtype=bool))
        return pa.ListArray.from_arrays(pa.array(self.offsets, pa.int32()), pa.array(self.values, value_type), mask=mask)


def offsets32(offsets: np.ndarray) -> np.ndarray:
    if len(offsets) and offsets[-1] > np.iinfo(np.int32).max:
        raise InvalidRecordError(
            f"{int(offsets[-1])} list values in one batch exceed Arrow's 32-bit offsets; publish fewer rows per shard"
        )
    return offsets.astype(np.int32)


def ragged(column: pa.Array | pa.ChunkedArray) -> Ragged:
    """Zero-copy :class:`Ragged` view of an Arrow list column (chunks are combined first, which copies)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    offsets = column.offsets.to_numpy()
    values = column.values.to_numpy(zero_copy_only=False)
    if offsets[0] != 0:  # a sliced array: rebase (copies the offsets only)
        values = values[offsets[0] : offsets[-1]]
        offsets = offsets - offsets[0]
    valid = None
    if column.null_count:
        valid = column.is_valid().to_numpy(zero_copy_only=False)
    return Ragged(values, offsets, valid)


def ragged_input(data: Any, dtype: type, name: str, pairs: bool = False) -> Ragged:
    if isinstance(data, Ragged):
        return Ragged(
            np.asarray(data.values, dtype=dtype).reshape(-1), offsets32(np.asarray(data.offsets, np.int64)), data.valid
        )
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        return ragged(data)
    try:
        rows = list(data)
    except TypeError:
        raise InvalidRecordError(f"column {name!r}: expected a sequence of rows or a Ragged, got {type(data).__name__}")
    if pairs:  # accept [(s, e), ...] per row as well as the flattened form
        rows = [None if r is None else np.asarray(to_numpy(r, dtype)).reshape(-1) for r in rows]
    try:
        return Ragged.from_rows(rows, dtype)
    except (ValueError, TypeError, OverflowError) as err:
        raise InvalidRecordError(f"column {name!r}: cannot convert rows to {np.dtype(dtype).name}: {err}") from None
