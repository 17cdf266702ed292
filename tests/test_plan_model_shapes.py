"""Every model a shipped recipe names has a shape for the plan (KV cache, activations, logits), the placement says
how the devices were split, and an engine whose KV cache holds far fewer sequences than ``max_num_seqs`` says so."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from mutualrl.config.loader import load_run_config
from mutualrl.launch.plan.launch_plan import make_launch_plan
from mutualrl.launch.plan.model_shapes import model_shape
from mutualrl.launch.plan.render import render_plan

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
NO_PUBLISHED_SHAPE_HERE: set[str] = set()
"""Models a recipe names whose config.json could not be read where this entry was written (no network): the plan
says their shape is unknown. The test fails once one gets an entry, so the set only shrinks (now empty)."""


def recipe_models() -> set[str]:
    """Every ``model:`` of every shipped recipe (pools and experiments)."""
    found: set[str] = set()
    for path in RECIPES.rglob("*.yaml"):
        pool = (yaml.safe_load(path.read_text()) or {}).get("pool") or {}
        found |= {p["model"] for p in pool.get("policies") or [] if isinstance(p, dict) and "model" in p}
    return found


def test_every_model_a_recipe_names_has_a_shape():
    models = recipe_models()
    assert "Qwen/Qwen3-4B-Base" in models and "ministral/Ministral-3b-instruct" in models  # the walk reads them
    missing = {m for m in models if model_shape(m) is None}
    assert missing == NO_PUBLISHED_SHAPE_HERE, f"add a KNOWN_SHAPES entry (from the model's config.json) for {missing}"


def gpu_plan(recipe: str, gpu_memory: float):
    config = load_run_config(recipe, overrides=["launch.gpus=8", f"launch.gpu_memory_gib={gpu_memory}"]).config
    return make_launch_plan(config, Path("/tmp/unused-run"), simulate=True, vllm_available=True, dry_run=True)


def rendered(plan) -> str:
    out = io.StringIO()
    render_plan(plan, Console(file=out, width=400))
    return out.getvalue()


@pytest.mark.parametrize("recipe, words", [("commonsense-3qwen", "split by device_share: 2+2+4 GPUs"),
                                           ("2qwen", "even split")])
def test_the_placement_says_how_the_gpus_were_split(recipe, words):
    plan = gpu_plan(recipe, 80.0)
    text = rendered(plan)
    assert f"MWRA placement ({words})" in text
    if words != "even split":
        assert "even split" not in text


def test_an_engine_holding_far_fewer_sequences_than_max_num_seqs_says_so():
    plan = gpu_plan("3qwen", 80.0)
    engine = plan.policy("qwen3-4b-base").engine
    assert (engine.kv_capacity_sequences, engine.max_num_seqs) == (83, 1024)
    notes = [n for n in plan.policy("qwen3-4b-base").notes if "KV cache" in n]
    assert len(notes) == 1 and "holds 83 sequences of 4096 tokens against max_num_seqs 1024" in notes[0]
    assert "preempts" in notes[0]
    assert "83 sequences of 4096 tokens (fewer than max_num_seqs" in rendered(plan)
