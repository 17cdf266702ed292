"""Typed rollout records of the Shared Experience Exchange.

The paper's SEE record is ``D = (id, x_text, y_text, r, A, l^(m), meta)`` (Sec. "The Mutual
RL System Design", "Dataflow in One Training Loop", SEE paragraph): raw prompt and response
texts, the verifier reward, an optional advantage, the behaviour-policy per-token trace and
provenance. We add what the Tokenizer Heterogeneity Layer needs to align traces across
vocabularies: the token ids the policy actually generated and each token's character span
in the response text.

One row per rollout. Columns (:data:`ROLLOUT_SCHEMA`):

=========================  ==================  ==================================================
column                     type                meaning
=========================  ==================  ==================================================
step                       int64               trainer step that produced the rollout
policy                     string              policy name (publisher)
rank                       int32               publishing rank within the policy's process group
prompt_id                  string              stable prompt id (identical across policies)
sample_index               int32               0..K-1 within the prompt's GRPO group
prompt_text                string              raw prompt text (shared by all policies)
response_text              string              decoded response text
response_token_ids         list<int32>         generated token ids, EOS included if emitted
response_token_spans       list<int32>         flattened ``[s0, e0, s1, e1, ...]``: token i covers
                                               ``response_text[s_i:e_i]`` (Python code-point
                                               indices); ``-1, -1`` for tokens with no text
reward                     float32             verifier reward, finite
advantage                  float32, nullable   advantage, finite when present
behaviour_logps            list<float32>,      per-token log-probs of the behaviour policy,
                           nullable            finite; null when not published
finished                   bool                the response ended with EOS
num_tokens                 int32               ``len(response_token_ids)``
=========================  ==================  ==================================================

Variable-length columns are Arrow lists (32-bit offsets) over flat primitive buffers, so a
reader maps them from disk and sees numpy arrays without copying (:func:`ragged`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mutualrl.see.errors import InvalidRecordError, SchemaMismatchError

#: Version of the record layout; written into every shard's metadata and manifest.
SCHEMA_VERSION = 1

ROLLOUT_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("policy", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("sample_index", pa.int32(), nullable=False),
        pa.field("prompt_text", pa.string(), nullable=False),
        pa.field("response_text", pa.string(), nullable=False),
        pa.field("response_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_token_spans", pa.list_(pa.int32()), nullable=False),
        pa.field("reward", pa.float32(), nullable=False),
        pa.field("advantage", pa.float32(), nullable=True),
        pa.field("behaviour_logps", pa.list_(pa.float32()), nullable=True),
        pa.field("finished", pa.bool_(), nullable=False),
        pa.field("num_tokens", pa.int32(), nullable=False),
    ]
)

COLUMNS: tuple[str, ...] = tuple(ROLLOUT_SCHEMA.names)

#: Columns stamped by the exchange at publish time (a batch may be built without them).
ID_COLUMNS = ("step", "policy", "rank")

#: Keys of the file-level (schema) metadata of every shard.
METADATA_KEYS = ("schema_version", "run_id", "policy", "step", "rank", "world_size", "provenance")


# --------------------------------------------------------------------------------------
# Ragged (variable-length) columns
# --------------------------------------------------------------------------------------


def _to_numpy(data: Any, dtype: np.dtype | type) -> np.ndarray:
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
                arrays.append(_to_numpy(row, dtype).reshape(-1))
                valid.append(True)
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(arrays) if arrays else np.empty(0, dtype=dtype)
        return cls(values.astype(dtype, copy=False), _offsets32(offsets), None if all(valid) else np.array(valid))

    @classmethod
    def from_padded(cls, padded: Any, lengths_or_mask: Any, dtype: np.dtype | type) -> Ragged:
        """From a padded ``(rows, T)`` array/tensor and either per-row lengths ``(rows,)`` or a ``(rows, T)`` mask.

        Masked positions are taken in row-major order (TRL's ``completion_mask`` keeps the
        tokens up to and including EOS).
        """
        padded = _to_numpy(padded, dtype)
        if padded.ndim != 2:
            raise InvalidRecordError(f"padded array must be 2-D (rows, T), got shape {padded.shape}")
        sel = np.asarray(_to_numpy(lengths_or_mask, np.int64))
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
        return cls(padded[mask], _offsets32(offsets))

    def to_arrow(self, value_type: pa.DataType) -> pa.ListArray:
        mask = None if self.valid is None else pa.array(~np.asarray(self.valid, dtype=bool))
        return pa.ListArray.from_arrays(pa.array(self.offsets, pa.int32()), pa.array(self.values, value_type), mask=mask)


def _offsets32(offsets: np.ndarray) -> np.ndarray:
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


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


def _single_chunk(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _first(mask: np.ndarray) -> int | None:
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
    ``len(behaviour_logps) == num_tokens`` where present; token ids >= 0; finite reward,
    advantage and log-probs; every span is ``(-1, -1)`` or ``0 <= start <= end <= len(text)``;
    ``sample_index >= 0``; no duplicate ``(prompt_id, sample_index)``. With
    ``require_ids=False`` the ``step``/``policy``/``rank`` columns may be null (stamped at publish).
    """
    table = conform_schema(table)
    n = table.num_rows
    arrays = {name: _single_chunk(table.column(name)) for name in COLUMNS}

    for f in ROLLOUT_SCHEMA:
        arr = arrays[f.name]
        if f.nullable or not arr.null_count or (not require_ids and f.name in ID_COLUMNS):
            continue
        row = _first(arr.is_null().to_numpy(zero_copy_only=False))
        raise InvalidRecordError(f"row {row}: column {f.name!r} is null but required", row=row, column=f.name)

    tokens = ragged(arrays["response_token_ids"])
    spans = ragged(arrays["response_token_spans"])
    logps = ragged(arrays["behaviour_logps"])
    num_tokens = arrays["num_tokens"].to_numpy(zero_copy_only=False).astype(np.int64)
    tok_len = tokens.lengths

    def fail(row: int, column: str, problem: str) -> None:
        pid = arrays["prompt_id"][row].as_py()
        sidx = arrays["sample_index"][row].as_py()
        raise InvalidRecordError(
            f"row {row} (prompt_id={pid!r}, sample_index={sidx}): column {column!r}: {problem}", row=row, column=column
        )

    for name in ("response_token_ids", "response_token_spans", "behaviour_logps"):
        if arrays[name].values.null_count:
            flat = pc.list_flatten(arrays[name])
            if flat.null_count:
                parents = pc.list_parent_indices(arrays[name]).to_numpy()
                fail(int(parents[_first(flat.is_null().to_numpy(zero_copy_only=False))]), name, "contains a null item")

    if (row := _first(num_tokens != tok_len)) is not None:
        fail(row, "num_tokens", f"is {num_tokens[row]} but response_token_ids has {tok_len[row]} tokens")
    if (row := _first(spans.lengths != 2 * tok_len)) is not None:
        fail(
            row,
            "response_token_spans",
            f"has {spans.lengths[row]} values; expected 2 per token = {2 * tok_len[row]} (flattened start,end pairs)",
        )
    logp_valid = np.ones(n, bool) if logps.valid is None else logps.valid
    if (row := _first(logp_valid & (logps.lengths != tok_len))) is not None:
        fail(row, "behaviour_logps", f"has {logps.lengths[row]} values for {tok_len[row]} tokens")

    if (idx := _first(tokens.values < 0)) is not None:
        fail(_row_of(tokens.offsets, idx), "response_token_ids", f"negative token id {int(tokens.values[idx])}")

    reward = arrays["reward"].to_numpy(zero_copy_only=False)
    if (row := _first(~np.isfinite(reward))) is not None:
        fail(row, "reward", f"is {reward[row]} (must be finite)")
    adv_arr = arrays["advantage"]
    adv = adv_arr.fill_null(0.0).to_numpy(zero_copy_only=False)
    if (row := _first(~np.isfinite(adv))) is not None:
        fail(row, "advantage", f"is {adv[row]} (must be finite or null)")
    bad_logp = ~np.isfinite(logps.values)
    if bad_logp.any():
        rows = _row_of(logps.offsets, np.flatnonzero(bad_logp))
        rows = rows[logp_valid[rows]]
        if len(rows):
            row = int(rows[0])
            token = int(np.flatnonzero(~np.isfinite(logps.row(row)))[0])
            fail(row, "behaviour_logps", f"token {token} has log-prob {logps.row(row)[token]} (must be finite)")

    if len(spans.values):
        pairs = spans.values.reshape(-1, 2)
        starts, ends = pairs[:, 0], pairs[:, 1]
        text_len = pc.utf8_length(arrays["response_text"]).fill_null(0).to_numpy(zero_copy_only=False)
        pair_row = np.repeat(np.arange(n), tok_len)
        no_text = (starts == -1) & (ends == -1)
        in_text = (starts >= 0) & (starts <= ends) & (ends <= text_len[pair_row])
        if (idx := _first(~(no_text | in_text))) is not None:
            row = int(pair_row[idx])
            token = idx - int(tokens.offsets[row])
            fail(
                row,
                "response_token_spans",
                f"token {token} has span ({starts[idx]}, {ends[idx]}) outside the response text "
                f"of {text_len[row]} characters (use -1,-1 for tokens with no text)",
            )

    sample_index = arrays["sample_index"].to_numpy(zero_copy_only=False)
    if (row := _first(sample_index < 0)) is not None:
        fail(row, "sample_index", f"is {sample_index[row]} (must be >= 0)")
    for name in ("step", "rank"):
        vals = arrays[name].fill_null(0).to_numpy(zero_copy_only=False)
        if (row := _first(vals < 0)) is not None:
            fail(row, name, f"is {vals[row]} (must be >= 0)")

    seen: dict[tuple[str, int], int] = {}
    for row, key in enumerate(zip(arrays["prompt_id"].to_pylist(), sample_index.tolist(), strict=True)):
        if key in seen:
            fail(row, "sample_index", f"duplicates row {seen[key]} (same prompt_id and sample_index)")
        seen[key] = row
    return table


