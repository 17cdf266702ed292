"""The SEE record: one row per rollout, its columns, its ragged layout, and the checks of a table from outside.

The paper's SEE record is ``D = (id, x_text, y_text, r, A, l^(m), meta)`` (Sec. "The Mutual
RL System Design", "Dataflow in One Training Loop", SEE paragraph): raw prompt and response
texts, the verifier reward, an optional advantage, the behaviour-policy per-token trace and
provenance. We add what the Tokenizer Heterogeneity Layer needs to align traces across
vocabularies: the token ids the policy actually generated and, where a reader needs them,
each token's character span in the response text. Who published a row (run, policy, step,
rank) and its provenance are the shard's, stored once in its manifest (:mod:`mutualrl.see.shards`).

One row per rollout. Columns (:data:`ROLLOUT_SCHEMA`):

=========================  ==================  ==================================================
column                     type                meaning
=========================  ==================  ==================================================
prompt_id                  string              stable prompt id (identical across policies)
sample_index               int32               0..K-1 within the prompt's GRPO group
prompt_text                string              raw prompt text (shared by all policies)
response_text              string              decoded response text
response_token_ids         list<int32>         generated token ids, EOS included if emitted
response_token_spans       list<int32>,        flattened ``[s0, e0, s1, e1, ...]``: token i covers
                           nullable            ``response_text[s_i:e_i]`` (Python code-point
                                               indices); ``-1, -1`` for tokens with no text;
                                               null unless the regime's readers need spans
reward                     float32             the reward, finite; NaN: not scored (every reward
                                               function returned None: TRL's NaN)
advantage                  float32, nullable   advantage, finite when present
behaviour_logps            list<float32>,      per-token log-probs of the behaviour policy,
                           nullable            finite; null when not published
finished                   bool                the response ended with EOS
num_tokens                 int32               ``len(response_token_ids)``
next_byte_ids              list<int32>,        flattened ``[num_tokens, k]``: at each token, the
                           nullable            publisher's top-k next-byte symbols (0..255 a byte,
                                               256 END: a token that ends generation, 257 other special or
                                               empty token); or ``[text bytes + 1, k]``, at each byte
                                               offset of the text (exact distributions); null unless
                                               the regime publishes distributions
next_byte_logps            list<float32>,      flattened as the ids: log of the
                           nullable            publisher's next-token probability mass on each of
                                               those symbols (finite, <= 0); null with the ids
text_byte_logps            list<float32>,      one per byte of the response text (UTF-8), then one
                           nullable            for its end where finished: the publisher's log-prob
                                               of that byte (of END) given the bytes before, over
                                               every tokenization (finite, <= 0); null unless the
                                               regime's readers compare texts (PRP's F-TIS)
=========================  ==================  ==================================================

A v2 table or shard (no ``next_byte_*`` columns) reads as v4 with those and ``text_byte_logps`` null; a v3 one with
``text_byte_logps`` null.

Variable-length columns are Arrow lists (32-bit offsets) over flat primitive buffers, so a
reader maps them from disk and sees numpy arrays without copying (:func:`ragged`).

A batch this process builds (:class:`RolloutBatch`) is not checked: its columns come from
TRL's tensors. A table from outside is (:func:`validate_table`): one handed to
:meth:`~mutualrl.see.exchange.ExperienceExchange.publish` by user code, and a shard read from
disk (a peer's), once after its checksum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mutualrl.see.errors import InvalidRecordError, SchemaMismatchError
from mutualrl.see.text_byte_checks import text_byte_problem

#: Version of the record layout; written into every shard's file metadata and manifest.
#: 2 (2026-11-26): no per-row step/policy/rank (the manifest has them), spans nullable.
#: 3 (2026-11-28): v2 plus the nullable next-byte distribution (next_byte_ids, next_byte_logps) at the end.
#: 4 (2026-11-29): v3 plus the nullable per-byte log-probs of the text (text_byte_logps) at the end.
SCHEMA_VERSION = 4

#: The layouts this version reads: an older shard or table reads as v4 with the columns it lacks null.
READABLE_SCHEMA_VERSIONS = (2, 3, 4)

#: The two columns v3 added; both null or both present in a row.
NEXT_BYTE_COLUMNS = ("next_byte_ids", "next_byte_logps")
#: Next-byte symbols past the bytes: the end-of-sequence token, and every other special or empty token.
NEXT_BYTE_END, NEXT_BYTE_OTHER = 256, 257
#: Largest next-byte log-prob accepted (0 up to float32 rounding of a summed mass).
NEXT_BYTE_LOGP_MAX = 1e-4

ROLLOUT_SCHEMA = pa.schema(
    [
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("sample_index", pa.int32(), nullable=False),
        pa.field("prompt_text", pa.string(), nullable=False),
        pa.field("response_text", pa.string(), nullable=False),
        pa.field("response_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_token_spans", pa.list_(pa.int32()), nullable=True),
        pa.field("reward", pa.float32(), nullable=False),
        pa.field("advantage", pa.float32(), nullable=True),
        pa.field("behaviour_logps", pa.list_(pa.float32()), nullable=True),
        pa.field("finished", pa.bool_(), nullable=False),
        pa.field("num_tokens", pa.int32(), nullable=False),
        pa.field("next_byte_ids", pa.list_(pa.int32()), nullable=True),
        pa.field("next_byte_logps", pa.list_(pa.float32()), nullable=True),
        pa.field("text_byte_logps", pa.list_(pa.float32()), nullable=True),
    ]
)

COLUMNS: tuple[str, ...] = tuple(ROLLOUT_SCHEMA.names)

#: The column v4 added.
TEXT_BYTE_COLUMN = "text_byte_logps"

#: Each readable layout's columns, as its files hold them (v3: v4 without text_byte_logps; v2: v3 without the
#: next-byte columns).
SCHEMAS: dict[int, pa.Schema] = {
    2: pa.schema([f for f in ROLLOUT_SCHEMA if f.name not in (*NEXT_BYTE_COLUMNS, TEXT_BYTE_COLUMN)]),
    3: pa.schema([f for f in ROLLOUT_SCHEMA if f.name != TEXT_BYTE_COLUMN]),
    4: ROLLOUT_SCHEMA,
}

#: The shard file's own metadata: only the layout version (the rest is the manifest's).
FILE_METADATA = {b"schema_version": str(SCHEMA_VERSION).encode()}


# -- the ragged layout ------------------------------------------------------------------------

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
        return np.diff(self.offsets)  # [rows]

    def row(self, i: int) -> np.ndarray | None:
        if self.valid is not None and not self.valid[i]:
            return None
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def from_rows(cls, rows: Sequence[Any], dtype: np.dtype | type) -> Ragged:
        """From per-row sequences (lists, numpy arrays or tensors); ``None`` rows become nulls."""
        arrays = [np.empty(0, dtype=dtype) if row is None else to_numpy(row, dtype).reshape(-1) for row in rows]
        valid = np.fromiter((row is not None for row in rows), dtype=bool, count=len(arrays))  # [rows]
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)  # [rows + 1]
        np.cumsum(np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays)), out=offsets[1:])
        values = np.concatenate(arrays) if arrays else np.empty(0, dtype=dtype)  # [total]
        return cls(values.astype(dtype, copy=False), offsets32(offsets), None if valid.all() else valid)

    @classmethod
    def from_padded(cls, padded: Any, lengths_or_mask: Any, dtype: np.dtype | type) -> Ragged:
        """From a padded ``(rows, T)`` array/tensor and either per-row lengths ``(rows,)`` or a ``(rows, T)`` mask.

        Masked positions are taken in row-major order (TRL's ``completion_mask`` keeps the
        tokens up to and including EOS).
        """
        padded = to_numpy(padded, dtype)  # [rows, T]
        if padded.ndim != 2:
            raise InvalidRecordError(f"padded array must be 2-D (rows, T), got shape {padded.shape}")
        sel = np.asarray(to_numpy(lengths_or_mask, np.int64))  # [rows] lengths, or [rows, T] mask
        if sel.ndim == 1:
            if len(sel) != padded.shape[0]:
                raise InvalidRecordError(f"{len(sel)} lengths for {padded.shape[0]} padded rows")
            if (bad := first_true((sel < 0) | (sel > padded.shape[1]))) is not None:
                raise InvalidRecordError(f"row {bad}: length {int(sel[bad])} outside [0, {padded.shape[1]}]", row=bad)
            mask = np.arange(padded.shape[1])[None, :] < sel[:, None]  # [rows, T]
        else:
            if sel.shape != padded.shape:
                raise InvalidRecordError(f"mask shape {sel.shape} differs from padded shape {padded.shape}")
            mask = sel.astype(bool)  # [rows, T]
        offsets = np.zeros(len(mask) + 1, dtype=np.int64)  # [rows + 1]
        np.cumsum(mask.sum(axis=1), out=offsets[1:])
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
    column = single_chunk(column)
    offsets = column.offsets.to_numpy()  # [rows + 1]
    values = column.values.to_numpy(zero_copy_only=False)  # [total]
    if offsets[0] != 0:  # a sliced array: rebase (copies the offsets only)
        values = values[offsets[0] : offsets[-1]]
        offsets = offsets - offsets[0]
    valid = column.is_valid().to_numpy(zero_copy_only=False) if column.null_count else None  # [rows]
    return Ragged(values, offsets, valid)


def _ragged_input(data: Any, dtype: type, name: str) -> Ragged:
    if isinstance(data, Ragged):
        return Ragged(np.asarray(data.values, dtype=dtype).reshape(-1),
                      offsets32(np.asarray(data.offsets, np.int64)), data.valid)
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        return ragged(data)
    try:  # per-row sequences; a row of pairs [(s, e), ...] is flattened
        return Ragged.from_rows(list(data), dtype)
    except TypeError as err:
        if not hasattr(data, "__iter__"):
            raise InvalidRecordError(
                f"column {name!r}: expected a sequence of rows or a Ragged, got {type(data).__name__}") from None
        raise InvalidRecordError(f"column {name!r}: cannot convert rows to {np.dtype(dtype).name}: {err}") from None
    except (ValueError, OverflowError) as err:
        raise InvalidRecordError(f"column {name!r}: cannot convert rows to {np.dtype(dtype).name}: {err}") from None


# -- a batch -------------------------------------------------------------------------------------

class RolloutBatch:
    """A columnar batch of rollout records (one Arrow table under the hood).

    Build it from per-row Python lists, numpy arrays or torch tensors; ragged columns also
    accept a :class:`Ragged` (e.g. ``Ragged.from_padded(completion_ids, lengths, np.int32)``),
    which avoids any per-row Python work. The constructor checks the shape of the batch (one
    length for every column, convertible values), not the values: a batch built from the
    trainer's own tensors is trusted. A table from elsewhere goes through :meth:`from_table`,
    which checks every invariant (:func:`validate_table`).
    """

    def __init__(self, *, prompt_id: Sequence[str], sample_index: Any, prompt_text: Sequence[str],
                 response_text: Sequence[str], response_token_ids: Any, reward: Any, finished: Any,
                 response_token_spans: Any = None, advantage: Any = None, behaviour_logps: Any = None,
                 next_byte_ids: Any = None, next_byte_logps: Any = None, text_byte_logps: Any = None):
        n = len(prompt_id)
        if (next_byte_ids is None) != (next_byte_logps is None):
            given, absent = NEXT_BYTE_COLUMNS if next_byte_logps is None else NEXT_BYTE_COLUMNS[::-1]
            raise InvalidRecordError(f"column {given!r} given without {absent!r}: both or neither", column=absent)
        tokens = _ragged_input(response_token_ids, np.int32, "response_token_ids")
        lists = {"response_token_spans": (response_token_spans, np.int32, pa.int32()),
                 "behaviour_logps": (behaviour_logps, np.float32, pa.float32()),
                 "next_byte_ids": (next_byte_ids, np.int32, pa.int32()),
                 "next_byte_logps": (next_byte_logps, np.float32, pa.float32()),
                 TEXT_BYTE_COLUMN: (text_byte_logps, np.float32, pa.float32())}
        optional = {name: None if data is None else _ragged_input(data, dtype, name)
                    for name, (data, dtype, _) in lists.items()}
        lengths = {"prompt_id": n, "sample_index": len(sample_index), "prompt_text": len(prompt_text),
                   "response_text": len(response_text), "response_token_ids": tokens.num_rows,
                   "reward": len(reward), "finished": len(finished),
                   **({} if advantage is None else {"advantage": len(advantage)}),
                   **{name: r.num_rows for name, r in optional.items() if r is not None}}
        if len(set(lengths.values())) > 1:
            raise InvalidRecordError(f"columns have different numbers of rows: {lengths}")
        columns = {
            "prompt_id": pa.array(list(prompt_id), pa.string()),
            "sample_index": pa.array(to_numpy(sample_index, np.int32)),
            "prompt_text": pa.array(list(prompt_text), pa.string()),
            "response_text": pa.array(list(response_text), pa.string()),
            "response_token_ids": tokens.to_arrow(pa.int32()),
            **{name: pa.nulls(n, pa.list_(typ)) if optional[name] is None else optional[name].to_arrow(typ)
               for name, (_, _, typ) in lists.items()},
            "reward": pa.array(to_numpy(reward, np.float32)),
            "advantage": _advantage_column(advantage, n),
            "finished": pa.array(to_numpy(finished, np.bool_)),
            "num_tokens": pa.array(tokens.lengths.astype(np.int32)),
        }
        self._table = pa.Table.from_arrays([columns[name] for name in COLUMNS], schema=ROLLOUT_SCHEMA)

    @classmethod
    def from_table(cls, table: pa.Table) -> RolloutBatch:
        """Wrap an Arrow table from outside this process (user code), after :func:`validate_table`."""
        batch = cls.__new__(cls)
        batch._table = validate_table(table)
        return batch

    @property
    def num_rows(self) -> int:
        return self._table.num_rows

    def __len__(self) -> int:
        return self._table.num_rows

    def to_table(self) -> pa.Table:
        """The Arrow table (zero-copy)."""
        return self._table

    def column(self, name: str) -> pa.ChunkedArray:
        return self._table.column(name)

    def ragged(self, name: str) -> Ragged:
        """Zero-copy flat values + offsets of a list column (``response_token_ids``, spans, ``behaviour_logps``,
        ``next_byte_ids``, ``next_byte_logps``)."""
        return ragged(self._table.column(name))

    def __repr__(self) -> str:
        return f"RolloutBatch(rows={self.num_rows}, tokens={int(pc.sum(self._table.column('num_tokens')).as_py() or 0)})"


def _advantage_column(advantage: Any, n: int) -> pa.Array:
    """The advantages as float32; ``None`` (the column, or a row of a Python list) is null."""
    if advantage is None:
        return pa.nulls(n, pa.float32())
    if isinstance(advantage, list) and any(a is None for a in advantage):
        return pa.array([None if a is None else float(a) for a in advantage], pa.float32())
    return pa.array(to_numpy(advantage, np.float32))


# -- validation of a table from outside -------------------------------------------------------------

def single_chunk(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def first_true(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


def conform_schema(table: pa.Table) -> pa.Table:
    """``table`` with exactly :data:`ROLLOUT_SCHEMA`'s columns, order and types (safe casts allowed).

    A v2 table (neither next-byte column) gets both as nulls, one without the other is missing; a v2 or v3 table
    (no ``text_byte_logps``) gets it as nulls. Raises :class:`SchemaMismatchError` listing missing, unexpected and
    uncastable columns.
    """
    added = (() if any(c in table.column_names for c in NEXT_BYTE_COLUMNS) else NEXT_BYTE_COLUMNS) + (
        () if TEXT_BYTE_COLUMN in table.column_names else (TEXT_BYTE_COLUMN,))
    for name in added:
        field = ROLLOUT_SCHEMA.field(name)
        table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    missing = [c for c in COLUMNS if c not in table.column_names]
    extra = [c for c in table.column_names if c not in COLUMNS]
    if missing or extra:
        parts = [f"missing column(s) {missing}"] if missing else []
        parts += [f"unexpected column(s) {extra}"] if extra else []
        raise SchemaMismatchError(f"rollout table does not match SEE schema v{SCHEMA_VERSION}: " + "; ".join(parts),
                                  path="<table>", problem="schema")
    columns = []
    for f in ROLLOUT_SCHEMA:
        col = table.column(f.name)
        if col.type != f.type:
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise SchemaMismatchError(
                    f"column {f.name!r} has type {col.type}, expected {f.type} (SEE schema v{SCHEMA_VERSION}): {err}",
                    path="<table>", problem="schema") from None
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=ROLLOUT_SCHEMA.with_metadata(table.schema.metadata or {}))


def validate_table(table: pa.Table) -> pa.Table:
    """Check every invariant of the SEE record and return ``table`` conformed to :data:`ROLLOUT_SCHEMA`.

    Checks (each error names the first offending row and the column): no nulls in required
    columns; ``num_tokens == len(response_token_ids)``; spans (where present) two per token and
    log-probs (where present) one per token, a null row holding no values; token ids >= 0; a
    finite or NaN (not scored) reward, finite advantage and log-probs; every span is ``(-1, -1)``
    or ``0 <= start <= end <= len(text)``; ``sample_index >= 0``; no duplicate
    ``(prompt_id, sample_index)``; next-byte ids and log-probs both null or both present, as many of each,
    k >= 1 per token, ids in 0..257, log-probs finite and <= :data:`NEXT_BYTE_LOGP_MAX`; ``text_byte_logps`` one
    per byte of the text and one for its end where finished, finite and <= that bound. The checks are
    numpy/Arrow passes over whole columns, no Python loop per row; locating the offending row runs only after a
    check failed.
    """
    table = conform_schema(table)
    arrays = {name: single_chunk(table.column(name)) for name in COLUMNS}
    _check_required(arrays)
    tokens = ragged(arrays["response_token_ids"])
    spans = ragged(arrays["response_token_spans"])
    logps = ragged(arrays["behaviour_logps"])
    _check_list_items(arrays)
    _check_lengths(arrays, tokens, spans, logps)
    _check_values(arrays, tokens, logps)
    _check_next_bytes(arrays, tokens)
    if (found := text_byte_problem(ragged(arrays[TEXT_BYTE_COLUMN]), arrays["response_text"], arrays["finished"])):
        _fail(arrays, found[0], TEXT_BYTE_COLUMN, found[1])
    _check_spans(arrays, spans)
    _check_ids(arrays)
    return table


def _fail(arrays: dict[str, pa.Array], row: int, column: str, problem: str) -> NoReturn:
    """Raise :class:`InvalidRecordError` naming the row (with its prompt and sample) and the column."""
    pid = arrays["prompt_id"][row].as_py()
    sidx = arrays["sample_index"][row].as_py()
    raise InvalidRecordError(
        f"row {row} (prompt_id={pid!r}, sample_index={sidx}): column {column!r}: {problem}", row=row, column=column
    )


def _check_required(arrays: dict[str, pa.Array]) -> None:
    """No null in a required column."""
    for f in ROLLOUT_SCHEMA:
        arr = arrays[f.name]
        if f.nullable or not arr.null_count:
            continue
        row = first_true(arr.is_null().to_numpy(zero_copy_only=False))
        raise InvalidRecordError(f"row {row}: column {f.name!r} is null but required", row=row, column=f.name)


def _check_list_items(arrays: dict[str, pa.Array]) -> None:
    """No null item inside the token, span, log-prob and next-byte lists."""
    for name in ("response_token_ids", "response_token_spans", "behaviour_logps", *NEXT_BYTE_COLUMNS,
                 TEXT_BYTE_COLUMN):
        if arrays[name].values.null_count:
            flat = pc.list_flatten(arrays[name])
            if flat.null_count:
                parents = pc.list_parent_indices(arrays[name]).to_numpy()
                _fail(arrays, int(parents[first_true(flat.is_null().to_numpy(zero_copy_only=False))]), name,
                      "contains a null item")


def _check_lengths(arrays: dict[str, pa.Array], tokens: Ragged, spans: Ragged, logps: Ragged) -> None:
    """``num_tokens``, spans (two per token) and log-probs (one per token) agree with the token ids where present;
    a null row of spans or log-probs holds no values (so each flat value belongs to a present row)."""
    num_tokens = arrays["num_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)  # [rows]
    tok_len = tokens.lengths  # [rows]
    if (row := first_true(num_tokens != tok_len)) is not None:
        _fail(arrays, row, "num_tokens", f"is {num_tokens[row]} but response_token_ids has {tok_len[row]} tokens")
    for name, column, per_token in (("response_token_spans", spans, 2), ("behaviour_logps", logps, 1)):
        lengths = column.lengths  # [rows]
        valid = np.ones(len(lengths), bool) if column.valid is None else column.valid  # [rows]
        if (row := first_true(valid & (lengths != per_token * tok_len))) is not None:
            expected = (f"expected 2 per token = {2 * tok_len[row]} (flattened start,end pairs)" if per_token == 2
                        else f"for {tok_len[row]} tokens")
            _fail(arrays, row, name, f"has {lengths[row]} values{';' if per_token == 2 else ''} {expected}")
        if (row := first_true(~valid & (lengths != 0))) is not None:
            _fail(arrays, row, name, f"is null but holds {lengths[row]} values")


def _check_values(arrays: dict[str, pa.Array], tokens: Ragged, logps: Ragged) -> None:
    """Token ids >= 0; finite or NaN (not scored) reward; finite advantage (or null) and log-probs."""
    if len(tokens.values) and tokens.values.min() < 0:
        idx = int(np.argmax(tokens.values < 0))
        _fail(arrays, row_of(tokens.offsets, idx), "response_token_ids", f"negative token id {int(tokens.values[idx])}")
    reward = arrays["reward"].to_numpy(zero_copy_only=False)  # [rows]
    if (row := first_true(np.isinf(reward))) is not None:  # NaN is a completion not scored (TRL's None)
        _fail(arrays, row, "reward", f"is {reward[row]} (must be finite, or NaN: not scored)")
    adv = arrays["advantage"].fill_null(0.0).to_numpy(zero_copy_only=False)  # [rows]
    if (row := first_true(~np.isfinite(adv))) is not None:
        _fail(arrays, row, "advantage", f"is {adv[row]} (must be finite or null)")
    # min and max are finite only when every value is (NaN propagates): two reductions, no mask
    if len(logps.values) and not (np.isfinite(logps.values.min()) and np.isfinite(logps.values.max())):
        idx = int(np.argmax(~np.isfinite(logps.values)))
        row = row_of(logps.offsets, idx)
        token = idx - int(logps.offsets[row])
        _fail(arrays, row, "behaviour_logps", f"token {token} has log-prob {logps.values[idx]} (must be finite)")


def _check_next_bytes(arrays: dict[str, pa.Array], tokens: Ragged) -> None:
    """Next-byte ids and log-probs: both null or both present in a row, a null row holding no values; as many ids
    as log-probs, k >= 1 per token (none for no token); ids in 0..257; log-probs finite and <= 1e-4."""
    ids, logps = ragged(arrays["next_byte_ids"]), ragged(arrays["next_byte_logps"])
    rows = ids.num_rows
    if (not len(ids.values) and not len(logps.values)
            and arrays["next_byte_ids"].null_count == arrays["next_byte_logps"].null_count == rows):
        return  # not published: every row null and empty
    valid = {name: np.ones(rows, bool) if r.valid is None else r.valid
             for name, r in zip(NEXT_BYTE_COLUMNS, (ids, logps), strict=True)}
    if (row := first_true(valid["next_byte_ids"] != valid["next_byte_logps"])) is not None:
        absent, given = NEXT_BYTE_COLUMNS if valid["next_byte_logps"][row] else NEXT_BYTE_COLUMNS[::-1]
        _fail(arrays, row, absent, f"is null but {given} is not (both or neither)")
    for name, column in zip(NEXT_BYTE_COLUMNS, (ids, logps), strict=True):
        if (row := first_true(~valid[name] & (column.lengths != 0))) is not None:
            _fail(arrays, row, name, f"is null but holds {column.lengths[row]} values")
    present = valid["next_byte_ids"]  # [rows]
    n_ids, n_logps = ids.lengths, logps.lengths  # [rows] each
    if (row := first_true(present & (n_ids != n_logps))) is not None:
        _fail(arrays, row, "next_byte_logps", f"has {n_logps[row]} values but next_byte_ids has {n_ids[row]}")
    tok_len = tokens.lengths  # [rows]
    whole = np.where(tok_len > 0, (n_ids % np.maximum(tok_len, 1) == 0) & (n_ids > 0), n_ids == 0)  # [rows]
    offsets = np.zeros(rows, dtype=np.int64)  # [rows] byte offsets of the text (its bytes + 1), where per offset
    if (row := first_true(present & ~whole)) is not None:
        offsets = np.fromiter((len(text.encode("utf-8")) + 1 if text is not None else 1
                               for text in arrays["response_text"].to_pylist()), dtype=np.int64, count=rows)
        per_offset = (n_ids % offsets == 0) & (n_ids > 0)  # [rows] k per byte offset (exact distributions)
        if (row := first_true(present & ~whole & ~per_offset)) is not None:
            _fail(arrays, row, "next_byte_ids", f"has {n_ids[row]} values, not k >= 1 per token for {tok_len[row]} "
                  f"tokens nor per byte offset for {offsets[row]} offsets")
        offsets = np.where(whole, 0, offsets)  # [rows]
    k = np.where(offsets > 0, n_ids // np.maximum(offsets, 1), n_ids // np.maximum(tok_len, 1))  # [rows] per position
    if len(ids.values) and (ids.values.min() < 0 or ids.values.max() > NEXT_BYTE_OTHER):
        idx = int(np.argmax((ids.values < 0) | (ids.values > NEXT_BYTE_OTHER)))
        row = row_of(ids.offsets, idx)
        token, symbol = divmod(idx - int(ids.offsets[row]), int(k[row]))
        _fail(arrays, row, "next_byte_ids", f"token {token} symbol {symbol} is {int(ids.values[idx])} (must be "
              f"0..{NEXT_BYTE_OTHER}: a byte, {NEXT_BYTE_END} END, {NEXT_BYTE_OTHER} another special token)")
    values = logps.values  # [total]
    # NaN makes min non-finite, +inf makes max too large: two reductions, no mask
    if len(values) and not (np.isfinite(values.min()) and values.max() <= NEXT_BYTE_LOGP_MAX):
        idx = int(np.argmax(~(np.isfinite(values) & (values <= NEXT_BYTE_LOGP_MAX))))
        row = row_of(logps.offsets, idx)
        token, symbol = divmod(idx - int(logps.offsets[row]), int(k[row]))
        _fail(arrays, row, "next_byte_logps",
              f"token {token} symbol {symbol} has log-prob {float(values[idx]):.6g} (must be finite and <= 0)")


def _check_spans(arrays: dict[str, pa.Array], spans: Ragged) -> None:
    """Every span is ``(-1, -1)`` or lies inside the response text (rows' lengths already checked: pairs)."""
    if not len(spans.values):
        return
    pairs = spans.values.reshape(-1, 2)  # [pairs, 2]
    starts, ends = pairs[:, 0], pairs[:, 1]  # [pairs] each
    text_len = _text_lengths(arrays["response_text"])  # [rows]
    pair_off = spans.offsets // 2  # [rows + 1]
    has_pairs = pair_off[1:] > pair_off[:-1]  # [rows]
    row_max_end = row_max(ends, pair_off, has_pairs)  # [rows], valid where has_pairs
    # Every value >= -1 and start <= end, compared signed ((s >= 0, -1) fails) and unsigned ((-1, e >= 0) fails:
    # -1 is the largest uint32), leaves (-1, -1) or 0 <= start <= end: one reduction or comparison per pass.
    fine = (spans.values.min() >= -1 and not (starts > ends).any()
            and not (starts.view(np.uint32) > ends.view(np.uint32)).any()
            and not (row_max_end[has_pairs] > text_len[has_pairs]).any())
    if fine:
        return
    pair_row = np.repeat(np.arange(spans.num_rows), np.diff(pair_off))  # [pairs]
    no_text = (starts == -1) & (ends == -1)  # [pairs]
    in_text = (starts >= 0) & (starts <= ends) & (ends <= text_len[pair_row])  # [pairs]
    idx = first_true(~(no_text | in_text))
    row = int(pair_row[idx])
    _fail(arrays, row, "response_token_spans",
          f"token {idx - int(pair_off[row])} has span ({starts[idx]}, {ends[idx]}) outside the response text "
          f"of {text_len[row]} characters (use -1,-1 for tokens with no text)")


def _text_lengths(text: pa.Array) -> np.ndarray:
    """Each text's length in characters (code points): its byte length where the text is ASCII, counted (UTF-8)
    only for the texts that are not (most responses are ASCII; counting every text costs a pass over all bytes)."""
    _, offset_buffer, data = text.buffers()
    offsets = np.frombuffer(offset_buffer, np.int32)[text.offset:text.offset + len(text) + 1].astype(np.int64)
    lengths = np.diff(offsets)  # [rows] bytes (a null row: 0)
    if data is None or not lengths.sum():
        return lengths
    data = np.frombuffer(data, np.uint8)[offsets[0]:offsets[-1]]  # [bytes]
    if data.max() < 0x80:
        return lengths
    wide = np.flatnonzero(row_max(data, offsets - offsets[0], lengths > 0) >= 0x80)  # [rows not ASCII]
    lengths[wide] = pc.utf8_length(text.take(pa.array(wide))).to_numpy(zero_copy_only=False)
    return lengths


def row_max(values: np.ndarray, offsets: np.ndarray, nonempty: np.ndarray) -> np.ndarray:
    """Each row's largest value, where ``nonempty`` (elsewhere 0): row i is ``values[offsets[i]:offsets[i+1]]``.

    One reduction over the rows that hold values only: their starts strictly increase, so each reduced range is
    exactly one row (an empty row's start, clamped or not, would cut its predecessor's range short)."""
    out = np.zeros(len(nonempty), dtype=values.dtype)  # [rows]
    if nonempty.any():
        out[nonempty] = np.maximum.reduceat(values, offsets[:-1][nonempty])
    return out


def _check_ids(arrays: dict[str, pa.Array]) -> None:
    """``sample_index`` >= 0; no duplicate ``(prompt_id, sample_index)`` (found by sorting, no loop per row)."""
    sample_index = arrays["sample_index"].to_numpy(zero_copy_only=False).astype(np.int64)  # [rows]
    if (row := first_true(sample_index < 0)) is not None:
        _fail(arrays, row, "sample_index", f"is {sample_index[row]} (must be >= 0)")
    if len(sample_index) < 2:
        return
    prompt = pc.dictionary_encode(arrays["prompt_id"]).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    key = prompt * (int(sample_index.max()) + 1) + sample_index  # [rows] one number per (prompt_id, sample_index)
    order = np.argsort(key, kind="stable")  # [rows] equal keys keep row order
    repeats = key[order[1:]] == key[order[:-1]]  # [rows - 1]
    if repeats.any():
        row = int(order[1:][repeats].min())  # the first row that repeats an earlier one
        first = int(order[np.searchsorted(key[order], key[row])])
        _fail(arrays, row, "sample_index", f"duplicates row {first} (same prompt_id and sample_index)")


def row_of(offsets: np.ndarray, value_index: int) -> int:
    """The row owning flat value ``value_index`` (empty rows skipped)."""
    return int(np.searchsorted(offsets, value_index, side="right") - 1)
