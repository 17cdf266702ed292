"""The check of the SEE record's ``text_byte_logps`` (schema v4; :func:`mutualrl.see.records.validate_table` names
the row and the column of what it finds, in one line, like the record's other checks)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

LOGP_MAX = 1e-4
"""Largest log-prob accepted (0 up to float32 rounding), the next-byte columns' bound too."""


def text_byte_problem(column: Any, texts: pa.Array, finished: pa.Array) -> tuple[int, str] | None:
    """The first row whose ``text_byte_logps`` (``column``, a :class:`~mutualrl.see.records.Ragged` view) is not one
    value per byte of its text (UTF-8) plus one where ``finished``, each finite and <= :data:`LOGP_MAX` (a null row
    holds none), and the problem; None where every row is fine or the column is not published (every row null)."""
    rows = len(column.offsets) - 1
    valid = np.ones(rows, bool) if column.valid is None else np.asarray(column.valid, bool)  # [rows]
    lengths = np.diff(column.offsets)  # [rows]
    if not valid.any() and not lengths.any():
        return None  # not published
    expected = np.fromiter((len((text or "").encode("utf-8")) for text in texts.to_pylist()), dtype=np.int64,
                           count=rows) + finished.to_numpy(zero_copy_only=False).astype(np.int64)  # [rows]
    wrong = np.flatnonzero(np.where(valid, lengths != expected, lengths != 0))
    if len(wrong):
        row = int(wrong[0])
        if not valid[row]:
            return row, f"is null but holds {lengths[row]} values"
        return row, (f"has {lengths[row]} values for {expected[row]} (one per byte of the text, one for its end where "
                     "finished)")
    values = column.values  # [total]
    bad = np.flatnonzero(~(np.isfinite(values) & (values <= LOGP_MAX))) if len(values) else []
    if not len(bad):
        return None
    row = int(np.searchsorted(column.offsets, bad[0], side="right") - 1)
    value = float(values[bad[0]])
    return row, f"value {int(bad[0]) - int(column.offsets[row])} is {value:.6g} (must be finite and <= 0)"