def _row_of(offsets: np.ndarray, value_index: Any) -> Any:
    """Row(s) owning flat value index/indices (empty rows skipped)."""
    rows = np.searchsorted(offsets, value_index, side="right") - 1
    return int(rows) if np.isscalar(value_index) or np.ndim(value_index) == 0 else rows


# --------------------------------------------------------------------------------------
# Records and batches
# --------------------------------------------------------------------------------------


@dataclass
class RolloutRecord:
    """One rollout, as plain Python values (for tests and small uses; batches are columnar)."""

    prompt_id: str
    sample_index: int
    prompt_text: str
    response_text: str
    response_token_ids: list[int]
    response_token_spans: list[tuple[int, int]]
    reward: float
    advantage: float | None = None
    behaviour_logps: list[float] | None = None
    finished: bool = True
    step: int | None = None
    policy: str | None = None
    rank: int | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.response_token_ids)


@dataclass
class ShardMetadata:
    """File-level metadata of a shard (stored in the Arrow schema metadata and the manifest)."""

    schema_version: int
    run_id: str
    policy: str
    step: int
    rank: int
    world_size: int
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_arrow(self) -> dict[bytes, bytes]:
        return {
            b"schema_version": str(self.schema_version).encode(),
            b"run_id": self.run_id.encode(),
            b"policy": self.policy.encode(),
            b"step": str(self.step).encode(),
            b"rank": str(self.rank).encode(),
            b"world_size": str(self.world_size).encode(),
            b"provenance": json.dumps(self.provenance, sort_keys=True).encode(),
        }

    @classmethod
    def from_arrow(cls, metadata: dict[bytes, bytes] | None) -> ShardMetadata:
        """Parse shard metadata; raises ``KeyError``/``ValueError`` when absent or malformed."""
        md = {k.decode(): v.decode() for k, v in (metadata or {}).items()}
        return cls(
            schema_version=int(md["schema_version"]),
            run_id=md["run_id"],
            policy=md["policy"],
            step=int(md["step"]),
            rank=int(md["rank"]),
            world_size=int(md["world_size"]),
            provenance=json.loads(md.get("provenance", "{}")),
        )


