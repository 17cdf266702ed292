"""On a clean node (no paper model in the hub cache yet) the context check and vLLM's length cap still act: the paper
models' contexts are known from their published config.json (pools/loading.py PAPER_MODEL_CONTEXTS)."""

from __future__ import annotations

import pytest

from mutualrl.config.loader import load_run_config
from mutualrl.errors import PlacementError
from mutualrl.launch.plan.checks import check_model_context
from mutualrl.launch.plan.launch_plan import make_launch_plan
from mutualrl.launch.plan.model_shapes import KNOWN_SHAPES
from mutualrl.pools import loading


@pytest.fixture()
def clean_node(monkeypatch):
    monkeypatch.setattr(loading, "cached_model_config", lambda model: None)


def test_every_paper_model_with_a_known_shape_has_a_known_context():
    assert sorted(loading.PAPER_MODEL_CONTEXTS) == sorted(KNOWN_SHAPES)


def test_a_completion_past_the_context_is_refused_on_a_clean_node(clean_node):
    known = loading.model_context("Qwen/Qwen2.5-Math-1.5B")
    assert known == (4096, "Qwen/Qwen2.5-Math-1.5B's config.json as published")
    check_model_context(load_run_config("2qwen").config)  # 1024 + 3072: exactly the 4096 positions
    with pytest.raises(PlacementError, match=r"1024 \+ grpo.max_completion_length=3200 = 4224 tokens.*4096 positions"):
        check_model_context(load_run_config("2qwen", overrides=["grpo.max_completion_length=3200"]).config)


def test_vllms_model_length_is_capped_by_the_context_on_a_clean_node(clean_node, tmp_path):
    config = load_run_config("2qwen", overrides=["validation.max_new_tokens=4096"]).config
    plan = make_launch_plan(config, tmp_path / "run", gpus=8, simulate=True, gpu_memory_gib=80.0, ram_gib=2048.0,
                            vllm_available=True, dry_run=True)
    lengths = {p.name: p.grpo["vllm_max_model_length"] for p in plan.policies}
    assert lengths == {"qwen2.5-math-1.5b": 4096, "qwen3-1.7b-base": 1024 + 4096}
