"""SEE record schema v3 and v4 (see/records.py): the nullable next-byte columns (``next_byte_ids``,
``next_byte_logps``) and v4's ``text_byte_logps``, their checks (one line naming the row and the column), and v2 and
v3 tables and shards still read, as v4 with nulls."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from mutualrl.ops.exchange_rollback import refuse_older_layout
from mutualrl.see import ExperienceExchange, InvalidRecordError, SchemaMismatchError, ragged, validate_table
from mutualrl.see.errors import CorruptShardError
from mutualrl.see.records import (
    COLUMNS,
    NEXT_BYTE_COLUMNS,
    READABLE_SCHEMA_VERSIONS,
    ROLLOUT_SCHEMA,
    SCHEMA_VERSION,
    SCHEMAS,
    TEXT_BYTE_COLUMN,
    Ragged,
    RolloutBatch,
)
from see_synthetic import RolloutRecord, batch_from_records, records_of, synthetic_batch


def test_v3_is_v2_plus_two_nullable_list_columns_at_the_end_and_v4_one_more():
    assert SCHEMA_VERSION == 4 and READABLE_SCHEMA_VERSIONS == (2, 3, 4)
    assert COLUMNS[-4:] == ("num_tokens", "next_byte_ids", "next_byte_logps", TEXT_BYTE_COLUMN)
    assert ROLLOUT_SCHEMA.field("next_byte_ids").type == pa.list_(pa.int32())
    assert ROLLOUT_SCHEMA.field("next_byte_logps").type == pa.list_(pa.float32())
    assert ROLLOUT_SCHEMA.field(TEXT_BYTE_COLUMN).type == pa.list_(pa.float32())
    assert all(ROLLOUT_SCHEMA.field(name).nullable for name in (*NEXT_BYTE_COLUMNS, TEXT_BYTE_COLUMN))
    assert SCHEMAS[2].names == list(COLUMNS[:-3]) and SCHEMAS[3].names == list(COLUMNS[:-1])
    assert SCHEMAS[4] is ROLLOUT_SCHEMA


def records() -> list[RolloutRecord]:
    """Row 0: 2 tokens, k=3; row 1: no tokens, empty lists; row 2: not published (null)."""
    return [
        RolloutRecord("q0", 0, "2+2?", "4", [19, 2], [(0, 1), (-1, -1)], 1.0, 0.7, [-0.1, -0.01], True,
                      next_byte_ids=[52, 53, 257, 256, 10, 32], next_byte_logps=[-0.1, -2.5, -4.0, -0.01, -5.0, 0.0]),
        RolloutRecord("q0", 1, "2+2?", "", [], [], 0.0, None, None, False, next_byte_ids=[], next_byte_logps=[]),
        RolloutRecord("q1", 0, "héllo", "wörld", [7], [(0, 5)], 0.5, -0.3, [-2.5], False),
    ]


def exchange(root: Path, policy: str, **kw) -> ExperienceExchange:
    return ExperienceExchange(root, "run-1", policy, policies=["a", "b"], barrier_timeout_s=5.0,
                              poll_interval_s=0.01, **kw)


def test_next_byte_columns_round_trip_through_the_table_and_a_published_shard(tmp_path):
    batch = batch_from_records(records())
    table = batch.to_table()
    assert table.column("next_byte_ids").null_count == 1
    assert records_of(RolloutBatch.from_table(table)) == records_of(batch)
    view = batch.ragged("next_byte_ids")
    assert view.offsets.tolist() == [0, 6, 6, 6] and view.row(2) is None
    assert view.values.reshape(-1, 3)[1].tolist() == [256, 10, 32]  # token 1's top 3, [num_tokens, k] row-major
    exchange(tmp_path, "b").publish(1, batch)
    read = exchange(tmp_path, "a").read(1, "b")
    assert read.schema.metadata == {b"schema_version": b"4"}
    got = records_of(read)
    assert got[0].next_byte_ids == [52, 53, 257, 256, 10, 32]
    assert got[0].next_byte_logps == pytest.approx([-0.1, -2.5, -4.0, -0.01, -5.0, 0.0])
    assert (got[1].next_byte_ids, got[1].next_byte_logps) == ([], [])
    assert (got[2].next_byte_ids, got[2].next_byte_logps) == (None, None)
    only = exchange(tmp_path, "a").read(1, "b", columns=["next_byte_logps"])
    assert only.column_names == ["next_byte_logps"]


def test_next_byte_columns_take_ragged_and_arrow_input():
    base = records()[:1]
    rows = batch_from_records(base)
    ids = Ragged(np.array([52, 53, 257, 256, 10, 32], np.int32), np.array([0, 6]))
    logps = pa.array([[-0.1, -2.5, -4.0, -0.01, -5.0, 0.0]], pa.list_(pa.float32()))
    kwargs = {name: rows.column(name).to_pylist() for name in ("prompt_id", "sample_index", "prompt_text",
                                                              "response_text", "reward", "finished")}
    built = RolloutBatch(**kwargs, response_token_ids=[[19, 2]], next_byte_ids=ids, next_byte_logps=logps)
    assert built.column("next_byte_ids").equals(rows.column("next_byte_ids"))
    assert built.column("next_byte_logps").equals(rows.column("next_byte_logps"))
    with pytest.raises(InvalidRecordError, match=r"'next_byte_ids' given without 'next_byte_logps': both or neither"):
        RolloutBatch(**kwargs, response_token_ids=[[19, 2]], next_byte_ids=ids)


def with_column(table: pa.Table, name: str, rows: list, value_type: pa.DataType) -> pa.Table:
    return table.set_column(COLUMNS.index(name), name, pa.array(rows, pa.list_(value_type)))


@pytest.mark.parametrize(
    ("ids", "logps", "pattern"),
    [
        ([[1, 2, 3, 4], [], None], [[-1.0, -1.0, -1.0], [], None],
         r"row 0 .*'next_byte_logps': has 3 values but next_byte_ids has 4$"),
        ([[1, 2, 3], [], None], [[-1.0, -1.0, -1.0], [], None],
         r"row 0 .*'next_byte_ids': has 3 values, not k >= 1 per token for 2 tokens nor per byte offset for 2 "
         r"offsets$"),
        ([[], [], None], [[], [], None],
         r"row 0 .*'next_byte_ids': has 0 values, not k >= 1 per token for 2 tokens nor per byte offset for 2 "
         r"offsets$"),
        ([[1, 2, 3, 258], [], None], [[-1.0] * 4, [], None],
         r"row 0 .*'next_byte_ids': token 1 symbol 1 is 258 \(must be 0\.\.257"),
        ([[1, -1], [], None], [[-1.0] * 2, [], None], r"row 0 .*'next_byte_ids': token 1 symbol 0 is -1 "),
        ([[1, 2, 3, 4], [], None], [[-1.0, -1.0, math.nan, -1.0], [], None],
         r"row 0 .*'next_byte_logps': token 1 symbol 0 has log-prob nan \(must be finite and <= 0\)$"),
        ([[1, 2], [], None], [[-math.inf, -1.0], [], None], r"row 0 .*'next_byte_logps': token 0 .*log-prob -inf"),
        ([[1, 2], [], None], [[-1.0, 0.01], [], None], r"row 0 .*'next_byte_logps': token 1 .*log-prob 0\.01"),
        ([[1, 2], [], None], [[-1.0, -1.0], None, None],
         r"row 1 .*'next_byte_logps': is null but next_byte_ids is not \(both or neither\)$"),
        ([[1, 2], [], None], [[-1.0, -1.0], [], [-1.0]],
         r"row 2 .*'next_byte_ids': is null but next_byte_logps is not \(both or neither\)$"),
        ([[1, 2], [], None], [[-1.0, -1.0], [], [None]], r"row 2 .*'next_byte_logps': contains a null item$"),
    ],
)
def test_each_next_byte_rule_is_one_line_naming_the_row_and_the_column(ids, logps, pattern):
    table = batch_from_records(records()).to_table()
    table = with_column(with_column(table, "next_byte_ids", ids, pa.int32()), "next_byte_logps", logps, pa.float32())
    with pytest.raises(InvalidRecordError, match=pattern) as info:
        validate_table(table)
    assert "\n" not in str(info.value) and info.value.column in NEXT_BYTE_COLUMNS


def test_rounding_above_zero_is_accepted_and_a_null_row_holding_values_is_not():
    table = batch_from_records(records()).to_table()
    table = with_column(table, "next_byte_logps", [[-1.0, 1e-5, 0.0, 0.0, -1.0, -1.0], [], None], pa.float32())
    assert validate_table(table).num_rows == 3
    ids = table.column("next_byte_ids").combine_chunks()
    hidden = pa.ListArray.from_arrays(ids.offsets, ids.values, mask=pa.array([False, True, True]))
    with pytest.raises(InvalidRecordError, match=r"row 1 .*'next_byte_ids': is null but next_byte_logps is not"):
        validate_table(table.set_column(COLUMNS.index("next_byte_ids"), "next_byte_ids", hidden))
    both = table.set_column(COLUMNS.index("next_byte_ids"), "next_byte_ids", pa.ListArray.from_arrays(
        pa.array([0, 6, 6, 7], pa.int32()), pa.array([1, 2, 3, 4, 5, 6, 9], pa.int32()),
        mask=pa.array([False, False, True])))
    with pytest.raises(InvalidRecordError, match=r"row 2 .*'next_byte_ids': is null but holds 1 values$"):
        validate_table(both)


def test_a_v2_table_validates_with_null_next_byte_columns_and_one_column_alone_is_missing():
    table = synthetic_batch(3, 2, seed=1).to_table()
    v2 = table.drop_columns([*NEXT_BYTE_COLUMNS, TEXT_BYTE_COLUMN])
    assert v2.schema.names == SCHEMAS[2].names
    read = validate_table(v2)
    assert read.schema.remove_metadata().equals(ROLLOUT_SCHEMA)
    assert [read.column(name).null_count for name in NEXT_BYTE_COLUMNS] == [6, 6]
    assert read.drop_columns([*NEXT_BYTE_COLUMNS, TEXT_BYTE_COLUMN]).equals(v2)
    with pytest.raises(SchemaMismatchError, match=r"SEE schema v4: missing column\(s\) \['next_byte_logps'\]$"):
        validate_table(table.drop_columns(["next_byte_logps"]))


def as_v2(data: Path) -> None:
    """Rewrite a published shard as mutualrl with SEE schema v2 wrote it: no next-byte columns, v2 file metadata and
    manifest (size, rows and checksum fixed)."""
    table = pa.ipc.open_file(data).read_all().drop_columns([*NEXT_BYTE_COLUMNS, TEXT_BYTE_COLUMN])
    table = table.replace_schema_metadata({b"schema_version": b"2"})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    raw = sink.getvalue().to_pybytes()
    data.write_bytes(raw)
    manifest = data.with_name(data.name.replace(".arrow", ".manifest.json"))
    fields = json.loads(manifest.read_text())
    fields.update(schema_version=2, bytes=len(raw), rows=table.num_rows, checksum=xxhash.xxh3_128(raw).hexdigest())
    manifest.write_text(json.dumps(fields))


def test_a_v2_shard_on_disk_reads_as_v4_with_nulls_beside_a_v4_shard(tmp_path):
    writers = [exchange(tmp_path, "b", rank=r, world_size=2) for r in range(2)]
    batches = [synthetic_batch(2, 2, seed=r, prompt_offset=2 * r) for r in range(2)]
    old = writers[0].publish(1, batches[0])
    writers[1].publish(1, batches[1])
    as_v2(old)
    reader = exchange(tmp_path, "a")
    read = reader.read(1, "b")
    assert read.schema.remove_metadata().equals(ROLLOUT_SCHEMA) and read.num_rows == 8
    assert read.column("next_byte_ids").null_count == 8
    assert records_of(read) == records_of(batches[0]) + records_of(batches[1])
    assert reader.gather(1, columns=["reward"], policies=["b"])["b"].num_rows == 8
    refuse_older_layout(tmp_path)  # a resumed run reads v2 rounds: not refused
    ragged(read.column("next_byte_logps"))  # the null column views like any other


def test_a_v2_file_under_a_v4_manifest_and_a_v1_shard_are_refused(tmp_path):
    data = exchange(tmp_path, "b").publish(1, synthetic_batch(2, 2, seed=1))
    manifest = data.with_name("rank-0-of-1.manifest.json")
    as_v2(data)
    fields = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**fields, "schema_version": 4}))
    with pytest.raises(SchemaMismatchError, match=r"file has schema version 2, its manifest says 4") as info:
        exchange(tmp_path, "a").read(1, "b")
    assert isinstance(info.value, CorruptShardError) and info.value.problem == "schema_version"
    manifest.write_text(json.dumps({**fields, "schema_version": 1}))
    message = (rf"^{tmp_path} was written by an older mutualrl \(SEE schema v1; this one reads v2, v3 and v4\): "
               r"start a new run .*or resume this one with the mutualrl version that wrote it \(0\.3\.0 or earlier\)$")
    with pytest.raises(SchemaMismatchError, match=message):
        exchange(tmp_path, "a").read(1, "b")
    with pytest.raises(SchemaMismatchError, match=message):
        refuse_older_layout(tmp_path)


def test_text_byte_logps_round_trip_and_each_rule_is_one_line_naming_the_row_and_the_column():
    """v4's ``text_byte_logps``: one per byte of the text (UTF-8) and one for its end where finished."""
    rows = records()  # "4" finished: 2 values; "" not finished: 0; "wörld" (6 bytes) not finished: 6
    values = [[-0.5, -0.1], [], [-1.0] * 6]
    batch = batch_from_records(rows)
    kwargs = {name: batch.column(name).to_pylist() for name in ("prompt_id", "sample_index", "prompt_text",
                                                               "response_text", "reward", "finished")}
    built = RolloutBatch(**kwargs, response_token_ids=batch.column("response_token_ids").to_pylist(),
                         text_byte_logps=values)
    assert validate_table(built.to_table()).column(TEXT_BYTE_COLUMN).to_pylist() == [
        pytest.approx(v) for v in values]
    nulls = RolloutBatch(**kwargs, response_token_ids=batch.column("response_token_ids").to_pylist(),
                         text_byte_logps=[values[0], None, None])
    assert validate_table(nulls.to_table()).column(TEXT_BYTE_COLUMN).null_count == 2
    table = built.to_table()
    for bad, pattern in (([[-0.5], [], [-1.0] * 6], r"row 0 .*'text_byte_logps': has 1 values for 2 \(one per byte "
                                                     r"of the text, one for its end where finished\)$"),
                         ([[-0.5, -0.1], [], [-1.0] * 5], r"row 2 .*'text_byte_logps': has 5 values for 6 "),
                         ([[-0.5, 0.1], [], [-1.0] * 6], r"row 0 .*'text_byte_logps': value 1 is 0\.1 \(must be "
                                                         r"finite and <= 0\)$"),
                         ([[-0.5, -0.1], [], [-1.0] * 5 + [math.nan]], r"row 2 .*value 5 is nan")):
        with pytest.raises(InvalidRecordError, match=pattern) as info:
            validate_table(with_column(table, TEXT_BYTE_COLUMN, bad, pa.float32()))
        assert "\n" not in str(info.value) and info.value.column == TEXT_BYTE_COLUMN


def test_a_v3_table_reads_as_v4_with_text_byte_logps_null():
    table = synthetic_batch(3, 2, seed=1).to_table()
    v3 = table.drop_columns([TEXT_BYTE_COLUMN])
    assert v3.schema.names == SCHEMAS[3].names
    read = validate_table(v3)
    assert read.schema.remove_metadata().equals(ROLLOUT_SCHEMA) and read.column(TEXT_BYTE_COLUMN).null_count == 6