class RolloutBatch:
    """A validated columnar batch of rollout records (one Arrow table under the hood).

    Build it from per-row Python lists, numpy arrays or torch tensors; ragged columns also
    accept a :class:`Ragged` (e.g. ``Ragged.from_padded(completion_ids, completion_mask, np.int32)``),
    which avoids any per-row Python work. ``step``/``policy``/``rank`` may be left out: the
    exchange stamps them at publish. Validation (:func:`validate_table`) runs on build and
    raises :class:`~mutualrl.see.errors.InvalidRecordError` naming the row.
    """

    def __init__(
        self,
        *,
        prompt_id: Sequence[str],
        sample_index: Any,
        prompt_text: Sequence[str],
        response_text: Sequence[str],
        response_token_ids: Any,
        response_token_spans: Any,
        reward: Any,
        finished: Any,
        advantage: Any = None,
        behaviour_logps: Any = None,
        step: int | Any | None = None,
        policy: str | Sequence[str] | None = None,
        rank: int | Any | None = None,
        num_tokens: Any = None,
    ):
        n = len(prompt_id)
        tokens = _ragged_input(response_token_ids, np.int32, "response_token_ids")
        spans = _ragged_input(response_token_spans, np.int32, "response_token_spans", pairs=True)
        logps = None if behaviour_logps is None else _ragged_input(behaviour_logps, np.float32, "behaviour_logps")
        lengths = {
            "prompt_id": n,
            "sample_index": len(sample_index),
            "prompt_text": len(prompt_text),
            "response_text": len(response_text),
            "response_token_ids": tokens.num_rows,
            "response_token_spans": spans.num_rows,
            "reward": len(reward),
            "finished": len(finished),
        }
        if advantage is not None:
            lengths["advantage"] = len(advantage)
        if logps is not None:
            lengths["behaviour_logps"] = logps.num_rows
        if num_tokens is not None:
            lengths["num_tokens"] = len(num_tokens)
        if len(set(lengths.values())) > 1:
            raise InvalidRecordError(f"columns have different numbers of rows: {lengths}")

        if advantage is None:
            adv_arr = pa.nulls(n, pa.float32())
        else:
            adv_list = advantage if isinstance(advantage, list) else None
            if adv_list is not None and any(a is None for a in adv_list):
                adv_arr = pa.array([None if a is None else float(a) for a in adv_list], pa.float32())
            else:
                adv_arr = pa.array(_to_numpy(advantage, np.float32))
        columns = {
            "step": _id_column(step, n, pa.int64()),
            "policy": _id_column(policy, n, pa.string()),
            "rank": _id_column(rank, n, pa.int32()),
            "prompt_id": pa.array(list(prompt_id), pa.string()),
            "sample_index": pa.array(_to_numpy(sample_index, np.int32)),
            "prompt_text": pa.array(list(prompt_text), pa.string()),
            "response_text": pa.array(list(response_text), pa.string()),
            "response_token_ids": tokens.to_arrow(pa.int32()),
            "response_token_spans": spans.to_arrow(pa.int32()),
            "reward": pa.array(_to_numpy(reward, np.float32)),
            "advantage": adv_arr,
            "behaviour_logps": pa.nulls(n, pa.list_(pa.float32())) if logps is None else logps.to_arrow(pa.float32()),
            "finished": pa.array(_to_numpy(finished, np.bool_)),
            "num_tokens": pa.array(
                tokens.lengths.astype(np.int32) if num_tokens is None else _to_numpy(num_tokens, np.int32)
            ),
        }
        table = pa.Table.from_arrays([columns[c] for c in COLUMNS], schema=ROLLOUT_SCHEMA)
        self._table = validate_table(table, require_ids=False)

    # -- construction from other forms ---------------------------------------------------

    @classmethod
    def from_table(cls, table: pa.Table, *, validate: bool = True) -> RolloutBatch:
        """Wrap an Arrow table (e.g. from :meth:`ExperienceExchange.read`), validating it unless told not to."""
        batch = cls.__new__(cls)
        batch._table = validate_table(table, require_ids=False) if validate else conform_schema(table)
        return batch

    @classmethod
    def from_records(cls, records: Sequence[RolloutRecord]) -> RolloutBatch:
        def ids(name: str) -> Any:
            vals = [getattr(r, name) for r in records]
            return None if all(v is None for v in vals) else vals

        return cls(
            prompt_id=[r.prompt_id for r in records],
            sample_index=[r.sample_index for r in records],
            prompt_text=[r.prompt_text for r in records],
            response_text=[r.response_text for r in records],
            response_token_ids=[r.response_token_ids for r in records],
            response_token_spans=[np.asarray(r.response_token_spans, np.int32).reshape(-1) for r in records],
            reward=[r.reward for r in records],
            advantage=[r.advantage for r in records],
            behaviour_logps=None
            if all(r.behaviour_logps is None for r in records)
            else [r.behaviour_logps for r in records],
            finished=[r.finished for r in records],
            step=ids("step"),
            policy=ids("policy"),
            rank=ids("rank"),
        )

    # -- access ------------------------------------------------------------------------

    @property
    def num_rows(self) -> int:
        return self._table.num_rows

    def __len__(self) -> int:
        return self._table.num_rows

    def to_table(self, metadata: ShardMetadata | None = None) -> pa.Table:
        """The Arrow table (zero-copy); with ``metadata`` attached as schema metadata."""
        if metadata is None:
            return self._table
        return self._table.replace_schema_metadata(metadata.to_arrow())

    def column(self, name: str) -> pa.ChunkedArray:
        return self._table.column(name)

    def ragged(self, name: str) -> Ragged:
        """Zero-copy flat values + offsets of a list column (``response_token_ids``, spans, ``behaviour_logps``)."""
        return ragged(self._table.column(name))

    def stamped(self, step: int, policy: str, rank: int) -> RolloutBatch:
        """This batch with ``step``/``policy``/``rank`` set; rows already carrying other values are an error."""
        n = self.num_rows
        table = self._table
        for name, value, typ in (("step", step, pa.int64()), ("policy", policy, pa.string()), ("rank", rank, pa.int32())):
            col = table.column(name)
            if col.null_count != n:
                present = _single_chunk(col)
                differs = pc.fill_null(pc.not_equal(present, pa.scalar(value, typ)), False).to_numpy(
                    zero_copy_only=False
                )
                nulls = present.is_null().to_numpy(zero_copy_only=False)
                if (row := _first(differs | nulls)) is not None:
                    raise InvalidRecordError(
                        f"row {row}: column {name!r} is {present[row].as_py()!r} but the batch is published as "
                        f"{name}={value!r}",
                        row=row,
                        column=name,
                    )
            table = table.set_column(COLUMNS.index(name), ROLLOUT_SCHEMA.field(name), _id_column(value, n, typ))
        out = RolloutBatch.__new__(RolloutBatch)
        out._table = table
        return out

    def records(self) -> list[RolloutRecord]:
        cols = {name: self._table.column(name).to_pylist() for name in COLUMNS}
        out = []
        for i in range(self.num_rows):
            flat = cols["response_token_spans"][i]
            out.append(
                RolloutRecord(
                    prompt_id=cols["prompt_id"][i],
                    sample_index=cols["sample_index"][i],
                    prompt_text=cols["prompt_text"][i],
                    response_text=cols["response_text"][i],
                    response_token_ids=cols["response_token_ids"][i],
                    response_token_spans=list(zip(flat[0::2], flat[1::2], strict=True)),
                    reward=cols["reward"][i],
                    advantage=cols["advantage"][i],
                    behaviour_logps=cols["behaviour_logps"][i],
                    finished=cols["finished"][i],
                    step=cols["step"][i],
                    policy=cols["policy"][i],
                    rank=cols["rank"][i],
                )
            )
        return out

    def __repr__(self) -> str:
        return f"RolloutBatch(rows={self.num_rows}, tokens={int(pc.sum(self._table.column('num_tokens')).as_py() or 0)})"


