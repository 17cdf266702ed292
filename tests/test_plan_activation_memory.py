"""The plan's activation bytes per token, counted from each model's shape, against the layers measured on the CPU
(``benchmarks/activation_memory.py``, committed in ``benchmarks/results/activation-memory.json``): within 15 % for
every measured shape, with and without gradient checkpointing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mutualrl.launch.plan.bounds import activation_bytes_per_token
from mutualrl.launch.plan.model_shapes import KNOWN_SHAPES, model_shape

MEASURED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "activation-memory.json"
TOLERANCE = 0.15
RECORD = json.loads(MEASURED.read_text())


def widths(model: str) -> tuple[int, int, int, int, int, bool]:
    shape = model_shape(model)
    return shape.hidden, shape.intermediate, shape.heads, shape.kv_heads, shape.head_dim, shape.qk_norm


def test_the_measurement_covers_every_distinct_paper_shape_in_bf16():
    assert RECORD["dtype"] == "bfloat16" and "sdpa" in RECORD["attention"]
    assert {widths(model) for model in KNOWN_SHAPES} == {widths(model) for model in RECORD["models"]}


@pytest.mark.parametrize("model", sorted(RECORD["models"]))
@pytest.mark.parametrize("setting", ["checkpointing", "no_checkpointing"])
def test_the_plans_bytes_per_token_are_within_15_percent_of_the_measured(model, setting):
    measured = RECORD["models"][model][setting]
    shape = model_shape(model)
    kept, rest = activation_bytes_per_token(shape, 2, setting == "checkpointing")
    planned_total = shape.layers * kept + rest
    assert planned_total == pytest.approx(measured["per_token_at_model_layers"], rel=TOLERANCE)
    assert kept == pytest.approx(measured["kept_per_layer"], rel=TOLERANCE)
    if setting == "checkpointing":  # the recomputed layer and backward: most of the peak of a checkpointed stack
        assert rest == pytest.approx(measured["rest"], rel=TOLERANCE)
