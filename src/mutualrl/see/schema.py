"""Typed rollout records of the Shared Experience Exchange (paper Sec. "The Mutual RL System Design").

The paper's SEE record is ``D = (id, x_text, y_text, r, A, l^(m), meta)``; the columns are
in :mod:`mutualrl.see.columns`, variable-length columns in :mod:`mutualrl.see.ragged`,
checks in :mod:`mutualrl.see.validation`. Here: one record (:class:`RolloutRecord`), a
columnar batch (:class:`RolloutBatch`) and a shard's file metadata (:class:`ShardMetadata`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mutualrl.see.columns import COLUMNS, ROLLOUT_SCHEMA
from mutualrl.see.errors import InvalidRecordError
from mutualrl.see.ragged import Ragged, ragged, ragged_input, to_numpy
from mutualrl.see.validation import conform_schema, first_true, single_chunk, validate_table




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
        tokens = ragged_input(response_token_ids, np.int32, "response_token_ids")
        spans = ragged_input(response_token_spans, np.int32, "response_token_spans", pairs=True)
        logps = None if behaviour_logps is None else ragged_input(behaviour_logps, np.float32, "behaviour_logps")
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
                adv_arr = pa.array(to_numpy(advantage, np.float32))
        columns = {
            "step": _id_column(step, n, pa.int64()),
            "policy": _id_column(policy, n, pa.string()),
            "rank": _id_column(rank, n, pa.int32()),
            "prompt_id": pa.array(list(prompt_id), pa.string()),
            "sample_index": pa.array(to_numpy(sample_index, np.int32)),
            "prompt_text": pa.array(list(prompt_text), pa.string()),
            "response_text": pa.array(list(response_text), pa.string()),
            "response_token_ids": tokens.to_arrow(pa.int32()),
            "response_token_spans": spans.to_arrow(pa.int32()),
            "reward": pa.array(to_numpy(reward, np.float32)),
            "advantage": adv_arr,
            "behaviour_logps": pa.nulls(n, pa.list_(pa.float32())) if logps is None else logps.to_arrow(pa.float32()),
            "finished": pa.array(to_numpy(finished, np.bool_)),
            "num_tokens": pa.array(
                tokens.lengths.astype(np.int32) if num_tokens is None else to_numpy(num_tokens, np.int32)
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
                present = single_chunk(col)
                differs = pc.fill_null(pc.not_equal(present, pa.scalar(value, typ)), False).to_numpy(
                    zero_copy_only=False
                )
                nulls = present.is_null().to_numpy(zero_copy_only=False)
                if (row := first_true(differs | nulls)) is not None:
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


def _id_column(value: Any, n: int, typ: pa.DataType) -> pa.Array:
    if value is None:
        return pa.nulls(n, typ)
    if isinstance(value, (str, int, np.integer)):
        if pa.types.is_string(typ):
            return pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), [value]).cast(typ)
        return pa.array(np.full(n, value), typ)
    return pa.array(list(value) if pa.types.is_string(typ) else to_numpy(value, typ.to_pandas_dtype()), typ)
