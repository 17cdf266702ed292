"""The plan's activation bytes per token, counted from each model's shape, against the layers measured on the CPU
(``benchmarks/activation_memory.py``, committed in ``benchmarks/results/activation-memory.json`` at 256 tokens a row
and ``activation-memory-seq512.json`` at 512): within 15 % for every measured shape, with and without gradient
checkpointing, and each layer's copy of the padding mask, the term that grows with the row's length, as measured
between the two lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mutualrl.launch.plan.bounds import activation_bytes_per_token
from mutualrl.launch.plan.model_shapes import KNOWN_SHAPES, model_shape

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
TOLERANCE = 0.15
RECORD = json.loads((RESULTS / "activation-memory.json").read_text())
LONGER = json.loads((RESULTS / "activation-memory-seq512.json").read_text())
SETTINGS = ["checkpointing", "no_checkpointing"]


def widths(model: str) -> tuple[int, int, int, int, int, bool]:
    shape = model_shape(model)
    return shape.hidden, shape.intermediate, shape.heads, shape.kv_heads, shape.head_dim, shape.qk_norm


def test_the_measurement_covers_every_distinct_paper_shape_in_bf16():
    for record in (RECORD, LONGER):
        assert record["dtype"] == "bfloat16" and "sdpa" in record["attention"]
    assert {widths(model) for model in KNOWN_SHAPES} == {widths(model) for model in RECORD["models"]}
    assert LONGER["seq"] > RECORD["seq"] and set(LONGER["models"]) <= set(RECORD["models"])


@pytest.mark.parametrize("record, model", [(RECORD, m) for m in sorted(RECORD["models"])]
                         + [(LONGER, m) for m in sorted(LONGER["models"])])
@pytest.mark.parametrize("setting", SETTINGS)
def test_the_plans_bytes_per_token_are_within_15_percent_of_the_measured(record, model, setting):
    measured = record["models"][model][setting]
    shape = model_shape(model)
    kept, rest = activation_bytes_per_token(shape, 2, setting == "checkpointing", record["seq"])
    planned_total = shape.layers * kept + rest
    assert planned_total == pytest.approx(measured["per_token_at_model_layers"], rel=TOLERANCE)
    assert kept == pytest.approx(measured["kept_per_layer"], rel=TOLERANCE)
    if setting == "checkpointing":  # the recomputed layer and backward: most of the peak of a checkpointed stack
        assert rest == pytest.approx(measured["rest"], rel=TOLERANCE)


@pytest.mark.parametrize("model", sorted(LONGER["models"]))
def test_each_layer_keeps_its_copy_of_the_padding_mask(model):
    """Rows of 512 against rows of 256 tokens, no checkpointing: each layer keeps 2 B per token per key more, its
    bf16 copy of the ``[rows, 1, tokens, tokens]`` mask, as measured (the layer slope has no constant
    moment in it; the rest's slope does, see the benchmark's docstring)."""
    shape = model_shape(model)
    planned = [activation_bytes_per_token(shape, 2, False, r["seq"])[0] for r in (RECORD, LONGER)]
    measured = [r["models"][model]["no_checkpointing"]["kept_per_layer"] for r in (RECORD, LONGER)]
    grown = LONGER["seq"] - RECORD["seq"]
    assert planned[1] - planned[0] == 2 * grown
    assert measured[1] - measured[0] == pytest.approx(2 * grown, abs=0.05 * grown)


@pytest.mark.slow  # builds transformers models (about 11 s alone, mostly imports the suite's workers have)
def test_the_benchmarks_counter_grows_with_the_rows_on_a_small_qwen3_shape():
    """benchmarks/activation_memory.py's measurement, run in process on a small shape of Qwen3's kind (the script
    itself takes minutes on the real widths): its live-storage peak grows with the rows, with checkpointing and
    without."""
    import importlib.util

    import torch

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "activation_memory.py"
    spec = importlib.util.spec_from_file_location("activation_memory_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    small = bench.ModelShape(layers=2, kv_heads=2, head_dim=16, vocab=256, hidden=64, heads=4, intermediate=128,
                             source="test", qk_norm=True)
    for checkpointing in (True, False):
        peaks = [bench.peak_bytes(small, "qwen3", 1, rows, 16, torch.float32, checkpointing)[0] for rows in (2, 4)]
        assert 0 < peaks[0] < peaks[1], (checkpointing, peaks)
