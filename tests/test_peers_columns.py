"""Peer rows leave Arrow column-wise: the (prompt, sample) -> row layout by Arrow and numpy, the per-token columns
as zero-copy numpy views, with the same numbers as the Python lists they replaced."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mutualrl.errors import PeerError, UsageError
from mutualrl.regimes.core.peer_responses import peer_row_views
from mutualrl.regimes.core.peers import peer_groups
from mutualrl.regimes.prp.adapter import PRPAdapter
from mutualrl.see import ragged
from see_synthetic import synthetic_batch


def two_shards(**columns):
    """One peer's table as the exchange reads it with two ranks: one chunk per shard."""
    half = {name: values[: len(values) // 2] for name, values in columns.items()}
    rest = {name: values[len(values) // 2:] for name, values in columns.items()}
    return pa.concat_tables([pa.table(half), pa.table(rest)])


def test_rows_are_laid_out_from_chunks_and_a_dictionary_column_with_a_prompt_asked_twice():
    table = two_shards(prompt_id=["b", "a", "c", "a", "b", "c"], sample_index=[1, 0, 0, 1, 0, 1])
    assert table.column("prompt_id").num_chunks == 2
    expected = [[1, 3], [4, 0], [1, 3]]
    assert peer_groups(table, ["a", "b", "a"], 2, "peer", 0).tolist() == expected
    encoded = table.set_column(0, "prompt_id", table.column("prompt_id").dictionary_encode())
    assert peer_groups(encoded, ["a", "b", "a"], 2, "peer", 0).tolist() == expected


def test_of_two_rows_of_one_rollout_the_later_counts():
    table = pa.table({"prompt_id": ["a", "a", "a"], "sample_index": [0, 1, 0]})
    assert peer_groups(table, ["a"], 2, "peer", 0).tolist() == [[2, 1]]


def test_a_sample_index_outside_the_group_is_a_gap_named_like_a_missing_rollout():
    """Failed before with a KeyError: two rows of the prompt, but samples 0 and 2 of K = 2."""
    table = pa.table({"prompt_id": ["a", "a", "b", "b"], "sample_index": [0, 2, 0, 1]})
    with pytest.raises(PeerError, match="peer 'p' published 1 of 2 rollouts for prompt 'a' at step 4"):
        peer_groups(table, ["b", "a"], 2, "p", 4)


def test_list_columns_are_views_of_the_arrow_buffers_with_nulls_as_none():
    logps = pa.chunked_array([pa.array([[-1.0, -2.0], None], pa.list_(pa.float32())),
                              pa.array([[-3.0], [], [-4.5, -5.0]], pa.list_(pa.float32()))])
    table = pa.table({"behaviour_logps": logps})
    rows = peer_row_views({"p": table}, [("p", 4), ("p", 1), ("p", 0), ("p", 3)], "behaviour_logps")
    assert rows[1] is None and rows[3].size == 0
    assert rows[0].tolist() == [-4.5, -5.0] and rows[2].tolist() == [-1.0, -2.0] and rows[0].dtype == np.float32
    assert np.shares_memory(rows[0], ragged(logps.chunk(1)).values)
    assert np.shares_memory(rows[2], ragged(logps.chunk(0)).values)


def test_prp_aligns_a_peer_trace_onto_the_same_tokens_as_itself():
    """Read from zero-copy views, a peer's behaviour trace aligned onto tokens that are the peer's own is its
    log-probs, bit for bit (THL's identity case); a learner EOS appended after a row that ends in text gets 0."""
    tables = {name: synthetic_batch(3, 2, seed=seed).to_table() for seed, name in enumerate(("a", "b"))}
    sources = [("b", 4), ("a", 0), ("a", 5), ("b", 1), ("a", 2)]
    texts = [tables[name].column("response_text")[row].as_py() for name, row in sources]
    spans = [np.asarray(tables[name].column("response_token_spans")[row].as_py(), dtype=np.int64).reshape(-1, 2)
             for name, row in sources]  # the learner's tokens: the peer's own, one EOS more where finished
    finished = [True, False, True, True, False]
    ids = [list(range(len(s) + done)) for s, done in zip(spans, finished, strict=True)]
    got = PRPAdapter._aligned_traces(None, tables, sources, texts, finished, spans, ids).traces
    for (name, row), trace, own, done in zip(sources, got, spans, finished, strict=True):
        logps = np.asarray(tables[name].column("behaviour_logps")[row].as_py(), dtype=np.float32)  # [n]
        assert trace.dtype == np.float32 and len(trace) == len(own) + done
        assert trace[: len(own)].tobytes() == logps.tobytes() and not trace[len(own):].any()


@pytest.mark.parametrize("missing", ["response_token_spans", "behaviour_logps"])
def test_prp_names_a_peer_row_without_spans_or_log_probs(missing):
    """Failed before for the spans (a TypeError from numpy): only PRP with the peer denominator publishes them."""
    columns = {"response_token_spans": pa.array([[0, 1]], pa.list_(pa.int32())),
               "behaviour_logps": pa.array([[-0.5]], pa.list_(pa.float32()))}
    columns[missing] = pa.array([None], columns[missing].type)
    table = pa.table(columns)
    what = "response token spans" if missing == "response_token_spans" else "behaviour log-probs"
    with pytest.raises(UsageError, match=f"peer 'b' did not publish {what}"):
        PRPAdapter._aligned_traces(None, {"b": table}, [("b", 0)], ["x"], [True], [np.array([[0, 1]])], [[5, 6]])
