"""Validation of rollout tables against the SEE schema: exact columns and types, finite values, consistent rows.

Every error names the row and the column (:class:`InvalidRecordError`) or lists the
mismatching columns (:class:`SchemaMismatchError`).
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mutualrl.see.columns import COLUMNS, ID_COLUMNS, ROLLOUT_SCHEMA, SCHEMA_VERSION
from mutualrl.see.errors import InvalidRecordError, SchemaMismatchError
from mutualrl.see.ragged import Ragged, ragged




def single_chunk(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def first_true(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


def conform_schema(table: pa.Table) -> pa.Table:
    """``table`` with exactly :data:`ROLLOUT_SCHEMA`'s columns, order and types (safe casts allowed).

    Raises :class:`SchemaMismatchError` listing missing, unexpected and uncastable columns.
    """
    names = set(table.column_names)
    missing = [c for c in COLUMNS if c not in names]
    extra = [c for c in table.column_names if c not in COLUMNS]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s) {missing}")
        if extra:
            parts.append(f"unexpected column(s) {extra}")
        raise SchemaMismatchError(
            f"rollout table does not match SEE schema v{SCHEMA_VERSION}: " + "; ".join(parts),
            path="<table>",
            problem="schema",
        )
    columns = []
    for f in ROLLOUT_SCHEMA:
        col = table.column(f.name)
        if col.type != f.type:
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise SchemaMismatchError(
                    f"column {f.name!r} has type {col.type}, expected {f.type} (SEE schema v{SCHEMA_VERSION}): {err}",
                    path="<table>",
                    problem="schema",
                ) from None
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=ROLLOUT_SCHEMA.with_metadata(table.schema.metadata or {}))


def validate_table(table: pa.Table, *, require_ids: bool = True) -> pa.Table:
    """Check every invariant of the SEE record and return ``table`` conformed to :data:`ROLLOUT_SCHEMA`.

    Checks (each error names the first offending row and the column): no nulls in required
    columns; ``num_tokens == len(response_token_ids)``; ``len(spans) == 2 * num_tokens``;
    ``len(behaviour_logps) == num_tokens`` where present; token ids >= 0; a finite or NaN (not scored)
    reward, finite advantage and log-probs; every span is ``(-1, -1)`` or ``0 <= start <= end <= len(text)``;
    ``sample_index >= 0``; no duplicate ``(prompt_id, sample_index)``. With
    ``require_ids=False`` the ``step``/``policy``/``rank`` columns may be null (stamped at publish).
    """
    table = conform_schema(table)
    arrays = {name: single_chunk(table.column(name)) for name in COLUMNS}
    _check_required(arrays, require_ids)
    tokens = ragged(arrays["response_token_ids"])
    spans = ragged(arrays["response_token_spans"])
    logps = ragged(arrays["behaviour_logps"])
    _check_list_items(arrays)
    logp_valid = _check_lengths(arrays, tokens, spans, logps)
    _check_values(arrays, tokens, logps, logp_valid)
    _check_spans(arrays, tokens, spans)
    _check_ids(arrays)
    return table


def _fail(arrays: dict[str, pa.Array], row: int, column: str, problem: str) -> NoReturn:
    """Raise :class:`InvalidRecordError` naming the row (with its prompt and sample) and the column."""
    pid = arrays["prompt_id"][row].as_py()
    sidx = arrays["sample_index"][row].as_py()
    raise InvalidRecordError(
        f"row {row} (prompt_id={pid!r}, sample_index={sidx}): column {column!r}: {problem}", row=row, column=column
    )


def _check_required(arrays: dict[str, pa.Array], require_ids: bool) -> None:
    """No null in a required column (the id columns may be null unless ``require_ids``)."""
    for f in ROLLOUT_SCHEMA:
        arr = arrays[f.name]
        if f.nullable or not arr.null_count or (not require_ids and f.name in ID_COLUMNS):
            continue
        row = first_true(arr.is_null().to_numpy(zero_copy_only=False))
        raise InvalidRecordError(f"row {row}: column {f.name!r} is null but required", row=row, column=f.name)


def _check_list_items(arrays: dict[str, pa.Array]) -> None:
    """No null item inside the token, span and log-prob lists."""
    for name in ("response_token_ids", "response_token_spans", "behaviour_logps"):
        if arrays[name].values.null_count:
            flat = pc.list_flatten(arrays[name])
            if flat.null_count:
                parents = pc.list_parent_indices(arrays[name]).to_numpy()
                _fail(arrays, int(parents[first_true(flat.is_null().to_numpy(zero_copy_only=False))]), name,
                      "contains a null item")


def _check_lengths(arrays: dict[str, pa.Array], tokens: Ragged, spans: Ragged, logps: Ragged) -> np.ndarray:
    """``num_tokens``, spans (two per token) and log-probs (where present) agree with the token ids;
    returns the rows that carry log-probs."""
    num_tokens = arrays["num_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)
    tok_len = tokens.lengths
    if (row := first_true(num_tokens != tok_len)) is not None:
        _fail(arrays, row, "num_tokens", f"is {num_tokens[row]} but response_token_ids has {tok_len[row]} tokens")
    if (row := first_true(spans.lengths != 2 * tok_len)) is not None:
        _fail(
            arrays,
            row,
            "response_token_spans",
            f"has {spans.lengths[row]} values; expected 2 per token = {2 * tok_len[row]} (flattened start,end pairs)",
        )
    logp_valid = np.ones(tokens.num_rows, bool) if logps.valid is None else logps.valid
    if (row := first_true(logp_valid & (logps.lengths != tok_len))) is not None:
        _fail(arrays, row, "behaviour_logps", f"has {logps.lengths[row]} values for {tok_len[row]} tokens")
    return logp_valid


def _check_values(arrays: dict[str, pa.Array], tokens: Ragged, logps: Ragged, logp_valid: np.ndarray) -> None:
    """Token ids >= 0; finite or NaN (not scored) reward; finite advantage (or null) and log-probs."""
    if (idx := first_true(tokens.values < 0)) is not None:
        _fail(arrays, row_of(tokens.offsets, idx), "response_token_ids", f"negative token id {int(tokens.values[idx])}")

    reward = arrays["reward"].to_numpy(zero_copy_only=False)
    if (row := first_true(np.isinf(reward))) is not None:  # NaN is a completion not scored (TRL's None)
        _fail(arrays, row, "reward", f"is {reward[row]} (must be finite, or NaN: not scored)")
    adv_arr = arrays["advantage"]
    adv = adv_arr.fill_null(0.0).to_numpy(zero_copy_only=False)
    if (row := first_true(~np.isfinite(adv))) is not None:
        _fail(arrays, row, "advantage", f"is {adv[row]} (must be finite or null)")
    bad_logp = ~np.isfinite(logps.values)
    if bad_logp.any():
        rows = row_of(logps.offsets, np.flatnonzero(bad_logp))
        rows = rows[logp_valid[rows]]
        if len(rows):
            row = int(rows[0])
            token = int(np.flatnonzero(~np.isfinite(logps.row(row)))[0])
            _fail(arrays, row, "behaviour_logps", f"token {token} has log-prob {logps.row(row)[token]} (must be finite)")


def _check_spans(arrays: dict[str, pa.Array], tokens: Ragged, spans: Ragged) -> None:
    """Every span is ``(-1, -1)`` or lies inside the response text."""
    if not len(spans.values):
        return
    pairs = spans.values.reshape(-1, 2)
    starts, ends = pairs[:, 0], pairs[:, 1]
    text_len = pc.utf8_length(arrays["response_text"]).fill_null(0).to_numpy(zero_copy_only=False)
    pair_row = np.repeat(np.arange(tokens.num_rows), tokens.lengths)
    no_text = (starts == -1) & (ends == -1)
    in_text = (starts >= 0) & (starts <= ends) & (ends <= text_len[pair_row])
    if (idx := first_true(~(no_text | in_text))) is not None:
        row = int(pair_row[idx])
        token = idx - int(tokens.offsets[row])
        _fail(
            arrays,
            row,
            "response_token_spans",
            f"token {token} has span ({starts[idx]}, {ends[idx]}) outside the response text "
            f"of {text_len[row]} characters (use -1,-1 for tokens with no text)",
        )


def _check_ids(arrays: dict[str, pa.Array]) -> None:
    """``sample_index``, ``step`` and ``rank`` >= 0; no duplicate ``(prompt_id, sample_index)``."""
    sample_index = arrays["sample_index"].to_numpy(zero_copy_only=False)
    if (row := first_true(sample_index < 0)) is not None:
        _fail(arrays, row, "sample_index", f"is {sample_index[row]} (must be >= 0)")
    for name in ("step", "rank"):
        vals = arrays[name].fill_null(0).to_numpy(zero_copy_only=False)
        if (row := first_true(vals < 0)) is not None:
            _fail(arrays, row, name, f"is {vals[row]} (must be >= 0)")

    seen: dict[tuple[str, int], int] = {}
    for row, key in enumerate(zip(arrays["prompt_id"].to_pylist(), sample_index.tolist(), strict=True)):
        if key in seen:
            _fail(arrays, row, "sample_index", f"duplicates row {seen[key]} (same prompt_id and sample_index)")
        seen[key] = row


def row_of(offsets: np.ndarray, value_index: Any) -> Any:
    """Row(s) owning flat value index/indices (empty rows skipped)."""
    rows = np.searchsorted(offsets, value_index, side="right") - 1
    return int(rows) if np.isscalar(value_index) or np.ndim(value_index) == 0 else rows
