"""SEE records (see/records.py): round trips of every column, the ragged layout, and the checks of a table from
outside, whose errors name the row and the column."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
import torch

from mutualrl.errors import DataError, PeerError
from mutualrl.see import (
    COLUMNS,
    ROLLOUT_SCHEMA,
    InvalidRecordError,
    Ragged,
    RolloutBatch,
    SchemaMismatchError,
    ragged,
    validate_table,
)
from see_synthetic import RolloutRecord, batch_from_records, records_of, synthetic_batch


def sample_records() -> list[RolloutRecord]:
    return [
        RolloutRecord(
            prompt_id="q1",
            sample_index=0,
            prompt_text="What is 2+2?",
            response_text="The answer is 4",
            response_token_ids=[791, 4320, 374, 220, 19, 151643],
            response_token_spans=[(0, 3), (3, 10), (10, 13), (13, 14), (14, 15), (-1, -1)],
            reward=1.0,
            advantage=0.5,
            behaviour_logps=[-0.1, -0.2, -0.3, -0.4, -0.5, -0.01],
            finished=True,
        ),
        RolloutRecord(  # empty response, no advantage, no log-probs
            prompt_id="q1",
            sample_index=1,
            prompt_text="What is 2+2?",
            response_text="",
            response_token_ids=[],
            response_token_spans=[],
            reward=0.0,
            advantage=None,
            behaviour_logps=None,
            finished=False,
        ),
        RolloutRecord(  # multi-byte characters: spans count code points, one token inside a character
            prompt_id="q2 ünïcode",
            sample_index=0,
            prompt_text="Say 你好",
            response_text="你好 é",
            response_token_ids=[1, 2, 3, 4],
            response_token_spans=[(0, 1), (1, 2), (2, 4), (3, 4)],
            reward=-0.25,
            advantage=-1.5,
            behaviour_logps=[-1.0, -2.0, -3.0, -4.0],
            finished=True,
        ),
    ]


def test_round_trip_every_column_with_nulls_and_empty_responses():
    records = sample_records()
    batch = batch_from_records(records)
    table = batch.to_table()
    assert table.schema.remove_metadata().equals(ROLLOUT_SCHEMA)
    assert table.column("num_tokens").to_pylist() == [6, 0, 4]
    assert table.column("advantage").null_count == 1
    assert table.column("behaviour_logps").null_count == 1
    back = records_of(RolloutBatch.from_table(table))
    for want, got in zip(records, back, strict=True):
        assert got.prompt_id == want.prompt_id
        assert got.sample_index == want.sample_index
        assert got.prompt_text == want.prompt_text
        assert got.response_text == want.response_text
        assert got.response_token_ids == want.response_token_ids
        assert got.response_token_spans == want.response_token_spans
        assert got.reward == pytest.approx(want.reward)
        assert got.finished == want.finished
        if want.advantage is None:
            assert got.advantage is None
        else:
            assert got.advantage == pytest.approx(want.advantage)
        if want.behaviour_logps is None:
            assert got.behaviour_logps is None
        else:
            assert got.behaviour_logps == pytest.approx(want.behaviour_logps)


def test_the_record_has_no_publisher_columns_and_spans_may_be_null():
    assert not {"step", "policy", "rank"} & set(COLUMNS)  # the manifest's, once per shard
    records = sample_records()
    for r in records:
        r.response_token_spans = None
    table = batch_from_records(records).to_table()
    assert table.column("response_token_spans").null_count == 3
    assert [r.response_token_spans for r in records_of(RolloutBatch.from_table(table))] == [None] * 3
    # spans where present are still checked: two per token, inside the text
    spans = pa.array([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5, -1, -1], None, None], pa.list_(pa.int32()))
    assert RolloutBatch.from_table(table.set_column(COLUMNS.index("response_token_spans"), "response_token_spans",
                                                    spans)).num_rows == 3
    bad = pa.array([[0, 1], None, None], pa.list_(pa.int32()))
    with pytest.raises(InvalidRecordError, match=r"row 0 .*'response_token_spans': has 2 values; expected 2 per "
                       r"token = 12"):
        RolloutBatch.from_table(table.set_column(COLUMNS.index("response_token_spans"), "response_token_spans", bad))


def test_a_null_list_row_that_holds_values_is_refused():
    table = batch_from_records(sample_records()).to_table()
    logps = table.column("behaviour_logps").combine_chunks()
    hidden = pa.ListArray.from_arrays(logps.offsets, logps.values, mask=pa.array([False, True, True]))
    with pytest.raises(InvalidRecordError, match=r"row 2 .*'behaviour_logps': is null but holds 4 values"):
        validate_table(table.set_column(COLUMNS.index("behaviour_logps"), "behaviour_logps", hidden))


def test_from_padded_tensors_matches_per_row_lists():
    ids = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    logps = torch.tensor([[-1.0, -2.0, -3.0, 0.0], [-4.0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bfloat16)
    tokens = Ragged.from_padded(ids, mask, np.int32)
    assert tokens.row(0).tolist() == [5, 6, 7] and tokens.row(1).tolist() == [8] and tokens.row(2).tolist() == []
    by_len = Ragged.from_padded(ids, torch.tensor([3, 1, 0]), np.int32)
    assert np.array_equal(by_len.values, tokens.values) and np.array_equal(by_len.offsets, tokens.offsets)
    batch = RolloutBatch(
        prompt_id=["a", "a", "b"],
        sample_index=torch.tensor([0, 1, 0]),
        prompt_text=["p", "p", "q"],
        response_text=["xyz", "w", ""],
        response_token_ids=tokens,
        response_token_spans=[[0, 1, 1, 2, 2, 3], [0, 1], []],
        reward=torch.tensor([1.0, 0.0, 0.5]),
        advantage=torch.tensor([0.1, -0.1, 0.0]),
        behaviour_logps=Ragged.from_padded(logps, mask, np.float32),
        finished=torch.tensor([True, True, False]),
    )
    rec = records_of(batch)
    assert rec[0].response_token_ids == [5, 6, 7]
    assert rec[0].behaviour_logps == [-1.0, -2.0, -3.0]
    assert rec[2].response_token_ids == [] and rec[2].behaviour_logps == []
    flat = batch.ragged("response_token_ids")
    assert flat.values.tolist() == [5, 6, 7, 8] and flat.offsets.tolist() == [0, 3, 4, 4]


def test_ragged_view_of_a_sliced_column_is_rebased():
    col = batch_from_records(sample_records()).column("response_token_ids")
    view = ragged(col.slice(1, 2))
    assert view.offsets.tolist() == [0, 0, 4]
    assert view.values.tolist() == col.to_pylist()[2]


def _kwargs(**over):
    base = dict(
        prompt_id=["a", "a"],
        sample_index=[0, 1],
        prompt_text=["p", "p"],
        response_text=["hi", "yo!"],
        response_token_ids=[[1, 2], [3, 4]],
        response_token_spans=[[0, 1, 1, 2], [0, 2, 2, 3]],
        reward=[1.0, 0.0],
        finished=[True, True],
        behaviour_logps=[[-0.5, -0.5], [-1.0, -1.0]],
    )
    base.update(over)
    return base


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ({"response_token_spans": [[0, 1, 1, 2], [0, 2]]}, r"row 1 .*'response_token_spans': has 2 values; expected 2 per token = 4"),
        ({"behaviour_logps": [[-0.5, -0.5], [-1.0]]}, r"row 1 .*'behaviour_logps': has 1 values for 2 tokens"),
        ({"behaviour_logps": [[-0.5, -0.5], [-1.0, math.nan]]}, r"row 1 .*'behaviour_logps': token 1 has log-prob nan"),
        ({"behaviour_logps": [[-math.inf, -0.5], [-1.0, -1.0]]}, r"row 0 .*'behaviour_logps': token 0 has log-prob -inf"),
        ({"reward": [1.0, math.inf]}, r"row 1 .*'reward': is inf \(must be finite, or NaN: not scored\)"),
        ({"reward": [-math.inf, 0.0]}, r"row 0 .*'reward': is -inf"),  # NaN is a reward not scored: kept
        ({"advantage": [0.0, math.nan]}, r"row 1 .*'advantage': is nan"),
        ({"response_token_spans": [[0, 1, 1, 3], [0, 2, 2, 3]]}, r"row 0 .*token 1 has span \(1, 3\) outside the response text of 2"),
        ({"response_token_spans": [[0, 1, 1, 2], [0, 2, -1, 3]]}, r"row 1 .*token 1 has span \(-1, 3\)"),
        ({"response_token_spans": [[-1, 0, 1, 2], [0, 2, 2, 3]]}, r"row 0 .*token 0 has span \(-1, 0\)"),
        ({"response_token_spans": [[0, 1, 1, -1], [0, 2, 2, 3]]}, r"row 0 .*token 1 has span \(1, -1\)"),
        ({"response_token_spans": [[0, 1, -2, -2], [0, 2, 2, 3]]}, r"row 0 .*token 1 has span \(-2, -2\)"),
        # characters, not bytes: "hé" is 2 characters in 3 bytes
        ({"response_text": ["hé", "yo!"], "response_token_spans": [[0, 1, 1, 3], [0, 2, 2, 3]]},
         r"row 0 .*token 1 has span \(1, 3\) outside the response text of 2 characters"),
        ({"response_token_ids": [[1, 2], [3, -4]]}, r"row 1 .*negative token id -4"),
        ({"sample_index": [0, 0]}, r"row 1 .*duplicates row 0"),
        ({"sample_index": [0, -1]}, r"row 1 .*'sample_index': is -1"),
        ({"num_tokens": [2, 3]}, r"row 1 .*'num_tokens': is 3 but response_token_ids has 2 tokens"),
        ({"reward": [1.0]}, r"different numbers of rows"),
        ({"response_token_ids": [[1, 2], ["x", 4]]}, r"'response_token_ids': cannot convert rows to int32"),
    ],
)
def test_validation_names_row_and_column(override, pattern):
    num_tokens = override.pop("num_tokens", None)
    with pytest.raises(InvalidRecordError, match=pattern) as info:
        table = RolloutBatch(**_kwargs(**override)).to_table()  # the shape of the batch: checked when built
        if num_tokens is not None:
            table = table.set_column(COLUMNS.index("num_tokens"), "num_tokens", pa.array(num_tokens, pa.int32()))
        RolloutBatch.from_table(table)  # the values: checked where the table comes from outside
    assert isinstance(info.value, DataError)


def test_a_batch_built_here_is_trusted_and_one_from_outside_is_checked():
    built = RolloutBatch(**_kwargs(reward=[1.0, math.inf]))  # the trainer's own tensors: not re-checked
    assert built.num_rows == 2
    with pytest.raises(InvalidRecordError, match=r"row 1 .*'reward'"):
        RolloutBatch.from_table(built.to_table())


def test_duplicates_are_found_without_a_loop_per_row():
    batch = synthetic_batch(2000, 5, 0, 4, seed=3)  # 10,000 rows
    table = batch.to_table()
    sample = np.arange(table.num_rows) % 5
    sample[7777] = sample[7776]  # same prompt (rows 7775..7779 share one), same sample index
    dup = table.set_column(COLUMNS.index("sample_index"), "sample_index", pa.array(sample, pa.int32()))
    with pytest.raises(InvalidRecordError, match=r"row 7777 .*'sample_index': duplicates row 7776"):
        validate_table(dup)
    assert validate_table(table).num_rows == 10_000


def test_table_schema_mismatch_is_reported():
    table = RolloutBatch(**_kwargs()).to_table()
    with pytest.raises(SchemaMismatchError, match=r"missing column\(s\) \['reward'\]") as info:
        RolloutBatch.from_table(table.drop_columns(["reward"]))
    assert isinstance(info.value, PeerError)
    extra = table.append_column("junk", pa.array([1, 2]))
    with pytest.raises(SchemaMismatchError, match=r"unexpected column\(s\) \['junk'\]"):
        RolloutBatch.from_table(extra)
    bad_type = table.set_column(COLUMNS.index("reward"), "reward", pa.array(["a", "b"]))
    with pytest.raises(SchemaMismatchError, match=r"column 'reward' has type string, expected float"):
        RolloutBatch.from_table(bad_type)
    # A safe cast (int64 ids, large_string texts) is accepted.
    widened = table.set_column(COLUMNS.index("sample_index"), "sample_index", pa.array([0, 1], pa.int64()))
    assert RolloutBatch.from_table(widened).column("sample_index").type == pa.int32()


def test_table_with_null_required_value_names_row():
    table = RolloutBatch(**_kwargs()).to_table()
    broken = table.set_column(COLUMNS.index("response_text"), "response_text", pa.array(["hi", None]))
    with pytest.raises(InvalidRecordError, match=r"row 1: column 'response_text' is null but required"):
        RolloutBatch.from_table(broken)


def test_synthetic_batch_is_valid_and_shares_prompts():
    a = synthetic_batch(4, 3, 0, 16, seed=1)
    b = synthetic_batch(4, 3, 0, 16, seed=2)
    assert a.num_rows == 12
    assert a.column("prompt_id").to_pylist() == b.column("prompt_id").to_pylist()
    assert a.column("prompt_text").to_pylist() == b.column("prompt_text").to_pylist()
    assert a.column("response_text").to_pylist() != b.column("response_text").to_pylist()