def _ragged_input(data: Any, dtype: type, name: str, pairs: bool = False) -> Ragged:
    if isinstance(data, Ragged):
        return Ragged(
            np.asarray(data.values, dtype=dtype).reshape(-1), _offsets32(np.asarray(data.offsets, np.int64)), data.valid
        )
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        return ragged(data)
    try:
        rows = list(data)
    except TypeError:
        raise InvalidRecordError(f"column {name!r}: expected a sequence of rows or a Ragged, got {type(data).__name__}")
    if pairs:  # accept [(s, e), ...] per row as well as the flattened form
        rows = [None if r is None else np.asarray(_to_numpy(r, dtype)).reshape(-1) for r in rows]
    try:
        return Ragged.from_rows(rows, dtype)
    except (ValueError, TypeError, OverflowError) as err:
        raise InvalidRecordError(f"column {name!r}: cannot convert rows to {np.dtype(dtype).name}: {err}") from None


def _id_column(value: Any, n: int, typ: pa.DataType) -> pa.Array:
    if value is None:
        return pa.nulls(n, typ)
    if isinstance(value, (str, int, np.integer)):
        if pa.types.is_string(typ):
            return pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), [value]).cast(typ)
        return pa.array(np.full(n, value), typ)
    return pa.array(list(value) if pa.types.is_string(typ) else _to_numpy(value, typ.to_pandas_dtype()), typ)
