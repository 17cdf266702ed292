"""One shipped recipe per code path, for the matrices that check every recipe.

The default suite checks a matrix on these recipes; its other recipes (the same code path with other models, sizes or
ablation settings) run in the benchmarks-and-recipes tier (``pytest -m benchmarks_and_recipes``), which ``.ci/run``
runs whenever ``recipes/`` changes (``.ci/tier_digest.py``). What each recipe stands for is its value here.
"""

from __future__ import annotations

import pytest

ONE_PER_CODE_PATH = {
    "2qwen": "SGT, the paper's pool: two Qwen tokenizers, ZeRO-3, vLLM colocated",
    "3qwen": "three policies: an 8-GPU node split unevenly by device_share",
    "4qwen": "four policies, instruct and coder models among them",
    "llama-mist": "Llama 3 and Mistral tokenizers (THL across families), chat templates",
    "qwen-phi4": "Phi-4's architecture and tokenizer",
    "commonsense-4qwen": "the math-and-QA mixture task (base/commonsense.yaml)",
    "xgrpo-2qwen": "XGRPO",
    "prp-ftis-2qwen": "PRP with the peer denominator and a correction",
    "prp-naive-2qwen": "PRP with the learner's denominator",
    "hacpo-qwen3-4b-llama3b": "HACPO across families",
    "grpo-randpert-2qwen": "the random-perturbation control",
    "smol": "the CPU pool of real models",
    "smol-qa": "LoRA adapters on a QA task with an answer line",
    "tiny": "the tiny CPU pool",
}
"""Recipe -> the code path it stands for."""


def recipe_params(recipes: list[str]) -> list:
    """``recipes`` as pytest parameters: those of :data:`ONE_PER_CODE_PATH` in the default suite, the rest in the
    benchmarks-and-recipes tier."""
    return [recipe if recipe in ONE_PER_CODE_PATH else pytest.param(recipe, marks=pytest.mark.benchmarks_and_recipes)
            for recipe in recipes]
